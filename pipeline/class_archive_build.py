"""Builds the driver's class-data archive (pipeline/class_archive.py): `make setup` runs
`python -m pipeline.class_archive_build [TARGET]` (default: the jars folder's streamfold.jsa)."""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from pipeline import spark as spark_session
from pipeline.class_archive import ARCHIVE, QUIET
from pipeline.sources import CAPPED_KAFKA

JVM_EXIT_S = 120


def build(target: Path) -> None:
    """Start a local session whose JVM writes the classes it loaded to `target` when it exits, load the
    job's classes, and wait for the JVM to exit (the archive is complete then)."""
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    options = spark_session.DEFAULTS["spark.driver.extraJavaOptions"]
    conf = {"spark.driver.extraJavaOptions": f"{options} -XX:ArchiveClassesAtExit={partial} {QUIET}"}
    spark = spark_session.session("streamfold-class-archive", conf)
    gateway = SparkContext._gateway
    load_job_classes(spark)
    spark.stop()
    # The JVM exits when its standard input closes, and dumps the archive on the way out.
    assert gateway is not None and gateway.proc is not None
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=JVM_EXIT_S)
    if not partial.exists():
        raise RuntimeError(f"the JVM wrote no class-data archive at {partial}")
    partial.replace(target)


def load_job_classes(spark: SparkSession) -> None:
    """What a job's start loads, without any service: SQL planning and code generation, a Python UDF over
    Arrow, a streaming query and its checkpoint, the (capped) Kafka source's planning, the join operator."""
    frame = spark.range(10_000).selectExpr("id % 7 AS k", "CAST(id AS STRING) AS v")
    frame.groupBy("k").count().collect()
    frame.mapInArrow(lambda batches: batches, frame.schema).count()
    spark.readStream.format("rate").load().writeStream.format("noop").trigger(
        availableNow=True
    ).start().awaitTermination()
    kafka = spark.readStream.format(CAPPED_KAFKA).option("kafka.bootstrap.servers", "127.0.0.1:9")
    _ = kafka.option("subscribe", "none").load().selectExpr("CAST(value AS STRING)").schema
    spark.sparkContext._jvm.java.lang.Class.forName("io.streamfold.join.TemporalJoin")  # type: ignore[union-attr]


def main() -> int:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else spark_session.jars_dir() / ARCHIVE
    build(target)
    print(f"class-data archive: {target} ({target.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
