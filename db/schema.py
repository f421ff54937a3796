"""Schema (Alembic migrations in db/migrations/), least-privilege roles and the filtered publication,
applied idempotently."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql

from common import config, plan
from common import pipeline_file as pf
from db import capture, introspect, locks, pipeline_schema, tables, versions

_ROLES = (
    (config.DEBEZIUM_ROLE, "LOGIN REPLICATION"),
    (config.WRITER_ROLE, "LOGIN"),
    (config.READER_ROLE, "LOGIN"),
)

VERSION_TABLE = "alembic_version"

T = TypeVar("T")

# The reader role's statement_timeout (a PostgreSQL duration), set on the role by every setup.
READER_TIMEOUT_VAR = "STREAMFOLD_READER_TIMEOUT"
READER_TIMEOUT_DEFAULT = "60s"


def _ours(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Autogenerate looks at streamfold's objects only: the public schema may hold other applications'."""
    if type_ == "schema":
        return name in (None, tables.SCHEMA)
    if type_ == "table" and parent_names.get("schema_name") is None:
        return f"public.{name}" in tables.metadata.tables
    return True


# Shared by db/migrations/env.py and the tests that compare the database with db/tables.py.
MIGRATION_OPTIONS: dict[str, Any] = {
    "target_metadata": tables.metadata,
    "version_table": VERSION_TABLE,
    "version_table_schema": tables.SCHEMA,
    "include_schemas": True,
    "include_name": _ours,
    "compare_server_default": True,
}


def engine(dsn: str) -> sa.Engine:
    """An engine for any libpq DSN (URL or key=value), connecting as psycopg does. The search path is
    public alone: with the default "$user", public, a role named streamfold (the compose and local
    superuser) would resolve unqualified names, and Alembic's default schema, to the streamfold schema."""
    connect = partial(psycopg.connect, dsn, options="-c search_path=public")
    return sa.create_engine("postgresql+psycopg://", creator=connect, poolclass=sa.NullPool)


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """Alembic's configuration, in code: an installed package needs no alembic.ini."""
    cfg = Config()
    cfg.set_main_option("script_location", "db:migrations")
    cfg.attributes["connection"] = connection  # db/migrations/env.py migrates on it
    return cfg


def head() -> str:
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision


def current(connection: sa.Connection) -> str | None:
    """The revision the database is at; None before the first migration (or a pre-Alembic install)."""
    return MigrationContext.configure(connection, opts=MIGRATION_OPTIONS).get_current_revision()


def upgrade(dsn: str) -> tuple[str | None, str]:
    """Tables only, to the newest revision. Returns the revisions before and after."""
    return migrating(dsn, _upgrade)


def migrating(dsn: str, migrate: Callable[[sa.Connection], T]) -> T:
    """migrate(connection) in one transaction as setup runs its DDL: after any other setup, taking each lock
    with a lock_timeout, all again after a lock timeout (db/locks.py), so that a long reader delays the
    migration, never the job's landing. Also what the `alembic` command line runs (db/migrations/env.py)."""

    def attempt() -> T:
        with _locked(dsn) as connection:
            return migrate(connection)

    return locks.retrying(dsn, attempt, print)


def apply(
    admin_dsn: str, pipeline: pf.Pipeline | None = None, echo: Callable[[str], None] = lambda _: None
) -> tuple[str | None, str]:
    """_apply_once, again while a lock it needs is held (db/locks.py); `echo` hears the changes once
    they are committed, and each wait for a lock."""
    changes: list[str] = []

    def attempt() -> tuple[str | None, str]:
        changes.clear()
        return _apply_once(admin_dsn, pipeline, changes.append)

    revisions = locks.retrying(admin_dsn, attempt, echo)
    for change in changes:
        echo(change)
    return revisions


