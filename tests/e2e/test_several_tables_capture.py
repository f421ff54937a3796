"""Several tables, captured (docs/join-semantics.md, "Several tables"): setup's publication, grants and
connector for a file with further tables, on the real stack. One connector and one slot capture every
table into the one CDC topic, in commit order with the heartbeats, with only the carried columns; a lookup
table that leaves the publication is a lost capture like the profile's. The fold of every table
(pipeline/cdc_fold.py fold_tables) types each table's real change events into its own columns. (This
calls the setup steps directly; tests/e2e/test_several_tables_join.py runs `streamfold setup` and the job.)"""

from __future__ import annotations

import base64
import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from common import config, plan
from common import pipeline_file as pf
from connectors.setup import run_setup
from db import capture, schema
from pipeline import cdc_fold
from streamfold import generate
from tests.support.kafka import read_all
from tests.support.own_pipeline import drop_installation, run_python

pytestmark = pytest.mark.e2e

TABLES = """\
CREATE TABLE public.parcels_{tag} (id bigint PRIMARY KEY, sender_id bigint, weight numeric, label text);
CREATE TABLE public.senders_{tag} (id bigint PRIMARY KEY, country text, email text);
CREATE TABLE public.depots_{tag} (code text PRIMARY KEY, city text, manager_phone text);
"""
PII = {"label", "email", "manager_phone"}


def pipeline_text(tag: str) -> str:
    return f"""\
name: scans_{tag}
profile:
  table: public.parcels_{tag}
  key: id
  key_type: bigint
  columns: {{sender_id: bigint, weight: numeric}}
tables:
  sender:
    table: public.senders_{tag}
    key: id
    key_type: bigint
    columns: {{country: {{type: text, if_missing: XX}}}}
    join_on: profile.sender_id
  depot:
    table: public.depots_{tag}
    key: code
    columns: {{city: text}}
    join_on: event.depot
events:
  kafka_topic: scans_{tag}
  key: parcel_id
  time: ts
  fields: {{depot: text}}
outputs:
  cdc_topic_prefix: scan_{tag}
"""


@pytest.fixture
def scans(streamfold_setup: config.Settings) -> Iterator[config.Settings]:
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as conn:
        conn.execute(TABLES.format(tag=tag))
    settings = dataclasses.replace(streamfold_setup, pipeline=pf.parse(pipeline_text(tag)))
    try:
        yield settings
    finally:
        p = settings.pipeline
        drop_installation(settings.pg_dsn, settings.connect_url, p, plan.of(p).captured)


def changes_of(settings: config.Settings, want: int) -> list[dict]:
    """The CDC topic's change events (heartbeats included) once `want` row changes are in it and a
    heartbeat after the last of them (the connector commits one every 200 ms while the capture holds)."""
    deadline = time.monotonic() + 180
    while True:
        messages = read_all(settings.kafka_bootstrap, plan.of(settings.pipeline).cdc_topic)
        envelopes = [m for m in messages if isinstance(m.value, dict)]
        tables = [e.value["source"]["table"] for e in envelopes]
        changed = [i for i, table in enumerate(tables) if table != pf.HEARTBEAT_TABLE]
        beat_after = bool(changed) and pf.HEARTBEAT_TABLE in tables[changed[-1] + 1 :]
        if (len(changed) >= want and beat_after) or time.monotonic() > deadline:
            assert {m.partition for m in messages} <= {0}
            return [e.value for e in envelopes]
        time.sleep(1)


