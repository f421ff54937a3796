"""The temporal join: every event enriched with its key's profile version valid when it happened.

Semantics (docs/join-semantics.md "In short"):
- A profile version is valid from its commit time (valid_from_ms = Debezium source.ts_ms); snapshot rows
  (op=r) from BEGINNING_OF_TIME_MS; a delete ends validity (a tombstone version), a re-insert starts anew;
  a truncate of the table ends every key's validity.
- An event at t joins the version with the greatest valid_from <= t (equal valid_from: the higher lsn),
  whatever order events and changes arrive in. No valid version -> each profile column's if_missing (null
  when the file gives none); a text column with if_missing also takes it for a null or empty value.
- Completeness: an event is emitted once CDC progress (source.ts_ms of changes, ts_ms of heartbeats)
  passes t (pipeline/cdc_fold.py: progress_ms is one before the newest commit's time), or after max_wait
  when the CDC stream stalls.
- Versions are dropped once a newer version is older than watermark - version_retention; a key left
  with only an old tombstone is forgotten, so state stays bounded.
- mode "latest": Kafka Streams KStream-KTable leftJoin (latest version when processed, a key's changes
  before its events within a micro-batch, nothing waits).

How: events and changes are tagged into one row shape (tagged_schema), unioned, and keyed by a bucket of the
key into ONE transformWithState operator written in Java (jvm/src/main/java/io/streamfold/join: RocksDB
state, event-time timers; docs/decisions/bucketed-join-state.md), reached through `TemporalJoin.apply` with
the join spec (join_spec: the columns it carries, their if_missing, the output schema; the Java names no
column). Its per-key logic is a line-for-line port of spec.temporal_state, the pure-Python reference that
tests/unit/test_join_operator.py holds it to. (A Python operator costs a socket round trip per state call
and an Arrow->pandas conversion per key; the JVM one does a key in a few RocksDB operations:
docs/decisions/join-in-the-jvm.md.)

The watermark trick: event time *is* Spark's watermark, so a replay after a crash makes the same decisions
(the watermark is in the offset log). The CDC rows, UNION ticks of Spark's `rate` source (progress_ms = tick
time - max_wait), carry the only withWatermark of the query, on progress_ms:
    watermark = max(CDC progress, wall clock - max_wait)
The watermark column is dropped right after, so no column of the operator's input carries watermark metadata
and Spark drops no late event or change. Spark computes a batch's watermark from the batches before it, so
the CDC progress also reaches the operator as input, in the same batch: each input partition's largest
progress_ms, fanned out to every bucket by the JVM (TemporalJoin.cdcRows), which passes the changes on and
drops the ticks. A bucket releases an event once max(watermark, CDC progress read so far) passes it; a newer
one waits under the bucket's event-time timer. An event released by max_wait rather than by CDC progress is
not complete (the file's complete column is false). The CDC source is read and parsed once per batch for
all of this.

Under Trigger.AvailableNow the `rate` source makes Spark run a single batch per
run (no trailing no-data batch, SPARK-45178): see run_until_drained for `--once`.

Spark's real-time mode (temporal_join(..., realtime=True)) refuses the `rate` source and runs
handleInputRows once per row: there is no watermark, every bucket gets the CDC progress at each heartbeat,
and join.max_wait and version expiry run on processing-time timers once CDC progress stalls
(TemporalJoin.applyRealTime, BucketJoinProcessor; docs/decisions/realtime-mode.md).

What this relies on in Spark (the unit tests hold it on the pinned pyspark): the union of watermarked and
plain streams drives TWS EventTime timers; late rows reach handleInputRows; a timer registered below the
watermark fires in the same batch.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from common import plan
from common.pipeline_file import Pipeline, ProfileColumn
from pipeline import records
from pipeline.field_types import spark_type
from pipeline.join_config import LATEST, JoinConfig

__all__ = [
    "CDC_PROGRESS_METRIC",
    "DRIFT_METRIC",
    "Pending",
    "committed_batches",
    "join_spec",
    "pending_clicks",
    "run_until_drained",
    "tagged_schema",
    "temporal_join",
]

_STR, _LONG, _INT = StringType(), LongType(), IntegerType()

# The operator's input (io.streamfold.join.TaggedRow): one row shape for events, CDC rows and rejects. ts_ms
# is an event's time or a change's valid_from; the fields of the other kinds are null.
_EVENT, _REJECT, _TICK = "event", "reject", "tick"
EVENT_PREFIX, PROFILE_PREFIX = "e_", "p_"  # an event field and a profile column may share a name

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_STATE_NAME = "bucket"  # io.streamfold.join.BucketJoinProcessor.BUCKET
# Real-time mode keeps the waiting events apart, by key (BucketJoinProcessor.WAITING); Spark's state reader
# gives a map state's entries a row each, the value under user_map_value.
_REALTIME_STATE_NAME, _REALTIME_VALUE = "waiting", "user_map_value"
_OPERATOR_NAME = "transformWithStateExec"
# The observed metric (StreamingQueryProgress.observedMetrics) with the largest progress_ms of a batch's CDC
# rows, null for a batch without any: event_time mode only.
CDC_PROGRESS_METRIC = "cdc_progress"
# The observed metric of a batch's drift (records.DRIFTED): `changes` with drifted columns, and `columns`,
# each drifted column as "<table>.<column>: <why>" (io.streamfold.status.ProgressListener says and counts
# them).
DRIFT_METRIC = "cdc_drift"


def tagged_schema(pipeline: Pipeline) -> StructType:
    """kind, bucket, key, ts_ms, lsn, event_id, e_<field>..., count, op, p_<column>..., unavailable, drifted,
    error, source, payload, progress_ms: each event field and profile column in the file's order, of its
    Spark type; unavailable: a change's columns Debezium did not send (records.UNAVAILABLE); drifted: why a
    change holds no value of a column's type (records.DRIFTED)."""
    return StructType(
        [
            StructField("kind", _STR),
            StructField("bucket", _INT),  # set on the JVM side for progress rows only
            StructField("key", _STR),
            StructField("ts_ms", _LONG),
            StructField("lsn", _LONG),
            StructField("event_id", _STR),
            *(
                StructField(f"{EVENT_PREFIX}{name}", spark_type(f.type))
                for name, f in pipeline.events.fields.items()
            ),
            StructField("count", _INT),
            StructField("op", _STR),
            *(
                StructField(f"{PROFILE_PREFIX}{name}", spark_type(c.type))
                for name, c in pipeline.profile.columns.items()
            ),
            records.UNAVAILABLE,
            records.DRIFTED,
            *records.REJECT.fields,
            StructField("progress_ms", _LONG),  # CDC rows only
        ]
    )


