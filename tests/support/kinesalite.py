"""A kinesalite of its own for a unit test: the stack's endpoint (its preload and options) on a free port,
with its data in a folder the test gives."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config as BotoConfig

from common import kinesis
from stack.home import AWS_ENV
from stack.kinesis import PRELOAD_JS, kinesalite_args
from stack.prerequisites import KINESIS_MAIN

# One attempt per call: a test sees an unreachable endpoint at once instead of after botocore's retries.
ONE_TRY = BotoConfig(connect_timeout=5, read_timeout=10, retries={"max_attempts": 1})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(folder: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """kinesalite and its URL, its output readable line by line; killed on exit."""
    if not KINESIS_MAIN.exists():
        pytest.fail(f"{KINESIS_MAIN} is missing: run `make setup`")
    port = free_port()
    proc = subprocess.Popen(
        ["node", "--require", str(PRELOAD_JS), str(KINESIS_MAIN), *kinesalite_args(port, str(folder))],
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


def client(url: str, *, epoch_timestamps: bool = False) -> Any:
    """A client of the endpoint at `url` with the stack's credentials, one try per call;
    `epoch_timestamps` as for `common.kinesis.client` (the Spark source's clients have it)."""
    return kinesis.client(
        ONE_TRY,
        epoch_timestamps=epoch_timestamps,
        endpoint_url=url,
        region_name=AWS_ENV["AWS_DEFAULT_REGION"],
        aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
    )


def read_stream(kinesis_client: Any, stream: str) -> list[tuple[str, dict[str, Any]]]:
    """Every record of the stream from its start, each with its shard's id: shard by shard, each shard's in
    the order it holds them."""
    read: list[tuple[str, dict[str, Any]]] = []
    for shard in kinesis_client.list_shards(StreamName=stream)["Shards"]:
        iterator = kinesis_client.get_shard_iterator(
            StreamName=stream, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = kinesis_client.get_records(ShardIterator=iterator, Limit=10_000)
            read += [(shard["ShardId"], record) for record in page["Records"]]
            iterator = page.get("NextShardIterator") if page["Records"] else None
    return read
