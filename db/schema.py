"""Schema (Alembic migrations in db/migrations/), least-privilege roles and the filtered publication,
applied idempotently."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg import sql

from common import config, names
from db import tables

# The columns that may leave the database. name, email and contactinfo are PII and stay behind.
PUBLIC_USER_COLUMNS = ("userid", "regionid", "gender", "interests", "registertime")

_ROLES = (
    (config.DEBEZIUM_ROLE, "LOGIN REPLICATION"),
    (config.WRITER_ROLE, "LOGIN"),
    (config.READER_ROLE, "LOGIN"),
)

VERSION_TABLE = "alembic_version"


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
    with _locked(dsn) as connection:
        return _upgrade(connection)


def apply(admin_dsn: str) -> tuple[str | None, str]:
    """Upgrade the tables, then roles, grants and the publication, in one transaction. Safe to run any
    number of times. Returns the revisions before and after."""
    with _locked(admin_dsn) as connection:
        revisions = _upgrade(connection)
        conn = connection.connection.driver_connection
        assert isinstance(conn, psycopg.Connection)
        for role, attributes in _ROLES:
            _ensure_role(conn, role, config.lookup(config.PASSWORD_VARS[role]), attributes)
        _grant(conn)
        _ensure_publication(conn)
    return revisions


@contextmanager
def _locked(dsn: str) -> Iterator[sa.Connection]:
    with engine(dsn).begin() as connection:
        # Serialise concurrent set-ups (the compose `setup` service and a developer, say).
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(hashtext('streamfold.setup'))")
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


def _grant(conn: psycopg.Connection) -> None:
    db = conn.info.dbname
    debezium, writer, reader = (
        sql.Identifier(r) for r in (config.DEBEZIUM_ROLE, config.WRITER_ROLE, config.READER_ROLE)
    )
    columns = sql.SQL(", ").join(sql.Identifier(c) for c in PUBLIC_USER_COLUMNS)
    statements = [
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}, {}, {}").format(
            sql.Identifier(db), debezium, writer, reader
        ),
        sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(debezium),
        # Column-level: even a misconfigured connector cannot read PII.
        sql.SQL("REVOKE ALL ON public.users FROM {}").format(debezium),
        sql.SQL("GRANT SELECT ({}) ON public.users TO {}").format(columns, debezium),
        # The heartbeat table (spec/envelopes.py): Debezium's heartbeat.action.query upserts its row.
        sql.SQL("GRANT USAGE ON SCHEMA streamfold TO {}").format(debezium),
        sql.SQL("REVOKE ALL ON streamfold.cdc_heartbeat FROM {}").format(debezium),
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON streamfold.cdc_heartbeat TO {}").format(debezium),
        sql.SQL("GRANT USAGE ON SCHEMA streamfold TO {}, {}").format(writer, reader),
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA streamfold TO {}").format(
            writer
        ),
        sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA streamfold TO {}").format(reader),
        # The migration history is setup's alone.
        sql.SQL("REVOKE INSERT, UPDATE, DELETE ON streamfold.{} FROM {}").format(
            sql.Identifier(VERSION_TABLE), writer
        ),
        sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA streamfold TO {}").format(writer),
    ]
    for statement in statements:
        conn.execute(statement)


def _ensure_publication(conn: psycopg.Connection) -> None:
    """A publication with a column list (PostgreSQL 15+): pgoutput never decodes the PII columns.

    It also carries streamfold.cdc_heartbeat (CDC progress, see spec/envelopes.py)."""
    # The heartbeat table too: its change events are CDC progress, in commit order with the users'.
    table = sql.SQL("public.users ({}), streamfold.cdc_heartbeat").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in PUBLIC_USER_COLUMNS)
    )
    name = sql.Identifier(names.PUBLICATION_NAME)
    exists = conn.execute(
        "SELECT 1 FROM pg_publication WHERE pubname = %s", (names.PUBLICATION_NAME,)
    ).fetchone()
    if exists:
        conn.execute(sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(name, table))
    else:
        conn.execute(sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(name, table))
