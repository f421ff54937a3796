"""The pipeline, top to bottom: sources -> CDC fold -> temporal join -> aggregates + sinks.

One streaming query, clicks-<source>, per micro-batch:
  clicks (and click rejects) + CDC changes, progress (and CDC rejects) -> temporal join
    -> enriched clicks, dead letters, and each change as a users_changelog record
landed by one sink: Postgres exactly once, then Kafka (pipeline/sinks.py). The aggregates are folded in
the sink's Postgres transaction (pipeline/aggregates.py).

Why one query and one path: a second query for users_changelog re-planned, checkpointed and scheduled its
own batches in the same 2 task slots, and its tasks queued behind the join's (an idle batch of it waited up
to 16 s); a second branch over the CDC topic read and parsed it twice per batch and doubled the fold's share
of each batch's planning. So rejects and changes pass through the join operator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from common.config import Settings
from pipeline import cdc_fold, clicks, sources
from pipeline.sinks import EnrichedClicksSink
from pipeline.temporal_join import JoinConfig, temporal_join


@dataclass(frozen=True)
class Flow:
    """A streaming query to start: its frame and its foreachBatch sink."""

    name: str
    frame: DataFrame
    sink: Callable[[DataFrame, int], None]


def read_clicks(spark: SparkSession, settings: Settings, source: str, once: bool) -> DataFrame:
    if source == "kinesis":
        return sources.kinesis_clicks(spark, None if once else sources.DEFAULT_MAX_RECORDS_PER_BATCH)
    return sources.kafka_clicks(spark, settings.kafka_bootstrap)


def flow(spark: SparkSession, settings: Settings, source: str, join: JoinConfig, once: bool = False) -> Flow:
    raw_clicks = read_clicks(spark, settings, source, once)
    parsed = clicks.parse(raw_clicks)  # clicks, and rejects with their error

    changes = cdc_fold.fold(sources.cdc(spark, settings.kafka_bootstrap))  # changes, progress, rejects
    # Rejects and changes ride through the join operator, so each source is read and parsed once per batch.
    joined = temporal_join(parsed, changes, join)  # enriched clicks, dead letters, users_changelog rows

    name = f"clicks-{source}"
    return Flow(name, joined, EnrichedClicksSink(name, settings.writer_dsn, settings.kafka_bootstrap))


def start(flow: Flow, checkpoints: Path, interval_ms: int | None = None) -> StreamingQuery:
    """Continuous with a micro-batch every interval_ms; without one, everything available now (`--once`)."""
    writer = (
        flow.frame.writeStream.queryName(flow.name)
        .option("checkpointLocation", str(checkpoints / flow.name))
        .foreachBatch(flow.sink)
    )
    if interval_ms is None:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime=f"{interval_ms} milliseconds").start()
