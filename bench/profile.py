"""py-spy on the running job: where the driver python and the python workers spend their time.

`py-spy record --subprocesses` samples the driver and every python process below it (the JVM's
pyspark daemons and workers) and writes collapsed stacks; we fold them into the functions with the most
samples, inclusive (anywhere on the stack) and self (the innermost frame), per process kind.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

PY_SPY = Path(sys.executable).with_name("py-spy")
RATE_HZ = 50
TOP = 15
# `--subprocesses` puts "process <pid>:"<cmdline>"" frames first on each stack.
PROCESS_FRAME = re.compile(r'^process (\d+):"(.*)"$')


def start(pid: int, out: Path, seconds: float) -> tuple[subprocess.Popen[bytes], Path]:
    proc = subprocess.Popen(
        [
            str(PY_SPY), "record", "--pid", str(pid), "--subprocesses", "--duration", str(int(seconds)),
            "--rate", str(RATE_HZ), "--format", "raw", "--output", str(out), "--nonblocking",
        ],
        stdout=subprocess.DEVNULL,
        stderr=out.with_suffix(".log").open("wb"),
    )  # fmt: skip
    return proc, out


def kind(cmdline: str) -> str:
    if "pyspark.daemon" in cmdline:
        return "python workers"
    return "driver" if "bench.job_runner" in cmdline else "other python"


def fold(lines: list[str]) -> dict[str, Any]:
    """Collapsed stacks -> per process kind: samples, top inclusive and top self functions."""
    samples: Counter[str] = Counter()
    inclusive: dict[str, Counter[str]] = defaultdict(Counter)
    leaf: dict[str, Counter[str]] = defaultdict(Counter)
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        # Each stack starts with its process's ancestry (java, daemon, worker): the last one is its own.
        processes = [m[2] for f in stack.split(";") if (m := PROCESS_FRAME.match(f))]
        frames = [f for f in stack.split(";") if not PROCESS_FRAME.match(f)]
        who = kind(processes[-1]) if processes else "driver"
        count = int(count_text)
        samples[who] += count
        for frame in set(frames):
            inclusive[who][frame] += count
        if frames:
            leaf[who][frames[-1]] += count
    return {
        who: {
            "samples": total,
            "top_inclusive": [(f, round(100 * n / total, 1)) for f, n in inclusive[who].most_common(TOP)],
            "top_self": [(f, round(100 * n / total, 1)) for f, n in leaf[who].most_common(TOP)],
        }
        for who, total in samples.items()
    }


def finish(started: tuple[subprocess.Popen[bytes], Path]) -> dict[str, Any]:
    proc, out = started
    proc.wait()
    if not out.exists():
        return {"error": f"py-spy wrote no profile; see {out.with_suffix('.log')}"}
    return {"file": str(out), "rate_hz": RATE_HZ, **fold(out.read_text().splitlines())}
