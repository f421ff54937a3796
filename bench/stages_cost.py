"""The join cascade's cost per micro-batch by the number of tables, on a local Spark session, no stack:
`python -m bench.stages_cost` (docs/decisions/join-cascade.md, "Latency"); `--stages` adds the median of
each Spark stage of a batch (wall, run, CPU, deserialisation, shuffle write) from the session's UI.

The three-table file of the bench (bench/tables_path.py: a profile, a plan chained through it, a page looked
up by an event field) and the same file without its further tables go through pipeline/stages.py
join_tables and stages.outputs into a noop sink, from file streams that hold one events file and one CDC
file per batch (the tables' rows first, then a few profile updates and one CDC progress row a batch). Both
run in turns in one process, so the machine's other load falls on both alike; each reports its batches'
median and p90 length, the JVM's CPU per batch and each stateful operator's update time. CPU per batch is
the figure to compare on a shared machine: wall times stretch with the load of others.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from bench import tables_path
from bench.cpu import process_cpu_s
from bench.procmem import descendants
from common import pipeline_file as pf
from pipeline import cdc_fold, records, stages
from pipeline.join_config import JoinConfig
from pipeline.spark import session as job_session

ONLY_CDC = JoinConfig(max_wait_ms=10**13, version_retention_ms=10**9)  # only CDC progress releases events
BATCH_MS = 500  # the event time a batch's events span: the job's trigger interval
WARM_UP = 8  # batches left out of the figures (the tables' load, the JIT)


def pipelines() -> dict[str, pf.Pipeline]:
    """The bench's three-table file, and the same file with its profile table only."""
    spec = tables_path.spec()
    one = {k: v for k, v in spec.items() if k != "tables"}
    return {
        "one table": pf.parse(yaml.safe_dump(one, sort_keys=False), "one-table.yaml"),
        "three tables": pf.parse(yaml.safe_dump(spec, sort_keys=False), "three-tables.yaml"),
    }


def write(path: Path, rows: list[dict[str, Any]]) -> None:
    hidden = path.with_name(f".{path.name}")
    hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
    hidden.rename(path)


