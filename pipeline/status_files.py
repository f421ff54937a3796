"""What a running job tells `streamfold status` (streamfold/status.py), as small JSON files it rewrites.

$STREAMFOLD_HOME/status/
  job.json         pid, source, mode, start time, Spark UI URL (Prometheus metrics under it)
  <query>.json     the query's last StreamingQueryProgress (batch duration, rows/s, state rows, ...),
                   written by the JVM listener io.streamfold.status.ProgressListener
  join.json        clicks waiting in the join's committed state, counted when `streamfold status` asks
                   (join.request), at most every WAITING_EVERY_S

Offsets are not here: status reads them from the checkpoint (the job's own record of what it processed),
so it works whether or not the job runs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from pipeline.temporal_join import pending_clicks

STATUS_DIR = "status"
JOB_FILE = "job.json"
WAITING_FILE = "join.json"
REQUEST_FILE = "join.request"
# Counting means reading the join's state (Spark's state data source restores every state partition from the
# checkpoint). That takes task slots, and the micro-batch due meanwhile waits for one: counted unasked, those
# stalls made the click latency's tail (docs/decisions/spark-settings.md, "Python out of the per-batch path").
# So the job counts only when asked, in one task (the stream keeps the other slot), and at most every
# WAITING_EVERY_S.
WAITING_EVERY_S = 10.0


def status_dir(home: Path) -> Path:
    return home / STATUS_DIR


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomically (rename), so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(data))
    partial.replace(path)


def now_ms() -> int:
    return int(time.time() * 1000)


def write_job(home: Path, source: str, mode: str, spark: SparkSession) -> None:
    ui = spark.sparkContext.uiWebUrl
    write_json(
        status_dir(home) / JOB_FILE,
        {"pid": os.getpid(), "source": source, "mode": mode, "started_ms": now_ms(), "spark_ui": ui},
    )


def request_count(home: Path) -> int:
    """Asks the running job for a fresh count of the clicks waiting in the join; returns when it asked."""
    requested_ms = now_ms()
    write_json(status_dir(home) / REQUEST_FILE, {"requested_ms": requested_ms})
    return requested_ms


def read_json(path: Path) -> Any:
    """The file's JSON; None if it is missing or not JSON (ValueError: JSONDecodeError, or bytes that are
    not UTF-8)."""
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def requested_ms(request: Any) -> int | None:
    """When `streamfold status` asked for a count (request_count writes {"requested_ms": int}); None for no
    request or a file that is not one: the job's poll loop must never fail on it."""
    value = request.get("requested_ms") if isinstance(request, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class WaitingClicks:
    """Counts the clicks waiting in the join's last committed state when asked (request_count), at most
    every WAITING_EVERY_S."""

    def __init__(
        self, home: Path, checkpoint: Path, echo: Callable[[str], None], realtime: bool = False
    ) -> None:
        self.path = status_dir(home) / WAITING_FILE
        self.realtime = realtime
        self.request = status_dir(home) / REQUEST_FILE
        self.checkpoint = checkpoint
        self.echo = echo
        self.last_s = -WAITING_EVERY_S
        self.answered_ms = 0
        self.failing = False

    def refresh(self, spark: SparkSession) -> None:
        asked = requested_ms(read_json(self.request))
        if asked is None or asked <= self.answered_ms:
            return
        if time.monotonic() - self.last_s < WAITING_EVERY_S:
            return
        self.last_s = time.monotonic()
        self.answered_ms = asked
        try:
            pending = pending_clicks(spark, str(self.checkpoint), tasks=1, realtime=self.realtime)
        except Exception as exc:  # a status figure must never stop the job: say so once, try again later
            if not self.failing:
                self.echo(f"[yellow]cannot count the clicks waiting in the join state:[/] {exc}")
            self.failing = True
            return
        self.failing = False
        write_json(
            self.path,
            {
                "as_of_ms": now_ms(),
                "clicks": pending.clicks,
                "earliest_ms": pending.earliest_ms,
                "latest_ms": pending.latest_ms,
            },
        )
