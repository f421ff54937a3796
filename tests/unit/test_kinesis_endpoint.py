"""The local Kinesis endpoint (stack/kinesis.py): kinesalite with the stack's preload keeps serving after a
client closes its connection in the middle of a request, which alone ends kinesalite under Node 20."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from botocore.config import Config as BotoConfig

from common import kinesis
from stack.home import AWS_ENV
from stack.kinesis import KINESIS_LOOPBACK_JS, kinesalite_args
from stack.prerequisites import KINESIS_MAIN

GUARD_S = 30  # only so that a broken endpoint fails the test instead of hanging it
ONE_TRY = BotoConfig(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    if not KINESIS_MAIN.exists():
        pytest.fail(f"{KINESIS_MAIN} is missing: run `make setup`")
    preload = tmp_path / "preload.js"
    preload.write_text(KINESIS_LOOPBACK_JS)
    port = free_port()
    proc = subprocess.Popen(
        ["node", "--require", str(preload), str(KINESIS_MAIN), *kinesalite_args(port, str(tmp_path))],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert "Listening" in proc.stdout.readline(), "kinesalite did not start"
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait()


def client(url: str) -> object:
    return kinesis.client(
        ONE_TRY,
        endpoint_url=url,
        region_name=AWS_ENV["AWS_DEFAULT_REGION"],
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


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
    assert "StreamNames" in client(url).list_streams()  # type: ignore[attr-defined]
