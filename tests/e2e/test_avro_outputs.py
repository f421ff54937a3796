"""Avro outputs (`outputs.format: avro`) through the whole job on the real stack: the enriched, changelog and
aggregate topics' records, read with confluent-kafka's AvroDeserializer from the stack's registry (its
Basic auth), are the rows Postgres holds; each topic's schema is registered under `<topic>-value` and names
only carried columns. A registry down when the job starts is waited out: the outputs land once it is back."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from confluent_kafka.schema_registry import SchemaRegistryClient
from psycopg.rows import dict_row

from common import config, plan, topics
from common import pipeline_file as pf
from connectors import setup
from db import schema
from tests.support import avro
from tests.support import pipeline as sp
from tests.support.kafka import read_all

pytestmark = pytest.mark.e2e

CARRIED = {"userid", "regionid", "gender", "interests", "registertime"}


@pytest.fixture(scope="module")
def registry() -> SchemaRegistryClient:
    return avro.registry_client()


def avro_outputs_file(tmp_path: Path, bootstrap: str) -> tuple[Path, pf.Pipeline]:
    """The default pipeline file with Avro outputs, on topics of its own (new subjects too)."""
    run = uuid.uuid4().hex[:6]
    spec = yaml.safe_load(pf.DEFAULT_PATH.read_text())
    outputs = spec["outputs"]
    outputs["format"] = "avro"
    outputs["enriched"]["topic"] = f"avro-out-{run}.user_clicks"
    outputs["changelog_topic"] = f"avro-out-{run}.users_changelog"
    outputs["dead_letters_topic"] = f"avro-out-{run}.clicks_dlq"
    for aggregate in spec["aggregates"]:
        aggregate["topic"] = f"avro-out-{run}.{aggregate['name']}"
    path = tmp_path / "avro-outputs.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    pipeline = pf.load(path)
    setup.ensure_topics(bootstrap, pipeline)
    return path, pipeline


def story(pg_dsn: str, bootstrap: str, sandbox: sp.Sandbox) -> tuple[list[str], int]:
    """Two users (one changed later) in a region of the run's own, and clicks of theirs and of a user no one
    captured: the users, and how many clicks were sent."""
    run = uuid.uuid4().hex[:6]
    users = [f"avro-out-{run}-1", f"avro-out-{run}-2"]
    with psycopg.connect(pg_dsn, autocommit=True) as pg:
        for user in users:
            pg.execute(
                "INSERT INTO public.users (userid, regionid, gender, interests, registertime, name, email) "
                "VALUES (%s, %s, 'OTHER', ARRAY['News', 'Tech'], 1665780360439, 'Pii Name', 'pii@e.com')",
                (user, f"region-{run}"),
            )
        time.sleep(1.5)
        at = int(time.time() * 1000)
        keys = [*users, *users, users[0], f"avro-out-{run}-ghost"]
        producer = topics.producer(bootstrap, {"linger.ms": 10})
        for i, key in enumerate(keys):
            click = {"userid": key, "url": f"/out/{i % 2}", "device_id": "mobile", "ip": f"10.8.0.{i}"}
            value = json.dumps({**click, "event_time": at - i, "clicks": 1 + i % 3})
            producer.produce(sandbox.clicks_topic, key=key, value=value.encode())
        assert producer.flush(30) == 0
        time.sleep(1.5)
        pg.execute("UPDATE public.users SET gender = 'FEMALE' WHERE userid = %s", (users[0],))
    time.sleep(1.5)  # the update's commit, and CDC progress, past every click
    return users, len(keys)


@dataclass(frozen=True)
class Run:
    """A scenario's sandbox, its pipeline file (Avro outputs), its story's users and clicks' count."""

    sandbox: sp.Sandbox
    path: Path
    pipeline: pf.Pipeline
    users: list[str]
    sent: int


def prepared(settings: config.Settings, name: str, tmp_path: Path) -> Run:
    """A sandbox with its sink tables for the Avro outputs file, and the story's users and clicks sent."""
    sandbox = sp.make_sandbox(settings.pg_dsn, name, tmp_path / "home")
    path, pipeline = avro_outputs_file(tmp_path, settings.kafka_bootstrap)
    schema.apply(sandbox.admin_dsn, pipeline)
    users, sent = story(settings.pg_dsn, settings.kafka_bootstrap, sandbox)
    return Run(sandbox, path, pipeline, users, sent)


