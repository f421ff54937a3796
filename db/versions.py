"""The registry of output versions (docs/reprocess.md): streamfold.output_versions, one row per version a
`streamfold reprocess` created, with the pipeline it runs (its versioned names: common/versions.py), where
its events start, its --conf settings and when it was created. The live pipeline, the one `streamfold
setup` applied, has no row: it is the version `live`.

The swap log, streamfold.output_swaps, and the swap itself: the users' names switched to views over a
version's tables in one transaction. And what `streamfold setup` needs of both: the users' names kept on the
current version once a swap has moved the live tables (ensure_views), the files whose jobs share the inputs
(sharing_inputs).

Created on first use (CREATE TABLE IF NOT EXISTS, by `reprocess` and `swap`; reading commands create
nothing): an installation that never reprocesses never has them. Each command opens its own short
transaction; setup's steps run in setup's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg import sql

from common import pipeline_file as pf
from common import plan
from common import versions as v
from db import history, pipeline_tables

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


def sharing_inputs(conn: psycopg.Connection, pipeline: pf.Pipeline) -> list[pf.Pipeline]:
    """`pipeline`, then the other files whose jobs read its inputs (the connector, publication and CDC
    topic): for the live file its registered versions; for a version's file the live file setup applied
    and the other versions. Just `pipeline` for an installation that never reprocessed."""
    if not _exists(conn, TABLE):
        return [pipeline]
    row = conn.execute(
        f"SELECT pipeline_name FROM {TABLE} WHERE spec->>'name' = %s", (pipeline.name,)
    ).fetchone()
    base = pipeline.name if row is None else str(row[0])
    live = None
    if base != pipeline.name:
        applied = conn.execute("SELECT spec FROM streamfold.pipelines WHERE name = %s", (base,)).fetchone()
        live = None if applied is None else pf.Pipeline.model_validate(applied[0])
    return [pipeline, *([live] if live else []), *(version.pipeline for version in all_of(conn, base))]


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
    resolved = plan.of(p)
    histories = resolved.histories
    tables = [resolved.enriched_table, *(a.table for a in resolved.aggregates), *(h.table for h in histories)]
    with conn.transaction():
        for h in histories:
            conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}").format(sql.SQL(h.function)))
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
  consumers_from timestamptz,
  PRIMARY KEY (pipeline_name, swapped_at)
)"""


@dataclass(frozen=True)
class Current:
    """The version users' names read, and whether the live tables have moved to <table>__live (they have
    from the first swap on); since when, and where its topics' consumers start (the swap's record)."""

    version: str
    live_moved: bool
    swapped_at: datetime | None
    consumers_from: datetime | None = None


def current(conn: psycopg.Connection, base: str, live: str) -> Current:
    if not _exists(conn, SWAPS):
        return Current(live, False, None)
    row = conn.execute(
        f"SELECT to_version, swapped_at, consumers_from FROM {SWAPS} WHERE pipeline_name = %s"
        " ORDER BY swapped_at DESC LIMIT 1",
        (base,),
    ).fetchone()
    return Current(live, False, None) if row is None else Current(row[0], True, row[1], row[2])


def _qualified(name: str) -> sql.Composable:
    return sql.SQL(".").join(sql.Identifier(part) for part in name.split("."))


