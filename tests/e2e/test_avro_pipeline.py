"""Avro events through the whole job on the real stack (registry, Kafka or Kinesis, Debezium, Spark,
Postgres): the same events, sent as JSON to one sandbox and as Avro in the Confluent wire format (written
with two versions of their schema) to another, give the same enriched rows; a record of an id the registry
does not know and a garbage byte string are dead letters with their reasons. A registry outage is waited
out: every event lands once it is back, none is dead-lettered; and the job, killed -9 then as Avro events
stream in, restarts and lands each event exactly once."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from common import config, kinesis, topics
from common import pipeline_file as pf
from db import schema
from streamfold.generate import ClickSpec, clicks
from tests.support import avro
from tests.support import pipeline as sp
from tests.support.traffic import Traffic, add_users, kafka_sender

pytestmark = pytest.mark.e2e

SUBJECT = "e2e-avro-clicks-value"
GARBAGE = b"\x7f\x00garbage\xff"
# What the two runs decide by when they ran, not by the events' format: how far CDC had come.
RUN_COLUMNS = {"event_id", "cdc_progress", "profile_complete", "released_by_max_wait"}


def avro_file(tmp_path: Path) -> Path:
    """The default pipeline file, its events Avro under the test's subject."""
    text = pf.DEFAULT_PATH.read_text()
    assert "  kafka_topic: clicks\n" in text
    path = tmp_path / "avro.yaml"
    path.write_text(
        text.replace(
            "  kafka_topic: clicks\n", f"  kafka_topic: clicks\n  format: avro\n  subject: {SUBJECT}\n"
        )
    )
    return path


def now_ms() -> int:
    return int(time.time() * 1000)


def story(pg_dsn: str) -> list[dict[str, Any]]:
    """Two users, clicks of theirs and of a user no one captured, then a change after the clicks: each
    click joins the version valid at its time. Each click's ip is its own, to match rows across runs."""
    run = uuid.uuid4().hex[:6]
    users = [f"avro-{run}-1", f"avro-{run}-2"]
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        for user, region in zip(users, ("asia", "europe"), strict=True):
            pg.execute(
                "INSERT INTO public.users (userid, regionid, gender, interests, registertime) "
                "VALUES (%s, %s, 'OTHER', ARRAY['News', 'Tech'], 1665780360439)",
                (user, region),
            )
        time.sleep(1.5)
        at = now_ms()
        keys = [*users, *users, f"avro-{run}-ghost"]
        sent = [
            {
                "userid": key,
                "url": f"/avro/{i}",
                "device_id": "mobile",
                "ip": f"10.9.0.{i}",
                "event_time": at - i,
                "clicks": 1 + i % 3,
            }
            for i, key in enumerate(keys)
        ]
        time.sleep(1.5)
        pg.execute("UPDATE public.users SET regionid = 'africa' WHERE userid = %s", (users[0],))
    time.sleep(1.5)  # the update's commit, and CDC progress, past every click
    return sent


