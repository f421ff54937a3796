"""Kafka clients: the one producer factory, and reading the tail of a topic (for people and tests)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import requests
from confluent_kafka import Consumer, Producer, TopicPartition

from common import config, registry

# Java clients (Kafka Streams, ksqlDB, Flink, Connect, Spark's Kafka writer) put a keyed record in partition
# murmur2(key) % partitions; librdkafka's default is CRC32. With murmur2 here too, every keyed record
# streamfold writes sits where a Java application expects it, so it can join streamfold's topics
# (co-partitioned by key) without re-partitioning. (Records without a key go to a random partition.)
JAVA_PARTITIONER = "murmur2_random"


def producer(bootstrap: str, settings: dict[str, Any] | None = None) -> Producer:
    """A producer that places keys as Java clients do; `settings` are librdkafka's."""
    return Producer(
        {**config.kafka_client_settings(bootstrap), "partitioner": JAVA_PARTITIONER, **(settings or {})}
    )


@dataclass(frozen=True)
class Record:
    partition: int
    offset: int
    key: str | None
    value: str | None


def latest_records(bootstrap: str, topic: str, count: int, timeout_s: float = 10) -> list[Record]:
    """The last `count` records of each partition, keys and values as text (Avro ones as JSON). Raises
    KeyError for an unknown topic."""
    consumer = Consumer(
        {**config.kafka_client_settings(bootstrap), "group.id": "streamfold-cli", "enable.auto.commit": False}
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics[topic]
        if metadata.error is not None:
            raise KeyError(topic)
        assignments, wanted = [], 0
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
            start = max(low, high - count)
            if high > start:
                assignments.append(TopicPartition(topic, partition, start))
                wanted += high - start
        consumer.assign(assignments)
        records: list[Record] = []
        schemas: dict[int, Any] = {}
        deadline = time.monotonic() + timeout_s
        while len(records) < wanted and time.monotonic() < deadline:
            for message in consumer.consume(wanted - len(records), timeout=1):
                if message.error() is None:
                    key, value = _text(message.key(), schemas), _text(message.value(), schemas)
                    records.append(Record(message.partition() or 0, message.offset() or 0, key, value))
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def _text(raw: bytes | None, schemas: dict[int, Any]) -> str | None:
    """A key or value as text. One in the Confluent wire format (Avro change events, events or outputs) as
    the JSON of its Avro record, when the schema registry is set and knows its id; else its bytes as UTF-8."""
    if raw is None:
        return None
    if raw[:1] == b"\x00" and len(raw) >= 5 and config.registry_url():
        try:
            return json.dumps(registry.decode(raw, schemas, timeout_s=10), default=str)
        except (ValueError, KeyError, TypeError, IndexError, EOFError, requests.RequestException):
            pass  # not Avro after all, or a registry that cannot say: the bytes as they are
    return raw.decode("utf-8", "replace")
