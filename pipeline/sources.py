"""Sources: clicks from Kafka or Kinesis, and the Debezium CDC stream from Kafka.

Each source is reduced to the columns the next step needs, with a deterministic record id taken
from the record's position (topic/partition/offset or stream/shard/sequence), so a replayed batch
produces the same ids. An event's payload stays the record's bytes, JSON or Avro alike: the parser of the
file's format reads it (pipeline/events.py).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from common import config, names, plan

# The most records a micro-batch reads from one source while it catches up on a backlog (after a start, an
# outage, a burst). Each batch has a fixed cost (planning, scheduling, commits) and keeps the JIT compiling
# code that runs once per batch, so larger batches catch up faster, at the price of the job's memory
# (docs/decisions/spark-settings.md, "Sources and micro-batches"). A live stream's batches stay far below.
DEFAULT_MAX_RECORDS_PER_BATCH = 500_000
# The most events the first batch after a start takes: that batch runs cold and folds the whole CDC snapshot
# as well, so with a backlog its output would wait for a full batch of events on top of that; the batches
# after it take the cap above (measured: docs/decisions/spark-settings.md, "Sources and micro-batches").
FIRST_BATCH_MAX_RECORDS = 25_000
# The Kafka source with that first cap and its option: jvm/src/main/java/io/streamfold/kafka/CappedKafka.java.
CAPPED_KAFKA = "io.streamfold.kafka.CappedKafka"
FIRST_BATCH_OPTION = "firstBatchMaxOffsets"
# A Kafka partition's records of a batch are read by tasks of at most this many, so a batch's clicks (3
# partitions) are read by many tasks rather than 3 on 2 cores (the third ran alone), and a CDC snapshot
# (one partition) is folded on every core rather than one.
RECORDS_PER_TASK = 25_000
# Spark's real-time mode reads Kafka with the project's own source (jvm/src/main/java/io/streamfold/realtime),
# one topic per source.
REALTIME_KAFKA = "streamfold-kafka"


def _kafka(
    spark: SparkSession,
    bootstrap: str,
    topics: str,
    max_records: int,
    start_ms: int | None = None,
    first_batch: int | None = None,
) -> DataFrame:
    """start_ms: a new checkpoint starts at the first record of each partition stamped at or after it
    (`streamfold reprocess --from`; a partition without one at its end); else at the earliest retained.
    A checkpoint that exists resumes from its own offsets either way.
    first_batch: the cap of the first batch that reads anything after the query starts."""
    capped = {FIRST_BATCH_OPTION: str(first_batch)} if first_batch is not None else {}
    start = (
        {"startingTimestamp": str(start_ms), "startingOffsetsByTimestampStrategy": "latest"}
        if start_ms is not None
        else {"startingOffsets": "earliest"}
    )
    return (
        spark.readStream.format(CAPPED_KAFKA if capped else "kafka")
        .options(**capped)
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**config.spark_kafka_options())
        .option("subscribe", topics)
        .options(**start)
        .option("maxOffsetsPerTrigger", str(max_records))
        .option("maxRecordsPerPartition", str(RECORDS_PER_TASK))
        # Spark seeks its cached consumers each batch, and a consumer must first wait out the fetch it left
        # in flight at the log end: the broker holds that fetch for fetch.max.wait.ms (default 500 ms) on a
        # quiet partition (the CDC topics), and every batch would wait that long.
        .option("kafka.fetch.max.wait.ms", "10")
        .load()
    )


def realtime_kafka(spark: SparkSession, bootstrap: str, topic: str, read_after: str = "") -> DataFrame:
    """One topic through the project's Kafka source for Spark's real-time mode (jvm/.../realtime), with the
    columns of Spark's (no timestampType or headers), from the earliest retained record on a new
    checkpoint. No read caps: a real-time batch is planned from its start only, and reads until its time
    is up. read_after: a topic whose backlog is read first (the events' the CDC topic's:
    jvm/.../realtime/CatchUp.java)."""
    return (
        spark.readStream.format(REALTIME_KAFKA)
        .option("topic", topic)
        .option("readAfter", read_after)
        .option("startingOffsets", "earliest")
        .option("kafka.bootstrap.servers", bootstrap)
        .options(**config.spark_kafka_options())
        .load()
    )


def _arrival_ms(timestamp: str) -> Column:
    """now_ms, the time an event's time may lead by at most a minute (pipeline/events.py): when the
    record reached its source, so a replay decides the same. Not the batch's time: Spark writes that into
    the generated code as a literal, so the parser's stage would be compiled again every batch. A record
    without one gets 0, so its click is a dead letter."""
    return F.coalesce(F.unix_millis(timestamp), F.lit(0)).alias("now_ms")


def _position(*parts: Column | str) -> Column:
    return F.concat_ws(":", *[F.lit(p) if isinstance(p, str) else p for p in parts])


def kafka_clicks(
    spark: SparkSession,
    bootstrap: str,
    topic: str = names.CLICKS_TOPIC,
    max_records: int = DEFAULT_MAX_RECORDS_PER_BATCH,
    start_ms: int | None = None,
) -> DataFrame:
    raw = _kafka(spark, bootstrap, topic, max_records, start_ms, first_batch=FIRST_BATCH_MAX_RECORDS)
    return from_kafka_clicks(raw, topic)


def from_kafka_clicks(raw: DataFrame, topic: str) -> DataFrame:
    """Kafka records -> event_id, source, payload, now_ms (when the record reached Kafka: its timestamp;
    see _arrival_ms)."""
    return raw.select(
        _kafka_position().alias("event_id"),
        F.lit(f"kafka:{topic}").alias("source"),
        F.col("value").alias("payload"),
        _arrival_ms("timestamp"),
    )


def kinesis_clicks(
    spark: SparkSession,
    stream: str = names.CLICKS_STREAM,
    max_records: int | None = DEFAULT_MAX_RECORDS_PER_BATCH,
    start_ms: int | None = None,
) -> DataFrame:
    """The same columns as kafka_clicks, from the Kinesis stream through our Python data source.

    max_records=None reads everything available in one batch: `--once` runs are single batches
    (Python sources cannot support Trigger.AvailableNow), so a cap would leave records unread.
    start_ms: a new checkpoint starts each shard at its first record that arrived at or after it
    (`streamfold reprocess --from`); else at the earliest retained (TRIM_HORIZON).
    """
    from pipeline.kinesis_source import KinesisDataSource

    spark.dataSource.register(KinesisDataSource)
    reader = spark.readStream.format("kinesis").option("streamName", stream)
    if start_ms is not None:
        reader = reader.option("startingTimestamp", str(start_ms))
    else:
        reader = reader.option("startingPosition", "TRIM_HORIZON")
    if max_records is not None:
        reader = reader.option("maxRecordsPerBatch", str(max_records))
    return from_kinesis_clicks(reader.load(), stream)


def from_kinesis_clicks(raw: DataFrame, stream: str) -> DataFrame:
    """Kinesis records (pipeline.kinesis_source.SCHEMA) -> the columns of from_kafka_clicks."""
    return raw.select(
        _position("kinesis", stream, F.col("shard_id"), F.col("sequence_number")).alias("event_id"),
        F.lit(f"kinesis:{stream}").alias("source"),
        F.col("data").alias("payload"),
        _arrival_ms("approximate_arrival_timestamp"),
    )


def cdc(
    spark: SparkSession,
    bootstrap: str,
    resolved: plan.Plan,
    max_records: int = DEFAULT_MAX_RECORDS_PER_BATCH,
) -> DataFrame:
    """The CDC topic with the connector's heartbeats, as change rows."""
    return from_kafka_cdc(
        _kafka(spark, bootstrap, f"{resolved.cdc_topic},{resolved.heartbeat_topic}", max_records)
    )


def realtime_cdc(spark: SparkSession, bootstrap: str, resolved: plan.Plan) -> DataFrame:
    """The CDC topic alone, as change rows, for real-time mode: its heartbeat-table rows are CDC progress in
    commit order with the changes. Debezium's heartbeat topic is not read: a task of its own in real-time
    mode, its progress would reach the join ahead of changes still being read from the CDC topic."""
    return from_kafka_cdc(realtime_kafka(spark, bootstrap, resolved.cdc_topic))


def from_kafka_cdc(raw: DataFrame) -> DataFrame:
    """Debezium change events and heartbeats: topic, key, value, event_id, written_ms (the record's Kafka
    timestamp: when Connect wrote it, or the commit time Debezium gave it)."""
    return raw.select(
        "topic",
        "key",
        "value",
        _kafka_position().alias("event_id"),
        F.unix_millis("timestamp").alias("written_ms"),
    )


def _kafka_position() -> Column:
    return _position(
        "kafka", F.col("topic"), F.col("partition").cast("string"), F.col("offset").cast("string")
    )
