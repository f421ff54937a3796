"""The job's event parser on Avro events (pipeline/events.py with a Registry), against the session's real
schema registry: the same events as Avro and as JSON give the same rows and the same reasons; a record
that is not Confluent Avro, or names an id the registry does not know, is a dead letter; a registry that
cannot be asked fails the task, with no record dead-lettered and no password in the error."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from common import pipeline_file as pf
from common import plan
from common.registry import CCOMPAT_PATH
from pipeline import events
from pipeline.spark import session as job_session
from streamfold import avro_events, generate
from streamfold.generate import ClickSpec, clicks
from tests.support import avro

pytestmark = pytest.mark.e2e

SPEC = plan.of(pf.load()).event_spec
RAW = StructType(
    [
        StructField("event_id", StringType()),
        StructField("source", StringType()),
        StructField("payload", BinaryType()),
        StructField("now_ms", LongType()),
    ]
)


@pytest.fixture(scope="module")
def spark(stack: dict[str, str]) -> Iterator[SparkSession]:
    conf = {"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
    session = job_session("streamfold-avro-parse", conf)
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def frame(spark: SparkSession, payloads: list[bytes]) -> DataFrame:
    now_ms = int(time.time() * 1000)
    rows = [(f"test:{i}", "test", payload, now_ms) for i, payload in enumerate(payloads)]
    return spark.createDataFrame(rows, RAW)


def parsed(spark: SparkSession, payloads: list[bytes], registry: events.Registry | None) -> list[Row]:
    out = events.parse(frame(spark, payloads), SPEC, registry).drop("payload", "source")
    return sorted(out.collect(), key=lambda row: int(row["event_id"].split(":")[1]))


def sample() -> list[dict[str, Any]]:
    """Generated clicks, and clicks whose values break the file's rules (an empty key, a count of 0, a
    time before 2000): their reasons must be JSON's."""
    good = list(clicks(ClickSpec(count=20, users=5, seed=6801)))
    bad = [{**good[0], "userid": ""}, {**good[1], "clicks": 0}, {**good[2], "event_time": 5}]
    return [*good, *bad]


def registry(url: str | None = None, password: str | None = None, retry_ms: int = 60_000) -> events.Registry:
    configured = events.Registry.configured()
    return events.Registry(
        url or configured.url,
        configured.user,
        configured.password if password is None else password,
        retry_ms,
    )


def test_avro_events_give_the_rows_and_reasons_of_the_same_events_as_json(spark: SparkSession) -> None:
    first = avro.register("e2e-parse-value", avro.click_schema())
    later = avro.register("e2e-parse-value", avro.click_schema(extra=True, time_type=avro.TIMESTAMP_MILLIS))
    assert first != later
    sent = sample()
    as_avro = [
        avro.encode(later if i % 2 else first, avro.click_schema(extra=bool(i % 2)), e)
        for i, e in enumerate(sent)
    ]
    as_json = [json.dumps(e).encode() for e in sent]
    got, want = parsed(spark, as_avro, registry()), parsed(spark, as_json, None)
    assert got == want
    reasons = [row["error"] for row in got if row["error"] is not None]
    assert len(reasons) == 3 and len(got) == len(sent)


def test_records_that_are_not_confluent_avro_or_of_an_unknown_id_are_dead_letters(
    spark: SparkSession,
) -> None:
    good = avro.encode(
        avro.register("e2e-parse-value", avro.click_schema()), avro.click_schema(), sample()[0]
    )
    payloads = [
        b'{"userid": "User_1"}',
        b"\x00\x01",
        avro.header(avro.UNKNOWN_ID) + good[5:],
        good[:5] + b"\xff\xff\xff",
        good + b"\x00",
        good,
    ]
    reasons = [row["error"] for row in parsed(spark, payloads, registry())]
    known = int.from_bytes(good[1:5], "big")
    assert reasons[:3] == [
        "not Confluent Avro: no magic byte 0 (the record starts with 0x7b)",
        "not Confluent Avro: 2 bytes, shorter than the 5-byte header",
        f"schema id {avro.UNKNOWN_ID} is unknown to the registry",
    ]
    assert reasons[3].startswith(f"schema id {known}: the payload does not decode: ")
    assert reasons[4] == f"schema id {known}: the payload does not decode: bytes left after the record"
    assert reasons[5] is None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def failure(spark: SparkSession, payloads: list[bytes], chosen: events.Registry) -> str:
    """The error the parse's Spark job fails with (it must fail: no row, so no dead letter)."""
    with pytest.raises(Exception) as failed:  # noqa: B017 - Py4J's or Spark's wrapper of the task's failure
        parsed(spark, payloads, chosen)
    return str(failed.value)


def test_a_registry_that_cannot_be_asked_fails_the_task_after_the_budget(spark: SparkSession) -> None:
    schema = avro.click_schema("Outage")
    record = avro.encode(avro.register("e2e-outage-value", schema), schema, sample()[0])
    down = registry(f"http://127.0.0.1:{free_port()}{CCOMPAT_PATH}", retry_ms=3_000)
    started = time.monotonic()
    message = failure(spark, [record], down)
    assert time.monotonic() - started >= 3
    assert "RegistryUnavailable" in message and "unavailable for 3.0 s" in message
    assert down.password not in message


def test_a_wrong_password_fails_the_task_at_once(spark: SparkSession) -> None:
    schema = avro.click_schema("WrongPassword")  # an id no earlier test read: not in the executor's cache
    record = avro.encode(avro.register("e2e-wrong-password-value", schema), schema, sample()[0])
    wrong = registry(password="not-" + registry().password)
    started = time.monotonic()
    message = failure(spark, [record], wrong)
    assert time.monotonic() - started < 30  # not the 60 s budget: a refusal is no outage
    assert "answered HTTP 401" in message and wrong.password not in message


TYPED = pf.parse(
    """\
name: generated
profile: {table: public.customers, key: id, key_type: bigint, columns: {tier: text}}
events:
  kafka_topic: generated_views
  format: avro
  key: customer_id
  time: {field: ts, format: iso8601}
  count: views
  fields:
    path: text
    n: integer
    ms: bigint
    score: double
    price: numeric
    ok: boolean
    at: timestamptz
    tags: text[]
    meta: jsonb
    note: {type: text, required: false}
"""
)


def test_generated_avro_events_of_every_type_give_the_rows_of_the_same_events_as_json(
    spark: SparkSession,
) -> None:
    sent = list(clicks(ClickSpec(count=40, users=7, seed=6802, pipeline=TYPED)))
    encode = avro_events.encoder(TYPED)
    spec = plan.of(TYPED).event_spec
    got = events.parse(frame(spark, [encode(e) for e in sent]), spec, registry()).drop("payload", "source")
    want = events.parse(frame(spark, [generate.as_json(e) for e in sent]), spec, None).drop(
        "payload", "source"
    )
    assert sorted(got.collect()) == sorted(want.collect())
    assert got.where("error IS NOT NULL").count() == 0 and got.count() == len(sent)
