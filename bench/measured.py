"""Baselines run as their own processes (`python -m bench.<module>`), so their memory is theirs alone.

Each prints one JSON object as its last stdout line; the parent samples the process tree meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.procmem import Sampler
from bench.stack import Offsets

ROOT = Path(__file__).resolve().parents[1]


def offsets_arg(offsets: Offsets) -> str:
    return json.dumps({str(p): list(r) for p, r in offsets.items()})


def parse_offsets(text: str) -> Offsets:
    return {int(p): (start, end) for p, (start, end) in json.loads(text).items()}


def emit(result: dict[str, Any]) -> None:
    """The child's side: its result as the last line of stdout."""
    print(json.dumps(result), flush=True)


def run(module: str, args: list[str], env: dict[str, str], log: Path, timeout_s: float) -> dict[str, Any]:
    """Run a baseline to completion; its result plus the peak memory of its processes."""
    with log.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdout=subprocess.PIPE,
            stderr=err,
            env=env,
            cwd=ROOT,
            start_new_session=True,
        )
        with Sampler(proc.pid) as sampler:
            out, _ = proc.communicate(timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{module} exited with {proc.returncode}; see {log}")
    lines = out.decode().strip().splitlines()
    return {**json.loads(lines[-1]), "memory": sampler.peaks.as_dict()}


def stop(proc: subprocess.Popen[bytes] | None, sig: signal.Signals, timeout_s: float) -> None:
    """`sig` to a process (leader of its own session); SIGKILL to its whole group if it does not exit in
    time."""
    if proc is None or proc.poll() is not None:
        return
    os.kill(proc.pid, sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def check_alive(proc: subprocess.Popen[bytes] | None, log: Path, name: str) -> None:
    """Raise, with the end of its log, if the process has exited."""
    if proc is not None and proc.poll() is not None:
        tail = log.read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{name} exited with {proc.returncode}; end of {log}:\n{tail}")