def join_spec(pipeline: Pipeline) -> dict[str, Any]:
    """What the JVM operator needs besides the tagged rows (io.streamfold.join.JoinSpec): the event fields
    and profile columns in order, each column's if_missing as a value of its Spark type, and the output
    schema (records.join_output, as Spark's JSON text)."""
    profile = plan.of(pipeline).joins[0].table
    return {
        "event_fields": list(pipeline.events.fields),
        "profile_columns": [
            {
                "name": name,
                "type": column.type,
                **({} if column.if_missing is None else {"if_missing": if_missing_value(name, column)}),
            }
            for name, column in profile.columns.items()
        ],
        "output": records.join_output(pipeline).json(),
    }


def if_missing_value(name: str, column: ProfileColumn) -> Any:
    """A column's if_missing as the value its Spark type carries (pipeline/field_types.py); ValueError
    when it is not one."""
    value, kind = column.if_missing, column.type
    number = None if isinstance(value, bool) or not isinstance(value, int | float) else value
    if kind == "text" and isinstance(value, str):
        return value
    if kind in ("integer", "bigint") and isinstance(number, int):
        bits = 32 if kind == "integer" else 64
        if -(2 ** (bits - 1)) <= number < 2 ** (bits - 1):
            return number
    if kind == "double" and number is not None and math.isfinite(number):
        return float(number)
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "numeric" and (number is not None or isinstance(value, str)) and _is_decimal(str(value)):
        return str(value)
    if kind == "jsonb" and value is not None:
        return json.dumps(value)
    raise ValueError(
        f"profile.columns.{name}.if_missing: {value!r} is not a value of type {kind}"
        + (
            " (if_missing takes no value for this type)"
            if kind in ("text[]", "timestamptz", "timestamp")
            else ""
        )
    )


