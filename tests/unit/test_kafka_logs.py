"""The Kafka clients' own lines go through logging (common/kafka_logs.py): a broker that cannot be reached
prints no raw librdkafka line (`%3|...|FAIL|...`), and no warning either (librdkafka retries; the call that
needed the broker fails with its own error)."""

from __future__ import annotations

import socket

from tests.support.kafka_clients import RAW_LINE, stderr_of_clients


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_unreachable_broker_prints_no_raw_client_lines():
    stderr = stderr_of_clients(f"127.0.0.1:{closed_port()}")
    assert not RAW_LINE.search(stderr), stderr[-3000:]
    assert stderr.strip() == ""
