"""Schema migrations (db/migrations) on the session stack's PostgreSQL, each test in a throwaway database
of its own: a pre-Alembic install is adopted with its rows, a fresh database ends up exactly as
db/tables.py says, a second run changes nothing, and the newest revision goes down and up again."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from psycopg import sql
from psycopg.conninfo import make_conninfo

from common import config
from db import locks, schema, tables
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

# A verbatim copy of db/schema.sql as it was before Alembic: what existing installs were created with.
PRE_ALEMBIC_DDL = Path(__file__).parent / "data" / "schema_pre_alembic.sql"

# Tables the first Alembic revision did not create.
AFTER_ALEMBIC = {"streamfold.pipelines", "streamfold.profile_history_clicks", "streamfold.debezium_signal"}
# The demo's source table: the first revision creates it, db/tables.py does not own it.
DEMO = {"public.users"}

# The revision before the one that alters streamfold.dead_letters (0006 adds its replay columns).
BEFORE_DEAD_LETTERS_ALTERED = "0005"

# What goes into each table: `INSERT INTO <table> <this>`.
ROWS = {
    "public.users": "VALUES ('u1', 'Ann', 'ann@example.com', 'Region_1', 'FEMALE', '{News,Movies}', "
    "'{\"city\": \"Oslo\"}', 1500000000000), ('u2', NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
    "streamfold.cdc_heartbeat": "VALUES (1, '2026-01-01T00:00:00Z')",
    "streamfold.enriched_clicks": "VALUES ('kafka:clicks:0:1', 'u1', '2026-01-01T00:00:01Z', "
    "'https://e.com/a', 'mobile', '10.0.0.1', 2, 'Region_1', 'FEMALE', '{News,Movies}', 1500000000000, "
    "'-infinity', true), ('kafka:clicks:0:2', 'u9', '2026-01-01T00:00:02Z', NULL, NULL, NULL, 1, 'unknown', "
    "NULL, NULL, NULL, NULL, false)",
    "streamfold.clicks_per_region": "VALUES ('Region_1', 2), ('unknown', 1)",
    "streamfold.url_region_click_count": "(url, region, click_count) VALUES "
    "('https://e.com/a', 'Region_1', 2), (repeat('x', 20000), 'unknown', 1)",
    "streamfold.dead_letters": "VALUES ('kafka:clicks:0:3', 'kafka:clicks', 'not JSON', '\\x00ff'::bytea, "
    "'2026-01-01T00:00:03Z')",
    "streamfold.sink_batches": "VALUES ('clicks', 0, 2, '2026-01-01T00:00:04Z')",
}

# Per-table totals: `SELECT <this> FROM <table>`.
TOTALS = {
    "public.users": "count(*), sum(registertime)",
    "streamfold.cdc_heartbeat": "count(*), max(ts)",
    "streamfold.enriched_clicks": "count(*), sum(clicks), count(*) FILTER (WHERE profile_complete)",
    "streamfold.clicks_per_region": "count(*), sum(clicks)",
    "streamfold.url_region_click_count": "count(*), sum(click_count), sum(length(url))",
    "streamfold.dead_letters": "count(*), sum(length(payload))",
    "streamfold.sink_batches": "count(*), sum(rows)",
}
TOTAL_QUERIES = tuple(f"SELECT {totals} FROM {table}" for table, totals in TOTALS.items())

# What a second upgrade must leave alone: columns, constraints, indexes, grants and the revision.
CATALOG = (
    """SELECT table_schema, table_name, column_name, data_type, is_nullable, column_default,
              generation_expression
         FROM information_schema.columns WHERE table_schema IN ('public', 'streamfold') ORDER BY 1, 2, 3""",
    """SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint
        WHERE connamespace IN ('public'::regnamespace, 'streamfold'::regnamespace) ORDER BY 1, 2""",
    "SELECT indexdef FROM pg_indexes WHERE schemaname IN ('public', 'streamfold') ORDER BY 1",
    """SELECT grantee, table_schema, table_name, privilege_type FROM information_schema.role_table_grants
        WHERE grantee LIKE 'streamfold%' ORDER BY 1, 2, 3, 4""",
    "SELECT version_num FROM streamfold.alembic_version",
)


@pytest.fixture
def database(settings: config.Settings) -> Iterator[str]:
    """A DSN to a new, empty database, dropped afterwards: the session's database stays untouched."""
    name = f"streamfold_migrations_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield make_conninfo(settings.pg_dsn, dbname=name)
    finally:
        with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def query(dsn: str, statements: tuple[str, ...]) -> dict[str, list[tuple[Any, ...]]]:
    with psycopg.connect(dsn) as conn:
        return {statement: conn.execute(statement).fetchall() for statement in statements}


def table_columns(dsn: str) -> dict[str, list[str]]:
    """Each table's columns, in order (the generated url_md5 too)."""
    with psycopg.connect(dsn) as conn:
        return {
            name: [
                row[0]
                for row in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema || '.' || table_name = %s ORDER BY ordinal_position",
                    (name,),
                )
            ]
            for name in [*tables.metadata.tables, *DEMO]
            if name not in AFTER_ALEMBIC
        }


