"""Stopping between writes, on a real local Spark: a stop waits for the batch being written, and a batch that
reaches its sink during the stop writes nothing, ends the query cleanly and is redone at the next start."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline.job import BatchGate, StopRefused

Sink = Callable[[DataFrame, int], None]


def start(spark: SparkSession, name: str, checkpoint: Path, sink: Sink) -> StreamingQuery:
    return (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 50)
        .load()
        .writeStream.queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(sink)
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_stop_finishes_the_write_in_flight_and_refuses_the_next_cleanly(
    spark: SparkSession, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = BatchGate()
    writing, release = threading.Event(), threading.Event()
    written: list[int] = []
    fast_batches: list[int] = []

    def slow(batch: DataFrame, batch_id: int) -> None:
        writing.set()
        release.wait(60)
        batch.count()  # JVM work after the stop began: an interrupt here would fail the batch
        written.append(batch_id)

    def fast(batch: DataFrame, batch_id: int) -> None:
        fast_batches.append(batch_id)
        batch.count()

    queries = [
        start(spark, "slow", tmp_path / "slow", gate.guard(slow)),
        start(spark, "fast", tmp_path / "fast", gate.guard(fast)),
    ]
    writing.wait(60)
    stopper = threading.Thread(target=gate.stop, args=(queries, print))
    stopper.start()
    wait_for(lambda: gate.held > 0, "the fast query's next batch to reach the closed gate")
    assert stopper.is_alive() and all(q.isActive for q in queries)  # the stop waits for the slow write
    release.set()
    stopper.join(120)

    assert not stopper.is_alive()
    assert [q.isActive for q in queries] == [False, False]
    assert [q.exception() for q in queries] == [None, None]  # stopped, not failed
    assert written  # the write in flight finished
    refused = max(fast_batches, default=-1) + 1
    assert not [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], StopRefused)]

    redone: list[int] = []
    again = start(spark, "fast", tmp_path / "fast", lambda batch, batch_id: redone.append(batch_id))
    try:
        wait_for(lambda: bool(redone), "the refused batch to run again")
    finally:
        again.stop()
    assert redone[0] == refused


def test_py4j_logs_real_errors_but_not_refusals() -> None:
    logger = logging.getLogger("py4j.clientserver")
    BatchGate()  # installs the filter
    for error, shown in ((StopRefused("stopping"), False), (ValueError("a real failure"), True)):
        record = logger.makeRecord(
            logger.name, logging.ERROR, __file__, 1, "boom", (), (type(error), error, None)
        )
        assert logger.filter(record) is shown
