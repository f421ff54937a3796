"""The local stack launcher with real processes: ports, idempotent `up`, clean `down`, restarts.

These tests run their own stacks in their own homes, independent of the session stack.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from botocore.config import Config

from common import kinesis
from stack import lifecycle
from stack.connect import DEBEZIUM_CONNECTOR_CLASS
from stack.home import allocate_ports, derived_base
from tests.support import kinesalite

pytestmark = pytest.mark.e2e


def processes_under(home: Path) -> list[int]:
    """Live processes whose command line names a file in `home`: what a stray would look like."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.name.isdigit() and f"{home}/" in cmdline:
            pids.append(int(entry.name))
    return pids


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def service_pids(home: Path) -> dict[str, int | None]:
    return {row.name: row.pid for row in lifecycle.status(home)}


def test_taken_port_is_a_one_line_error_and_starts_nothing(new_stack_home: Callable[[str], Path]) -> None:
    home = new_stack_home("taken")
    port = allocate_ports(home)["kafka-controller"]
    with socket.create_server(("127.0.0.1", port)):
        result = subprocess.run(
            [sys.executable, "-m", "streamfold", "stack", "up"],
            env={**os.environ, "STREAMFOLD_HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: port {port} needed by kafka-controller is already in use"
    assert processes_under(home) == []
    assert not (home / "stack.env").exists()


@pytest.fixture(scope="module")
def second_stack(new_stack_home: Callable[[str], Path]) -> Iterator[tuple[Path, dict[str, str]]]:
    home = new_stack_home("second")
    env = lifecycle.up(home)
    yield home, env
    lifecycle.down(home)


def test_stack_is_healthy_and_env_matches(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, env = second_stack
    assert all(row.up for row in lifecycle.status(home))
    assert lifecycle.env_lines(home) == [f"export {key}={value}" for key, value in env.items()]
    assert env["STREAMFOLD_HOME"] == str(home)
    auth = (env["STREAMFOLD_CONNECT_USER"], env["STREAMFOLD_CONNECT_PASSWORD"])
    plugins = requests.get(env["STREAMFOLD_CONNECT_URL"] + "/connector-plugins", timeout=10, auth=auth).json()
    assert DEBEZIUM_CONNECTOR_CLASS in {plugin["class"] for plugin in plugins}
    assert oct((home / "secrets.json").stat().st_mode & 0o777) == "0o600"


def test_second_up_is_a_no_op(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, env = second_stack
    before = service_pids(home)
    started = time.monotonic()
    assert lifecycle.up(home) == env
    assert time.monotonic() - started < 10
    assert service_pids(home) == before


def test_a_new_home_never_takes_a_running_stacks_ports(
    second_stack: tuple[Path, dict[str, str]], new_stack_home: Callable[[str], Path]
) -> None:
    home, _ = second_stack
    running = allocate_ports(home)
    # A home whose hash picks the very block the running stack uses.
    parent = new_stack_home("collide")
    colliding = next(
        parent / f"h{i}" for i in range(100_000) if derived_base(parent / f"h{i}") == running["postgres"]
    )
    ports = allocate_ports(colliding)
    assert set(ports.values()).isdisjoint(running.values())
    assert allocate_ports(colliding) == ports  # persisted: a stack keeps its ports


def test_connect_can_be_killed_and_restarted_alone(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, _ = second_stack
    before = service_pids(home)
    lifecycle.kill_service(home, "connect")
    assert service_pids(home) == {**before, "connect": None}
    lifecycle.start_service(home, "connect")
    after = service_pids(home)
    assert after["connect"] not in (None, before["connect"])
    assert {k: v for k, v in after.items() if k != "connect"} == {
        k: v for k, v in before.items() if k != "connect"
    }


def test_kinesis_killed_under_load_keeps_every_acknowledged_record(
    second_stack: tuple[Path, dict[str, str]],
) -> None:
    """kill -9 of the Kinesis endpoint while a writer puts records: after each restart, every record whose
    PutRecords call was acknowledged is there, once, in order. A call the kill left without an answer may
    have landed or not (Kinesis producers are at least once): each call is one attempt, its records are
    told apart by the attempt in their data, and may be there at most once."""
    home, env = second_stack
    endpoint = {
        "endpoint_url": env["STREAMFOLD_KINESIS_ENDPOINT"],
        "region_name": env["AWS_DEFAULT_REGION"],
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
    }
    client = kinesis.client(**endpoint)  # the job's patient retries, for setup and read-back
    # botocore's own retry of a put would hide a lost answer: the writer puts with one attempt a call
    putter = kinesis.client(Config(retries={"total_max_attempts": 1}), **endpoint)
    client.create_stream(StreamName="survivor", ShardCount=1)
    client.get_waiter("stream_exists").wait(StreamName="survivor", WaiterConfig={"Delay": 1})
    acknowledged: list[bytes] = []
    unanswered: set[bytes] = set()
    stop = threading.Event()

    def write() -> None:  # numbered records, 100 per call, until told to stop
        for attempt in itertools.count():
            if stop.is_set():
                return
            batch = [f"{len(acknowledged) + i}.{attempt}".encode() for i in range(100)]
            try:
                failed = putter.put_records(
                    StreamName="survivor", Records=[{"Data": d, "PartitionKey": "k"} for d in batch]
                )["FailedRecordCount"]
            except Exception:  # the endpoint is down: try the same numbers again
                failed = len(batch)
            if failed:
                unanswered.update(batch)
            else:
                acknowledged.extend(batch)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(3):
            until_acknowledged(acknowledged, len(acknowledged) + 2_000)
            lifecycle.kill_service(home, "kinesis")
            lifecycle.start_service(home, "kinesis")
    finally:
        stop.set()
        writer.join()
    stream = [record["Data"] for _, record in kinesalite.read_stream(client, "survivor")]
    assert [data for data in stream if data not in unanswered] == acknowledged
    assert len(set(stream)) == len(stream), "a record is in the stream twice"


def until_acknowledged(acknowledged: list[bytes], count: int, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while len(acknowledged) < count:
        assert time.monotonic() < deadline, f"{len(acknowledged)} of {count} records put in {timeout_s} s"
        time.sleep(0.05)


def test_down_leaves_no_stray_process(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, _ = second_stack
    pids = [pid for pid in service_pids(home).values() if pid is not None]
    assert len(pids) == len(lifecycle.SERVICES) and processes_under(home)
    lifecycle.down(home)
    assert processes_under(home) == []
    assert not any(alive(pid) for pid in pids)
    assert list((home / "pids").iterdir()) == []
    assert service_pids(home) == dict.fromkeys(lifecycle.SERVICES)
