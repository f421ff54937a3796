"""`python -m bench.spark_noop BOOTSTRAP OFFSETS`: Spark's ceiling on this machine, as a ladder.

With streamfold's own Spark session settings (pipeline.spark), the same offset range of the clicks topic
is read three times into Spark's `noop` sink:
  read       the Kafka connector alone (the first pass also warms the JVM and is not reported)
  parse      + the click parser (pipeline.events.parse, one Java UDF)
Each step is timed around its action, so JVM start-up is excluded, like the job's first-read timing.
"""

from __future__ import annotations

import json
import sys
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from bench.measured import emit, parse_offsets
from bench.stack import Offsets
from common import config, names, plan
from common import pipeline_file as pf
from pipeline import events
from pipeline import spark as spark_session


def read(spark: SparkSession, bootstrap: str, offsets: Offsets) -> DataFrame:
    ranges = {names.CLICKS_TOPIC: {str(p): r[0] for p, r in offsets.items()}}
    ends = {names.CLICKS_TOPIC: {str(p): r[1] for p, r in offsets.items()}}
    return (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**config.spark_kafka_options())
        .option("subscribe", names.CLICKS_TOPIC)
        .option("startingOffsets", json.dumps(ranges))
        .option("endingOffsets", json.dumps(ends))
        .load()
    )


def parsed(raw: DataFrame) -> DataFrame:
    """The same columns the job's Kafka source hands to the parser."""
    return raw.select(
        F.concat_ws(":", F.lit("kafka"), "topic", "partition", "offset").alias("event_id"),
        F.lit(f"kafka:{names.CLICKS_TOPIC}").alias("source"),
        F.col("value").alias("payload"),
        F.unix_millis(F.current_timestamp()).alias("now_ms"),
    ).transform(lambda frame: events.parse(frame, plan.of(pf.load()).event_spec))


def timed_noop(frame: DataFrame, records: int) -> dict[str, float]:
    start = time.monotonic()
    frame.write.format("noop").mode("overwrite").save()
    seconds = time.monotonic() - start
    return {"clicks": records, "seconds": round(seconds, 2), "clicks_per_s": round(records / seconds)}


def main(bootstrap: str, offsets: Offsets) -> dict[str, dict[str, float]]:
    spark = spark_session.session("bench-spark-noop")
    records = sum(end - start for start, end in offsets.values())
    raw = read(spark, bootstrap, offsets)
    timed_noop(raw, records)  # warm-up
    result = {"read": timed_noop(raw, records), "parse": timed_noop(parsed(raw), records)}
    spark.stop()
    return result


if __name__ == "__main__":
    emit(main(sys.argv[1], parse_offsets(sys.argv[2])))
