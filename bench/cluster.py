"""The local-vs-cluster comparison's pieces: the bench stack's Spark cluster, where a batch's time goes.

The same input is measured twice in one run, by the same job: under `local[*]` (one JVM, both cores) and
submitted to the stack's standalone cluster (`stack up --spark-workers N`: a master and N one-core
workers, each running one executor). Beside clicks/s and memory, each side records from the driver's
REST API (/api/v1/applications/<id>/stages) every stage of the measured batches: its tasks, their run and
CPU time, its shuffle bytes. With the progress log's durationMs that splits a batch into
  - the driver's serial part: the trigger's time outside any stage (planning, offsets, the write-ahead
    and commit logs, the foreachBatch call and the totals it publishes), and
  - the stages, each parallel up to its task count: the Kafka read + parse tasks (click partitions x
    records per task, pipeline/sources.py), and the join + landing tasks (spark.sql.shuffle.partitions,
    fixed per checkpoint; each lands its own partition in Postgres).
`projection` turns that into batch times for W one-core workers, assuming every task keeps the time it
took here: a bound computed from the run's figures, not a measurement.
"""

from __future__ import annotations

import json
import math
import os
import re
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.cpu import CpuClock
from bench.procmem import Tree
from bench.stack import Bench
from stack import lifecycle

BATCH = re.compile(r"batch = (\d+)")
BENCH = "the bench itself (loads, samples)"
JOB = "job (driver; local: + executors)"
DAEMONS = "cluster daemons"
EXECUTORS = "executors"
JOIN = "join + landing"
READ = "read + parse"


@contextmanager
def spark_cluster(bench: Bench, workers: int) -> Iterator[Bench]:
    """The bench stack with a Spark cluster of `workers` workers; the cluster stops afterwards (the rest of
    the stack keeps running, and jobs started later run under local[*] again)."""
    try:
        env = lifecycle.up(bench.home, spark_workers=workers)
        yield replace(bench, env=env)
    finally:
        lifecycle.up(bench.home, spark_workers=0)


def service_pids(home: Path, prefix: str = "") -> dict[str, int]:
    """name -> pid of the stack's running services (those whose name starts with `prefix`)."""
    return {s.name: s.pid for s in lifecycle.status(home) if s.pid is not None and s.name.startswith(prefix)}


def cluster_trees(home: Path) -> list[Tree]:
    """The cluster's processes, for procmem: its master and worker daemons, the executors below them."""
    return [Tree(pid, "cluster daemons", "executor ") for pid in service_pids(home, "spark-").values()]


def cpu_groups(home: Path, job_pid: int) -> dict[str, list[int]]:
    """The process groups whose CPU is accounted (bench.cpu): the job first (under a local master its
    executors are inside it), the cluster's executors, its daemons, then the stack's services."""
    services = service_pids(home)
    workers = [pid for name, pid in services.items() if name.startswith("spark-worker")]
    return {
        BENCH: [os.getpid()],
        JOB: [job_pid],
        DAEMONS: [pid for name, pid in services.items() if name.startswith("spark-")],
        EXECUTORS: workers,  # below the workers: their daemons count above
        **{name: [pid] for name, pid in services.items() if not name.startswith("spark-")},
    }


def cpu_clock(home: Path, job_pid: int) -> CpuClock:
    return CpuClock(cpu_groups(home, job_pid), exact=frozenset({BENCH, DAEMONS}))


def get_json(url: str, timeout: float = 30) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - the job's own UI
        return json.load(response)


def spark_ui(job_home: Path) -> str:
    """The job's Spark UI (status/job.json, written when its session started)."""
    return str(json.loads((job_home / "status" / "job.json").read_text())["spark_ui"])


def fetch_stages(ui: str) -> list[dict[str, Any]]:
    """Every completed stage of the job's application, with its tasks."""
    (app, *_) = get_json(f"{ui}/api/v1/applications")
    return list(get_json(f"{ui}/api/v1/applications/{app['id']}/stages?status=complete&details=true"))


def batch_of(stage: dict[str, Any]) -> int | None:
    """The micro-batch a stage ran for (Structured Streaming's job description says "batch = N")."""
    found = BATCH.search(stage.get("description") or "")
    return int(found[1]) if found else None


