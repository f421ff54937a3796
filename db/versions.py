"""The registry of output versions (docs/reprocess.md): streamfold.output_versions, one row per version a
`streamfold reprocess` created, with the pipeline it runs (its versioned names: common/versions.py), where
its events start, its --conf settings and when it was created. The live pipeline, the one `streamfold
setup` applied, has no row: it is the version `live`.

Created on first use (CREATE TABLE IF NOT EXISTS, by `reprocess` and `swap`; reading commands create
nothing): an installation that never reprocesses never has them. Each command opens its own short
transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from common import pipeline_file as pf

TABLE = "streamfold.output_versions"

# spec is json, not jsonb: json keeps the order of the file's columns and fields, which the version's
# tables, history view and join state follow.
_CREATE = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
  name text NOT NULL,
  pipeline_name text NOT NULL,
  spec json NOT NULL,
  source text NOT NULL,
  from_ms bigint,
  conf jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (pipeline_name, name)
)"""


@dataclass(frozen=True)
class Version:
    name: str
    base: str  # the live pipeline's name
    pipeline: pf.Pipeline  # with the version's names
    source: str
    from_ms: int | None  # None: the earliest retained event
    conf: dict[str, str]
    created_at: datetime | None = None


def ensure(conn: psycopg.Connection) -> None:
    conn.execute(_CREATE)


def add(conn: psycopg.Connection, version: Version) -> bool:
    """Registers the version; False when one of that name exists already (nothing changed)."""
    ensure(conn)
    inserted = conn.execute(
        f"INSERT INTO {TABLE} (name, pipeline_name, spec, source, from_ms, conf)"
        " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
        (
            version.name,
            version.base,
            json.dumps(version.pipeline.model_dump(mode="json")),
            version.source,
            version.from_ms,
            json.dumps(version.conf),
        ),
    )
    return inserted.rowcount == 1


def _version(row: tuple[Any, ...]) -> Version:
    name, base, spec, source, from_ms, conf, created_at = row
    return Version(name, base, pf.Pipeline.model_validate(spec), source, from_ms, conf, created_at)


_COLUMNS = "name, pipeline_name, spec, source, from_ms, conf, created_at"


def _exists(conn: psycopg.Connection, table: str) -> bool:
    """Whether the table is there: reading commands (`versions`, `status`) create nothing."""
    row = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()
    return bool(row and row[0])


def all_of(conn: psycopg.Connection, base: str) -> list[Version]:
    """The versions of the live pipeline `base`, oldest first."""
    if not _exists(conn, TABLE):
        return []
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM {TABLE} WHERE pipeline_name = %s ORDER BY created_at, name", (base,)
    )
    return [_version(row) for row in rows]


def get(conn: psycopg.Connection, base: str, name: str) -> Version | None:
    if not _exists(conn, TABLE):
        return None
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM {TABLE} WHERE pipeline_name = %s AND name = %s", (base, name)
    ).fetchone()
    return None if row is None else _version(row)


def drop_outputs(conn: psycopg.Connection, version: Version) -> list[str]:
    """In one transaction: the version's tables (its history with its view and function), its batch ledger
    rows, its recorded file and its registry row. Returns the tables dropped."""
    p = version.pipeline
    tables = [p.enriched_table, *(p.aggregate_table(a) for a in p.aggregates), p.history_table]
    with conn.transaction():
        conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}").format(sql.SQL(p.profile_at_function)))
        for table in tables:  # the history's view with it
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(table)))
        conn.execute("DELETE FROM streamfold.sink_batches WHERE starts_with(query, %s)", (f"{p.name}-",))
        conn.execute("DELETE FROM streamfold.pipelines WHERE name = %s", (p.name,))
        conn.execute(
            f"DELETE FROM {TABLE} WHERE pipeline_name = %s AND name = %s", (version.base, version.name)
        )
    return tables


# --- the swap ---------------------------------------------------------------------------------------------

SWAPS = "streamfold.output_swaps"
SWAP_DEADLOCK_TIMEOUT = "10s"

_CREATE_SWAPS = f"""
CREATE TABLE IF NOT EXISTS {SWAPS} (
  pipeline_name text NOT NULL,
  swapped_at timestamptz NOT NULL DEFAULT clock_timestamp(),
  from_version text NOT NULL,
  to_version text NOT NULL,
  offsets jsonb NOT NULL,
  PRIMARY KEY (pipeline_name, swapped_at)
)"""


@dataclass(frozen=True)
class Current:
    """The version users' names read, and whether the live tables have moved to <table>__live (they have
    from the first swap on)."""

    version: str
    live_moved: bool
    swapped_at: datetime | None


def current(conn: psycopg.Connection, base: str, live: str) -> Current:
    if not _exists(conn, SWAPS):
        return Current(live, False, None)
    row = conn.execute(
        f"SELECT to_version, swapped_at FROM {SWAPS} WHERE pipeline_name = %s"
        " ORDER BY swapped_at DESC LIMIT 1",
        (base,),
    ).fetchone()
    return Current(live, False, None) if row is None else Current(row[0], True, row[1])


def _qualified(name: str) -> sql.Composable:
    return sql.SQL(".").join(sql.Identifier(part) for part in name.split("."))


def swap(
    conn: psycopg.Connection,
    base: str,
    before: Current,
    to_version: str,
    views: dict[str, str],
    dropped: set[str],
    move_live: dict[str, str],
    offsets: dict[str, Any],
    reader: str,
) -> None:
    """In ONE transaction: the live tables moved (`move_live`: users' name -> its table's new name, on the
    first swap), the views of the users' names `dropped` replaced by `views` (users' name -> the target
    version's table), the swap recorded with the target's input offsets. DROP and CREATE, not CREATE OR
    REPLACE: versions may differ in their columns. Each statement takes an ACCESS EXCLUSIVE lock on its
    name, held to the commit: a query reads either the old version or the new, never a mix; one that holds
    a name across the swap delays it, or (reading two names in an order the swap crosses) is aborted by
    PostgreSQL's deadlock detection."""
    conn.execute(_CREATE_SWAPS)
    with conn.transaction():
        superuser = conn.execute("SELECT current_setting('is_superuser') = 'on'").fetchone()
        if superuser and superuser[0]:
            # A reader crossing the swap deadlocks with it: let PostgreSQL abort the reader (whose check runs
            # after the default 1 s), not the swap. Only a superuser may set it.
            conn.execute(f"SET LOCAL deadlock_timeout = '{SWAP_DEADLOCK_TIMEOUT}'")
        for name, moved in move_live.items():
            conn.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    _qualified(name), sql.Identifier(moved.rpartition(".")[2])
                )
            )
        for name in sorted(dropped):
            conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(_qualified(name)))
        for name, table in sorted(views.items()):
            conn.execute(
                sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(_qualified(name), _qualified(table))
            )
            conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(_qualified(name), sql.Identifier(reader)))
        conn.execute(
            f"INSERT INTO {SWAPS} (pipeline_name, from_version, to_version, offsets) VALUES (%s, %s, %s, %s)",
            (base, before.version, to_version, json.dumps(offsets)),
        )


def live_moved(conn: psycopg.Connection, base: str) -> bool:
    """Whether a swap has moved the live pipeline `base`'s tables to <table>__live (read-only: an
    installation that never swapped has no swaps table)."""
    if not _exists(conn, SWAPS):
        return False
    row = conn.execute(f"SELECT 1 FROM {SWAPS} WHERE pipeline_name = %s LIMIT 1", (base,)).fetchone()
    return row is not None