def _apply_once(
    admin_dsn: str, pipeline: pf.Pipeline | None, echo: Callable[[str], None]
) -> tuple[str | None, str]:
    """Upgrade streamfold's tables, bring the pipeline's sink tables to its file (db/pipeline_schema.py;
    once a swap has moved them, the <table>__live ones, and the users' names then point at the current
    version: db/versions.py ensure_views), then roles, grants and the publication of its profile table, in
    one transaction: a file the database contradicts, or a change it cannot absorb, changes nothing. Safe
    to run any number of times. Returns the revisions before and after; `echo` hears each change to the
    sink tables and views."""
    pipeline = pipeline or pf.load()
    with _locked(admin_dsn) as connection:
        revisions = _upgrade(connection)
        conn = connection.connection.driver_connection
        assert isinstance(conn, psycopg.Connection)
        # Before any grant or publication: a file the database contradicts changes nothing.
        introspect.check(conn, pipeline)
        moved = versions.live_moved(conn, pipeline.name)
        for change in pipeline_schema.apply(connection, pipeline, moved):
            echo(change)
        for role, attributes in _ROLES:
            _ensure_role(conn, role, config.lookup(config.PASSWORD_VARS[role]), attributes)
        _set_reader_timeout(conn)
        if moved:  # after the roles: the views are granted to the reader
            for change in versions.ensure_views(conn, pipeline, config.READER_ROLE):
                echo(change)
        captured = plan.captured(*versions.sharing_inputs(conn, pipeline))
        _grant(conn, pipeline, captured)
        _ensure_publication(conn, plan.of(pipeline), captured)
    return revisions


@contextmanager
def _locked(dsn: str) -> Iterator[sa.Connection]:
    with engine(dsn).begin() as connection:
        # Serialise concurrent set-ups (the compose `setup` service and a developer, say).
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('streamfold.setup'))")
        # After the advisory lock, which waits as long as another setup takes.
        connection.exec_driver_sql(f"SET LOCAL lock_timeout = '{locks.LOCK_TIMEOUT}'")
        yield connection


def _upgrade(connection: sa.Connection) -> tuple[str | None, str]:
    before = current(connection)
    command.upgrade(alembic_config(connection), "head")
    after = current(connection)
    assert after is not None
    return before, after


def _ensure_role(conn: psycopg.Connection, role: str, password: str, attributes: str) -> None:
    exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    verb = "ALTER" if exists else "CREATE"
    # NOSUPERUSER explicitly: the Debezium role must never be one.
    conn.execute(
        sql.SQL("{} ROLE {} WITH NOSUPERUSER NOCREATEDB NOCREATEROLE " + attributes + " PASSWORD {}").format(
            sql.SQL(verb), sql.Identifier(role), sql.Literal(password)
        )
    )


def _set_reader_timeout(conn: psycopg.Connection) -> None:
    """A reader's statement ends after the timeout, so a forgotten query cannot hold its table for ever."""
    timeout = config.lookup(READER_TIMEOUT_VAR, READER_TIMEOUT_DEFAULT)
    conn.execute(
        sql.SQL("ALTER ROLE {} SET statement_timeout = {}").format(
            sql.Identifier(config.READER_ROLE), sql.Literal(timeout)
        )
    )


def shared_capture(dsn: str, pipeline: pf.Pipeline) -> plan.Captured:
    """The tables and columns the connector and the publication carry for `pipeline`: those of every file
    that reads its inputs (db/versions.py sharing_inputs), so that setup of one version (the live file's at
    every compose up) never stops a column another version's job carries."""
    with psycopg.connect(dsn) as conn:
        return plan.captured(*versions.sharing_inputs(conn, pipeline))


def set_up_capture(dsn: str, pipeline: pf.Pipeline) -> plan.Captured | None:
    """What the files set up on the same inputs as `pipeline` captured; None before any was set up."""
    with psycopg.connect(dsn) as conn:
        sharing = versions.sharing_inputs(conn, pipeline)
    with engine(dsn).connect() as conn:
        installed = sa.inspect(conn).has_table(tables.pipelines.name, schema=tables.pipelines.schema)
        set_up = [pipeline_schema.applied(conn, p.name) for p in sharing] if installed else []
    files = [p for p in set_up if p is not None]
    return plan.captured(*files) if files else None


def added_tables(dsn: str, pipeline: pf.Pipeline) -> tuple[str, ...]:
    """The tables `pipeline` joins that no file set up on its inputs captured: a table added to the file.
    None on a first setup, whose connector snapshots every table anyway."""
    before = set_up_capture(dsn, pipeline)
    return () if before is None else tuple(t for t in plan.of(pipeline).captured if t not in before)


