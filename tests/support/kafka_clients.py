"""Runs the project's Kafka clients (a producer, a consumer, an admin client) in a child process against a
bootstrap address and returns what they printed on stderr: librdkafka writes its raw lines there unless the
settings route them (common/kafka_logs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

# librdkafka's own log line: %LEVEL|timestamp|FACILITY|client| ...
RAW_LINE = re.compile(r"^%\d+\|", re.MULTILINE)

_CLIENTS = """
import sys
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from common import config, topics

bootstrap = sys.argv[1]
producer = topics.producer(bootstrap, {"message.timeout.ms": 3000})
producer.produce("streamfold-log-probe", b"v")
producer.flush(10)
try:
    topics.latest_records(bootstrap, "streamfold-log-probe", 1, timeout_s=3)
except (KafkaException, KeyError):  # unreachable, or no such topic
    pass
try:
    AdminClient(config.kafka_client_settings(bootstrap)).list_topics(timeout=3)
except KafkaException:
    pass
print("done")
"""


def stderr_of_clients(bootstrap: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-c", _CLIENTS, bootstrap],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert result.returncode == 0 and result.stdout.strip() == "done", result.stderr[-3000:]
    return result.stderr
