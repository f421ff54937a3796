"""The local Kinesis endpoint (stack/kinesis.py): kinesalite with the stack's preload keeps serving after a
client closes its connection in the middle of a request, which alone ends kinesalite under Node 20, and its
sequence-number conversions and partition-key hash keys are kinesalite's own."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import kinesis
from stack.home import AWS_ENV
from stack.kinesis import PRELOAD_JS
from stack.prerequisites import KINESIS_MAIN
from streamfold import generate
from tests.support import kinesalite

GUARD_S = 30  # only so that a broken endpoint fails the test instead of hanging it
SEQUENCES_JS = Path(__file__).resolve().parents[1] / "support" / "kinesalite_sequences.js"


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    with kinesalite.running(tmp_path) as running:
        yield running


def abort_a_request(url: str) -> None:
    """Headers announcing a body, half of it, then the connection closed."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=GUARD_S) as s:
        s.sendall(
            b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-amz-json-1.1\r\n"
            b'X-Amz-Target: Kinesis_20131202.ListStreams\r\nContent-Length: 100\r\n\r\n{"Limit"'
        )
        time.sleep(0.2)  # the server has started reading the body; not a timing assertion


@pytest.mark.timeout(GUARD_S * 2)
def test_endpoint_serves_after_a_client_aborts_a_request(endpoint):
    proc, url = endpoint
    abort_a_request(url)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the preload's line, or "" when kinesalite ended
    assert "closed its connection mid-request" in line, f"kinesalite said {line!r}, exit {proc.poll()}"
    assert proc.poll() is None
    assert "StreamNames" in kinesalite.client(url).list_streams()


def test_the_preloads_sequence_numbers_and_hash_keys_are_kinesalites() -> None:
    count = 20_000
    run = subprocess.run(
        ["node", str(SEQUENCES_JS), str(PRELOAD_JS), str(count)],
        env={"PATH": os.environ["PATH"], "KINESALITE_MAIN": str(KINESIS_MAIN)},
        capture_output=True,
        text=True,
        timeout=GUARD_S * 4,
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) >= count * 0.9  # the rest are inputs both refuse alike


def test_the_generators_puts_land_every_record_once(endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    # The generator's client leaves botocore's parameter checks out (common.kinesis.PUT_CONFIG).
    _, url = endpoint
    monkeypatch.setenv("STREAMFOLD_KINESIS_ENDPOINT", url)
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    client = kinesalite.client(url)
    kinesis.ensure_stream(client, "puts", shards=2)
    records = [(f"user-{i % 97}", b'{"n": %d}' % i) for i in range(1_234)]
    assert generate.send_kinesis(iter(records), lambda n: None, "puts", senders=3) == len(records)
    read = [(r["PartitionKey"], r["Data"]) for _, r in kinesalite.read_stream(client, "puts")]
    assert sorted(read) == sorted(records)
