"""pipeline/sources.py: what the sources make of their records, on batch frames shaped like Spark's Kafka
source and our Kinesis source (the reading itself runs against real brokers in tests/e2e)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pyspark.sql import SparkSession

from common import names
from pipeline import sources
from pipeline.kinesis_source import SCHEMA as KINESIS_SCHEMA

pytestmark = pytest.mark.spark

# The columns of Spark's Kafka source.
KAFKA_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
AT = datetime(2026, 11, 26, 12, 0, 0, 123_000, tzinfo=UTC)
AT_MS = 1_795_694_400_123


def test_a_kafka_click_is_named_by_its_position_and_dated_by_its_timestamp(spark: SparkSession) -> None:
    raw = spark.createDataFrame(
        [(b"u1", b'{"userid": "u1"}', "clicks-eu", 2, 41, AT), (None, None, "clicks-eu", 0, 7, None)],
        KAFKA_SCHEMA,
    )
    rows = sources.from_kafka_clicks(raw, "clicks-eu").collect()
    assert [tuple(r) for r in rows] == [
        ("kafka:clicks-eu:2:41", "kafka:clicks-eu", b'{"userid": "u1"}', AT_MS),
        # No timestamp (never seen): arrival 0, so the parser finds every event time in its future.
        ("kafka:clicks-eu:0:7", "kafka:clicks-eu", None, 0),
    ]


def test_a_kinesis_click_is_named_by_its_stream_shard_and_sequence(spark: SparkSession) -> None:
    raw = spark.createDataFrame([("u1", "4960", "shardId-000000000001", AT, b"{}")], KINESIS_SCHEMA)
    rows = sources.from_kinesis_clicks(raw, "clicks-us").collect()
    assert [tuple(r) for r in rows] == [
        ("kinesis:clicks-us:shardId-000000000001:4960", "kinesis:clicks-us", b"{}", AT_MS)
    ]


def test_cdc_records_keep_key_and_value_with_their_position_and_write_time(spark: SparkSession) -> None:
    raw = spark.createDataFrame([(b"k", b"v", names.CDC_USERS_TOPIC, 0, 99, AT)], KAFKA_SCHEMA)
    rows = sources.from_kafka_cdc(raw).collect()
    assert [r.asDict() for r in rows] == [
        {
            "topic": names.CDC_USERS_TOPIC,
            "key": b"k",
            "value": b"v",
            "event_id": f"kafka:{names.CDC_USERS_TOPIC}:0:99",
            "written_ms": AT_MS,
        }
    ]