def capture_lost(dsn: str, pipeline: pf.Pipeline) -> tuple[capture.CaptureLost, ...]:
    """The tables the publication lacks, or lacks a column of, that the file carries and that a file set up
    on the same inputs carried too (db/capture.py): a table or column no set-up file carried was never
    captured (a file or a reprocessed version that adds it), so it is not lost."""
    before, resolved = set_up_capture(dsn, pipeline) or {}, plan.of(pipeline)
    was_captured = {
        table: tuple(c for c in columns if c in before[table])
        for table, columns in resolved.captured.items()
        if table in before
    }
    with psycopg.connect(dsn) as conn:
        return capture.lost_tables(conn, resolved, was_captured)


def _quoted(table: str) -> sql.Composable:
    return sql.Identifier(*table.split("."))


def _grant(conn: psycopg.Connection, pipeline: pf.Pipeline, captured: plan.Captured) -> None:
    db = conn.info.dbname
    debezium, writer, reader = (
        sql.Identifier(r) for r in (config.DEBEZIUM_ROLE, config.WRITER_ROLE, config.READER_ROLE)
    )
    statements = [
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}, {}, {}").format(
            sql.Identifier(db), debezium, writer, reader
        ),
    ]
    for table, carried in captured.items():
        columns = sql.SQL(", ").join(sql.Identifier(c) for c in carried)
        statements += [
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(table.split(".")[0]), debezium),
            # Column-level: even a misconfigured connector cannot read PII.
            sql.SQL("REVOKE ALL ON {} FROM {}").format(_quoted(table), debezium),
            sql.SQL("GRANT SELECT ({}) ON {} TO {}").format(columns, _quoted(table), debezium),
        ]
    statements += [
        # The heartbeat table (pipeline/cdc_fold.py): Debezium's heartbeat.action.query upserts its row.
        sql.SQL("GRANT USAGE ON SCHEMA streamfold TO {}").format(debezium),
        sql.SQL("REVOKE ALL ON streamfold.cdc_heartbeat FROM {}").format(debezium),
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON streamfold.cdc_heartbeat TO {}").format(debezium),
        # The signal table (db/capture.py): Debezium reads the signals and writes its snapshot watermarks.
        sql.SQL("REVOKE ALL ON {} FROM {}").format(sql.SQL(capture.SIGNAL_TABLE), debezium),
        sql.SQL("GRANT SELECT, INSERT ON {} TO {}").format(sql.SQL(capture.SIGNAL_TABLE), debezium),
        sql.SQL("GRANT USAGE ON SCHEMA streamfold TO {}, {}").format(writer, reader),
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA streamfold TO {}").format(
            writer
        ),
        sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA streamfold TO {}").format(reader),
        # The migration history and the applied pipeline files are setup's alone.
        sql.SQL("REVOKE INSERT, UPDATE, DELETE ON streamfold.{}, streamfold.pipelines FROM {}").format(
            sql.Identifier(VERSION_TABLE), writer
        ),
        sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA streamfold TO {}").format(writer),
    ]
    for statement in statements:
        conn.execute(statement)


def _ensure_publication(conn: psycopg.Connection, resolved: plan.Plan, captured: plan.Captured) -> None:
    """A publication with a column list per table (PostgreSQL 15+): pgoutput never decodes the PII columns.

    It also carries streamfold.cdc_heartbeat (CDC progress, see pipeline/cdc_fold.py) and Debezium's signal
    table (db/capture.py), whose rows Debezium reads from the stream."""
    captured_tables = [
        sql.SQL("{} ({})").format(_quoted(table), sql.SQL(", ").join(sql.Identifier(c) for c in carried))
        for table, carried in captured.items()
    ]
    # The heartbeat table too: its change events are CDC progress, in commit order with the tables'.
    table = sql.SQL("{}, {} WHERE (id = {}), {}").format(
        sql.SQL(", ").join(captured_tables),
        sql.Identifier(pf.HEARTBEAT_SCHEMA, pf.HEARTBEAT_TABLE),
        sql.Literal(capture.heartbeat_id(resolved)),
        sql.SQL(capture.SIGNAL_TABLE),
    )
    name = sql.Identifier(resolved.publication)
    exists = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (resolved.publication,)
    ).fetchone()
    if exists:
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(name, table))
    else:
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(name, table))
