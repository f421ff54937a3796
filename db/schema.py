"""Schema, least-privilege roles and the filtered publication, applied idempotently."""

from __future__ import annotations

from importlib import resources

import psycopg
from psycopg import sql

from streamfold import config, names

# The columns that may leave the database. name, email and contactinfo are PII and stay behind.
PUBLIC_USER_COLUMNS = ("userid", "regionid", "gender", "interests", "registertime")

_ROLES = (
    (config.DEBEZIUM_ROLE, "STREAMFOLD_DEBEZIUM_PASSWORD", "LOGIN REPLICATION"),
    (config.WRITER_ROLE, "STREAMFOLD_WRITER_PASSWORD", "LOGIN"),
    (config.READER_ROLE, "STREAMFOLD_READER_PASSWORD", "LOGIN"),
)


def schema_sql() -> str:
    return resources.files("db").joinpath("schema.sql").read_text()


def apply(admin_dsn: str) -> None:
    """Create or update tables, roles, grants and the publication. Safe to run any number of times."""
    with psycopg.connect(admin_dsn, autocommit=False) as conn:
        # Serialise concurrent set-ups (the compose `setup` service and a developer, say).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('streamfold.setup'))")
        conn.execute(schema_sql())
        for role, password_var, attributes in _ROLES:
            _ensure_role(conn, role, config.lookup(password_var), attributes)
        _grant(conn)
        _ensure_publication(conn)


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
        # The heartbeat table (pipeline/cdc_fold.py): Debezium's heartbeat.action.query upserts its row.
        sql.SQL("GRANT USAGE ON SCHEMA streamfold TO {}").format(debezium),
        sql.SQL("REVOKE ALL ON streamfold.cdc_heartbeat FROM {}").format(debezium),
        sql.SQL("GRANT SELECT, INSERT, UPDATE ON streamfold.cdc_heartbeat TO {}").format(debezium),
        sql.SQL("GRANT USAGE ON SCHEMA streamfold TO {}, {}").format(writer, reader),
        sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA streamfold TO {}").format(
            writer
        ),
        sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA streamfold TO {}").format(reader),
        sql.SQL("GRANT USAGE ON ALL SEQUENCES IN SCHEMA streamfold TO {}").format(writer),
    ]
    for statement in statements:
        conn.execute(statement)


def _ensure_publication(conn: psycopg.Connection) -> None:
    """A publication with a column list (PostgreSQL 15+): pgoutput never decodes the PII columns.

    It also carries streamfold.cdc_heartbeat (CDC progress, see pipeline/cdc_fold.py)."""
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