class Input:
    """The batches' files: events with a user and a page each, the tables' rows, updates, progress."""

    def __init__(self, root: Path, users: int, events: int, batches: int, seed: int = 7) -> None:
        self.root, self.users, self.events, self.batches = root, users, events, batches
        self.rng = random.Random(seed)
        self.start_ms = int(time.time() * 1000) - 3_600_000

    def tables(self, ms: int) -> list[dict[str, Any]]:
        plans, pages = max(self.users // 10, 1), max(self.users // 100, 1)
        rows = [
            self.change(
                tables_path.PROFILE_TABLE, u, ms, t0_regionid="r1", t0_plan_id=self.rng.randint(1, plans)
            )
            for u in range(1, self.users + 1)
        ]
        rows += [
            self.change(tables_path.PLANS_TABLE, p, ms, t1_tier="pro", t1_seats=5)
            for p in range(1, plans + 1)
        ]
        rows += [
            self.change(tables_path.PAGES_TABLE, p, ms, t2_section="news", t2_title="a title")
            for p in range(1, pages + 1)
        ]
        return rows

    def change(self, table: str, key: int, ms: int, **columns: Any) -> dict[str, Any]:
        return {
            "kind": "change",
            "table": table,
            "key": str(key),
            "op": "c",
            "valid_from_ms": ms,
            "lsn": ms,
            "progress_ms": ms - 1,
            **columns,
        }

    def write_all(self, event_fields: list[str]) -> None:
        (self.root / "events").mkdir(parents=True)
        (self.root / "cdc").mkdir(parents=True)
        pages = max(self.users // 100, 1)
        time_ms, count = event_fields[-2:]
        for b in range(self.batches):
            at = self.start_ms + b * BATCH_MS
            cdc = self.tables(at - 1) if b == 0 else []
            cdc += [
                self.change(
                    tables_path.PROFILE_TABLE, self.rng.randint(1, self.users), at + i, t0_regionid="r2"
                )
                for i in range(3)
            ]
            # Progress half-way through the batch's events: half are released now, half in the next batch.
            cdc.append({"kind": "progress", "progress_ms": at + BATCH_MS // 2})
            events = [
                {
                    "event_id": f"e{b}-{i}",
                    "userid": str(self.rng.randint(1, self.users)),
                    "url": "/a",
                    "page_id": self.rng.randint(1, pages),
                    time_ms: at + self.rng.randrange(BATCH_MS),
                    count: None,
                }
                for i in range(self.events)
            ]
            write(self.root / "events" / f"{b:05d}.json", events)
            write(self.root / "cdc" / f"{b:05d}.json", cdc)


def jvm_cpu_ns() -> int:
    """The CPU time of this process's JVM (the java below it: the Spark driver, tasks included)."""
    for pid, comm in descendants(os.getpid()).items():
        if comm == "java" and (cpu_s := process_cpu_s(pid)) is not None:
            return int(cpu_s * 1e9)
    raise RuntimeError("no java child")


def _batch_id(query: Any) -> int:
    """The newest finished batch's id; -1 before the first."""
    return int((query.lastProgress or {}).get("batchId", -1))


def measure(
    spark: SparkSession, pipeline: pf.Pipeline, root: Path, users: int, events: int, batches: int
) -> dict:
    """One variant's batches: their length, the JVM's CPU per batch, each operator's update time."""
    data = Input(root, users, events, batches)
    data.write_all(records.click(pipeline).fieldNames())
    read = spark.readStream.format("json").option("maxFilesPerTrigger", 1)
    clicks = read.schema(records.click(pipeline)).load(str(root / "events"))
    fold = cdc_fold.tables_fold_type(cdc_fold.tables_spec(pipeline))
    text = StructType(
        [*fold.fields, StructField("event_id", StringType()), StructField("payload", StringType())]
    )
    cdc = read.schema(text).load(str(root / "cdc")).withColumn("payload", F.col("payload").cast("binary"))
    joined = stages.outputs(stages.join_tables(clicks, cdc, ONLY_CDC, pipeline), pipeline)
    query = (
        joined.writeStream.format("noop")
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        while _batch_id(query) < WARM_UP - 1:
            time.sleep(0.05)
        cpu_ns, first = jvm_cpu_ns(), _batch_id(query)
        while _batch_id(query) < batches - 1:
            time.sleep(0.05)
        cpu_ns, last = jvm_cpu_ns() - cpu_ns, _batch_id(query)
        progress = [p for p in query.recentProgress if first < p["batchId"] <= last and p["numInputRows"]]
    finally:
        query.stop()
    took = sorted(p["durationMs"]["triggerExecution"] for p in progress)
    operators = zip(*(p["stateOperators"] for p in progress), strict=True)
    return {
        "batches": len(progress),
        "batch_ms_p50": statistics.median(took),
        "batch_ms_p90": took[int(len(took) * 0.9)],
        "cpu_ms_per_batch": round(cpu_ns / 1e6 / (last - first), 1),
        "operator_update_ms_p50": [statistics.median(o["allUpdatesTimeMs"] for o in op) for op in operators],
        "phase_ms_p50": {
            phase: statistics.median(p["durationMs"].get(phase, 0) for p in progress)
            for phase in ("queryPlanning", "addBatch", "latestOffset", "walCommit", "commitOffsets")
        },
    }


def spark_stages(spark: SparkSession, jobs: int) -> list[dict[str, float]]:
    """The last jobs' (batches') Spark stages in their order, each figure a median over those jobs: tasks,
    wall ms from submission to completion, the tasks' run, CPU and deserialisation ms, shuffle write ms.
    Read from the UI's REST API (the session must have its UI)."""
    url = f"{spark.sparkContext.uiWebUrl}/api/v1/applications/{spark.sparkContext.applicationId}"

    def get(path: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{url}/{path}") as r:  # noqa: S310 - the session's own UI
            return json.load(r)

    def ms(at: str) -> float:
        return datetime.strptime(at, "%Y-%m-%dT%H:%M:%S.%f%Z").timestamp() * 1000

    stages = {s["stageId"]: s for s in get("stages?status=complete")}
    by_position: dict[int, list[dict[str, float]]] = {}
    for job in sorted(get("jobs?status=succeeded"), key=lambda j: j["jobId"])[-jobs:]:
        for position, sid in enumerate(sorted(i for i in job["stageIds"] if i in stages)):
            s = stages[sid]
            by_position.setdefault(position, []).append(
                {
                    "tasks": s["numTasks"],
                    "wall_ms": ms(s["completionTime"]) - ms(s["submissionTime"]),
                    "run_ms": s["executorRunTime"],
                    "cpu_ms": s["executorCpuTime"] / 1e6,
                    "deserialize_ms": s["executorDeserializeTime"],
                    "shuffle_write_ms": s["shuffleWriteTime"] / 1e6,
                }
            )
    return [
        {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}
        for _, rows in sorted(by_position.items())
    ]


def main(
    users: int = typer.Option(10_000, help="profile rows (plans a tenth, pages a hundredth)"),
    events: int = typer.Option(2_500, help="events a batch (5,000/s at the job's 500 ms trigger)"),
    batches: int = typer.Option(40, help="batches a run, the first few left out"),
    rounds: int = typer.Option(2, help="runs of each variant, in turns"),
    partitions: str = typer.Option("4", help="state partitions to try, comma list (the job's: 4 here)"),
    variants: str = typer.Option("one table,three tables", help="which files, comma list"),
    conf: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for the Spark session, to try one")
    ] = None,
    stages_of_batch: bool = typer.Option(
        False, "--stages", help="also each Spark stage of a batch (the UI's API)"
    ),
) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    settings = dict(c.split("=", 1) for c in conf or [])
    ui = {"spark.ui.enabled": "true"} if stages_of_batch else {"spark.ui.enabled": "false"}
    spark = job_session("streamfold-stages-cost", {**ui, **settings})
    spark.sparkContext.setLogLevel("ERROR")
    chosen = {name: p for name, p in pipelines().items() if name in variants.split(",")}
    with tempfile.TemporaryDirectory(prefix="stages-cost-") as tmp:
        for r in range(rounds):
            for n in partitions.split(","):
                spark.conf.set("spark.sql.shuffle.partitions", n)  # a new checkpoint takes it
                for name, pipeline in chosen.items():
                    root = Path(tmp) / f"{r}-{n}-{name.replace(' ', '-')}"
                    result = measure(spark, pipeline, root, users, events, batches)
                    print(f"{name}, {n} partitions: {json.dumps(result)}", flush=True)
                    if stages_of_batch:
                        for position, stage in enumerate(spark_stages(spark, jobs=20)):
                            print(f"  Spark stage {position}: {json.dumps(stage)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    typer.run(main)