def _is_decimal(text: str) -> bool:
    try:
        return Decimal(text).is_finite()
    except InvalidOperation:
        return False


def temporal_join(
    events: DataFrame, cdc: DataFrame, cfg: JoinConfig, pipeline: Pipeline, realtime: bool = False
) -> DataFrame:
    """Streaming events as the event parser returns them (event_id, the key, each field, the time in ms,
    the count, by position: records.click) and CDC rows (pipeline.cdc_fold.fold: kind "change" with the
    records.change columns, "truncate" (no key: every key's profile ends, spec/temporal_state.py), or
    "progress"; progress_ms on all) -> one records.join_output row per event, and one per version stored
    (kind "change", change_op set: the changelog, in the join's version order per key; a truncate gives a
    tombstone to every key that had a profile).
    Inputs must carry no watermark of their own and have non-null event times and valid_from_ms (the
    parsers send such records to the dead letters).

    events may also carry the records.REJECT columns: a row whose error is set is a rejected record, which
    passes through the operator untouched (one output row of kind "reject" with event_id and the reject
    columns set). Why: any split of the parsed source into events and rejects (a filter each, then a union,
    before or after the join) makes Spark read and parse the source twice per batch; one tagging
    projection does not. The CDC rows likewise go through one path (watermark, then changes and progress
    fanned out in the JVM), and may carry CDC records that could not be folded (kind "error", with error,
    event_id and payload): they pass through as rejects of source `kafka:<the profile table's CDC topic>`.

    realtime: for Spark's real-time mode, which refuses the `rate` source: no watermark; in event_time
    mode the operator runs on processing-time timers for join.max_wait and version expiry, and every bucket
    gets the CDC progress at each heartbeat (TemporalJoin.applyRealTime). The output rows are the same.
    """
    spark = events.sparkSession
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)  # required by transformWithState
    jvm: Any = spark._jvm
    operator = jvm.io.streamfold.join.TemporalJoin
    buckets = operator.REALTIME_BUCKETS if realtime else operator.BUCKETS
    tagged = tagged_schema(pipeline)
    tagged_cdc = _tag_cdc(_observe_drift(cdc, pipeline), plan.of(pipeline), tagged, buckets)
    if cfg.mode != LATEST:
        # The batch's CDC progress, for the job's stall line (pipeline/cdc_stall.py): a metric Spark gathers
        # as the batch runs and reports in its progress, with no second pass over the rows.
        tagged_cdc = tagged_cdc.observe(CDC_PROGRESS_METRIC, F.max("progress_ms").alias("progress_ms"))
        if not realtime:
            tagged_cdc = watermarked(spark, tagged_cdc, tagged, cfg.max_wait_ms)
    tagged_events = _tag_events(events, pipeline, tagged, buckets)
    spec = json.dumps(join_spec(pipeline))
    if realtime and cfg.mode != LATEST:
        joined = operator.applyRealTime(
            tagged_events._jdf, tagged_cdc._jdf, cfg.version_retention_ms, cfg.max_wait_ms, spec
        )
    else:
        joined = operator.apply(tagged_events._jdf, tagged_cdc._jdf, cfg.mode, cfg.version_retention_ms, spec)
    return DataFrame(joined, spark)


def _observe_drift(cdc: DataFrame, pipeline: Pipeline) -> DataFrame:
    """The CDC rows, measured for DRIFT_METRIC as the batch runs (no second pass over the rows)."""
    return observe_drift(cdc, drift_said(pipeline.profile.table, list(pipeline.profile.columns)))


def drift_said(table: str, columns: list[str]) -> Column:
    """A change's drifted columns (its drifted array indexes `columns`), each as "<table>.<column>: why"."""
    drifted = F.col("drifted")
    return F.array(
        *(
            F.when(drifted[i].isNotNull(), F.concat(F.lit(f"{table}.{name}: "), drifted[i]))
            for i, name in enumerate(columns)
        )
    )


def observe_drift(cdc: DataFrame, said: Column) -> DataFrame:
    """cdc measured for DRIFT_METRIC: its changes with a drifted column, and the distinct texts `said`."""
    columns = F.array_distinct(F.flatten(F.collect_set(F.filter(said, lambda m: m.isNotNull()))))
    return cdc.observe(DRIFT_METRIC, F.count(F.col("drifted")).alias("changes"), columns.alias("columns"))