def rows(sandbox: sp.Sandbox, query: str, *params: Any) -> list[dict[str, Any]]:
    with sandbox.connect() as conn, conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(query, params).fetchall()


def differing(got: dict[str, Any], want: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The fields whose values differ (or that only one of them has): (got, want)."""
    return {
        k: (got.get(k), want.get(k)) for k in got.keys() | want.keys() if got.get(k, ...) != want.get(k, ...)
    }


def field_names(registry: SchemaRegistryClient, topic: str) -> list[str]:
    registered = registry.get_latest_version(f"{topic}-value")
    return [f["name"] for f in json.loads(registered.schema.schema_str)["fields"]]


def test_avro_outputs_are_the_rows_postgres_holds(
    streamfold_setup, registry: SchemaRegistryClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dsn, bootstrap = streamfold_setup.pg_dsn, streamfold_setup.kafka_bootstrap
    run = prepared(streamfold_setup, "avro_outputs", tmp_path)
    sandbox, pipeline, users, sent = run.sandbox, run.pipeline, run.users, run.sent
    monkeypatch.setenv(pf.PIPELINE_VAR, str(run.path))
    sandbox.run_once("kafka")

    enriched = {
        value["event_id"]: value
        for _, value in avro.decoded(registry, bootstrap, plan.of(pipeline).enriched_topic)
    }
    stored = {row["event_id"]: row for row in rows(sandbox, "SELECT * FROM streamfold.enriched_clicks")}
    assert len(stored) == sent and enriched.keys() == stored.keys()
    for event_id, row in stored.items():
        assert differing(enriched[event_id], row) == {}, event_id
    assert {row["user_gender"] for row in stored.values()} == {"OTHER", None}

    changes = {
        key: value for key, value in avro.decoded(registry, bootstrap, plan.of(pipeline).changelog_topic)
    }
    with psycopg.connect(dsn) as pg, pg.cursor(row_factory=dict_row) as cur:
        for user in users:
            current = cur.execute(
                f"SELECT {', '.join(sorted(CARRIED))} FROM public.users WHERE userid = %s", (user,)
            ).fetchone()
            last = changes[user]
            assert {k: last[k] for k in CARRIED} == current and last["incomplete"] is None
            assert last["valid_from"] is not None

    for aggregate in plan.of(pipeline).aggregates:
        totals = {key: value for key, value in avro.decoded(registry, bootstrap, aggregate.topic)}
        columns = [*(key.column for key in aggregate.keys), aggregate.count_column]
        table = rows(sandbox, f"SELECT {', '.join(columns)} FROM {aggregate.table}")
        assert sorted(totals.values(), key=str) == sorted(table, key=str) and table

    changelog_fields = field_names(registry, plan.of(pipeline).changelog_topic)
    assert set(changelog_fields) == CARRIED | {"valid_from", "incomplete"}
    assert field_names(registry, plan.of(pipeline).enriched_topic) == list(stored[next(iter(stored))])


def test_a_registry_down_at_the_start_is_waited_out(
    streamfold_setup, services, registry: SchemaRegistryClient, tmp_path: Path
) -> None:
    bootstrap = streamfold_setup.kafka_bootstrap
    run = prepared(streamfold_setup, "avro_outputs_outage", tmp_path)
    sandbox, path, pipeline, sent = run.sandbox, run.path, run.pipeline, run.sent
    avro.through_registry_outage(
        services,
        sandbox,
        path,
        f"the schema registry ({plan.of(pipeline).enriched_topic}-value) unavailable (",
        lambda: len(read_all(bootstrap, plan.of(pipeline).enriched_topic)) >= sent,
    )
    landed = {
        value["event_id"] for _, value in avro.decoded(registry, bootstrap, plan.of(pipeline).enriched_topic)
    }
    assert landed == {
        row["event_id"] for row in rows(sandbox, "SELECT event_id FROM streamfold.enriched_clicks")
    }
