"""Peak memory of a process tree, sampled from /proc: the driver python, the JVM, the python workers.

RSS double-counts pages that forked python workers share with their daemon, so the total is also
sampled as PSS (proportional set size, /proc/<pid>/smaps_rollup), which splits shared pages fairly.

Processes the JVM is spawning are left out. Hadoop's local filesystem runs `chmod` for every checkpoint
file it writes, several times a second. Until the child execs, it shares the JVM's memory and carries the
name of the spawning thread ("Executor task l", "stream executio"). Counting it would add the whole JVM a
second time, as "python workers" that are not there.

RSS is cheap to read (/proc/<pid>/status) and is sampled 4 times a second. PSS is not: the kernel walks
every page of the process to sum it, and reading it at that rate for the whole tree would take CPU from
the job it measures. It is sampled every 2 s.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path


def _stat(pid: str) -> tuple[int, str] | None:
    """(ppid, comm) of a process, None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1 : text.rindex(")")]
    return int(text[text.rindex(")") + 2 :].split()[1]), comm


def descendants(root: int) -> dict[int, str]:
    """pid -> comm of `root` and every process below it."""
    children: dict[int, list[tuple[int, str]]] = defaultdict(list)
    comms: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (info := _stat(entry.name)):
            children[info[0]].append((int(entry.name), info[1]))
            comms[int(entry.name)] = info[1]
    if root not in comms:
        return {}
    tree, todo = {root: comms[root]}, [root]
    while todo:
        for pid, comm in children.get(todo.pop(), []):
            tree[pid] = comm
            todo.append(pid)
    return tree


def _kib(pid: int, path: str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def role(pid: int, comm: str, root: int, tree: Tree | None = None) -> str | None:
    """driver, jvm or workers (a tree's own names, Tree); None for anything else (a process being spawned,
    see the module doc)."""
    tree = tree or Tree(root)
    if pid == root:
        return tree.root_role
    if comm == "java":
        return f"{tree.prefix}jvm"
    return f"{tree.prefix}workers" if comm.startswith("python") else None


@dataclass(frozen=True)
class Tree:
    """A process tree to sample: its root is `root_role`, the JVMs and python processes below it are
    `prefix`jvm and `prefix`workers. A cluster's worker: Tree(pid, "cluster daemons", "executor ")."""

    root: int
    root_role: str = "driver"
    prefix: str = ""


@dataclass
class Peaks:
    """Peak RSS per role (MiB) and the peak of the tree's total RSS and PSS (MiB)."""

    rss_mib: dict[str, float] = field(default_factory=dict)
    total_rss_mib: float = 0.0
    total_pss_mib: float = 0.0
    samples: int = 0

    def add(self, rss_kib: dict[str, int], pss_kib: int | None) -> None:
        for name, kib in rss_kib.items():
            self.rss_mib[name] = max(self.rss_mib.get(name, 0.0), kib / 1024)
        self.total_rss_mib = max(self.total_rss_mib, sum(rss_kib.values()) / 1024)
        if pss_kib is not None:
            self.total_pss_mib = max(self.total_pss_mib, pss_kib / 1024)
        self.samples += 1

    def as_dict(self) -> dict[str, object]:
        return {
            "peak_rss_mib": {k: round(v) for k, v in sorted(self.rss_mib.items())},
            "peak_total_rss_mib": round(self.total_rss_mib),
            "peak_total_pss_mib": round(self.total_pss_mib),
            "samples": self.samples,
        }


def sample(roots: int | list[Tree], peaks: Peaks, with_pss: bool = True) -> None:
    """One sample of every tree (a pid: one tree whose root is the driver), summed per role."""
    rss: dict[str, int] = defaultdict(int)
    pss = 0
    for tree in [Tree(roots)] if isinstance(roots, int) else roots:
        for pid, comm in descendants(tree.root).items():
            if (name := role(pid, comm, tree.root, tree)) is not None:
                rss[name] += _kib(pid, "status", "VmRSS:")
                if with_pss:
                    pss += _kib(pid, "smaps_rollup", "Pss:")
    if rss:
        peaks.add(dict(rss), pss if with_pss else None)


class Sampler:
    """Samples a process tree (or several, summed: a driver and a cluster's workers) every `interval_s` in a
    thread until stopped."""

    def __init__(self, root: int | list[Tree], interval_s: float = 0.25, pss_every_s: float = 2.0) -> None:
        self.root = root
        self.interval_s = interval_s
        self.pss_every = max(1, round(pss_every_s / interval_s))
        self.peaks = Peaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="procmem", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        n = 0
        while True:
            sample(self.root, self.peaks, with_pss=n % self.pss_every == 0)
            n += 1
            if self._stop.wait(self.interval_s):
                return