@dataclass(frozen=True)
class Switch:
    """What a swap changes. `move_live`: on the first swap, each users' name -> its live table's new name,
    and `move_indexes` each of their indexes -> the name setup gives it on the moved table.
    `dropped`: the users' names whose views go; `views`: users' name -> the target version's table.
    `live`, `target`: the live file, whose history view and function are the users' names, and the target's
    pipeline, whose history they read from then on. `offsets`: the target's committed input offsets;
    `consumers_from`: where its topics' consumers start (streamfold/reprocess.py)."""

    to_version: str
    views: dict[str, str]
    dropped: set[str]
    move_live: dict[str, str]
    move_indexes: dict[str, str]
    live: pf.Pipeline
    target: pf.Pipeline
    offsets: dict[str, Any]
    consumers_from: datetime | None

    @classmethod
    def of(
        cls,
        live: pf.Pipeline,
        before: Current,
        to_version: str,
        tables: tuple[pf.Pipeline, pf.Pipeline],
        offsets: dict[str, Any],
        consumers_from: datetime | None,
    ) -> Switch:
        """The swap from `before` to `to_version`; `tables`: the pipelines whose tables the current version
        and the target write once the live tables moved (common/versions.py physical). The first swap
        moves the live tables and drops no view (the users' names are those tables until then)."""
        previous, target = tables
        moved = before.live_moved
        return cls(
            to_version=to_version,
            views=v.users_tables(target, to_version),
            dropped=set(v.users_tables(previous, before.version)) if moved else set(),
            move_live={} if moved else v.users_tables(v.moved_live(live), v.LIVE),
            move_indexes={} if moved else _index_renames(live),
            live=live,
            target=target,
            offsets=offsets,
            consumers_from=consumers_from,
        )


def _index_renames(live: pf.Pipeline) -> dict[str, str]:
    """The live tables' indexes (schema-qualified) -> the names db/pipeline_tables.py gives them once the
    tables are <table>__live, so that setup finds the moved tables as their file declares them."""
    renames = {}
    tables = pipeline_tables.metadata(live).tables.values()
    moved = pipeline_tables.metadata(v.moved_live(live)).tables.values()
    for table, moved_table in zip(tables, moved, strict=True):
        for name, moved_name in zip(_index_names(table), _index_names(moved_table), strict=True):
            if name != moved_name:
                renames[f"{table.schema}.{name}"] = moved_name
    return renames


def _index_names(table: sa.Table) -> list[str]:
    return sorted(str(index.name) for index in table.indexes)


def swap(conn: psycopg.Connection, base: str, before: Current, switch: Switch, reader: str) -> None:
    """In ONE transaction: the live tables moved, the views of the users' names replaced, the users' history
    view and function pointed at the target's history, the swap recorded (the Switch says what each is).
    DROP and CREATE, not CREATE OR REPLACE: versions may differ in their columns. Each statement takes an
    ACCESS EXCLUSIVE lock on its name, held to the commit: a query reads either the old version or the new,
    never a mix; one that holds a name across the swap delays it, or (reading two names in an order the
    swap crosses) is aborted by PostgreSQL's deadlock detection."""
    conn.execute(_CREATE_SWAPS)
    with conn.transaction():
        superuser = conn.execute("SELECT current_setting('is_superuser') = 'on'").fetchone()
        if superuser and superuser[0]:
            # A reader crossing the swap deadlocks with it: let PostgreSQL abort the reader (whose check runs
            # after the default 1 s), not the swap. Only a superuser may set it.
            conn.execute(f"SET LOCAL deadlock_timeout = '{SWAP_DEADLOCK_TIMEOUT}'")
        for name, moved in switch.move_live.items():
            conn.execute(
                sql.SQL("ALTER TABLE {} RENAME TO {}").format(
                    _qualified(name), sql.Identifier(moved.rpartition(".")[2])
                )
            )
        for name, moved in switch.move_indexes.items():
            conn.execute(
                sql.SQL("ALTER INDEX {} RENAME TO {}").format(_qualified(name), sql.Identifier(moved))
            )
        for name in sorted(switch.dropped):
            conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(_qualified(name)))
        for name, table in sorted(switch.views.items()):
            _create_view(conn, name, table, reader)
        for live, target in zip(plan.histories(switch.live), plan.histories(switch.target), strict=True):
            _point_history(conn, live, target, reader)
        conn.execute(
            f"INSERT INTO {SWAPS} (pipeline_name, from_version, to_version, offsets, consumers_from)"
            " VALUES (%s, %s, %s, %s, %s)",
            (base, before.version, switch.to_version, json.dumps(switch.offsets), switch.consumers_from),
        )


