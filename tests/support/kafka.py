"""Reading topics in tests: everything from the beginning, decoded."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka import Message as KafkaMessage

from common import config


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any  # JSON-decoded when it parses, else text
    raw_value: bytes | None
    raw_key: bytes | None


def murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (the Java clients' key hash), as an unsigned 32-bit value."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    h = (0x9747B28C ^ len(data)) & mask
    whole = len(data) & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        h = ((h * m) & mask) ^ ((k * m) & mask)
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h = ((h ^ tail[0]) * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    return h ^ (h >> 15)


def java_partition(key: bytes, partitions: int) -> int:
    """Where a Java producer puts a keyed record: toPositive(murmur2(key)) % partitions."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def _decode(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # poison records: not JSON, or nested too deeply to read
        return raw.decode("utf-8", "replace")


def read_all(bootstrap: str, topic: str, timeout_s: float = 60) -> list[Message]:
    """Every message in `topic` up to its end offsets as of the call (heartbeats keep some topics
    growing, so "until idle" would never end); [] while the topic does not exist."""
    consumer = Consumer(
        {
            **config.kafka_client_settings(bootstrap),
            "group.id": f"test-{uuid.uuid4()}",
            "enable.auto.commit": False,
        }
    )
    messages: list[Message] = []
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in metadata.partitions
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends])
        done = {p for p, end in ends.items() if end == 0}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(ends):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read {len(messages)} messages of {topic} in {timeout_s}s, not all")
            for m in consumer.consume(10_000, timeout=0.5):
                if m.error() is not None or m.offset() >= ends[m.partition()]:
                    continue
                messages.append(
                    Message(
                        m.topic(),
                        m.partition(),
                        m.offset(),
                        _decode(m.key()),
                        _decode(m.value()),
                        m.value(),
                        m.key(),
                    )
                )
            # The position, not the last offset seen: compaction may have removed the last records.
            for tp in consumer.position([TopicPartition(topic, p) for p in ends if p not in done]):
                if tp.offset >= ends[tp.partition]:
                    done.add(tp.partition)
    finally:
        consumer.close()
    return messages


def wait_for(
    bootstrap: str, topic: str, predicate: Callable[[list[Message]], bool], timeout_s: float = 90
) -> list[Message]:
    """Re-read `topic` until `predicate(messages)` holds; fail with what was seen."""
    deadline = time.monotonic() + timeout_s
    messages: list[Message] = []
    while time.monotonic() < deadline:
        messages = read_all(bootstrap, topic)
        if predicate(messages):
            return messages
        time.sleep(1)
    raise AssertionError(
        f"condition not met on {topic} within {timeout_s}s; last {len(messages)} messages: "
        f"{[m.value for m in messages[-5:]]}"
    )


def produce_once(settings: dict[str, Any], topic: str, key: bytes, value: bytes) -> KafkaError | None:
    """Produce one record and wait for its delivery report: the error, or None once the broker has it."""
    reports: list[KafkaError | None] = []

    def report(error: KafkaError | None, _message: KafkaMessage) -> None:
        reports.append(error)

    producer = Producer({**settings, "message.timeout.ms": 10_000, "retries": 0})
    producer.produce(topic, key=key, value=value, on_delivery=report)
    producer.flush(60)
    assert len(reports) == 1, "no delivery report within the flush"
    return reports[0]
