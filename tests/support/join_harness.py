"""A temporal join query on a real local Spark, fed from four file streams (events, changes, CDC progress and
rejects passed through), run one batch at a time, for any pipeline (the default file's unless told). An
"events" row has the columns of records.click(pipeline), a "changes" row those of records.change(pipeline);
a "changes" row may instead be an unfoldable CDC record (kind "error" with error, event_id and payload), as
pipeline.cdc_fold.fold emits it."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.types import StringType, StructField, StructType

from common.pipeline_file import Pipeline
from pipeline import records
from pipeline.join_config import JoinConfig
from pipeline.temporal_join import temporal_join
from tests.support.pipelines import DEFAULT

CDC_ERROR_FIELDS = ("kind", "error", "event_id", "payload")  # an unfoldable CDC record's (all text here)


class Harness:
    """Input folders for the four streams, one checkpoint, and the rows the join emitted so far."""

    def __init__(
        self, spark: SparkSession, root: Path, cfg: JoinConfig, pipeline: Pipeline = DEFAULT
    ) -> None:
        self.spark, self.root, self.cfg, self.pipeline = spark, root, cfg, pipeline
        self.checkpoint = str(root / "checkpoint")
        self.output: list[Row] = []  # events and rejects
        self.changes: list[Row] = []  # the profile changes passed through (change_op set)
        self.last_query: StreamingQuery | None = None
        self._files = 0
        for name in ("events", "changes", "progress", "rejects"):
            (root / name).mkdir()

    def write(self, stream: str, rows: list[dict[str, Any]]) -> None:
        self._files += 1
        final = self.root / stream / f"{self._files:04d}.json"
        hidden = final.with_name(f".{final.name}")  # the file source skips hidden files: rename is atomic
        hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
        hidden.rename(final)

    def joined(self) -> DataFrame:
        read = self.spark.readStream.format("json")
        rejects = read.schema("event_id string, error string, source string, payload string").load(
            str(self.root / "rejects")
        )
        events = read.schema(records.click(self.pipeline)).load(str(self.root / "events"))
        change = records.change(self.pipeline)
        changes = read.schema(
            StructType([*change.fields, *(StructField(c, StringType()) for c in CDC_ERROR_FIELDS)])
        ).load(str(self.root / "changes"))
        progress = read.schema("progress_ms long").load(str(self.root / "progress"))
        cdc = changes.select(
            *(F.col(f"`{name}`") for name in change.fieldNames()),
            F.coalesce("kind", F.lit("change")).alias("kind"),
            "error",
            "event_id",
            F.col("payload").cast("binary").alias("payload"),
        ).unionByName(progress.withColumn("kind", F.lit("progress")), allowMissingColumns=True)
        return temporal_join(
            events.unionByName(
                rejects.withColumn("payload", F.col("payload").cast("binary")), allowMissingColumns=True
            ),
            cdc,
            self.cfg,
            self.pipeline,
        )

    def start(self) -> StreamingQuery:
        def collect(batch: DataFrame, _batch_id: int) -> None:
            for row in batch.collect():
                (self.output if row.change_op is None else self.changes).append(row)

        writer = self.joined().writeStream.foreachBatch(collect).option("checkpointLocation", self.checkpoint)
        self.last_query = writer.trigger(availableNow=True).start()
        return self.last_query

    def run(self) -> dict[str, Row]:
        """One AvailableNow run (a single batch: the rate source cannot do more); its rows by event_id."""
        return run_together([self])[0]

    def watermark_ms(self) -> int:
        """The watermark the last batch ran with (what the operator saw as the current watermark)."""
        assert self.last_query is not None and self.last_query.lastProgress is not None
        iso = self.last_query.lastProgress["eventTime"].get("watermark", "1970-01-01T00:00:00.000Z")
        return round(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def run_together(harnesses: list[Harness]) -> list[dict[str, Row]]:
    """One AvailableNow run of each harness's query, side by side; each one's rows by event_id."""
    before = [len(h.output) for h in harnesses]
    queries = [h.start() for h in harnesses]
    try:
        for query in queries:
            query.awaitTermination()
    finally:
        for query in queries:
            query.stop()  # nothing to do once it ended; ends the others when one failed
    return [{r.event_id: r for r in h.output[n:]} for h, n in zip(harnesses, before, strict=True)]
