"""The services' processes: spawn in their own sessions, pid files checked against the command line,
terminate a process group, tail a log."""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

LOG_TAIL_LINES = 30
STOP_TIMEOUT = 30.0

# Popen objects of children this process started, so they are reaped (no zombies in a test session).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def verified_pid(pid: int | None, marker: str) -> int | None:
    """`pid` if that process is alive and still the one we started (its cmdline names `marker`)."""
    if pid is None:
        return None
    child = _CHILDREN.get(pid)
    if child is not None:
        # Our unreaped child cannot have had its pid reused; and just after exec its cmdline can
        # still read empty (the kernel fills it in after closing the fd Popen waits on).
        return pid if child.poll() is None else None
    return pid if _alive(pid) and marker in _cmdline(pid) else None


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def spawn(cmd: Sequence[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start `cmd` in its own session (it survives the CLI; a Ctrl-C of the CLI does not reach it),
    with the caller's environment minus streamfold's settings and secrets (after `eval "$(streamfold
    stack env)"` it holds the superuser DSN), plus `env`; files it creates are private (umask 077)."""
    inherited = {k: v for k, v in os.environ.items() if not _is_secret_setting(k)}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**inherited, **(env or {})},
            cwd=cwd,
            start_new_session=True,
            umask=0o077,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _is_secret_setting(name: str) -> bool:
    return name.startswith(("STREAMFOLD_", "PG", "AWS_")) and name != "STREAMFOLD_PORT_RANGE"


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    _CHILDREN.pop(pid, None)
    return True


def terminate(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM the process group the service leads, SIGKILL it if it outlives `timeout`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if not wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        wait_gone(pid, 10)


def tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as handle:
            return "".join(collections.deque(handle, maxlen=lines)).rstrip("\n")
    except OSError:
        return f"({path} not found)"