def project(df: DataFrame, tagged: StructType, values: dict[str, Column]) -> DataFrame:
    """df as the tagged schema: the given columns, typed nulls for the rest."""
    return df.select(*[values.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in tagged.fields])


def reject_bucket(is_reject: Column, event_id: str, buckets: int) -> Column:
    """A reject may go to any bucket (it only passes through), so rejects are spread by their record id,
    and a flood of them is too."""
    return F.when(is_reject, F.pmod(F.hash(event_id), F.lit(buckets)))


def event_columns(events: DataFrame, pipeline: Pipeline) -> tuple[str, list[str], str, str]:
    """The parser's key, field, time and count columns: the key and the fields by name, then the time in
    ms and the count, the two columns after them (the parser's row is by position, records.click)."""
    names = [pipeline.events.key, *pipeline.events.fields]
    start = events.columns.index(names[0]) if names[0] in events.columns else 0
    after = start + len(names)
    if events.columns[start:after] != names or len(events.columns) < after + 2:
        raise ValueError(
            f"expected the parser's columns {names} then the time and the count, got {events.columns}"
        )
    return names[0], names[1:], events.columns[after], events.columns[after + 1]


def _tag_events(events: DataFrame, pipeline: Pipeline, tagged: StructType, buckets: int) -> DataFrame:
    """Events, and rejects (error set) if the frame has the records.REJECT columns."""
    key, fields, time_ms, count = event_columns(events, pipeline)
    rejects: dict[str, Column] = {}
    kind = F.lit(_EVENT)
    if "error" in events.columns:
        is_reject = F.col("error").isNotNull()
        kind = F.when(is_reject, F.lit(_REJECT)).otherwise(kind)
        rejects = {f.name: F.col(f.name) for f in records.REJECT.fields}
        rejects["bucket"] = reject_bucket(is_reject, "event_id", buckets)
    return project(
        events,
        tagged,
        {
            **{f"{EVENT_PREFIX}{name}": F.col(f"`{name}`") for name in fields},
            **rejects,
            "kind": kind,
            "key": F.col(f"`{key}`"),
            "ts_ms": F.col(f"`{time_ms}`"),
            "lsn": F.lit(0),
            "event_id": F.col("event_id"),
            "count": F.coalesce(F.col(f"`{count}`"), F.lit(1)),  # every event counts 1 without a count
        },
    )


def _tag_cdc(cdc: DataFrame, resolved: plan.Plan, tagged: StructType, buckets: int) -> DataFrame:
    """Changes and progress, and CDC records that could not be folded (kind "error") as rejects."""
    kind, profile = F.col("kind"), resolved.joins[0].table
    rejects: dict[str, Column] = {}
    if "error" in cdc.columns:
        is_reject = kind == "error"
        kind = F.when(is_reject, F.lit(_REJECT)).otherwise(kind)
        rejects = {
            "event_id": F.col("event_id"),
            "error": F.col("error"),
            "source": F.lit(f"kafka:{resolved.cdc_topic}"),
            "payload": F.col("payload"),
            "bucket": reject_bucket(is_reject, "event_id", buckets),
        }
    return project(
        cdc,
        tagged,
        {
            **rejects,
            "kind": kind,
            "key": F.col(f"`{profile.key}`"),
            "ts_ms": F.col("valid_from_ms"),
            "lsn": F.coalesce(F.col("lsn"), F.lit(0)),
            "op": F.col("op"),
            "unavailable": F.col("unavailable"),
            "drifted": F.col("drifted"),
            "progress_ms": F.col("progress_ms"),
            **{f"{PROFILE_PREFIX}{name}": F.col(f"`{name}`") for name in profile.columns},
        },
    )


