"""Avro change events (docs/avro.md, "Avro change events") on the real stack: real Connect with Apicurio's
Avro converter, the real registry, PostgreSQL. Two pipelines capture two tables of the same columns, one
with `cdc.format: avro` and one with JSON; every change is made to both tables in one transaction (so with
the same commit time), and each CDC topic is folded by the job's fold (pipeline/cdc_fold.py, the Avro one
through jvm/.../cdc/AvroChangeFold.java): the folded rows must be equal, numeric, timestamptz, text[],
jsonb, an unchanged TOASTed value, deletes and a TRUNCATE included."""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import psycopg
import pytest
from psycopg import sql

from common import config, plan
from common import pipeline_file as pf
from connectors.setup import run_setup
from pipeline import cdc_fold
from streamfold import status
from tests.support.kafka import Message, read_all
from tests.support.own_pipeline import drop_installation, run_python

pytestmark = pytest.mark.e2e

TABLE = """CREATE TABLE {} (id bigint PRIMARY KEY, region text, amount numeric, seen timestamptz, tags text[],
prefs jsonb, bio text, email text)"""


def pipeline_text(kind: str, tag: str) -> str:
    return f"""\
name: {kind}_{tag}
profile:
  table: public.{kind}_people_{tag}
  key: id
  key_type: bigint
  columns:
    region: text
    amount: numeric
    seen: timestamptz
    tags: text[]
    prefs: jsonb
    bio: text
events: {{kafka_topic: {kind}_events_{tag}, key: person_id, time: ts}}
outputs: {{cdc_topic_prefix: {kind}_{tag}}}
cdc: {{format: {kind}}}
"""


@pytest.fixture
def twins(streamfold_setup: config.Settings) -> Iterator[dict[str, config.Settings]]:
    """An Avro and a JSON pipeline over twin tables, set up (connectors running, slots made)."""
    tag = uuid.uuid4().hex[:8]
    pipelines = {kind: pf.parse(pipeline_text(kind, tag)) for kind in ("avro", "json")}
    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as conn:
        for p in pipelines.values():
            conn.execute(sql.SQL(TABLE).format(sql.SQL(p.profile.table)))
    twins = {kind: dataclasses.replace(streamfold_setup, pipeline=p) for kind, p in pipelines.items()}
    try:
        for settings in twins.values():
            run_setup(settings, echo=lambda _: None)
        yield twins
    finally:
        for settings in twins.values():
            p = settings.pipeline
            drop_installation(settings.pg_dsn, settings.connect_url, p, plan.of(p).captured)


def wait_for_slots(dsn: str, slots: list[str]) -> None:
    """Changes committed once the slots exist are streamed, never read by the (empty) initial snapshot."""
    deadline = time.monotonic() + 120
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            found = conn.execute(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = ANY(%s) AND active", (slots,)
            ).fetchone()
            if found and found[0] == len(slots):
                return
            time.sleep(0.5)
    pytest.fail(f"replication slots {slots} not active after 120 s")


def change_both(dsn: str, tables: list[str], bio: str, marker: str) -> None:
    """The same changes to both tables, each statement for both in one transaction."""
    statements = [
        "INSERT INTO {t} VALUES (1, 'north', 12.50, '2026-01-02 03:04:05.123456+02', ARRAY['a', 'b'], "
        '\'{{"theme": "dark", "n": [1, 2.5]}}\', %(bio)s, \'one@example.com\'), '
        "(2, 'south', -0.001, '1999-12-31 23:59:59Z', ARRAY[]::text[], '[]', 'short', 'two@example.com'), "
        "(3, NULL, NULL, NULL, NULL, NULL, NULL, NULL)",
        "UPDATE {t} SET region = 'east' WHERE id = 1",  # bio is TOASTed and unchanged: a placeholder
        "UPDATE {t} SET amount = 99999999.99, prefs = '{{\"a\": null}}', tags = ARRAY['x', NULL] "
        "WHERE id = 2",
        "DELETE FROM {t} WHERE id = 3",
        "TRUNCATE {t}",
        "INSERT INTO {t} (id, region) VALUES (4, %(marker)s)",
    ]
    with psycopg.connect(dsn) as conn:
        for statement in statements:
            with conn.transaction():
                for table in tables:
                    conn.execute(sql.SQL(statement).format(t=sql.SQL(table)), {"bio": bio, "marker": marker})


