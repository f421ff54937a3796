"""streamfold under measurement: the continuous job in a subprocess, its progress log, its commits.

Throughput is measured from the job's own records, not from the outside:
  start = the trigger time of the first micro-batch that read clicks (StreamingQueryProgress.timestamp)
  end   = the end of the later of two micro-batches (its progress timestamp + durationMs.triggerExecution,
          which includes the Kafka outputs written after the Postgres commit):
          - the one whose Postgres commit brought the committed click rows to the target
            (streamfold.sink_batches says which batch that is), and
          - the first one that had read every change event present when the job started (the join
            must fold every user; its CDC source's endOffset says when).
JVM start-up and query planning before the first batch are reported separately (launch_to_first_read_s),
as is the launch -> the first commit that made click rows visible (launch_to_first_output_s).
Every user of the generated clicks exists, so a click enriched with region UNKNOWN was released before
its user's change event was read: unknown_region_clicks counts them.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from bench import measured
from bench.procmem import Sampler, Tree, descendants
from bench.stack import Bench
from common import names, plan
from common import pipeline_file as pf

ROOT = Path(__file__).resolve().parents[1]
# The clicks source's description in a query progress, by `streamfold run --source` (kinesis: our Python
# data source).
CLICKS_SOURCES = {"kafka": f"Subscribe[{names.CLICKS_TOPIC}]", "kinesis": "PythonMicroBatchStream"}
STOP_TIMEOUT_S = 60
ROCKSDB_LATENCIES = ("rocksdbGetLatency", "rocksdbPutLatency")


def parse_ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class JobRun:
    """One `streamfold run --source SOURCE` with its own STREAMFOLD_HOME (fresh checkpoints)."""

    def __init__(
        self,
        bench: Bench,
        name: str,
        conf: dict[str, str] | None = None,
        also: list[Tree] | None = None,
        source: str = "kafka",
        env: dict[str, str] | None = None,
        pipeline: pf.Pipeline | None = None,
        mode: str = pf.MICRO_BATCH,
    ) -> None:
        """`also`: process trees whose memory counts as the job's too (a cluster's workers); `env`: variables
        of this run's own (another pipeline file); `pipeline`: the file the job runs, when it is not the
        default one (its query, CDC topic and enriched table); `mode`: `streamfold run --mode`."""
        self.bench = bench
        self.source = source
        self.mode = mode
        self.pipeline = pipeline or pf.load()
        self.query = f"{self.pipeline.name}-{source}"  # as pipeline/topology.py names it
        self.conf = conf or {}
        self.also = also or []
        self.env = env or {}
        self.home = bench.home / "runs" / name
        self.home.mkdir(parents=True, exist_ok=True)
        self.progress_file = self.home / "progress.jsonl"
        self.log = self.home / "job.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.sampler: Sampler | None = None
        self.launched = 0.0

    def __enter__(self) -> JobRun:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.job_runner",
                    str(self.progress_file),
                    self.source,
                    self.mode,
                    *(f"{k}={v}" for k, v in self.conf.items()),
                ],  # fmt: skip
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**self.bench.job_env(self.home), **self.env},
                cwd=ROOT,
                start_new_session=True,  # the JVM and python workers share its process group
            )
        self.launched = time.time()
        self.sampler = Sampler([Tree(self.proc.pid), *self.also]).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.sampler:
            self.sampler.__exit__()
        self.stop()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def jvm_pid(self) -> int:
        """The job's JVM (the driver python's java child, there once the Spark session started)."""
        return next(pid for pid, comm in descendants(self.pid).items() if comm == "java")

    def stop(self) -> None:
        """SIGINT like Ctrl-C; the whole process group if it does not exit in time."""
        measured.stop(self.proc, signal.SIGINT, STOP_TIMEOUT_S)

    def check_alive(self) -> None:
        measured.check_alive(self.proc, self.log, "the job")

    def wait_first_batch(self, timeout_s: float = 300) -> None:
        """Until the clicks query has planned its first batch (its offset log entry 0 exists)."""
        first = self.home / "checkpoints" / self.query / "offsets" / "0"
        deadline = time.monotonic() + timeout_s
        while not first.exists():
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the job planned no batch within {timeout_s:.0f}s; see {self.log}")
            time.sleep(0.5)

    def progress(self) -> list[dict[str, Any]]:
        if not self.progress_file.exists():
            return []
        events = (json.loads(line) for line in self.progress_file.read_text().splitlines() if line.strip())
        return [e for e in events if e.get("name") == self.query]

    def commits(self) -> list[tuple[int, int, datetime]]:
        """(batch_id, rows, committed_at) of the clicks query's Postgres commits: the batch's rows over
        its partitions, and when its first partition committed (its ledger row's commit timestamp). The
        first, not the last: a click becomes visible when its own partition commits, and the last would
        attribute clicks of an early partition to the batch before (negative segments in the latency
        breakdown)."""
        with psycopg.connect(self.bench.admin_dsn) as conn:
            return conn.execute(
                "SELECT batch_id, sum(rows)::bigint, min(pg_xact_commit_timestamp(xmin)) "
                "FROM streamfold.sink_batches WHERE query LIKE %s GROUP BY batch_id ORDER BY batch_id",
                (f"{self.query}:%",),
            ).fetchall()

    def committed_rows(self) -> int:
        if self.mode == pf.REALTIME:
            return self.rows_landed()
        return sum(rows for _, rows, _ in self.commits())

    def rows_landed(self) -> int:
        """Rows in the enriched table: the real-time mode's sink keeps no batch ledger
        (streamfold.sink_batches), its rows are their own record."""
        with psycopg.connect(self.bench.admin_dsn) as conn:
            row = conn.execute(f"SELECT count(*) FROM {plan.of(self.pipeline).enriched_table}").fetchone()
        return row[0] if row else 0

    def landed_span(self) -> tuple[datetime, datetime]:
        """The commit times of the enriched table's first and last rows."""
        with psycopg.connect(self.bench.admin_dsn) as conn:
            row = conn.execute(
                "SELECT min(pg_xact_commit_timestamp(xmin)), max(pg_xact_commit_timestamp(xmin)) "
                f"FROM {plan.of(self.pipeline).enriched_table}"
            ).fetchone()
        if not row or row[0] is None:
            raise RuntimeError(f"no rows in {plan.of(self.pipeline).enriched_table}")
        return row[0], row[1]

    def wait_committed(
        self, target: int, timeout_s: float, on_progress: Callable[[int], None], poll_s: float = 2.0
    ) -> int:
        """Wait until `target` click rows are committed; returns the batch id that reached it."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            total = 0
            for batch_id, rows, _ in self.commits():
                total += rows
                if total >= target:
                    on_progress(total)
                    return batch_id
            on_progress(total)
            if time.monotonic() > deadline:
                raise TimeoutError(f"{total} of {target} clicks committed after {timeout_s:.0f}s")
            time.sleep(poll_s)

    def wait_landed(
        self, target: int, timeout_s: float, on_progress: Callable[[int], None], poll_s: float = 5.0
    ) -> None:
        """Wait until the enriched table has `target` rows (real-time mode: no batch ledger to read)."""
        deadline = time.monotonic() + timeout_s
        while (landed := self.rows_landed()) < target:
            on_progress(landed)
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"{landed} of {target} clicks landed after {timeout_s:.0f}s")
            time.sleep(poll_s)
        on_progress(landed)

    def wait_cdc_read(self, end_offset: int, timeout_s: float, poll_s: float = 2.0) -> int:
        """Wait until the job has read the CDC topic up to `end_offset`; returns that batch id."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.check_alive()
            for event in self.progress():
                if cdc_read_to(event, plan.of(self.pipeline).cdc_topic) >= end_offset:
                    return event["batchId"]
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the job did not read the CDC topic to offset {end_offset} in {timeout_s:.0f}s"
                )
            time.sleep(poll_s)

    def unknown_region_clicks(self) -> int:
        with psycopg.connect(self.bench.admin_dsn) as conn:
            row = conn.execute(
                f"SELECT count(*) FROM {plan.of(self.pipeline).enriched_table} WHERE user_regionid = %s",
                (names.UNKNOWN_REGION,),
            ).fetchone()
        return row[0] if row else 0

    def landed(self) -> dict[str, int]:
        """Rows in the enriched table, and those of them not complete (joined before CDC progress passed
        their time: released by join.max_wait)."""
        resolved = plan.of(self.pipeline)
        complete = resolved.names.complete
        with psycopg.connect(self.bench.admin_dsn) as conn:
            row = conn.execute(
                f"SELECT count(*), count(*) FILTER (WHERE NOT {complete}) FROM {resolved.enriched_table}"
            ).fetchone()
        rows, incomplete = row or (0, 0)
        return {"rows_landed": rows, "incomplete_rows": incomplete}

    def batch_progress(self, batch_id: int, timeout_s: float = 60) -> dict[str, Any]:
        """The progress event of one batch (the listener writes it just after the batch ends)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for event in self.progress():
                if event["batchId"] == batch_id:
                    return event
            time.sleep(0.5)
        raise TimeoutError(f"no progress event for batch {batch_id} in {self.progress_file}")


def clicks_read(event: dict[str, Any]) -> int:
    """Clicks the batch read, from whichever source the job had (a progress event names its query)."""
    marker = CLICKS_SOURCES[event["name"].rsplit("-", 1)[-1]]  # <pipeline>-<source>
    return sum(s["numInputRows"] for s in event["sources"] if marker in s["description"])


def cdc_read_to(event: dict[str, Any], topic: str = names.CDC_USERS_TOPIC) -> int:
    """The CDC topic offset (one partition) the batch read up to; 0 if it has no CDC source."""
    for source in event["sources"]:
        if f"Subscribe[{topic}" in source["description"]:
            return int((source.get("endOffset") or {}).get(topic, {}).get("0", 0))
    return 0


def catch_up(run: JobRun, cdc_to: int, timeout_s: float) -> dict[str, Any]:
    """A fresh checkpoint's fold of the CDC topic up to `cdc_to` (every user's change event, and the
    heartbeat rows among them): from the first batch's trigger to the end of the batch that completed it."""
    done = run.wait_cdc_read(cdc_to, timeout_s)
    start = parse_ts(run.progress()[0]["timestamp"])
    last = run.batch_progress(done)
    seconds = parse_ts(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000 - start
    return {
        "records": cdc_to,
        "seconds": round(seconds, 2),
        "records_per_s": round(cdc_to / seconds),
        "launch_to_first_batch_s": round(start - run.launched, 1),
    }


def throughput(run: JobRun, clicks: int, clicks_batch: int, cdc_batch: int) -> dict[str, Any]:
    """Clicks per second from the first click read to the end of the batch that completed the work."""
    events = run.progress()
    first = next(e for e in events if clicks_read(e) > 0)
    last_batch = max(clicks_batch, cdc_batch)
    last = run.batch_progress(last_batch)
    start = parse_ts(first["timestamp"])
    end = parse_ts(last["timestamp"]) + last["durationMs"]["triggerExecution"] / 1000
    batches = [e for e in run.progress() if first["batchId"] <= e["batchId"] <= last_batch]
    landed = run.commits()
    commits = {batch_id: committed_at for batch_id, _, committed_at in landed}
    first_output = min(committed_at for _, rows, committed_at in landed if rows > 0)
    return {
        "clicks": clicks,
        "seconds": round(end - start, 2),
        "clicks_per_s": round(clicks / (end - start)),
        "launch_to_first_read_s": round(start - run.launched, 1),
        "launch_to_first_output_s": round(first_output.timestamp() - run.launched, 1),
        "last_click_commit_started_at": commits[clicks_batch].isoformat(),
        "clicks_committed_batch": clicks_batch,
        "cdc_read_batch": cdc_batch,
        "batches": len(batches),
        "duration_ms_total": duration_totals(batches),
        "batch_table": [batch_summary(e) for e in batches],
        "state": state_metrics(last),
    }


def duration_totals(events: list[dict[str, Any]]) -> dict[str, int]:
    """Spark's per-phase time (durationMs) summed over the batches: where the trigger time went."""
    totals: Counter[str] = Counter()
    for event in events:
        totals.update(event["durationMs"])
    return dict(totals.most_common())


def batch_summary(event: dict[str, Any]) -> dict[str, Any]:
    ops = event.get("stateOperators") or [{}]
    return {
        "batch": event["batchId"],
        "clicks_read": clicks_read(event),
        "input_rows": event["numInputRows"],
        "ms": event["durationMs"].get("triggerExecution"),
        "add_batch_ms": event["durationMs"].get("addBatch"),
        "state_rows": ops[0].get("numRowsTotal"),
        "state_rows_updated": ops[0].get("numRowsUpdated"),
        # Summed over the operator's tasks (4 shuffle partitions on 2 cores: up to twice the wall time).
        "join_operator_ms": ops[0].get("allUpdatesTimeMs"),
        "rocksdb_get_put_ms": sum(ops[0].get("customMetrics", {}).get(k, 0) for k in ROCKSDB_LATENCIES),
    }


def state_metrics(event: dict[str, Any]) -> dict[str, Any]:
    """The join operator's state after a batch: rows (one per user), memory, RocksDB sizes and timings."""
    ops = event.get("stateOperators") or []
    if not ops:
        return {}
    op = ops[0]
    keep = ("operatorName", "numRowsTotal", "memoryUsedBytes", "allUpdatesTimeMs", "commitTimeMs")
    return {**{k: op.get(k) for k in keep}, "customMetrics": op.get("customMetrics", {})}


def sst_bytes(event: dict[str, Any]) -> int | None:
    """What RocksDB had flushed to SST files after a batch, over every state operator (a file with further
    tables has one stateful stage per table); None without the metric."""
    sizes = [
        op.get("customMetrics", {}).get("rocksdbSstFileSize") for op in event.get("stateOperators") or []
    ]
    return sum(sizes) if sizes and None not in sizes else None


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def state_dir_bytes(run: JobRun) -> int:
    """The clicks query's state under its checkpoint (RocksDB snapshots of every retained version)."""
    return dir_bytes(run.home / "checkpoints" / run.query / "state")


def realtime_throughput(
    run: JobRun, clicks: int, timeout_s: float, on_progress: Callable[[int], None]
) -> dict[str, Any]:
    """Real-time mode: `clicks` rows landed, timed by their own commits. Its batches end on a timer, not
    when the input is done, so the progress events cannot time the work: from start = launch -> the last
    row's commit; steady = the first row's commit -> the last's."""
    run.wait_landed(clicks, timeout_s, on_progress)
    first, last = run.landed_span()
    from_start = last.timestamp() - run.launched
    steady = (last - first).total_seconds()
    return {
        "mode": run.mode,
        "clicks": clicks,
        "seconds": round(steady, 2),
        "clicks_per_s": round(clicks / steady),
        "seconds_from_start": round(from_start, 2),
        "clicks_per_s_from_start": round(clicks / from_start),
        "launch_to_first_output_s": round(first.timestamp() - run.launched, 1),
        "unknown_region_clicks": run.unknown_region_clicks(),
        **run.landed(),
    }
