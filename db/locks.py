"""Setup's DDL never queues for long behind another session: a queued ALTER TABLE blocks every later
statement on its table, the job's COPY among them, so setup's transaction waits at most LOCK_TIMEOUT for
a lock, then rolls back (releasing every lock it took, so the job's statements go through) and runs again,
naming who holds the lock, until it gets them all or LOCK_WAIT_S have passed.

The job itself never waits for a reader: its COPY and INSERT take ROW EXCLUSIVE locks, which a SELECT's
ACCESS SHARE does not conflict with; only an ACCESS EXCLUSIVE request (ALTER TABLE) queued between them
would make it wait."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import psycopg
import sqlalchemy as sa

LOCK_TIMEOUT = "2s"
RETRY_PAUSE_S = 2.0
LOCK_WAIT_S = 600.0

T = TypeVar("T")


class LockWaitTimeout(Exception):
    """Setup gave up waiting for a lock another session held."""


def retrying(dsn: str, attempt: Callable[[], T], echo: Callable[[str], None]) -> T:
    """attempt() (one transaction that SET LOCAL lock_timeout = LOCK_TIMEOUT), again after each lock
    timeout, with a line naming the lock's holder, until LOCK_WAIT_S have passed."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            return attempt()
        except (sa.exc.OperationalError, psycopg.errors.LockNotAvailable) as exc:
            if not _lock_timed_out(exc):
                raise
        holder = lock_holder(dsn)
        if time.monotonic() > deadline:
            raise LockWaitTimeout(
                f"gave up after {LOCK_WAIT_S:.0f} s waiting for a lock on {holder}: wait for that session "
                "to end, or end it (SELECT pg_terminate_backend(PID)), then run setup again"
            )
        echo(f"waiting for a lock on {holder}, retrying")
        time.sleep(RETRY_PAUSE_S)


def _lock_timed_out(exc: Exception) -> bool:
    return isinstance(exc, psycopg.errors.LockNotAvailable) or isinstance(
        getattr(exc, "orig", None), psycopg.errors.LockNotAvailable
    )


# The oldest transaction but ours holding a lock on a table outside the system catalogs: the one the
# timed-out statement most likely queued behind (the lock it waited for is gone with its transaction).
_HOLDER = r"""
SELECT format('%I.%I', n.nspname, c.relname), a.pid, regexp_replace(left(a.query, 80), '\s+', ' ', 'g')
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.granted AND l.locktype = 'relation' AND l.pid <> pg_backend_pid()
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
ORDER BY a.xact_start NULLS LAST, c.oid
LIMIT 1
"""


def lock_holder(dsn: str) -> str:
    """'TABLE held by pid N (query ...)', or what to say when the holder has already finished."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(_HOLDER).fetchone()
    if row is None:
        return "a table (its holder has finished since)"
    table, pid, query = row
    return f"{table} held by pid {pid} (query {query})"
