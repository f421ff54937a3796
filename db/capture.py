"""Whether the publication still captures every table the pipeline joins and every column it carries.

PostgreSQL drops a table from a publication with a column list when a published column is dropped with
CASCADE (`ALTER TABLE ... DROP COLUMN ... CASCADE`), and a renamed column is published under its new name.
Debezium keeps running either way and never sees the table's changes again. The heartbeat query
(connectors/debezium-postgres.json) stops with the capture, so CDC progress stops too; this module names
the cause for `streamfold status`, the job's stall line and `streamfold setup`.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

import psycopg
import psycopg.sql

from common import drift, plan

# Debezium's signal table (db/tables.py): setup asks the connector here for an incremental snapshot.
SIGNAL_TABLE = "streamfold.debezium_signal"
FIX = "run `streamfold setup` to publish it again and recapture the table (docs/operations.md)"


@dataclass(frozen=True)
class CaptureLost:
    """A captured table, or some of its carried columns, no longer in the pipeline's publication."""

    table: str
    publication: str
    columns: tuple[str, ...]  # the carried columns it lacks; () when the whole table left it

    def message(self) -> str:
        if not self.columns:
            lost = f"{self.table} is not in publication {self.publication}"
        else:
            lost = f"{self.table} column {', '.join(self.columns)} is not in publication {self.publication}"
        return f"capture lost: {lost}, so its changes are not captured; {FIX}"


def heartbeat_id(resolved: plan.Plan) -> int:
    """The pipeline's row of streamfold.cdc_heartbeat: its publication carries that row alone (a row filter),
    so another pipeline's heartbeats never move its progress past a capture it lost."""
    return zlib.crc32(resolved.publication.encode()) & 0x7FFFFFFF


def published_columns(conn: psycopg.Connection, publication: str, table: str) -> tuple[str, ...] | None:
    """A table's columns in the publication; None when the table is not in it."""
    schema, name = table.split(".")
    row = conn.execute(
        "SELECT attnames FROM pg_publication_tables "
        "WHERE pubname = %s AND schemaname = %s AND tablename = %s",
        (publication, schema, name),
    ).fetchone()
    return None if row is None else tuple(row[0])


def publication_exists(conn: psycopg.Connection, resolved: plan.Plan) -> bool:
    found = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (resolved.publication,))
    return found.fetchone() is not None


def lost_tables(
    conn: psycopg.Connection, resolved: plan.Plan, captured: plan.Captured
) -> tuple[CaptureLost, ...]:
    """Each captured table (plan.captured) a publication `streamfold setup` made lacks, or lacks one
    of its columns; () while it captures them all, or before setup made it."""
    if not publication_exists(conn, resolved):
        return ()
    found = []
    for table, carried in captured.items():
        published = published_columns(conn, resolved.publication, table)
        missing = () if published is None else tuple(c for c in carried if c not in published)
        if published is None or missing:
            found.append(CaptureLost(table, resolved.publication, missing))
    return tuple(found)


def lost(conn: psycopg.Connection, resolved: plan.Plan, captured: plan.Captured) -> CaptureLost | None:
    """The first of lost_tables, if any."""
    return next(iter(lost_tables(conn, resolved, captured)), None)


def lost_message(dsn: str, resolved: plan.Plan, captured: plan.Captured) -> str | None:
    """What `lost` says, for the job's stall line; None when captured or when the database cannot say."""
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            found = lost(conn, resolved, captured)
    except psycopg.Error:
        return None  # PostgreSQL unreachable: the stall line names the usual suspects
    return None if found is None else found.message()


@dataclass(frozen=True)
class Drifted:
    """The keys whose current version in the history has drifted columns, and some of their reasons."""

    table: str
    profiles: int
    reasons: tuple[str, ...]


SHOWN_REASONS = 5


def drifted(conn: psycopg.Connection, resolved: plan.Plan) -> Drifted:
    """Read from the history, so it holds across restarts until newer versions (the key's next change, or a
    recapture) replace the drifted ones."""
    profile = resolved.joins[0].table
    # A drifted column's reason, not any unknown column: an unchanged TOASTed value without an earlier
    # version is unknown too, but not drift.
    endings = psycopg.sql.SQL(" OR ").join(
        psycopg.sql.SQL("incomplete LIKE {}").format(psycopg.sql.Literal(f"%{e}%")) for e in drift.ENDINGS
    )
    query = psycopg.sql.SQL(
        "SELECT count(*), (array_agg(DISTINCT incomplete))[1:{shown}] FROM ("
        " SELECT DISTINCT ON ({key}) incomplete FROM {view} ORDER BY {key}, valid_from DESC, lsn DESC"
        ") current WHERE {endings}"
    ).format(
        shown=psycopg.sql.Literal(SHOWN_REASONS),
        key=psycopg.sql.Identifier(profile.key),
        view=psycopg.sql.SQL(resolved.histories[0].view),
        endings=endings,
    )
    profiles, reasons = conn.execute(query).fetchone() or (0, None)
    return Drifted(profile.table, profiles, tuple(reasons or ()))


INCREMENTAL, BLOCKING = "incremental", "blocking"


def request_snapshot(
    conn: psycopg.Connection, tables: list[str], signal_id: str, kind: str = INCREMENTAL
) -> None:
    """Asks the pipeline's connector for a snapshot of `tables` (their carried columns only, as
    column.include.list says). INCREMENTAL: Debezium reads every row again while it streams, each read a
    version valid from the time it was read (spec/envelopes.py): a recapture. BLOCKING: Debezium pauses
    streaming while it reads the tables, and marks the reads as its initial snapshot's, each a version
    valid from the beginning of time: a table new to the pipeline."""
    data = {"data-collections": tables, "type": kind}
    conn.execute(
        f"INSERT INTO {SIGNAL_TABLE} (id, type, data) VALUES (%s, 'execute-snapshot', %s)",
        (signal_id, json.dumps(data)),
    )