def kind(stage: dict[str, Any]) -> str:
    """The join stage reads the shuffle (and lands its partition); the map stages read Kafka and write it."""
    if stage.get("shuffleReadBytes", 0) > 0 or stage.get("shuffleRemoteBytesRead", 0) > 0:
        return JOIN
    return READ if stage.get("shuffleWriteBytes", 0) > 0 else "other"


def _ms(text: str | None) -> float:
    from bench.job import parse_ts

    return parse_ts(text.replace("GMT", "Z")) * 1000 if text else 0.0


def stage_summary(stage: dict[str, Any]) -> dict[str, Any]:
    tasks = [t for t in (stage.get("tasks") or {}).values() if t.get("status") == "SUCCESS"]
    durations = [t.get("duration", 0) for t in tasks]
    cpu_ms = [(t.get("taskMetrics") or {}).get("executorCpuTime", 0) / 1e6 for t in tasks]
    return {
        "batch": batch_of(stage),
        "kind": kind(stage),
        "tasks": stage.get("numCompleteTasks", len(durations)),
        "start_ms": _ms(stage.get("firstTaskLaunchedTime") or stage.get("submissionTime")),
        "end_ms": _ms(stage.get("completionTime")),
        "task_ms": sum(durations),
        "max_task_ms": max(durations, default=0),
        "run_ms": stage.get("executorRunTime", 0),
        "cpu_ms": round(stage.get("executorCpuTime", 0) / 1e6),
        "max_task_cpu_ms": round(max(cpu_ms, default=0)),
        "shuffle_read_bytes": stage.get("shuffleReadBytes", 0),
        "shuffle_write_bytes": stage.get("shuffleWriteBytes", 0),
        "input_records": stage.get("inputRecords", 0),
    }


