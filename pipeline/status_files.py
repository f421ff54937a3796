"""What a running job tells `streamfold status` (streamfold/status.py), as small JSON files it rewrites.

$STREAMFOLD_HOME/status/
  job.json         pid, source, start time, Spark UI URL (Prometheus metrics under it)
  <query>.json     the query's last StreamingQueryProgress (batch duration, rows/s, state rows, ...),
                   written by the JVM listener io.streamfold.status.ProgressListener
  join.json        clicks waiting in the join's committed state, read every WAITING_EVERY_S

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
# Reading the join state is a small Spark job over a few RocksDB instances: cheap, but not every second.
WAITING_EVERY_S = 30.0


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


def write_job(home: Path, source: str, spark: SparkSession) -> None:
    ui = spark.sparkContext.uiWebUrl
    write_json(
        status_dir(home) / JOB_FILE,
        {"pid": os.getpid(), "source": source, "started_ms": now_ms(), "spark_ui": ui},
    )


class WaitingClicks:
    """Counts the clicks waiting in the join's last committed state, at most every WAITING_EVERY_S."""

    def __init__(self, home: Path, checkpoint: Path, echo: Callable[[str], None]) -> None:
        self.path = status_dir(home) / WAITING_FILE
        self.checkpoint = checkpoint
        self.echo = echo
        self.last_s = 0.0
        self.failing = False

    def refresh(self, spark: SparkSession) -> None:
        if time.monotonic() - self.last_s < WAITING_EVERY_S:
            return
        self.last_s = time.monotonic()
        try:
            pending = pending_clicks(spark, str(self.checkpoint))
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