# Folds the records on stdin in a Spark session of its own process: a session an earlier test of the
# pytest process made (tests/e2e/test_kinesis_source.py) holds a JVM without the streamfold jars.
FOLD = """
import base64, json, sys
from pipeline import cdc_fold
from streamfold import generate
from pipeline.spark import session
asked = json.load(sys.stdin)
spark = session("streamfold-e2e-fold", {"spark.master": "local[1]", "spark.ui.enabled": "false"})
raw = spark.createDataFrame(
    [(t, k and base64.b64decode(k), v and base64.b64decode(v), i, w) for t, k, v, i, w in asked["records"]],
    "topic string, key binary, value binary, event_id string, written_ms long",
)
rows = [r.asDict() for r in cdc_fold.fold_tables(raw, asked["spec"]).collect()]
spark.stop()
print(json.dumps(rows, default=str))
"""


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def folded(settings: config.Settings) -> list[tuple[str, str, str, dict[str, Any]]]:
    """The CDC topic's records through fold_tables: each change's table, key, op and the columns it set
    (numerics as text); every other record must be progress (a heartbeat-table event), none a dead letter."""
    messages = read_all(settings.kafka_bootstrap, plan.of(settings.pipeline).cdc_topic)
    now = int(time.time() * 1000)
    records = [(m.topic, _b64(m.raw_key), _b64(m.raw_value), f"r{m.offset}", now) for m in messages]
    rows = run_python(FOLD, {"records": records, "spec": cdc_fold.tables_spec(settings.pipeline)})
    assert {r["kind"] for r in rows if r["kind"] != "change"} <= {"progress"}, rows
    return [
        (
            r["table"],
            r["key"],
            r["op"],
            {k: v for k, v in r.items() if k.startswith("t") and k[1].isdigit() and v is not None},
        )
        for r in rows
        if r["kind"] == "change"
    ]


def test_one_connector_captures_every_table_into_one_topic_in_commit_order(scans: config.Settings) -> None:
    run_setup(scans, echo=lambda _: None)
    p = scans.pipeline
    parcels, senders, depots = plan.of(p).captured
    with psycopg.connect(scans.pg_dsn, autocommit=True) as conn:
        published = dict(
            conn.execute(
                "SELECT schemaname || '.' || tablename, attnames FROM pg_publication_tables "
                "WHERE pubname = %s",
                (plan.of(p).publication,),
            ).fetchall()
        )
        assert {t: tuple(c) for t, c in published.items() if t in (parcels, senders, depots)} == {
            parcels: ("id", "sender_id", "weight"),
            senders: ("id", "country"),
            depots: ("code", "city"),
        }
        grants = conn.execute(
            "SELECT has_column_privilege(%s, %s, 'country', 'SELECT'), "
            "has_column_privilege(%s, %s, 'email', 'SELECT')",
            (config.DEBEZIUM_ROLE, senders, config.DEBEZIUM_ROLE, senders),
        ).fetchone()
        assert grants == (True, False), "the Debezium role reads the carried columns only"

        conn.execute(f"INSERT INTO {depots} VALUES ('HAM', 'Hamburg', '+49 555')")
        conn.execute(f"INSERT INTO {senders} VALUES (1, 'DE', 'a@example.com')")
        conn.execute(f"INSERT INTO {parcels} VALUES (7, 1, 2.5, 'to Alice')")
        with conn.transaction():  # one commit, two tables
            conn.execute(f"UPDATE {senders} SET country = 'FR' WHERE id = 1")
            conn.execute(f"UPDATE {parcels} SET weight = 3 WHERE id = 7")

    envelopes = changes_of(scans, want=5)
    rows = [e for e in envelopes if e["source"]["table"] != pf.HEARTBEAT_TABLE]
    assert [(e["source"]["table"], e["op"]) for e in rows] == [
        (depots.split(".")[1], "c"),
        (senders.split(".")[1], "c"),
        (parcels.split(".")[1], "c"),
        (senders.split(".")[1], "u"),
        (parcels.split(".")[1], "u"),
    ]
    assert all(not PII & set(e["after"] or {}) for e in rows), "a PII column left the database"
    lsns = [e["source"]["lsn"] for e in rows]
    assert lsns == sorted(lsns), "the tables' changes are in commit order"
    first = envelopes.index(rows[0])
    assert any(e["source"]["table"] == pf.HEARTBEAT_TABLE for e in envelopes[first:]), "heartbeats among them"
    assert folded(scans) == [
        (depots, "HAM", "c", {"t2_city": "Hamburg"}),
        (senders, "1", "c", {"t1_country": "DE"}),
        (parcels, "7", "c", {"t0_sender_id": 1, "t0_weight": "2.5"}),
        (senders, "1", "u", {"t1_country": "FR"}),
        (parcels, "7", "u", {"t0_sender_id": 1, "t0_weight": "3"}),
    ]

    # A lookup table that leaves the publication is a lost capture, named.
    with psycopg.connect(scans.pg_dsn, autocommit=True) as conn:
        conn.execute(f"ALTER TABLE {senders} DROP COLUMN country CASCADE")
        lost = capture.lost_tables(conn, plan.of(p), plan.of(p).captured)
    assert [found.table for found in lost] == [senders]
    assert f"capture lost: {senders} is not in publication {plan.of(p).publication}" in lost[0].message()


