"""Who used the machine's CPU during a measurement: core-seconds per process group, from /proc.

A thread reads, once a second, the machine's busy time (/proc/stat) and the CPU time (utime + stime) of
every process in the named groups (process trees: the job, a cluster's workers, the stack's services). A
process counts from the first sample that saw it (from 0 if it started after the first sample), up to the
last one that saw it. What the machine spent outside the groups is "other": the bench itself, and whatever
else runs on the machine (other people's tests distort a measurement; this says by how much).
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.procmem import descendants

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float | None:
    """utime + stime of a process, in seconds; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S


def machine_busy_s() -> float:
    """Seconds all cores spent busy since boot (not idle, not waiting for I/O)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    total = sum(values[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
    return (total - values[3] - values[4]) * TICK_S


@dataclass
class Sample:
    at: float  # time.time()
    busy_s: float
    groups: dict[str, float]


@dataclass
class CpuClock:
    """Samples the groups' CPU every `interval_s` until stopped. `groups`: name -> root pids (a group's
    processes are the roots and everything below them, or the roots alone for the groups named in
    `exact`; a pid in two groups counts for the first)."""

    groups: dict[str, list[int]]
    exact: frozenset[str] = frozenset()
    interval_s: float = 1.0
    samples: list[Sample] = field(default_factory=list)
    _first: dict[int, float] = field(default_factory=dict)
    _last: dict[int, tuple[str, float]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> CpuClock:
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="cpu-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        first = not self.samples
        for name, roots in self.groups.items():
            for root in roots:
                for pid in [root] if name in self.exact else descendants(root):
                    cpu = process_cpu_s(pid)
                    if cpu is None or (pid in self._last and self._last[pid][0] != name):
                        continue
                    self._first.setdefault(pid, cpu if first else 0.0)
                    self._last[pid] = (name, cpu)
        totals = dict.fromkeys(self.groups, 0.0)
        for pid, (name, cpu) in self._last.items():
            totals[name] += cpu - self._first[pid]
        self.samples.append(Sample(time.time(), machine_busy_s(), totals))

    def between(self, start: float, end: float) -> dict[str, object]:
        """Core-seconds per group from the last sample at or before `start` to the first at or after `end`
        (so the span is up to a sampling interval longer than asked; its length is reported)."""
        times = [s.at for s in self.samples]
        a = self.samples[max(0, bisect.bisect_right(times, start) - 1)]
        b = self.samples[min(len(times) - 1, bisect.bisect_left(times, end))]
        return usage(a, b)


def usage(a: Sample, b: Sample) -> dict[str, object]:
    """The groups' core-seconds between two samples, "other" the machine's rest, and busy shares."""
    wall = b.at - a.at
    groups = {name: round(b.groups[name] - a.groups.get(name, 0.0), 1) for name in b.groups}
    busy = b.busy_s - a.busy_s
    cores = os.cpu_count() or 1
    return {
        "wall_s": round(wall, 1),
        "cores": cores,
        "machine_busy_core_s": round(busy, 1),
        "machine_busy_share": round(busy / (wall * cores), 3) if wall else None,
        "core_s": {**groups, "other": round(busy - sum(groups.values()), 1)},
    }
