"""`python -m bench.raw_consumer BOOTSTRAP OFFSETS`: the client ceiling, reading clicks and doing nothing.

A confluent-kafka consumer assigned to the given offset ranges of the clicks topic; it touches each
record's value and stops at the end offsets. Timed from the first record received to the last.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, TopicPartition

from bench.measured import emit, parse_offsets
from bench.stack import Offsets
from common import config, names


def consume(bootstrap: str, offsets: Offsets) -> dict[str, float]:
    consumer = Consumer(
        {
            **config.kafka_client_settings(bootstrap),
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            # Fetch and queue sizes well above librdkafka's defaults, so the figure is the broker's and the
            # client's limit rather than the defaults'.
            "max.partition.fetch.bytes": 10 * 2**20,
            "fetch.max.bytes": 100 * 2**20,
            "queued.max.messages.kbytes": 2**20,
            "queued.min.messages": 1_000_000,
        }
    )
    limits = {p: end for p, (start, end) in offsets.items() if end > start}
    ends = dict(limits)  # partitions not read to the end yet
    consumer.assign([TopicPartition(names.CLICKS_TOPIC, p, offsets[p][0]) for p in limits])
    records = value_bytes = 0
    first = last = 0.0
    while ends:
        for msg in consumer.consume(10_000, timeout=1.0):
            if msg.error() or msg.offset() >= limits[msg.partition()]:
                continue
            if not first:
                first = time.monotonic()
            records += 1
            value_bytes += len(msg.value() or b"")
            if msg.offset() + 1 >= ends.get(msg.partition(), 0):
                ends.pop(msg.partition(), None)
    last = time.monotonic()
    consumer.close()
    seconds = last - first
    return {
        "clicks": records,
        "seconds": round(seconds, 2),
        "clicks_per_s": round(records / seconds),
        "mib_per_s": round(value_bytes / seconds / 2**20, 1),
    }


if __name__ == "__main__":
    emit(consume(sys.argv[1], parse_offsets(sys.argv[2])))
