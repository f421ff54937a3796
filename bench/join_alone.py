"""`python -m bench.join_alone [--clicks N] [--users U] [--files F]`: the join operator alone, no Kafka.

Clicks in F parquet files (one per micro-batch, N/F clicks each, users uniform over U), a snapshot of U
profiles, and CDC progress that passes each file's clicks one file later (as in the pipeline, where the
watermark trails the batch that read a click). The query is pipeline.temporal_join on Spark's file source
into a counting foreachBatch, with the job's own Spark settings. Prints one JSON line: clicks emitted,
seconds from query start, clicks/s, and per-batch timings (steady: every batch after the snapshot's).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from common import pipeline_file as pf
from pipeline import records
from pipeline import spark as spark_session
from pipeline.temporal_join import (
    BEGINNING_OF_TIME_MS,
    JoinConfig,
    temporal_join,
)

# The demo's pipeline: write_inputs writes its columns.
PIPELINE = pf.load(Path(pf.__file__).resolve().parents[1] / pf.DEFAULT_FILE)
T0 = (
    2_000_000_000_000  # event times far ahead of the wall clock: only the files' progress moves the watermark
)


def session() -> SparkSession:
    spark = spark_session.session("bench-join-alone", {"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_inputs(spark: SparkSession, root: Path, clicks: int, users: int, files: int) -> None:
    per_file = clicks // files
    for f in range(files):
        ids = spark.range(f * per_file, (f + 1) * per_file, 1, 1)
        ids.select(
            F.concat(F.lit("e"), F.col("id").cast("string")).alias("event_id"),
            F.format_string("User_%d", F.pmod(F.xxhash64("id"), F.lit(users))).alias("userid"),
            (F.lit(T0) + F.col("id")).alias("click_time_ms"),
            F.concat(F.lit("/p/"), (F.col("id") % 1000).cast("string")).alias("url"),
            F.lit("ios").alias("device_id"),
            F.lit("10.0.0.1").alias("ip"),
            F.lit(1).alias("clicks"),
        ).write.parquet(str(root / "clicks" / f"{f:04d}"))
        progress = spark.createDataFrame([(T0 + (f + 1) * per_file - 1,)], "progress_ms long")
        progress.write.parquet(str(root / "progress" / f"{f:04d}"))
    spark.range(users).select(
        F.format_string("User_%d", "id").alias("userid"),
        F.lit("r").alias("op"),
        F.lit(BEGINNING_OF_TIME_MS).alias("valid_from_ms"),
        F.col("id").alias("lsn"),
        F.lit("asia").alias("regionid"),
        F.lit("F").alias("gender"),
        F.array(F.lit("golf")).alias("interests"),
        F.lit(7).cast("long").alias("registertime"),
    ).write.parquet(str(root / "changes" / "0000"))


def stream(spark: SparkSession, root: Path, schema: Any, name: str) -> DataFrame:
    reader = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
    return reader.option("recursiveFileLookup", "true").parquet(str(root / name))


def main(
    clicks: Annotated[int, typer.Option(help="clicks in all")] = 2_000_000,
    users: Annotated[int, typer.Option(help="users the clicks are spread over")] = 100_000,
    files: Annotated[int, typer.Option(help="files = micro-batches")] = 20,
) -> None:
    spark = session()
    root = Path(tempfile.mkdtemp(prefix="join-alone-"))
    try:
        write_inputs(spark, root, clicks, users, files)
        joined = temporal_join(
            stream(spark, root, records.click(PIPELINE), "clicks"),
            stream(spark, root, records.change(PIPELINE), "changes")
            .withColumn("kind", F.lit("change"))
            .unionByName(
                stream(spark, root, "progress_ms long", "progress").withColumn("kind", F.lit("progress")),
                allowMissingColumns=True,
            ),
            JoinConfig(),
            PIPELINE,
        )
        emitted = [0]

        def count(batch: DataFrame, _batch_id: int) -> None:
            emitted[0] += batch.where("kind = 'event'").count()  # changes pass through too

        target = clicks - clicks // files  # the last file's clicks wait for progress that never comes
        started = time.monotonic()
        query = (
            joined.writeStream.foreachBatch(count)
            .option("checkpointLocation", str(root / "checkpoint"))
            .trigger(processingTime="0 seconds")
            .start()
        )
        while emitted[0] < target and time.monotonic() - started < 1800:
            time.sleep(0.2)
        seconds = time.monotonic() - started
        query.stop()
        batches = [
            {"batch": p.batchId, "rows": p.numInputRows, "ms": p.durationMs.get("triggerExecution")}
            for p in query.recentProgress
        ]
        steady = batches[1:]  # after the batch that loads the snapshot
        steady_ms = sum(b["ms"] for b in steady)
        print(
            json.dumps(
                {
                    "clicks": emitted[0],
                    "users": users,
                    "seconds": round(seconds, 1),
                    "clicks_per_s": round(emitted[0] / seconds),
                    "steady_clicks_per_s": round(sum(b["rows"] for b in steady) / steady_ms * 1000)
                    if steady_ms
                    else None,
                    "batches": batches,
                }
            )
        )
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    typer.run(main)
