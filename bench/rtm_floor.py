"""Spark real-time mode's latency on this machine, for the job's steps and for Spark's own operators.

Not part of `make bench`: it needs pyspark 4.3.0, which the job does not run on, so it runs in a venv of
its own beside a running local stack (`streamfold stack up`; `streamfold setup` and `streamfold generate
profiles --count 100000` for the join modes), with this checkout on the path:

    python3 -m venv /tmp/rtm && /tmp/rtm/bin/pip install pyspark==4.3.0 confluent-kafka \
        'psycopg[binary]' pyyaml pydantic sqlalchemy alembic boto3 requests typer rich
    source "$STREAMFOLD_HOME/stack.env"
    PYTHONPATH=. /tmp/rtm/bin/python -m bench.rtm_floor MODE RATE SECONDS

MODE: `parse` (Kafka -> JSON parse -> Kafka), `shuffle` (with a hash repartition by user: the pipelined
shuffle), `agg` (a count per user: the shuffle and the state store), `join-latest` (the job's own event
parser, CDC fold and join operator, pipeline/topology.enrich, with join.mode=latest). Every query runs
under `trigger(realTime="5 minutes")` and writes to the topic rtm_out. Maven Central serves the Kafka
connector up to 4.2.0 here, so that one is used (spark.jars.packages). `streamfold generate events`
sends RATE clicks a second over 100,000 users for SECONDS into the topic rtm_in; a consumer of rtm_out
takes each record's receive time minus its click's time (the Kafka timestamp of the input record, or the
click's own time for join-latest), after a warm-up, and counts clicks joined as UNKNOWN (join-latest).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import LongType, StringType, StructField, StructType

from bench.latency import percentile
from common import config, plan

ROOT = Path(__file__).resolve().parents[1]
CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
IN, OUT, PARTITIONS = "rtm_in", "rtm_out", 3
WARMUP_S = 10.0
USERS = 100_000
MODES = ("parse", "shuffle", "agg", "join-latest")


def fresh_topics(admin: AdminClient) -> None:
    for future in admin.delete_topics([IN, OUT]).values():
        with contextlib.suppress(KafkaException):  # the topic did not exist
            future.result()
    time.sleep(2)
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (IN, OUT)]).values():
        future.result()


def kafka_reader(spark: SparkSession, topic: str, start: str) -> DataFrame:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", config.load().kafka_bootstrap)
        .options(**config.spark_kafka_options())
        .option("subscribe", topic)
        .option("startingOffsets", start)
        .load()
    )


def operators(spark: SparkSession, mode: str) -> DataFrame:
    """userid, in_ms (the click's Kafka timestamp), region (null) through Spark's own operators."""
    click = StructType([StructField("userid", StringType()), StructField("event_time", LongType())])
    parsed = kafka_reader(spark, IN, "latest").select(
        F.from_json(F.col("value").cast("string"), click).userid.alias("userid"),
        F.unix_millis("timestamp").alias("in_ms"),
    )
    if mode == "shuffle":
        parsed = parsed.repartition(4, "userid")
    if mode == "agg":
        parsed = parsed.groupBy("userid").agg(F.max("in_ms").alias("in_ms"))
    return parsed.withColumn("region", F.lit(None).cast("string"))


def joined(spark: SparkSession) -> DataFrame:
    """userid, in_ms (the click's time), region through the job's own steps 2 and 3, on the CDC topic
    alone (its heartbeat-table rows are in commit order with the changes)."""
    from pipeline import sources, topology
    from pipeline.join_config import LATEST, JoinConfig

    pipeline = config.load().pipeline
    resolved = plan.of(pipeline)
    clicks = sources.from_kafka_clicks(kafka_reader(spark, IN, "latest"), IN)
    cdc = sources.from_kafka_cdc(kafka_reader(spark, resolved.cdc_topic, "earliest"))
    out = topology.enrich(clicks, cdc, JoinConfig(mode=LATEST), pipeline)
    named, profile = resolved.names, resolved.joins[0]
    return out.where(F.col("kind") == "event").select(
        F.col(named.key).alias("userid"),
        F.col(named.time_ms).alias("in_ms"),
        F.col(profile.output(next(iter(profile.table.columns)))).alias(
            "region"
        ),  # the default pipeline's first column: regionid
    )


def start(spark: SparkSession, mode: str) -> StreamingQuery:
    frame = joined(spark) if mode == "join-latest" else operators(spark, mode)
    return (
        frame.select(F.col("userid").alias("key"), F.to_json(F.struct("in_ms", "region")).alias("value"))
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", config.load().kafka_bootstrap)
        .options(**config.spark_kafka_options())
        .option("kafka.linger.ms", "0")
        .option("topic", OUT)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="rtm-floor-"))
        .outputMode("update")
        .trigger(realTime="5 minutes")
        .start()
    )


def watch(stop: threading.Event, after_s: float, latencies: list[float], unknown: list[bytes]) -> None:
    consumer = Consumer(
        {
            **config.kafka_client_settings(config.load().kafka_bootstrap),
            "group.id": "rtm-floor",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 5,
        }
    )
    consumer.assign([TopicPartition(OUT, p, -1) for p in range(PARTITIONS)])  # -1: the end
    while not stop.is_set():
        for message in consumer.consume(1000, 0.1):
            now = time.time()
            if message.error() or now < after_s:
                continue
            record = json.loads(message.value())
            latencies.append(now - record["in_ms"] / 1000)
            if record.get("region") == "UNKNOWN":  # to_json leaves a null region out
                unknown.append(message.key())
    consumer.close()


def main(mode: str, rate: float, seconds: float) -> None:
    if mode not in MODES:
        raise SystemExit(f"MODE is one of {', '.join(MODES)}")
    fresh_topics(AdminClient(config.kafka_client_settings(config.load().kafka_bootstrap)))
    spark = (
        SparkSession.builder.master("local[10]")  # real-time mode runs every stage's tasks at once
        .config("spark.jars.packages", CONNECTOR)
        .config("spark.jars", str(ROOT / "lib" / "spark" / "streamfold-join.jar"))
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        .config("spark.driver.memory", "1792m")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = start(spark, mode)
    time.sleep(8)  # the long-running tasks start (and join-latest reads the CDC topic)
    latencies: list[float] = []
    unknown: list[bytes] = []
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop, time.time() + WARMUP_S, latencies, unknown))
    watcher.start()
    generate = [str(ROOT / ".venv" / "bin" / "streamfold"), "generate", "events", "--rate", str(rate)]
    generate += ["--count", str(int(rate * seconds)), "--users", str(USERS)]
    subprocess.run(generate, env={**os.environ, "STREAMFOLD_CLICKS_TOPIC": IN}, cwd=ROOT, check=True)
    time.sleep(3)
    stop.set()
    watcher.join()
    failed = query.exception()
    query.stop()
    if failed is not None or not latencies:
        raise SystemExit(f"{mode}: no output ({failed})")
    p50, p95, p99 = (percentile(latencies, pct) for pct in (50, 95, 99))
    print(
        f"{mode} at {rate:,.0f} clicks/s: {len(latencies):,} records after {WARMUP_S:.0f} s; "
        f"p50 {p50:.3f} s, p95 {p95:.3f} s, p99 {p99:.3f} s, max {max(latencies):.3f} s; "
        f"UNKNOWN {len(unknown)}"
    )


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]))
