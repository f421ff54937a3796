"""The pipeline, top to bottom: sources -> CDC fold -> temporal join -> aggregates -> sinks.

One streaming query, <pipeline name>-<source>, per micro-batch (records: pipeline/records.py):
  1. sources: events from Kafka or Kinesis, Debezium change events and heartbeats from Kafka
  2. parse the events, fold the change events (rejects of either carry their reason)
  3. temporal join: each event with the profile version valid at its time; rejects and profile changes pass
     through. A file with `tables`: the fold of every table, then one stage per join (pipeline/stages.py),
     each event with every table's version valid at its time; the profile's versions pass on (its history)
  4. aggregate: each aggregate of the pipeline file, its count and sums per key, summed from the rows each
     partition lands (jvm/src/main/java/io/streamfold/sink/GroupTotals.java)
  5. sink, per partition of the join's output (pipeline/sinks.py): one Postgres transaction that claims the
     partition in the batch ledger, COPYs the enriched events and dead letters, and adds the partition's
     totals (step 4); then its Kafka records (the enriched events, the changelog, the dead letters); then the
     driver publishes the current totals of the keys the batch touched (pipeline/aggregates.py reads them
     back).

Why one query and one path: a second query, or a second branch over the CDC topic, would plan, read and
parse a source again every batch and compete for the same task slots; so rejects and profile changes pass
through the join operator (docs/decisions/one-streaming-query.md). The aggregates are summed in the sink,
not by a Spark aggregation: a groupBy would shuffle every batch a second time and write its totals apart
from the rows; summed from the rows a partition COPYs, in the same transaction, they equal the sums over
the enriched table in every committed state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from common import pipeline_file as pf
from common import plan
from common.config import Settings
from db import capture
from pipeline import cdc_fold, events, sources, stages
from pipeline.cdc_stall import CdcStall
from pipeline.join_config import LATEST, JoinConfig
from pipeline.sink_spec import aggregate_specs
from pipeline.sinks import Sink, StallWatch
from pipeline.status_files import now_ms
from pipeline.temporal_join import temporal_join


@dataclass(frozen=True)
class Flow:
    """The job's one streaming query, to start: its name, its frame and its foreachBatch sink."""

    name: str
    frame: DataFrame
    sink: Callable[[DataFrame, int], None]


def read_clicks(
    spark: SparkSession, settings: Settings, source: str, once: bool, start_ms: int | None = None
) -> DataFrame:
    if source == "kinesis":
        cap = None if once else sources.DEFAULT_MAX_RECORDS_PER_BATCH
        return sources.kinesis_clicks(spark, settings.clicks_stream, cap, start_ms)
    return sources.kafka_clicks(spark, settings.kafka_bootstrap, settings.clicks_topic, start_ms=start_ms)


def enrich(
    raw_clicks: DataFrame,
    cdc_raw: DataFrame,
    join: JoinConfig,
    pipeline: pf.Pipeline,
    registry: events.Registry | None = None,
    realtime: bool = False,
) -> DataFrame:
    """Steps 2 and 3, whatever the sources: raw events (event_id, source, payload, now_ms) and raw CDC records
    (topic, key, value, event_id, written_ms) -> the join's output (records.join_output(pipeline)).
    registry: where Avro events' schemas are read (events.registry_for), None for JSON events.
    realtime: the join for Spark's real-time mode (temporal_join, stages.join_tables)."""
    resolved = plan.of(pipeline)
    parsed = events.parse(raw_clicks, resolved.event_spec, registry)  # events, and rejects with their error
    cdc_registry = cdc_fold.avro_registry(pipeline)  # cdc.format avro: Avro change events
    if pipeline.tables:  # one stage per join (pipeline/stages.py); a one-table file keeps its one operator
        folded = cdc_fold.fold_tables(cdc_raw, cdc_fold.tables_spec(pipeline), cdc_registry)
        return stages.outputs(stages.join_tables(parsed, folded, join, pipeline, realtime), pipeline)
    changes = cdc_fold.fold(cdc_raw, resolved.profile_spec, cdc_registry)  # changes, progress, rejects
    # Rejects and changes ride through the join operator, so each source is read and parsed once per batch.
    # enriched clicks, dead letters, changelog rows
    return temporal_join(parsed, changes, join, pipeline, realtime)