def test_generate_fills_every_table_and_every_foreign_key_hits_a_row(scans: config.Settings) -> None:
    p = scans.pipeline
    inserted = generate.load_tables(scans.pg_dsn, 300, p)
    parcels, senders, depots = (join.table.table for join in plan.joins(p))
    assert inserted == {parcels: 300, senders: 30, depots: 3}
    with psycopg.connect(scans.pg_dsn) as conn:
        dangling = conn.execute(
            f"SELECT count(*) FROM {parcels} p LEFT JOIN {senders} s ON s.id = p.sender_id WHERE s.id IS NULL"
        ).fetchone()
        depot_codes = {code for (code,) in conn.execute(f"SELECT code FROM {depots}")}
    assert dangling == (0,)
    events = list(generate.clicks(generate.ClickSpec(500, 300, pipeline=p)))
    assert {e["depot"] for e in events} == depot_codes
    assert {e["parcel_id"] for e in events} <= set(range(1, 301))
    assert generate.load_tables(scans.pg_dsn, 300, p) == {parcels: 0, senders: 0, depots: 0}


def test_a_table_added_to_the_file_is_snapshotted_as_from_the_beginning(scans: config.Settings) -> None:
    p = scans.pipeline
    parcels, senders, depots = plan.of(p).captured
    without_depot = pf.Pipeline.model_validate(
        {
            **p.model_dump(mode="json", exclude_none=True),
            "tables": {"sender": p.tables["sender"].model_dump()},
        }
    )
    run_setup(dataclasses.replace(scans, pipeline=without_depot), echo=lambda _: None)
    with psycopg.connect(scans.pg_dsn, autocommit=True) as conn:
        conn.execute(f"INSERT INTO {senders} VALUES (1, 'DE', 'a@example.com')")
        conn.execute(
            f"INSERT INTO {depots} VALUES ('HAM', 'Hamburg', '+49 555'), ('BER', 'Berlin', '+49 556')"
        )
    assert [e["op"] for e in changes_of(scans, want=1) if e["source"]["table"] != pf.HEARTBEAT_TABLE] == ["c"]

    said: list[str] = []
    run_setup(scans, echo=said.append)
    assert any(depots in line and "snapshot" in line for line in said), said
    with psycopg.connect(scans.pg_dsn, autocommit=True) as conn:
        conn.execute(f"UPDATE {depots} SET city = 'Hamburg-Altona' WHERE code = 'HAM'")
    rows = [e for e in changes_of(scans, want=4) if e["source"]["table"] != pf.HEARTBEAT_TABLE]
    depot_rows = [(e["op"], e["after"]["code"], e["source"]["snapshot"]) for e in rows[1:]]
    assert sorted((op, code) for op, code, _ in depot_rows[:2]) == [("r", "BER"), ("r", "HAM")]
    assert all(snapshot not in ("incremental", "false") for _, _, snapshot in depot_rows[:2]), depot_rows
    assert depot_rows[2][:2] == ("u", "HAM"), "the table streams after its snapshot"
    assert [e["source"]["table"] for e in rows[1:]] == [depots.split(".")[1]] * 3, "no other table read again"
    assert all(not PII & set(e["after"] or {}) for e in rows), "a PII column left the database"
    assert schema.added_tables(scans.pg_dsn, p) == (), "a table is added once"