def _create_view(conn: psycopg.Connection, name: str, table: str, reader: str) -> None:
    conn.execute(sql.SQL("CREATE VIEW {} AS SELECT * FROM {}").format(_qualified(name), _qualified(table)))
    _grant_reader(conn, name, reader)


def _grant_reader(conn: psycopg.Connection, name: str, reader: str) -> None:
    conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(_qualified(name), sql.Identifier(reader)))


def _point_history(conn: psycopg.Connection, live: plan.History, target: plan.History, reader: str) -> None:
    """The live file's history view and function (the users' names) over the target's history table."""
    for statement in history.replace_sql(target, live):
        conn.execute(statement)
    _grant_reader(conn, live.view, reader)


def ensure_views(conn: psycopg.Connection, live: pf.Pipeline, reader: str) -> list[str]:
    """What `streamfold setup` of the live file does once a swap has moved the live tables: each users'
    name a view over the current version's table with that table's columns now (a view over SELECT *
    keeps the columns it was created with: a column setup added needs a new view), and the users' history
    view and function over its history. Replaces only what differs, so a second setup changes nothing.
    Returns what changed, one line each."""
    now = current(conn, live.name, v.LIVE)
    registered = None if now.version == v.LIVE else get(conn, live.name, now.version)
    target = v.physical(live, now.version, registered.pipeline if registered else None)
    changed = []
    for name, table in sorted(v.users_tables(target, now.version).items()):
        if not _reads(conn, name, table, columns(conn, table)):
            conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(_qualified(name)))
            _create_view(conn, name, table, reader)
            changed.append(f"view {name} now reads {table} ({now.version}, current)")
    for users, read in zip(plan.histories(live), plan.histories(target), strict=True):
        wanted = history.view_columns(read)
        if not (_reads(conn, users.view, read.table, wanted) and _returns(conn, users.function, users.view)):
            _point_history(conn, users, read, reader)
            changed.append(f"view {users.view} and function {users.function} now read {read.table}")
    return changed


def columns(conn: psycopg.Connection, relation: str) -> list[str]:
    """A table's or view's columns in order; none when it does not exist."""
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0"
        " AND NOT attisdropped ORDER BY attnum",
        (relation,),
    )
    return [row[0] for row in rows]


def _reads(conn: psycopg.Connection, view: str, source: str, wanted: list[str]) -> bool:
    """Whether `view` is a view over `source` with exactly the `wanted` columns."""
    row = conn.execute(
        "SELECT c.relkind = 'v' AND EXISTS (SELECT 1 FROM pg_rewrite r JOIN pg_depend d"
        " ON d.classid = 'pg_rewrite'::regclass AND d.objid = r.oid WHERE r.ev_class = c.oid"
        " AND d.refclassid = 'pg_class'::regclass AND d.refobjid = to_regclass(%s))"
        " FROM pg_class c WHERE c.oid = to_regclass(%s)",
        (source, view),
    ).fetchone()
    return bool(row and row[0]) and columns(conn, view) == wanted


def _returns(conn: psycopg.Connection, function: str, view: str) -> bool:
    """Whether the one function of that name returns the view's rows (to_regproc: NULL for none or many)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_proc p JOIN pg_class c ON p.prorettype = c.reltype"
        " WHERE p.oid = to_regproc(%s) AND c.oid = to_regclass(%s))",
        (function, view),
    ).fetchone()
    return bool(row and row[0])


def live_moved(conn: psycopg.Connection, base: str) -> bool:
    """Whether a swap has moved the live pipeline `base`'s tables to <table>__live (read-only: an
    installation that never swapped has no swaps table)."""
    if not _exists(conn, SWAPS):
        return False
    row = conn.execute(f"SELECT 1 FROM {SWAPS} WHERE pipeline_name = %s LIMIT 1", (base,)).fetchone()
    return row is not None
