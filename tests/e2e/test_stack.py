"""The local stack launcher with real processes: ports, idempotent `up`, clean `down`, restarts.

These tests run their own stacks in their own homes, independent of the session stack.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from compose import local_stack

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
    return {row.name: row.pid for row in local_stack.status(home)}


def test_taken_port_is_a_one_line_error_and_starts_nothing(new_stack_home: Callable[[str], Path]) -> None:
    home = new_stack_home("taken")
    port = local_stack.allocate_ports(home)["kafka-controller"]
    with socket.create_server(("127.0.0.1", port)):
        result = subprocess.run(
            [sys.executable, "-m", "compose.local_stack", "up"],
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
    env = local_stack.up(home)
    yield home, env
    local_stack.down(home)


def test_stack_is_healthy_and_env_matches(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, env = second_stack
    assert all(row.up for row in local_stack.status(home))
    assert local_stack.env_lines(home) == [f"export {key}={value}" for key, value in env.items()]
    assert env["STREAMFOLD_HOME"] == str(home)
    plugins = requests.get(env["STREAMFOLD_CONNECT_URL"] + "/connector-plugins", timeout=10).json()
    assert local_stack.DEBEZIUM_CONNECTOR_CLASS in {plugin["class"] for plugin in plugins}
    assert oct((home / "secrets.json").stat().st_mode & 0o777) == "0o600"


def test_second_up_is_a_no_op(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, env = second_stack
    before = service_pids(home)
    started = time.monotonic()
    assert local_stack.up(home) == env
    assert time.monotonic() - started < 10
    assert service_pids(home) == before


def test_a_new_home_never_takes_a_running_stacks_ports(
    second_stack: tuple[Path, dict[str, str]], new_stack_home: Callable[[str], Path]
) -> None:
    home, _ = second_stack
    running = local_stack.allocate_ports(home)
    # A home whose hash picks the very block the running stack uses.
    parent = new_stack_home("collide")
    colliding = next(
        parent / f"h{i}"
        for i in range(100_000)
        if local_stack.derived_base(parent / f"h{i}") == running["postgres"]
    )
    ports = local_stack.allocate_ports(colliding)
    assert set(ports.values()).isdisjoint(running.values())
    assert local_stack.allocate_ports(colliding) == ports  # persisted: a stack keeps its ports


def test_connect_can_be_killed_and_restarted_alone(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, _ = second_stack
    before = service_pids(home)
    local_stack.kill_service(home, "connect")
    assert service_pids(home) == {**before, "connect": None}
    local_stack.start_service(home, "connect")
    after = service_pids(home)
    assert after["connect"] not in (None, before["connect"])
    assert {k: v for k, v in after.items() if k != "connect"} == {
        k: v for k, v in before.items() if k != "connect"
    }


def test_down_leaves_no_stray_process(second_stack: tuple[Path, dict[str, str]]) -> None:
    home, _ = second_stack
    pids = [pid for pid in service_pids(home).values() if pid is not None]
    assert len(pids) == 4 and processes_under(home)
    local_stack.down(home)
    assert processes_under(home) == []
    assert not any(alive(pid) for pid in pids)
    assert list((home / "pids").iterdir()) == []
    assert service_pids(home) == dict.fromkeys(local_stack.SERVICES)