def records_until(settings: config.Settings, marker: str) -> list[Message]:
    """The CDC topic's records once the marker row is in it (Avro writes a string's UTF-8 as it is)."""
    deadline = time.monotonic() + 180
    while True:
        messages = read_all(settings.kafka_bootstrap, plan.of(settings.pipeline).cdc_topic)
        if any(m.raw_value and marker.encode() in m.raw_value for m in messages):
            return messages
        if time.monotonic() > deadline:
            pytest.fail(f"{plan.of(settings.pipeline).cdc_topic}: no change with {marker} after 180 s")
        time.sleep(1)


# Folds the records on stdin in a Spark session of its own process (as test_several_tables_capture.py).
FOLD = """
import base64, json, sys
from pipeline import cdc_fold, events
from pipeline.spark import session
asked = json.load(sys.stdin)
spark = session("streamfold-e2e-avro-fold", {"spark.master": "local[1]", "spark.ui.enabled": "false"})
out = []
for topic in asked:
    raw = spark.createDataFrame(
        [(t, k and base64.b64decode(k), v and base64.b64decode(v), i) for t, k, v, i in topic["records"]],
        "topic string, key binary, value binary, event_id string",
    )
    registry = topic["registry"] and events.Registry(**topic["registry"])
    try:
        rows = cdc_fold.fold_records(raw, topic["spec"], registry=registry).collect()
        out.append([r.asDict() for r in rows])
    except Exception as failed:  # the task failed: what it says
        out.append({"failed": str(failed)})
spark.stop()
print(json.dumps(out, default=str))
"""


# A schema id no registry here has given out: Apicurio's content ids count from 1.
UNKNOWN_ID = b"\x00\x7f\xff\xff\xff\x02"
UNKNOWN_REASON = "schema id 2147483647 is unknown to the registry"  # a dead letter: the real registry's 404


def folded(twins: dict[str, config.Settings], marker: str) -> dict[str, Any]:
    """Each pipeline's CDC topic and heartbeat topic through the job's fold, in one Spark process; the
    Avro topic's with a record of an unknown schema id added, and once more with the registry down."""
    asked: list[dict[str, Any]] = []
    for settings in twins.values():
        p = settings.pipeline
        messages = records_until(settings, marker) + read_all(
            settings.kafka_bootstrap, plan.of(p).heartbeat_topic
        )
        records = [(m.topic, _b64(m.raw_key), _b64(m.raw_value), f"r{m.offset}") for m in messages]
        registry = cdc_fold.avro_registry(p)
        asked.append(
            {
                "records": records,
                "spec": plan.of(p).profile_spec,
                "registry": registry and asdict(registry),
            }
        )
    avro = cdc_fold.avro_registry(twins["avro"].pipeline)
    assert avro is not None
    asked[0]["records"].append((plan.of(twins["avro"].pipeline).cdc_topic, None, _b64(UNKNOWN_ID), "unknown"))
    closed = f"http://127.0.0.1:{closed_port()}/apis/ccompat/v7"
    down = asdict(dataclasses.replace(avro, url=closed, retry_ms=2000))
    asked.append({**asked[0], "registry": down})
    return dict(zip([*twins, "registry down"], run_python(FOLD, asked), strict=True))


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode()


def changes(rows: list[dict[str, Any]], *errors: str) -> list[dict[str, Any]]:
    """The changes and truncates, without what differs between two tables' records: the LSN; the dead
    letters must be `errors`."""
    assert [r["error"] for r in rows if r["kind"] == "error"] == list(errors)
    return [{k: v for k, v in r.items() if k != "lsn"} for r in rows if r["kind"] in ("change", "truncate")]


