"""A user's own table and events through `streamfold setup`'s database step, in a throwaway database on the
session's PostgreSQL: the sink tables come from the pipeline file, only the declared columns are published
and granted, a changed file adds columns and aggregates without losing rows, and a change the
installation cannot absorb is refused with nothing applied."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from common import config
from common import pipeline_file as pf
from db import pipeline_schema, schema
from pipeline import preflight

pytestmark = pytest.mark.e2e

CUSTOMERS = """\
name: views
profile:
  table: public.customers
  key: id
  key_type: bigint
  columns:
    tier: text
    country: {type: text, if_missing: UNKNOWN}
    credit: numeric
    vip: {type: boolean, if_missing: false}
    since: timestamptz
    prefs: jsonb
events:
  kafka_topic: page_views
  key: customer_id
  time: {field: ts, format: iso8601}
  count: views
  fields: {path: text, ms_on_page: bigint}
aggregates:
  - name: views_per_country
    group_by: {country: country}
    sums: {ms_total: ms_on_page}
  - name: views_per_path
    group_by: {path: path, vip: vip}
"""
TABLE = """CREATE TABLE public.customers (
  id bigint PRIMARY KEY, email text NOT NULL, tier text, country varchar(2), credit numeric(12, 2),
  vip boolean, since timestamptz, prefs jsonb, notes text)"""


@pytest.fixture
def database(settings: config.Settings) -> Iterator[str]:
    name = f"streamfold_own_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo(settings.pg_dsn, dbname=name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(TABLE)
    try:
        yield dsn
    finally:
        with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def columns(dsn: str, table: str) -> list[str]:
    with psycopg.connect(dsn) as conn:
        return [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema || '.' || table_name = %s ORDER BY ordinal_position",
                (table,),
            )
        ]


def test_setup_builds_the_files_tables_and_publishes_only_its_columns(database: str) -> None:
    changes: list[str] = []
    schema.apply(database, pf.parse(CUSTOMERS), echo=changes.append)
    assert "created table streamfold.enriched_views" in changes
    assert columns(database, "streamfold.enriched_views") == [
        "event_id", "customer_id", "ts", "path", "ms_on_page", "views", "profile_tier", "profile_country",
        "profile_credit", "profile_vip", "profile_since", "profile_prefs", "profile_valid_from",
        "profile_complete", "cdc_progress", "released_by_max_wait",
    ]  # fmt: skip
    assert "created table streamfold.profile_history_views" in changes
    history = "created view streamfold.profile_versions_views and function streamfold.profile_at_views"
    assert history in changes
    assert columns(database, "streamfold.views_per_path") == ["path", "vip", "count", "path_md5"]
    with psycopg.connect(database) as conn:
        (published,) = conn.execute(
            "SELECT attnames FROM pg_publication_tables WHERE pubname = 'streamfold_customers' "
            "AND tablename = 'customers'"
        ).fetchone()
        granted = {
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.column_privileges "
                "WHERE grantee = %s AND table_name = 'customers'",
                (config.DEBEZIUM_ROLE,),
            )
        }
    declared = {"id", "tier", "country", "credit", "vip", "since", "prefs"}
    assert set(published) == granted == declared  # email and notes never leave the database
    assert schema.apply(database, pf.parse(CUSTOMERS), echo=changes.append)  # a second run changes nothing
    assert changes.count("created table streamfold.enriched_views") == 1


def test_a_new_column_and_aggregate_are_added_without_losing_rows(database: str) -> None:
    schema.apply(database, pf.parse(CUSTOMERS))
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("ALTER TABLE public.customers ADD COLUMN segment text")
        conn.execute(
            "INSERT INTO streamfold.enriched_views (event_id, customer_id, ts, views, profile_country, "
            "profile_vip) VALUES ('kafka:page_views:0:1', 7, now(), 1, 'NO', false)"
        )
    grown = CUSTOMERS.replace("    prefs: jsonb\n", "    prefs: jsonb\n    segment: text\n") + (
        "  - name: views_per_segment\n    group_by: {segment: segment}\n"
    )
    with pytest.raises(pf.PipelineFileError, match="if_missing"):
        pf.parse(grown)
    grown = grown.replace("segment: text\n", "segment: {type: text, if_missing: none}\n", 1)
    changes: list[str] = []
    schema.apply(database, pf.parse(grown), echo=changes.append)
    assert "added column profile_segment to streamfold.enriched_views (older rows: null)" in changes
    assert "created table streamfold.views_per_segment" in changes
    with psycopg.connect(database) as conn:
        rows = conn.execute("SELECT event_id, profile_segment FROM streamfold.enriched_views").fetchall()
    assert rows == [("kafka:page_views:0:1", None)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            ("key: id\n", "key: email\n  # the other unique column\n"),
            r"profile.key: changed from 'id' to 'email'",
        ),
        (
            ("ms_on_page: bigint}", "ms_on_page: double}"),
            r"events.fields.ms_on_page.type: changed from bigint",
        ),
        (("    tier: text\n", ""), r"profile.columns: 'tier' is gone"),
        (("format: iso8601", "format: epoch_ms"), r"events.time.format: changed"),
    ],
)
def test_a_change_the_installation_cannot_absorb_is_refused_and_nothing_applied(
    database: str, change: tuple[str, str], message: str
) -> None:
    schema.apply(database, pf.parse(CUSTOMERS))
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute("CREATE UNIQUE INDEX ON public.customers (email)")
    before = columns(database, "streamfold.enriched_views")
    changed = CUSTOMERS.replace(*change).replace("ms_on_page: bigint}", "ms_on_page: bigint, ref: text}")
    if "key: email" in changed:
        changed = changed.replace("key_type: bigint", "key_type: text")
    with pytest.raises(pf.PipelineFileError, match=message):
        schema.apply(database, pf.parse(changed, "mine.yaml"))
    assert columns(database, "streamfold.enriched_views") == before  # not even the new field's column


def test_the_live_table_is_checked_before_anything_is_applied(database: str) -> None:
    wrong = {
        "table: public.customers": "table: public.customer",
        "tier: text": "teir: text",
        "vip: {type: boolean, if_missing: false}": "vip: {type: bigint, if_missing: 0}",
        "key: id\n": "key: tier\n",
    }
    expected = {
        "table: public.customers": "no table public.customer in this database "
        "(did you mean public.customers?)",
        "tier: text": "public.customers has no column teir (did you mean 'tier'?)",
        "vip: {type: boolean, if_missing: false}": "declared bigint, but public.customers.vip is boolean: "
        "declare it as boolean",
        "key: id\n": "tier is not the primary key of public.customers and has no unique index",
    }
    for old, new in wrong.items():
        text = CUSTOMERS.replace(old, new)
        if old == "key: id\n":
            text = text.replace("key_type: bigint", "key_type: text").replace("    tier: text\n", "")
        with pytest.raises(pf.PipelineFileError) as error:
            schema.apply(database, pf.parse(text, "mine.yaml"))
        assert expected[old] in str(error.value) and str(error.value).startswith("mine.yaml:")
    assert columns(database, "streamfold.enriched_views") == []  # nothing applied


def test_a_file_run_would_refuse_is_refused_by_setup_and_the_old_file_still_runs(
    database: str, tmp_path: Path
) -> None:
    """A jsonb event field as an aggregate key: `run` cannot group by it, so `setup` refuses it before
    applying anything, with the same message, and the installation still holds the old file (what `run`
    checks first, db/pipeline_schema.check_applied)."""
    old = pf.parse(CUSTOMERS)
    schema.apply(database, old)
    new = tmp_path / "new.yaml"
    new.write_text(
        CUSTOMERS.replace(
            "fields: {path: text, ms_on_page: bigint}",
            "fields: {path: text, ms_on_page: bigint, meta: jsonb}",
        )
        + "  - name: views_per_meta\n    group_by: {meta: meta}\n"
    )
    message = "aggregates.2.group_by.meta: the sink cannot group by a jsonb column yet: group by another"
    result = subprocess.run(
        [sys.executable, "-m", "streamfold", "--pipeline", str(new), "setup", "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "STREAMFOLD_PG_DSN": database, "COLUMNS": "400"},
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr[-3000:]
    with pytest.raises(pf.PipelineFileError, match=message):
        preflight.check_plan(pf.load(new))  # what `run` calls first
    with schema.engine(database).connect() as conn:
        pipeline_schema.check_applied(conn, old)  # the old file still runs: setup applied nothing
    assert "meta" not in columns(database, "streamfold.enriched_views")


def test_check_refuses_a_change_setup_would_refuse_with_the_same_message(
    database: str, tmp_path: Path
) -> None:
    schema.apply(database, pf.parse(CUSTOMERS))
    changed = tmp_path / "mine.yaml"
    changed.write_text(CUSTOMERS.replace("    credit: numeric\n", ""))
    with pytest.raises(pf.PipelineFileError) as refused:
        schema.apply(database, pf.load(changed))
    assert "'credit' is gone" in str(refused.value)
    result = subprocess.run(
        [sys.executable, "-m", "streamfold", "--pipeline", str(changed), "check"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "STREAMFOLD_PG_DSN": database, "COLUMNS": "400"},
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip() == f"error: {refused.value}"
