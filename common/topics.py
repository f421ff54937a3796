"""Kafka clients: the one producer factory, and reading the tail of a topic (for people and tests)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from common import config

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
    """The last `count` records of each partition. Raises KeyError for an unknown topic."""
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
        deadline = time.monotonic() + timeout_s
        while len(records) < wanted and time.monotonic() < deadline:
            for message in consumer.consume(wanted - len(records), timeout=1):
                if message.error() is None:
                    key, value = _text(message.key()), _text(message.value())
                    records.append(Record(message.partition() or 0, message.offset() or 0, key, value))
        return sorted(records, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def _text(raw: bytes | None) -> str | None:
    return None if raw is None else raw.decode("utf-8", "replace")
