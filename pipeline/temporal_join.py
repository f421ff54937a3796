"""The temporal join: every click enriched with the user profile version valid when it happened.

Semantics (docs/join-semantics.md "In short"):
- A profile version is valid from its commit time (valid_from_ms = Debezium source.ts_ms); snapshot rows
  (op=r) from BEGINNING_OF_TIME_MS; a delete ends validity (a tombstone version), a re-insert starts anew.
- A click at t joins the version with the greatest valid_from <= t (equal valid_from: the higher lsn),
  whatever order clicks and changes arrive in. No valid version -> user_regionid UNKNOWN, other fields null.
- Completeness: a click is emitted once CDC progress (source.ts_ms of changes, ts_ms of heartbeats)
  reaches t, or after max_wait when the CDC stream stalls.
- Versions are dropped once a newer version is older than watermark - version_retention; a user left
  with only an old tombstone is forgotten, so state stays bounded.
- mode "latest": Kafka Streams KStream-KTable leftJoin (latest version when processed, a key's changes
  before its clicks within a micro-batch, nothing waits).

How: clicks and changes are tagged into one row shape, unioned, and keyed by a bucket of userid into ONE
transformWithState operator written in Java (jvm/src/main/java/io/streamfold/join: RocksDB state, event-time
timers; docs/decisions/bucketed-join-state.md), reached through `TemporalJoin.apply`. Its per-user logic is
a line-for-line port of spec.temporal_state, the pure-Python reference that tests/unit/test_join_operator.py
holds it to. (A Python operator costs a socket round trip per state call and an Arrow->pandas conversion per
key; the JVM one does a key in a few RocksDB operations: docs/decisions/join-in-the-jvm.md.)

The watermark trick: event time *is* Spark's watermark, so a replay after a crash makes the same decisions
(the watermark is in the offset log). The CDC rows, UNION ticks of Spark's `rate` source (progress_ms = tick
time - max_wait), carry the only withWatermark of the query, on progress_ms:
    watermark = max(CDC progress, wall clock - max_wait)
The watermark column is dropped right after, so no column of the operator's input carries watermark metadata
and Spark drops no late click or change. Spark computes a batch's watermark from the batches before it, so
the CDC progress also reaches the operator as input, in the same batch: each input partition's largest
progress_ms, fanned out to every bucket by the JVM (TemporalJoin.cdcRows), which passes the changes on and
drops the ticks. A bucket releases a click once max(watermark, CDC progress read so far) passes it; a newer
one waits under the bucket's event-time timer. A click released by max_wait rather than by CDC progress has
profile_complete = false. The CDC source is read and parsed once per batch for all of this.

Under Trigger.AvailableNow the `rate` source makes Spark 4.0 run a single batch per
run (no trailing no-data batch, SPARK-45178): see run_until_drained for `--once`.

What this relies on in Spark 4.0: the union of watermarked and plain streams drives TWS EventTime timers;
late rows reach handleInputRows; a timer registered below the watermark fires in the same batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
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

from common import names
from pipeline import records
from pipeline.join_config import LATEST, JoinConfig

__all__ = [
    "Pending",
    "committed_batches",
    "pending_clicks",
    "run_until_drained",
    "temporal_join",
]

_STR, _LONG, _INT = StringType(), LongType(), IntegerType()

# The operator's input: one row shape for clicks, CDC rows and rejects (io.streamfold.join.TaggedRow). ts_ms
# is a click's event time or a change's valid_from; the fields of the other kinds are null.
_CLICK, _REJECT, _TICK = "click", "reject", "tick"
_CLICK_FIELDS = ("event_id", "url", "device_id", "ip", "clicks")
_CHANGE_FIELDS = ("op", "regionid", "gender", "interests", "registertime")
_TAGGED_SCHEMA = StructType(
    [
        StructField("kind", _STR),
        StructField("bucket", _INT),  # set on the JVM side for progress rows only
        StructField("userid", _STR),
        StructField("ts_ms", _LONG),
        StructField("lsn", _LONG),
        *[f for f in records.CLICK.fields if f.name in _CLICK_FIELDS],
        *[f for f in records.CHANGE.fields if f.name in _CHANGE_FIELDS],
        *records.REJECT.fields,
        StructField("progress_ms", _LONG),  # CDC rows only
    ]
)

_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_STATE_NAME = "bucket"  # io.streamfold.join.BucketJoinProcessor.BUCKET
_OPERATOR_NAME = "transformWithStateExec"


def temporal_join(clicks: DataFrame, cdc: DataFrame, cfg: JoinConfig | None = None) -> DataFrame:
    """Streaming clicks (records.CLICK) and CDC rows (pipeline.cdc_fold.fold: kind "change" with the
    records.CHANGE fields, or "progress"; progress_ms on both) -> one records.JOIN_OUTPUT row per click,
    and one per change (change_op set: users_changelog, in the join's version order per user).
    Inputs must carry no watermark of their own and have non-null click_time_ms / valid_from_ms (the
    parsers send such records to the dead letters).

    clicks may also carry the records.REJECT fields: a row whose error is set is a rejected record, which
    passes through the operator untouched (one output row with only event_id and the reject columns set). Why:
    any split of the parsed source into clicks and rejects (a filter each, then a union, before or after
    the join) makes Spark read and parse the source twice per batch; one tagging projection does not.
    The CDC rows likewise go through one path (watermark, then changes and progress fanned out in the JVM),
    and may carry CDC records that could not be folded (kind "error", with error, event_id and payload):
    they pass through as rejects of source `kafka:<CDC users topic>`.
    """
    cfg = cfg or JoinConfig()
    spark = clicks.sparkSession
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB)  # required by transformWithState
    jvm: Any = spark._jvm
    buckets = jvm.io.streamfold.join.TemporalJoin.BUCKETS
    tagged_cdc = _tag_cdc(cdc, buckets)
    if cfg.mode != LATEST:
        tagged_cdc = _watermarked(spark, tagged_cdc, cfg.max_wait_ms)
    joined = jvm.io.streamfold.join.TemporalJoin.apply(
        _tag_clicks(clicks, buckets)._jdf,
        tagged_cdc._jdf,
        cfg.mode,
        cfg.version_retention_ms,
    )
    return DataFrame(joined, spark)


def _project(df: DataFrame, values: dict[str, Column]) -> DataFrame:
    """df as _TAGGED_SCHEMA: the given columns, typed nulls for the rest."""
    return df.select(
        *[values.get(f.name, F.lit(None)).cast(f.dataType).alias(f.name) for f in _TAGGED_SCHEMA.fields]
    )


def _reject_bucket(is_reject: Column, event_id: str, buckets: int) -> Column:
    """A reject may go to any bucket (it only passes through), so rejects are spread by their record id,
    and a flood of them is too."""
    return F.when(is_reject, F.pmod(F.hash(event_id), F.lit(buckets)))


def _tag_clicks(clicks: DataFrame, buckets: int) -> DataFrame:
    """Clicks, and rejects (error set) if the frame has the records.REJECT fields."""
    fields = {name: F.col(name) for name in ("userid", *_CLICK_FIELDS)}
    rejects: dict[str, Column] = {}
    kind = F.lit(_CLICK)
    if "error" in clicks.columns:
        is_reject = F.col("error").isNotNull()
        kind = F.when(is_reject, F.lit(_REJECT)).otherwise(kind)
        rejects = {f.name: F.col(f.name) for f in records.REJECT.fields}
        rejects["bucket"] = _reject_bucket(is_reject, "event_id", buckets)
    return _project(
        clicks,
        {
            **fields,
            **rejects,
            "kind": kind,
            "ts_ms": F.col("click_time_ms"),
            "lsn": F.lit(0),
            "clicks": F.coalesce("clicks", F.lit(1)),  # the click contract's default
        },
    )


def _tag_cdc(cdc: DataFrame, buckets: int) -> DataFrame:
    """Changes and progress, and CDC records that could not be folded (kind "error") as rejects."""
    kind = F.col("kind")
    rejects: dict[str, Column] = {}
    if "error" in cdc.columns:
        is_reject = kind == "error"
        kind = F.when(is_reject, F.lit(_REJECT)).otherwise(kind)
        rejects = {
            "event_id": F.col("event_id"),
            "error": F.col("error"),
            "source": F.lit(f"kafka:{names.CDC_USERS_TOPIC}"),
            "payload": F.col("payload"),
            "bucket": _reject_bucket(is_reject, "event_id", buckets),
        }
    return _project(
        cdc,
        {
            **rejects,
            "kind": kind,
            "userid": F.col("userid"),
            "ts_ms": F.col("valid_from_ms"),
            "lsn": F.coalesce(F.col("lsn"), F.lit(0)),
            "progress_ms": F.col("progress_ms"),
            **{name: F.col(name) for name in _CHANGE_FIELDS},
        },
    )


def _watermarked(spark: SparkSession, tagged_cdc: DataFrame, max_wait_ms: int) -> DataFrame:
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
        tagged_cdc.unionByName(_project(ticks, {"kind": F.lit(_TICK), "progress_ms": F.col("progress_ms")}))
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


def pending_clicks(spark: SparkSession, checkpoint: str, tasks: int | None = None) -> Pending:
    """Reads the join operator's last committed state with Spark's state data source; in at most `tasks`
    tasks when given (the state partitions are then restored one after another)."""
    operator_id = _join_operator_id(spark, checkpoint)
    if operator_id is None:
        return Pending(0, None, None)
    state = (
        spark.read.format("statestore")
        .option("path", checkpoint)
        .option("operatorId", operator_id)
        .option("stateVarName", _STATE_NAME)
        .load()
    )
    if tasks is not None:
        state = state.coalesce(tasks)
    total, earliest, latest = state.agg(
        F.sum("value.pending"), F.min("value.pending_min_ms"), F.max("value.pending_max_ms")
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
    first = operators.select("operatorId").first()
    return None if first is None else int(first[0])


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