def every_row(dsn: str, columns: dict[str, list[str]]) -> dict[str, list[tuple[Any, ...]]]:
    """Each table's rows as text, over the given columns (those a table had before a migration added
    some), in a stable order."""
    with psycopg.connect(dsn) as conn:
        return {
            name: conn.execute(
                sql.SQL("SELECT ROW({})::text FROM {} t ORDER BY 1").format(
                    sql.SQL(", ").join(map(sql.Identifier, cols)), sql.SQL(name)
                )
            ).fetchall()
            for name, cols in columns.items()
        }


def differences(dsn: str) -> list[Any]:
    """What autogenerate would migrate: the database against db/tables.py (empty: they agree)."""
    with schema.engine(dsn).connect() as connection:
        context = MigrationContext.configure(connection, opts=schema.MIGRATION_OPTIONS)
        return compare_metadata(context, tables.metadata)


def revision(dsn: str) -> str | None:
    with schema.engine(dsn).connect() as connection:
        return schema.current(connection)


def has_recorded_at_index(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT to_regclass('streamfold.dead_letters_recorded_at')").fetchone()
    return found is not None and found[0] is not None


def test_a_pre_alembic_database_is_adopted_with_its_rows(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(PRE_ALEMBIC_DDL.read_text())
        for table, values in ROWS.items():
            conn.execute(f"INSERT INTO {table} {values}")
    # Every table has rows and totals, but those added after Alembic (which the old DDL does not create).
    assert set(ROWS) == set(TOTALS) == set(tables.metadata.tables) - AFTER_ALEMBIC | DEMO
    columns = table_columns(database)
    rows, totals = every_row(database, columns), query(database, TOTAL_QUERIES)

    assert schema.upgrade(database) == (None, schema.head())

    assert every_row(database, columns) == rows
    assert query(database, TOTAL_QUERIES) == totals
    with psycopg.connect(database) as conn:  # 0003: the batches of old rows were landed whole
        assert conn.execute("SELECT partition_id FROM streamfold.sink_batches").fetchall() == [(0,)]
    assert revision(database) == schema.head()
    assert has_recorded_at_index(database)
    assert differences(database) == []


def test_a_new_database_matches_the_tables_module(database: str) -> None:
    assert schema.upgrade(database) == (None, schema.head())
    assert differences(database) == []


def test_a_second_setup_changes_nothing(database: str) -> None:
    assert schema.apply(database) == (None, schema.head())
    catalog = query(database, CATALOG)
    assert schema.apply(database) == (schema.head(), schema.head())
    assert query(database, CATALOG) == catalog
    # The writer role writes the sink tables, not the migration history.
    writer = {(table, grant) for role, _, table, grant in catalog[CATALOG[3]] if role == config.WRITER_ROLE}
    assert ("enriched_clicks", "INSERT") in writer
    assert {grant for table, grant in writer if table == "alembic_version"} == {"SELECT"}


def test_the_newest_revision_goes_down_and_up_again(database: str) -> None:
    schema.upgrade(database)
    with schema.engine(database).begin() as connection:
        command.downgrade(schema.alembic_config(connection), "-1")

    previous = revision(database)
    assert previous not in (None, schema.head())
    assert differences(database), "the newest revision's change is undone"

    assert schema.upgrade(database) == (previous, schema.head())
    assert differences(database) == []


def test_alembic_upgrade_waits_out_a_reader_without_queueing_writers(database: str, tmp_path: Path) -> None:
    """`alembic upgrade head` takes its locks as setup does (db/locks.py): behind a reader of a table it
    alters, it gives up its queued lock after lock_timeout, names the reader and tries again, so a writer of
    that table (the job's landing) never queues behind it; once the reader ends, the upgrade completes."""
    schema.upgrade(database)
    with schema.engine(database).begin() as connection:
        command.downgrade(schema.alembic_config(connection), BEFORE_DEAD_LETTERS_ALTERED)
    said = tmp_path / "alembic.out"
    with psycopg.connect(database) as reader:
        reader.execute("SELECT count(*) FROM streamfold.dead_letters")  # ACCESS SHARE until it rolls back
        with said.open("w") as out:
            cli = subprocess.Popen(
                [sys.executable, "-m", "alembic", "upgrade", "head"],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "STREAMFOLD_PG_DSN": database},
                cwd=sp.ROOT,
            )  # fmt: skip
        try:
            holder = f"held by pid {reader.info.backend_pid}"
            sp.wait_until(lambda: holder in said.read_text(), 120, "alembic naming the reader")
            with psycopg.connect(database, autocommit=True) as writer:
                # A guard against hanging for ever, far above the migration's lock_timeout.
                writer.execute("SET statement_timeout = '60s'")
                writer.execute(f"INSERT INTO streamfold.dead_letters {ROWS['streamfold.dead_letters']}")
        finally:
            reader.rollback()
            cli.wait(timeout=locks.LOCK_WAIT_S)
    assert cli.returncode == 0, said.read_text()[-3000:]
    assert revision(database) == schema.head()
    assert differences(database) == []