def test_avro_change_events_fold_as_the_json_ones(twins: dict[str, config.Settings]) -> None:
    avro, plain = twins["avro"], twins["json"]
    wait_for_slots(avro.pg_dsn, [plan.of(avro.pipeline).slot, plan.of(plain.pipeline).slot])
    marker = f"marker-{uuid.uuid4().hex}"
    bio = secrets.token_hex(8000)  # 16 KB that do not compress: stored out of line (TOASTed)
    change_both(avro.pg_dsn, [avro.pipeline.profile.table, plain.pipeline.profile.table], bio, marker)
    rows = folded(twins, marker)

    avro_changes, json_changes = changes(rows["avro"], UNKNOWN_REASON), changes(rows["json"])
    assert avro_changes == json_changes
    assert [(r["op"], r["id"]) for r in json_changes] == [
        ("c", "1"), ("c", "2"), ("c", "3"), ("u", "1"), ("u", "2"), ("d", "3"), ("t", None), ("c", "4"),
    ]  # fmt: skip
    first, toasted, second = json_changes[0], json_changes[3], json_changes[4]
    assert (first["amount"], first["seen"], first["tags"]) == (
        "12.50",
        1_767_315_845_123_456,  # 2026-01-02T01:04:05.123456Z in epoch microseconds
        ["a", "b"],
    )
    assert json.loads(first["prefs"]) == {"theme": "dark", "n": [1, 2.5]} and first["bio"] == bio
    assert (toasted["region"], toasted["bio"], toasted["unavailable"]) == ("east", None, [5])
    assert (second["amount"], second["tags"], json.loads(second["prefs"])) == (
        "99999999.99",
        ["x", None],
        {"a": None},
    )
    # The Avro pipeline's records are the Confluent wire format, the JSON one's JSON; both had progress.
    for kind in ("avro", "json"):
        assert any(r["kind"] == "progress" for r in rows[kind])
    # A registry that cannot be asked fails the task once the budget is spent: no dead letter.
    assert "unavailable for 2.0 s" in rows["registry down"]["failed"]
    # `streamfold status` reads CDC progress from the Avro envelopes too (their schemas from the registry).
    end = len(read_all(avro.kafka_bootstrap, plan.of(avro.pipeline).cdc_topic))
    client = status.consumer(avro.kafka_bootstrap)
    try:
        newest = status.newest_ts(client, plan.of(avro.pipeline).cdc_topic, 0, end)
    finally:
        client.close()
    assert newest is not None and newest >= avro_changes[-1]["valid_from_ms"]
    avro_values = [
        m.raw_value for m in read_all(avro.kafka_bootstrap, plan.of(avro.pipeline).cdc_topic) if m.raw_value
    ]
    assert avro_values and all(v[0] == 0 for v in avro_values)


def test_a_json_installation_turns_avro_and_folds_both(twins: dict[str, config.Settings]) -> None:
    """cdc.format json -> avro on a running installation: setup switches the connector's converters, and
    the fold reads the JSON change events the topic kept beside the Avro ones."""
    plain = twins["json"]
    wait_for_slots(plain.pg_dsn, [plan.of(plain.pipeline).slot])
    table = plain.pipeline.profile.table
    first = f"first-{uuid.uuid4().hex}"
    with psycopg.connect(plain.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} (id, region) VALUES (1, %s)").format(sql.SQL(table)), (first,))
    records_until(plain, first)
    text = pipeline_text("json", plain.pipeline.name.removeprefix("json_")).replace(
        "format: json", "format: avro"
    )
    switched = dataclasses.replace(plain, pipeline=pf.parse(text))
    run_setup(switched, echo=lambda _: None)
    marker = f"after-{uuid.uuid4().hex}"
    with psycopg.connect(plain.pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("UPDATE {} SET region = %s WHERE id = 1").format(sql.SQL(table)), (marker,))
    rows = folded({"avro": switched}, marker)["avro"]
    assert [(r["op"], r["region"]) for r in changes(rows, UNKNOWN_REASON)] == [("c", first), ("u", marker)]
    values = [
        m.raw_value for m in read_all(plain.kafka_bootstrap, plan.of(plain.pipeline).cdc_topic) if m.raw_value
    ]
    assert values[0][:1] == b"{" and values[-1][:1] == b"\x00"  # JSON first, Avro once switched
