"""Named queries over the pipeline's tables, run with the read-only role: one per aggregate (its name),
the enriched table's latest rows, the dead letters and the totals (`streamfold query NAME`), and two over
the profile history that take arguments: `versions KEY` and `profile_at KEY TIME` (db/history.py), and
for each further table of a file's `tables`, `<name>_versions KEY` and `<name>_at KEY TIME`."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg import sql
from psycopg.types.string import TextLoader

from common import names, plan
from common import pipeline_file as pf
from db import history


def named(pipeline: pf.Pipeline) -> dict[str, str]:
    """Short names for `streamfold query`, from the pipeline file."""
    resolved = plan.of(pipeline)
    enriched = resolved.enriched_table
    key, time, counted = resolved.names.key, resolved.names.time, resolved.names.count_column
    count = f"sum({counted})" if counted else "count(*)"
    queries = {a.name: _aggregate(a) for a in resolved.aggregates}
    queries[enriched.split(".")[1]] = f"SELECT * FROM {enriched} ORDER BY {time} DESC, event_id LIMIT 20"
    queries["dead_letters"] = (
        f"SELECT dead_letter_id, source, reason, left(encode(payload, 'escape'), 60) AS payload, recorded_at "
        f"FROM {names.DEAD_LETTERS_TABLE} ORDER BY recorded_at DESC LIMIT 20"
    )
    queries["totals"] = (
        f"SELECT (SELECT count(*) FROM {enriched}) AS enriched_rows, "
        f"(SELECT coalesce({count}, 0) FROM {enriched}) AS events, "
        f"(SELECT count(DISTINCT {key}) FROM {enriched}) AS keys, "
        f"(SELECT count(*) FROM {names.DEAD_LETTERS_TABLE}) AS dead_letters"
    )
    return queries


def with_arguments(pipeline: pf.Pipeline) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Short names whose SQL takes arguments: name -> (SQL with %s placeholders, the arguments' names)."""
    profile, *tables = plan.of(pipeline).histories
    queries = {
        "versions": (history.versions_query(profile), ("KEY",)),
        "profile_at": (history.profile_at_query(profile), ("KEY", "TIME")),
    }
    for table in tables:  # a file's further tables: <name>_versions KEY and <name>_at KEY TIME
        queries[f"{table.join.name}_versions"] = (history.versions_query(table), ("KEY",))
        queries[f"{table.join.name}_at"] = (history.profile_at_query(table), ("KEY", "TIME"))
    return queries


def _aggregate(aggregate: plan.AggregatePlan) -> str:
    """The aggregate's largest totals first (its own columns, without the md5 key columns)."""
    groups = [k.column for k in aggregate.keys]
    columns = ", ".join([*groups, aggregate.count_column, *(s.column for s in aggregate.sums)])
    order = ", ".join([f"{aggregate.count_column} DESC", *groups])
    return f"SELECT {columns} FROM {aggregate.table} ORDER BY {order} LIMIT 100"


def resolve(pipeline: pf.Pipeline, sql_or_name: str) -> str:
    return named(pipeline).get(sql_or_name, sql_or_name)


# Rows fetched per round trip of the server-side cursor: what `streamfold query` holds at once.
FETCH_ROWS = 2000


@contextmanager
def rows(
    reader_dsn: str, statement: str, arguments: tuple[str, ...] = (), timeout: str | None = None
) -> Iterator[tuple[list[str], Iterator[tuple]]]:
    """Column names and an iterator of the rows, from ONE statement in a read-only transaction, read
    through a server-side cursor FETCH_ROWS at a time: memory stays bounded whatever the result's size.

    The reader role can only SELECT from the sink schema, but any role may alter itself: the cursor's
    DECLARE goes by the extended query protocol, which refuses "COMMIT; ALTER ROLE ..." as several
    statements, so nothing ever runs outside the read-only transaction. `timeout` (a PostgreSQL
    duration) replaces the role's statement_timeout for this session.
    """
    with psycopg.connect(reader_dsn) as conn:
        conn.read_only = True
        if timeout:
            conn.execute(sql.SQL("SET statement_timeout = {}").format(sql.Literal(timeout)))
        # Timestamps as Postgres prints them: a valid-from may be '-infinity' (no Python datetime).
        for type_name in ("timestamptz", "timestamp"):
            conn.adapters.register_loader(type_name, TextLoader)
        with conn.cursor(name="streamfold_query") as cur:
            cur.itersize = FETCH_ROWS
            cur.execute(statement, arguments or None)
            yield [c.name for c in cur.description or []], iter(cur)