def flow(
    spark: SparkSession,
    settings: Settings,
    source: str,
    join: JoinConfig,
    registry: events.Registry | None,
    once: bool = False,
    start_ms: int | None = None,
) -> Flow:
    """registry: where Avro events' schemas are read (events.registry_for), None for JSON events.
    start_ms: where a new checkpoint starts on the events (a reprocessed version's --from); the CDC topic
    is always read from its beginning, since the fold needs every profile version."""
    pipeline = settings.pipeline
    resolved = plan.of(pipeline)
    raw_clicks = read_clicks(spark, settings, source, once, start_ms)
    cdc_raw = sources.cdc(spark, settings.kafka_bootstrap, resolved)
    joined = enrich(raw_clicks, cdc_raw, join, pipeline, registry)
    totals = aggregate_specs(resolved, joined.schema)  # per key, from the rows each partition lands

    name = f"{pipeline.name}-{source}"  # the query: its checkpoint folder and batch ledger
    # Postgres (enriched events, the totals, dead letters) exactly once, then Kafka.
    cause = partial(capture.lost_message, settings.writer_dsn, resolved, resolved.captured)
    watch = CdcStall(resolved.cdc_topic, join.max_wait_ms, now_ms(), cause=cause)
    stall = None if join.mode == LATEST else StallWatch(watch, spark.streams)
    sink = Sink(
        name,
        settings.writer_dsn,
        settings.kafka_bootstrap,
        pipeline,
        joined.schema,
        totals,
        stall=stall,
    )
    return Flow(name, joined, sink)


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


# Real-time mode's query name (its checkpoint folder): its own, since its sources' offsets and its
# operator's timers are not the micro-batch query's (docs/decisions/realtime-mode.md, "Switching an
# installation between the modes").
REALTIME_SUFFIX = "-realtime"


def realtime_frame(
    spark: SparkSession, settings: Settings, join: JoinConfig, registry: events.Registry | None
) -> tuple[str, DataFrame]:
    """The query's name and the join's output for Spark's real-time mode: the events topic and the CDC topic
    through the project's Kafka source (sources.realtime_kafka), from their earliest records on a new
    checkpoint, the CDC topic's backlog read first, joined by the real-time operator (temporal_join).
    Kafka events only."""
    pipeline = settings.pipeline
    topic = settings.clicks_topic
    resolved = plan.of(pipeline)
    raw_clicks = sources.from_kafka_clicks(
        sources.realtime_kafka(spark, settings.kafka_bootstrap, topic, read_after=resolved.cdc_topic), topic
    )
    cdc_raw = sources.realtime_cdc(spark, settings.kafka_bootstrap, resolved)
    joined = enrich(raw_clicks, cdc_raw, join, pipeline, registry, realtime=True)
    return f"{pipeline.name}-kafka{REALTIME_SUFFIX}", joined


def start_realtime(
    frame: DataFrame, name: str, checkpoints: Path, batch_ms: int, sink: Any
) -> StreamingQuery:
    """The query in real-time mode into `sink`, a JVM ForeachWriter (sinks.realtime_writer): output mode
    update, a batch every batch_ms (how often offsets and state commit; rows move as they arrive)."""
    jvm: Any = frame.sparkSession._jvm
    query = (
        frame._jdf.writeStream()
        .queryName(name)
        .option("checkpointLocation", str(checkpoints / name))
        .outputMode("update")
        .trigger(jvm.org.apache.spark.sql.streaming.Trigger.RealTime(f"{batch_ms} milliseconds"))
        .foreach(sink)
        .start()
    )
    return StreamingQuery(query)
