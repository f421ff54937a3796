"""The pipeline, top to bottom: sources -> CDC fold -> temporal join -> aggregates + sinks.

Two streaming queries share one Spark session:
  clicks-<source>  clicks + CDC changes + CDC progress -> temporal join -> Postgres (exactly once) + Kafka
  changelog        CDC changes -> users_changelog (compacted) + CDC dead letters
The aggregates are folded in the clicks sink's Postgres transaction (pipeline/aggregates.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from pipeline import cdc_fold, clicks, sources
from pipeline.sinks import ChangelogSink, EnrichedClicksSink
from pipeline.temporal_join import JoinConfig, temporal_join
from streamfold.config import Settings


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


def flows(
    spark: SparkSession, settings: Settings, source: str, join: JoinConfig, once: bool = False
) -> tuple[Flow, Flow]:
    """(the clicks flow, the changelog flow)."""
    raw_clicks = read_clicks(spark, settings, source, once)
    parsed = clicks.parse(raw_clicks)  # clicks, and rejects with their error

    folded = cdc_fold.fold(sources.cdc(spark, settings.kafka_bootstrap))
    # Rejects ride through the join operator, so the source is read and parsed once per batch.
    enriched = temporal_join(parsed, folded.cdc, join)

    clicks_name = f"clicks-{source}"
    return (
        Flow(
            clicks_name,
            enriched,
            EnrichedClicksSink(clicks_name, settings.writer_dsn, settings.kafka_bootstrap),
        ),
        Flow("changelog", folded.records, ChangelogSink(settings.writer_dsn, settings.kafka_bootstrap)),
    )


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
