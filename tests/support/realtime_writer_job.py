"""A small query in Spark's real-time mode ending in the real-time sink (io.streamfold.sink.RealtimeWriter),
for tests/e2e/test_realtime_writer.py, run as its own process so that the test can kill -9 it.

    python -m tests.support.realtime_writer_job TOPIC CHECKPOINT

It reads TOPIC with the project's real-time Kafka source (`streamfold-kafka`), turns each record (a JSON
object: kind "event" with uid, url, region, clicks and time_ms; kind "change", a profile version, with uid,
region, op, lsn and valid_from_ms; or kind "reject" with error) into a row of
the join's output shape (pipeline.records.join_output) by Spark SQL expressions only (no Python in the
plan), and lands the rows as the default pipeline's sink spec lays them out, in STREAMFOLD_PG_DSN. The join
is not under test: an event row carries its region as given.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from common import config, plan
from common import pipeline_file as pf
from pipeline import records
from pipeline import spark as spark_session
from pipeline.retry import retry_budget_s
from pipeline.sink_spec import sink_spec
from pipeline.sinks import KAFKA_ATTEMPT_MS, KAFKA_MAX_REQUEST_BYTES, JdbcTarget

QUERY = "realtime-writer-test"
# How often the query commits its offsets (a batch of real-time mode), not how often rows move.
BATCH = "5 seconds"
# One task slot per partition of the input (connectors/setup.py CLICK_PARTITIONS), and one to spare.
MASTER = "local[4]"

INPUT = StructType(
    [
        StructField("kind", StringType()),
        StructField("uid", StringType()),
        StructField("url", StringType()),
        StructField("region", StringType()),
        StructField("clicks", IntegerType()),
        StructField("time_ms", LongType()),
        StructField("error", StringType()),
        StructField("op", StringType()),
        StructField("lsn", LongType()),
        StructField("valid_from_ms", LongType()),
    ]
)


def source_options(topic: str, bootstrap: str) -> dict[str, str]:
    options = {"topic": topic, "startingOffsets": "earliest", "kafka.bootstrap.servers": bootstrap}
    login = config.kafka_login()
    if login:
        options["kafka.security.protocol"] = "SASL_PLAINTEXT"
        options["kafka.sasl.mechanism"] = "SCRAM-SHA-512"
        options["kafka.sasl.jaas.config"] = config.scram_jaas(login)
    return options


def join_output_rows(records_df: DataFrame, output: StructType) -> DataFrame:
    """The source's records as rows of the join's output: the columns the input gives, null elsewhere."""
    r = F.col("r")
    event_id = F.concat_ws(":", F.lit("kafka"), F.col("topic"), F.col("partition"), F.col("offset"))
    given: dict[str, Column] = {
        "kind": r["kind"],
        "event_id": event_id,
        "uid": r["uid"],
        "click_time_ms": r["time_ms"],
        "click_url": r["url"],
        "device_type": F.lit("mobile"),
        "clicks": r["clicks"],
        "user_regionid": r["region"],
        "profile_valid_from_ms": F.coalesce(r["valid_from_ms"], F.lit(-1)),
        "profile_complete": F.lit(True),
        "error": r["error"],
        "source": F.concat(F.lit("kafka:"), F.col("topic")),
        "payload": F.col("value"),
        "change_op": r["op"],
        "change_lsn": r["lsn"],
        "cdc_progress_ms": r["time_ms"],
        "released_by_max_wait": F.lit(False),
    }
    parsed = records_df.select(
        F.from_json(F.col("value").cast("string"), INPUT).alias("r"), "topic", "partition", "offset", "value"
    )
    return parsed.select(
        *(given.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in output.fields)
    )


def writer(spark: SparkSession, spec: dict[str, Any], settings: config.Settings) -> Any:
    """The JVM writer (RealtimeWriter.of takes Landing.land's arguments without ledger and batch id)."""
    jvm: Any = spark._jvm
    pg = JdbcTarget.of(settings.pg_dsn)
    login = config.kafka_login()
    return jvm.io.streamfold.sink.RealtimeWriter.of(
        json.dumps(spec),
        pg.url,
        pg.user,
        pg.password,
        settings.kafka_bootstrap,
        config.scram_jaas(login) if login else "",
        KAFKA_MAX_REQUEST_BYTES,
        KAFKA_ATTEMPT_MS,
        int(retry_budget_s() * 1000),
    )


def main(topic: str, checkpoint: str) -> None:
    settings = config.load()
    spark = spark_session.session(
        QUERY,
        {"spark.master": MASTER, "spark.sql.streaming.stateStore.checkpointFormatVersion": "2"},
    )
    pipeline = pf.load()
    output = records.join_output(pipeline)
    spec = sink_spec(plan.of(pipeline), output)
    source = (
        spark.readStream.format("streamfold-kafka")
        .options(**source_options(topic, settings.kafka_bootstrap))
        .load()
    )
    rows = join_output_rows(source, output)
    jvm: Any = spark._jvm
    query = (
        rows._jdf.writeStream()
        .queryName(QUERY)
        .foreach(writer(spark, spec, settings))
        .outputMode("update")
        .trigger(jvm.org.apache.spark.sql.streaming.Trigger.RealTime(BATCH))
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.awaitTermination()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
