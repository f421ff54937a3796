"""The CDC fold at run time: Debezium change envelopes of the profile table into the join's CDC input.

The fold itself (which record is a change, progress, a tombstone or a dead letter, and each column's
typing) is specified by spec/envelopes.py (parse_envelope) for the profile table a profile spec describes
(the pipeline file's profile section as a plain dict: common.pipeline_file.Pipeline.profile_spec()).
Here it runs in the JVM with no Python per record: jvm/.../cdc/EnvelopeFold.java, made with the spec's
JSON, with a streaming fast path for plain change events (PlainEnvelope.java), held to parse_envelope by
the differential tests in tests/unit/test_parsers_spark.py.

CDC progress moves the join's watermark for good, so `fold` counts it at most MAX_PROGRESS_LEAD_MS past the
record's Kafka timestamp: one commit time far ahead (a forged record, a database clock running ahead)
would otherwise release every waiting click as complete and expire versions later clicks still need. The
record itself folds as recorded (a change keeps its valid_from). Why the record's timestamp and not the
batch's time: a Spark batch time is a literal in the generated code, so every batch compiled the fold
again (2 compilations, ~40 ms). Kafka brokers (4.0+) refuse a timestamp more than an hour ahead of their
clock (`message.timestamp.after.max.ms`), so a forged one moves progress at most that far.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from common import names
from common import pipeline_file as pf
from common.limits import MAX_FUTURE_MS
from pipeline import field_types, records

# The heartbeat table and the change-event size limit are the pipeline file's (common/pipeline_file.py).
HEARTBEAT_SCHEMA, HEARTBEAT_TABLE, MAX_CHANGE_BYTES = (
    pf.HEARTBEAT_SCHEMA,
    pf.HEARTBEAT_TABLE,
    pf.MAX_CHANGE_BYTES,
)
# How far past its record's Kafka timestamp CDC progress counts: the clock drift a click may have
# (pipeline/events.py).
MAX_PROGRESS_LEAD_MS = MAX_FUTURE_MS
# The fold in the JVM (jvm/src/main/java/io/streamfold/cdc/EnvelopeFold.java).
FOLD_UDF = "streamfold_fold_envelope"
_KIND = StructField("kind", StringType())  # change | truncate | progress | skip | error
_PROGRESS = StructField("progress_ms", LongType())


def fold_type(spec: dict[str, Any]) -> StructType:
    """The row EnvelopeFold returns, by position: kind, the key (as text), op, valid_from_ms, lsn, each
    column in spec order (its Spark type), unavailable (the indexes of the columns Debezium did not send),
    drifted (records.DRIFTED), progress_ms, error."""
    columns = [StructField(c["name"], field_types.spark_type(c["type"])) for c in spec["columns"]]
    fields = [
        _KIND,
        StructField(spec["key"]["column"], StringType()),
        StructField("op", StringType()),  # c | u | d | r
        StructField("valid_from_ms", LongType()),  # source.ts_ms; BEGINNING_OF_TIME_MS for op=r
        StructField("lsn", LongType()),
        *columns,
        records.UNAVAILABLE,
        records.DRIFTED,
        _PROGRESS,
        records.REJECT["error"],
    ]
    taken = [f.name for f in fields]
    if len(set(taken)) != len(taken):
        raise ValueError(f"a profile column takes the name of another field of the fold's row: {taken}")
    return StructType(fields)


def folded_columns(spec: dict[str, Any]) -> tuple[str, ...]:
    """What `fold_records` returns: the UDF's row, and the record's id and bytes when it is an error."""
    return (*records.names(fold_type(spec)), "event_id", "payload")


def fold(cdc_raw: DataFrame, spec: dict[str, Any]) -> DataFrame:
    """Raw CDC records (topic, key, value, event_id, written_ms) -> the join's CDC input,
    folded_columns(spec): every change, truncate, progress and unfoldable record ("error", a dead letter the
    join passes through); skipped ones dropped. progress_ms counts at most MAX_PROGRESS_LEAD_MS past
    written_ms, the record's Kafka timestamp."""
    kept = "kind IN ('change', 'truncate', 'progress', 'error')"
    folded = fold_records(cdc_raw, spec, "written_ms").where(kept)
    limit = F.col("written_ms") + F.lit(MAX_PROGRESS_LEAD_MS)
    progress = F.col("progress_ms")
    capped = F.when(progress > limit, limit).otherwise(progress)  # null stays null
    return folded.withColumn("progress_ms", capped).drop("written_ms")


def fold_records(cdc_raw: DataFrame, spec: dict[str, Any], *keep: str) -> DataFrame:
    """parse_envelope in the JVM: every record -> folded_columns(spec), tagged by kind.

    One Java UDF (jvm/src/main/java/io/streamfold/cdc/EnvelopeFold.java) folds a record or says why it
    cannot, so the plan is two small projections (a fold in Spark's native functions was a 16-deep chain
    of them, planned and code-generated again every micro-batch). `keep` names input columns to carry along.
    """
    register_java_udf(cdc_raw.sparkSession, FOLD_UDF, "EnvelopeFold", spec)
    folded = cdc_raw.select(
        "event_id",
        "value",
        *keep,
        F.call_function(FOLD_UDF, _heartbeat_topic(), "key", "value").alias("_fold"),
    )
    error = F.col("_fold.kind") == "error"
    return folded.select(
        *(F.col(f"_fold.{name}").alias(name) for name in folded_columns(spec)[:-2]),
        F.when(error, F.col("event_id")).alias("event_id"),
        F.when(error, F.col("value")).alias("payload"),
        *keep,
    )


def _heartbeat_topic() -> Column:
    """Whether a record comes from a Debezium heartbeat topic (the job reads its pipeline's only)."""
    return F.col("topic").startswith(f"{names.HEARTBEAT_TOPIC_PREFIX}.")


def register_java_udf(spark: SparkSession, name: str, java_class: str, spec: dict[str, Any]) -> None:
    """Registers `name` as an instance of io.streamfold.cdc.<java_class> made with the spec's JSON (it
    travels to the executors inside the serialised UDF), of return type fold_type(spec). The UDF is bound
    when a DataFrame calling it is made: register right before."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    udf = getattr(jvm.io.streamfold.cdc, java_class)(json.dumps(spec))
    return_type = spark._jsparkSession.parseDataType(fold_type(spec).json())
    spark._jsparkSession.udf().register(name, udf, return_type)