def as_avro(sent: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    """Every other event written with a later schema version; then the two records that are no events."""
    versions = [avro.click_schema(), avro.click_schema(time_type=avro.TIMESTAMP_MILLIS, extra=True)]
    ids = [avro.register(SUBJECT, version) for version in versions]
    assert ids[0] != ids[1]
    records = [(e["userid"], avro.encode(ids[i % 2], versions[i % 2], e)) for i, e in enumerate(sent)]
    unknown = avro.header(avro.UNKNOWN_ID) + records[0][1][5:]
    return [*records, ("bad", unknown), ("bad", GARBAGE)]


def deliver(bootstrap: str, sandbox: sp.Sandbox, source: str, records: list[tuple[str, bytes]]) -> None:
    if source == "kinesis":
        kinesis.put_records(kinesis.client(), sandbox.stream(), records)
        return
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for key, value in records:
        producer.produce(sandbox.clicks_topic, key=key, value=value)
    assert producer.flush(30) == 0


def enriched(sandbox: sp.Sandbox) -> dict[str, dict[str, Any]]:
    """The enriched rows by their click's ip, without the columns that tell when the run was."""
    with sandbox.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute("SELECT * FROM streamfold.enriched_clicks").fetchall()
    return {row["click_location"]: {k: v for k, v in row.items() if k not in RUN_COLUMNS} for row in rows}


def event_letters(sandbox: sp.Sandbox) -> dict[bytes, str]:
    """The events' dead letters, payload -> reason (the sandbox's job folds the shared CDC topic too)."""
    with sandbox.connect() as conn:
        rows = conn.execute(
            "SELECT payload, reason FROM streamfold.dead_letters WHERE source NOT LIKE 'kafka:cdc.%'"
        ).fetchall()
    return {bytes(payload): reason for payload, reason in rows}


@pytest.mark.parametrize("source", ["kafka", "kinesis"])
def test_avro_events_join_as_the_same_events_as_json(
    streamfold_setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    dsn, bootstrap = streamfold_setup.pg_dsn, streamfold_setup.kafka_bootstrap
    as_json = sp.make_sandbox(dsn, f"avro_as_json_{source}", tmp_path / "json")
    as_avro_box = sp.make_sandbox(dsn, f"avro_{source}", tmp_path / "avro")
    path = avro_file(tmp_path)
    schema.apply(as_avro_box.admin_dsn, pf.load(path))
    sent = story(dsn)
    avro_records = as_avro(sent)
    deliver(bootstrap, as_json, source, [(e["userid"], json.dumps(e).encode()) for e in sent])
    deliver(bootstrap, as_avro_box, source, avro_records)

    as_json.run_once(source)
    monkeypatch.setenv(pf.PIPELINE_VAR, str(path))
    as_avro_box.run_once(source)

    want = enriched(as_json)
    assert len(want) == len(sent) and not event_letters(as_json)
    assert {row["user_regionid"] for row in want.values()} == {"asia", "europe", "UNKNOWN"}
    assert enriched(as_avro_box) == want
    unknown = avro_records[-2][1]
    assert event_letters(as_avro_box) == {
        unknown: f"schema id {avro.UNKNOWN_ID} is unknown to the registry",
        GARBAGE: "not Confluent Avro: no magic byte 0 (the record starts with 0x7f)",
    }


def enriched_count(sandbox: sp.Sandbox) -> int:
    with sandbox.connect() as conn:
        return int(conn.execute("SELECT count(*) FROM streamfold.enriched_clicks").fetchone()[0])


def test_a_registry_outage_is_waited_out_and_a_kill_9_loses_and_doubles_nothing(
    streamfold_setup, services, pg, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bootstrap = streamfold_setup.kafka_bootstrap
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "avro_registry_outage", tmp_path / "home")
    path = avro_file(tmp_path)
    schema.apply(sandbox.admin_dsn, pf.load(path))
    writer = avro.click_schema("RegistryOutage")  # a schema no job has read: no executor holds it
    schema_id = avro.register(SUBJECT, writer)
    sent = list(clicks(ClickSpec(count=40, users=5, seed=6802)))
    records = [(e["userid"], avro.encode(schema_id, writer, e)) for e in sent]
    deliver(bootstrap, sandbox, "kafka", records)
    users = [f"avro-kill-{i}" for i in range(10)]
    add_users(pg, users)
    send = avro.as_avro_sender(kafka_sender(bootstrap, sandbox.clicks_topic), schema_id, writer)
    traffic = Traffic(send, pg, users)

    def while_down() -> None:
        traffic.start()  # Avro events stream in from here until the job is killed
        time.sleep(10)  # an outage longer than a retry or two
        assert enriched_count(sandbox) == 0

    try:
        # Once a batch has landed the outage's events, the helper kill -9s the job, as events stream in:
        # mid-batch, mid-commit or idle.
        log = avro.through_registry_outage(
            services,
            sandbox,
            path,
            f"(schema id {schema_id}) unavailable (",
            lambda: enriched_count(sandbox) >= len(sent),
            while_down,
        )
    finally:
        traffic.stop()
    monkeypatch.setenv(pf.PIPELINE_VAR, str(path))
    sandbox.run_once("kafka")  # the restart, from the killed job's checkpoint

    event_ids = {i.event_id for i in sp.kafka_inputs(bootstrap, sandbox.clicks_topic)}
    assert len(event_ids) == len(sent) + traffic.sent
    with sandbox.connect() as conn:
        sp.assert_landed_once(conn, event_ids)
    assert not event_letters(sandbox)
    login = config.registry_auth()  # the log names the registry, never its password
    assert login is not None and login[1] not in log
    print(f"{traffic.sent} Avro events streamed in besides {len(sent)}; {sp.batches(sandbox)} batches landed")
