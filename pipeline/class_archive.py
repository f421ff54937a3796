"""The job driver's class-data archive (AppCDS): the classes a local job loads at start, mapped from one
file instead of read, verified and parsed from Spark's jars at every start.

`make setup` builds it into the jars folder (`python -m pipeline.class_archive`); pipeline/spark.py hands it
to a local master's driver JVM when it is there. The JVM uses it only if the class path and the JDK are
those it was built with, and otherwise starts as without it, silently: an archive never stops a job.
Measurements: docs/decisions/spark-settings.md, "Start-up".
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from pipeline.sources import CAPPED_KAFKA

ARCHIVE = "streamfold.jsa"
# The JVM warns about every class it cannot archive (Spark's jars hold many) and about an archive that
# does not match; neither matters to a job, which then loads those classes as it would without one.
QUIET = "-Xlog:cds*=off"
JVM_EXIT_S = 120


def use(path: Path) -> str:
    """The driver's JVM options that map the archive."""
    return f"-XX:SharedArchiveFile={path} {QUIET}"


def build(target: Path) -> None:
    """Start a local session whose JVM writes the classes it loaded to `target` when it exits, load the
    job's classes, and wait for the JVM to exit (the archive is complete then)."""
    from pipeline import spark as spark_session

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
    from pipeline import spark as spark_session

    target = Path(sys.argv[1]) if len(sys.argv) > 1 else spark_session.jars_dir() / ARCHIVE
    build(target)
    print(f"class-data archive: {target} ({target.stat().st_size // 2**20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