def busy_ms(intervals: list[tuple[float, float]]) -> float:
    """The length of a union of intervals."""
    total, end = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def breakdown(stages: list[dict[str, Any]], events: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the measured batches' time went: the driver's serial time, and per stage kind its tasks."""
    batches = {e["batchId"]: e for e in events}
    mine = [s for s in stages if s["batch"] in batches]
    trigger_ms = sum(e["durationMs"].get("triggerExecution", 0) for e in events)
    stage_wall = {
        b: busy_ms([(s["start_ms"], s["end_ms"]) for s in mine if s["batch"] == b]) for b in batches
    }
    kinds: dict[str, dict[str, Any]] = {}
    for s in mine:
        k = kinds.setdefault(
            s["kind"],
            {"stages": 0, "tasks": 0, "max_tasks": 0, "wall_ms": 0.0, "task_ms": 0, "max_task_ms_sum": 0}
            | {"cpu_ms": 0, "max_task_cpu_ms_sum": 0, "shuffle_read_bytes": 0, "shuffle_write_bytes": 0},
        )
        k["stages"] += 1
        k["tasks"] += s["tasks"]
        k["max_tasks"] = max(k["max_tasks"], s["tasks"])
        k["wall_ms"] += s["end_ms"] - s["start_ms"]
        k["max_task_ms_sum"] += s["max_task_ms"]
        k["max_task_cpu_ms_sum"] += s["max_task_cpu_ms"]
        for key in ("task_ms", "cpu_ms", "shuffle_read_bytes", "shuffle_write_bytes"):
            k[key] += s[key]
    for k in kinds.values():
        k["wall_ms"] = round(k["wall_ms"])
    stages_ms = sum(stage_wall.values())
    return {
        "batches": len(events),
        "trigger_ms": trigger_ms,
        "stages_wall_ms": round(stages_ms),
        "driver_serial_ms": round(trigger_ms - stages_ms),
        "driver_phases_ms": _phases(events),
        "kinds": kinds,
        "per_batch": [
            {
                "batch": b,
                "trigger_ms": e["durationMs"].get("triggerExecution", 0),
                "stages_wall_ms": round(stage_wall[b]),
            }
            for b, e in sorted(batches.items())
        ],
        "stages": mine,
    }


def _phases(events: list[dict[str, Any]]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for e in events:
        for phase, ms in e["durationMs"].items():
            if phase != "triggerExecution":
                totals[phase] = totals.get(phase, 0) + ms
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def stage_ms_with(stage: dict[str, Any], workers: int, cpu_only: bool = False) -> float:
    """A stage's wall time on `workers` one-core executors if its tasks kept their measured times (or took
    only their CPU time): the work spread over min(workers, tasks) slots, never below its longest task."""
    slots = max(1, min(workers, stage["tasks"]))
    if cpu_only:
        return max(stage["cpu_ms"] / slots, stage["max_task_cpu_ms"])
    return max(stage["task_ms"] / slots, stage["max_task_ms"])


def projection(b: dict[str, Any], clicks: int, workers: tuple[int, ...] = (1, 2, 4, 8, 16)) -> list[dict]:
    """Throughput bounds for W workers: the driver's serial time plus each stage at W slots (a batch's
    stages run one after another: the join reads what the read stage shuffled), with the tasks' measured
    times (they include waiting for the cores, Postgres and Kafka: pessimistic on a busy machine) and
    with their CPU time alone (optimistic). A model of the measured figures, not a measurement."""
    rows = []
    for w in workers:
        ms = b["driver_serial_ms"] + sum(stage_ms_with(s, w) for s in b["stages"])
        cpu_ms = b["driver_serial_ms"] + sum(stage_ms_with(s, w, cpu_only=True) for s in b["stages"])
        rows.append(
            {
                "workers": w,
                "batch_ms_total": round(ms),
                "clicks_per_s": round(clicks / ms * 1000),
                "cpu_only_batch_ms_total": round(cpu_ms),
                "cpu_only_clicks_per_s": round(clicks / cpu_ms * 1000),
            }
        )
    return rows


# A machine this busy during a measurement is CPU-bound: more work in parallel only queues for the cores.
BUSY = 0.9


def _mib(n: float) -> str:
    return f"{n / 2**20:,.1f}"


def _memory(side: dict[str, Any]) -> str:
    mem = side.get("memory") or {}
    return f"{mem.get('peak_total_rss_mib', '-')} / {mem.get('peak_total_pss_mib', '-')}"


def _times(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.0%}" if whole else "-"


def _core_s(cpu: dict[str, Any]) -> str:
    used = sorted(cpu.get("core_s", {}).items(), key=lambda kv: -kv[1])
    return ", ".join(f"{name} {seconds:.1f}" for name, seconds in used if seconds)


def cpu_per_click(side: dict[str, Any]) -> dict[str, float]:
    """µs of CPU a click over the measured span: Spark's processes (the job, the executors, the cluster's
    daemons), every process of the stack (Spark, Postgres, Kafka, Connect, Kinesis; not the bench nor
    other processes), and the tasks' own CPU (Spark's executorCpuTime). Unlike clicks/s, it leaves out the
    time spent waiting for a core that other processes hold."""
    used, clicks = side["cpu"]["core_s"], side["clicks"]
    spark = sum(used.get(g, 0.0) for g in (JOB, EXECUTORS, DAEMONS))
    stack = sum(v for g, v in used.items() if g not in (BENCH, "other"))
    tasks = sum(k["cpu_ms"] for k in side["breakdown"]["kinds"].values()) / 1000
    return {k: round(v / clicks * 1e6, 1) for k, v in (("spark", spark), ("stack", stack), ("tasks", tasks))}


def findings(pair: dict[str, Any]) -> list[str]:
    """The comparison in sentences, every figure from the run: the ratio, the memory, which part of a
    batch is serial and which parallel (and up to how many workers), where the CPU went, the bottleneck."""
    local, on_cluster, workers = pair["local"], pair["cluster"], pair["workers"]
    lines = [
        f"cluster of {workers} one-core workers / local[*]: {pair['cluster_over_local']:.2f} "
        f"({on_cluster['clicks_per_s']:,} against {local['clicks_per_s']:,} clicks/s, the same "
        f"{pair['clicks']:,} clicks, {pair['order']})",
        f"peak memory, total RSS / PSS: local {_memory(local)} MiB; cluster (driver, executors, master and "
        f"worker daemons) {_memory(on_cluster)} MiB",
    ]
    here, there = cpu_per_click(local), cpu_per_click(on_cluster)
    lines.append(
        f"CPU a click (time spent waiting for a core is not in it, unlike in clicks/s): Spark's processes "
        f"local {here['spark']} µs, cluster {there['spark']} µs ({_times(there['spark'], here['spark'])}); "
        f"the tasks' own CPU {here['tasks']} against {there['tasks']} µs; the whole stack {here['stack']} "
        f"against {there['stack']} µs"
    )
    b = on_cluster["breakdown"]
    trigger, serial = b["trigger_ms"], b["driver_serial_ms"]
    phases = ", ".join(f"{k} {v / 1000:.1f} s" for k, v in list(b["driver_phases_ms"].items())[:4])
    lines.append(
        f"cluster, serial: the driver outside any stage took {serial / 1000:.1f} s of the {b['batches']} "
        f"batches' {trigger / 1000:.1f} s ({_share(serial, trigger)}; the batches' phases: {phases})"
    )
    for name, what in ((READ, "parallel over workers, up to its tasks"), (JOIN, "parallel up to its tasks")):
        k = b["kinds"].get(name)
        if k:
            lines.append(
                f"cluster, {name} ({what}): {k['stages']} stages of up to {k['max_tasks']} tasks, "
                f"{k['wall_ms'] / 1000:.1f} s wall ({_share(k['wall_ms'], trigger)} of the batches), "
                f"{k['task_ms'] / 1000:.1f} s of tasks ({k['cpu_ms'] / 1000:.1f} s on a CPU), the longest "
                f"task of each stage {k['max_task_ms_sum'] / 1000:.1f} s summed; shuffle "
                f"{_mib(k['shuffle_write_bytes'])} MiB written, {_mib(k['shuffle_read_bytes'])} MiB read"
            )
    for side in (local, on_cluster):
        cpu = side["cpu"]
        busy, cores = cpu["machine_busy_share"], cpu["cores"]
        lines.append(
            f"{side['mode']}, CPU over the measured {cpu['wall_s']:.1f} s: the machine was {busy:.0%} busy "
            f"({cpu['machine_busy_core_s']:.1f} core-s of {cores} cores); core-s by process group: "
            f"{_core_s(cpu)}"
        )
    lines.extend(_bottleneck(pair))
    return lines


def _bottleneck(pair: dict[str, Any]) -> list[str]:
    on_cluster = pair["cluster"]
    b, cpu = on_cluster["breakdown"], on_cluster["cpu"]
    used = cpu["core_s"]
    pg = used.get("postgres", 0.0)
    lines = [
        f"Postgres (one server, whatever the workers): {pg:.1f} core-s for {pair['clicks']:,} clicks, "
        f"{pg / pair['clicks'] * 1e6:.1f} µs a click"
    ]
    busy = cpu["machine_busy_share"]
    if busy and busy >= BUSY:
        top = max(used, key=lambda k: used[k])
        lines.append(
            f"bottleneck on this machine: its {cpu['cores']} cores ({busy:.0%} busy during the cluster's "
            f"span; most to {top}: {used[top]:.1f} of {cpu['machine_busy_core_s']:.1f} core-s)"
            + (
                ": other processes than this measurement's, so its figures are distorted"
                if top == "other"
                else ""
            )
        )
    rows = pair.get("projection") or []
    if rows:
        last = rows[-1]
        join = b["kinds"].get(JOIN, {})
        terms = {
            "the driver's serial part": b["driver_serial_ms"],
            f"the join + landing's longest tasks ({join.get('max_tasks')} state partitions)": join.get(
                "max_task_ms_sum", 0
            ),
            "the read + parse's longest tasks": b["kinds"].get(READ, {}).get("max_task_ms_sum", 0),
        }
        name = max(terms, key=lambda k: terms[k])
        cpu_terms = {
            "the driver's serial part": b["driver_serial_ms"],
            "the join + landing's longest tasks": join.get("max_task_cpu_ms_sum", 0),
            "the read + parse's longest tasks": b["kinds"].get(READ, {}).get("max_task_cpu_ms_sum", 0),
        }
        cpu_name = max(cpu_terms, key=lambda k: cpu_terms[k])
        bounds = ", ".join(
            f"{r['workers']}: {r['clicks_per_s']:,} ({r['cpu_only_clicks_per_s']:,})" for r in rows
        )
        lines.append(
            f"with W workers, if each task kept its measured time (its CPU time alone), clicks/s: {bounds}; "
            f"at {last['workers']} "
            f"the largest term left is {name}, {terms[name] / 1000:.1f} s of "
            f"{last['batch_ms_total'] / 1000:.1f} s (CPU time only: {cpu_name}, "
            f"{cpu_terms[cpu_name] / 1000:.1f} s of {last['cpu_only_batch_ms_total'] / 1000:.1f} s)"
        )
    return lines