def watermarked(
    spark: SparkSession, tagged_cdc: DataFrame, tagged: StructType, max_wait_ms: int
) -> DataFrame:
    """The CDC rows plus wall-clock ticks, under the query's only watermark (on progress_ms), which is then
    dropped: no column of the operator's input carries watermark metadata, so Spark drops no late row.
    The ticks (progress_ms = tick time - max_wait) end in the JVM, which counts only CDC rows as progress.
    """
    ticks = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1)
        .load()
        .select((F.unix_millis("timestamp") - F.lit(max_wait_ms)).alias("progress_ms"))
    )
    return (
        tagged_cdc.unionByName(
            project(ticks, tagged, {"kind": F.lit(_TICK), "progress_ms": F.col("progress_ms")})
        )
        .withColumn("progress_ts", F.timestamp_millis("progress_ms"))
        .withWatermark("progress_ts", "0 seconds")
        .drop("progress_ts")
    )


# --- --once ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pending:
    """Clicks waiting for completeness in the join's committed state."""

    clicks: int
    earliest_ms: int | None
    latest_ms: int | None


def pending_clicks(
    spark: SparkSession, checkpoint: str, tasks: int | None = None, realtime: bool = False
) -> Pending:
    """Reads the join operator's last committed state with Spark's state data source; in at most `tasks`
    tasks when given (the state partitions are then restored one after another). realtime: a real-time
    mode checkpoint, whose waiting events are kept by key."""
    operator_id = _join_operator_id(spark, checkpoint)
    if operator_id is None:
        return Pending(0, None, None)
    state = (
        spark.read.format("statestore")
        .option("path", checkpoint)
        .option("operatorId", operator_id)
        .option("stateVarName", _REALTIME_STATE_NAME if realtime else _STATE_NAME)
        .load()
    )
    if tasks is not None:
        state = state.coalesce(tasks)
    value = _REALTIME_VALUE if realtime else "value"
    total, earliest, latest = state.agg(
        F.sum(f"{value}.pending"), F.min(f"{value}.pending_min_ms"), F.max(f"{value}.pending_max_ms")
    ).first()  # type: ignore[misc]
    return Pending(int(total or 0), earliest, latest)


def committed_batches(checkpoint: Path) -> list[int]:
    """The batch ids in a query checkpoint's commit log (Spark writes commits/<id> once a batch is done)."""
    return [int(f.name) for f in (checkpoint / "commits").glob("*") if f.name.isdigit()]


def _join_operator_id(spark: SparkSession, checkpoint: str) -> int | None:
    if not (Path(checkpoint) / "state").exists() or not committed_batches(Path(checkpoint)):
        return None  # no batch has committed state yet (Spark's state readers would fail)
    operators = (
        spark.read.format("state-metadata").load(checkpoint).where(F.col("operatorName") == _OPERATOR_NAME)
    )
    # A file with `tables` runs one operator per stage (pipeline/stages.py), numbered by Spark from the
    # plan's top (the last stage) down: the first stage, the highest id, holds every event still waiting.
    first = operators.select(F.max("operatorId")).first()
    if first is None or first[0] is None:
        return None
    return int(first[0])


def run_until_drained(
    spark: SparkSession,
    start_query: Callable[[], StreamingQuery],
    checkpoint: str,
    *,
    timeout_s: float = 120.0,
    poll_s: float = 1.0,
) -> int:
    """`--once`: emits every click available now, then returns the number of runs.

    start_query must start the join's query with trigger(availableNow=True) on `checkpoint`. The `rate`
    source does not support AvailableNow, so Spark runs exactly one batch per run (SPARK-45178), and that
    batch only replays an uncommitted batch if the last run crashed; the second run is therefore the first
    that surely read every click available now. Clicks the watermark has not passed stay pending; later runs
    let the wall clock (rate ticks) and CDC progress advance it until no click up to the latest one pending
    after the second run is left. Clicks that arrive meanwhile may be emitted too. Raises TimeoutError when
    that takes longer than timeout_s (e.g. clicks dated in the future).
    """
    deadline = time.monotonic() + timeout_s
    for _ in range(2):
        start_query().awaitTermination()
    runs = 2
    target = pending_clicks(spark, checkpoint).latest_ms
    while target is not None:
        left = pending_clicks(spark, checkpoint)
        if left.earliest_ms is None or left.earliest_ms > target:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{left.clicks} clicks still wait for CDC progress or max_wait after {timeout_s}s"
            )
        time.sleep(poll_s)
        start_query().awaitTermination()
        runs += 1
    return runs
