"""Reading topics in tests: everything from the beginning, decoded."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int
    key: Any
    value: Any  # JSON-decoded when it parses, else text
    raw_value: bytes | None


def _decode(raw: bytes | None) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def read_all(bootstrap: str, topic: str, idle_s: float = 2.0, timeout_s: float = 60) -> list[Message]:
    """Every message currently in `topic`, stopping once nothing new arrived for `idle_s`."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    messages: list[Message] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline and time.monotonic() - last < idle_s:
            for m in consumer.consume(10_000, timeout=0.5):
                if m.error() is None:
                    messages.append(
                        Message(
                            m.topic(),
                            m.partition(),
                            m.offset(),
                            _decode(m.key()),
                            _decode(m.value()),
                            m.value(),
                        )
                    )
                    last = time.monotonic()
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
        messages = read_all(bootstrap, topic, idle_s=1.0)
        if predicate(messages):
            return messages
        time.sleep(1)
    raise AssertionError(
        f"condition not met on {topic} within {timeout_s}s; last {len(messages)} messages: "
        f"{[m.value for m in messages[-5:]]}"
    )
