"""The sink spec: how the JVM landing (jvm/src/main/java/io/streamfold/sink/) writes the join's output, built
from the pipeline file (docs/contracts.md "The pipeline file").

The spec names the enriched table and topic, the changelog topic, each history table, the dead
letters, and each aggregate's table and topic, and says for each column the sink writes which column of the
join's output it is (its ordinal, found by NAME in the output's schema, so the join may order its columns
as it likes) and its type:
a pipeline column type, or `epoch_ms` (the event time) or `valid_from_ms` (a profile version's start,
negative for a snapshot version). The JVM checks each type against the output's Spark type.

The enriched columns are db.pipeline_tables.enriched_columns, in that order; each comes from the output
column of the same name, except the event time and valid-from, which the join carries in ms as `<name>_ms`,
and the CDC progress at release (`cdc_progress_ms`). The history columns are history_layout's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import StructType

from common import join_plan, names
from common.pipeline_file import Aggregate, Pipeline
from db.pipeline_tables import (
    CDC_PROGRESS,
    RELEASED_BY_MAX_WAIT,
    aggregate_columns,
    enriched_columns,
    history_columns,
)
from pipeline import records

# The join's output columns the sink reads besides the pipeline's own (docs/contracts.md, the join's output).
KIND = "kind"
EVENT_ID = "event_id"
ERROR = "error"
SOURCE = "source"
PAYLOAD = "payload"
CHANGE_OP = "change_op"
# The changelog record's field holding the version's start.
VALID_FROM = "valid_from"
# The changelog record's field saying which values are unknown, and why (only then).
INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class EnrichedColumn:
    """An enriched table column: its name (also in the enriched topic's records), the join output column it
    comes from, and its type."""

    name: str
    output: str
    type: str


def enriched_layout(pipeline: Pipeline) -> list[EnrichedColumn]:
    """The enriched table's columns in its order, each with the join output column it comes from."""
    given, events = pipeline.outputs.enriched, pipeline.events
    key = given.key_column or events.key
    time = given.time_column or events.time.field
    sources: dict[str, tuple[str, str]] = {
        EVENT_ID: (EVENT_ID, "text"),
        key: (key, pipeline.key_type),
        time: (f"{time}_ms", "epoch_ms"),
        **{pipeline.event_column(n): (pipeline.event_column(n), f.type) for n, f in events.fields.items()},
        given.valid_from_column: (f"{given.valid_from_column}_ms", "valid_from_ms"),
        given.complete_column: (given.complete_column, "boolean"),
        CDC_PROGRESS: (records.CDC_PROGRESS_MS, "epoch_ms"),
        RELEASED_BY_MAX_WAIT: (records.RELEASED_BY_MAX_WAIT, "boolean"),
    }
    if events.count:
        count = given.count_column or events.count
        sources[count] = (count, "integer")
    for name, column in pipeline.profile.columns.items():
        sources[profile_column(pipeline, name)] = (profile_column(pipeline, name), column.type)
    for name, column in records.table_columns(pipeline):
        sources[name] = (name, column.type)
    return [EnrichedColumn(c.name, *sources[c.name]) for c in enriched_columns(pipeline)]


def profile_column(pipeline: Pipeline, column: str) -> str:
    """A profile column's column in the enriched table and the join's output."""
    return f"{pipeline.outputs.enriched.profile_prefix}{column}"


def joined_column(pipeline: Pipeline, source: str, name: str) -> str:
    """A resolved reference's column in the enriched table and the join's output: an event field's, or a
    column of the profile or of a table, under its prefix."""
    if source == "event":
        return pipeline.event_column(name)
    return join_plan.join_named(pipeline, source).output(name)


def aggregate_specs(pipeline: Pipeline, output: StructType) -> list[dict[str, Any]]:
    """Each aggregate of the file: its keys and sums as columns of the join output `output`, and the table
    and topic its totals go to (the landing sums them per partition: GroupTotals.java)."""
    ordinal = _ordinals(output)
    return [_aggregate(pipeline, i, a, ordinal) for i, a in enumerate(pipeline.aggregates)]


def sink_spec(
    pipeline: Pipeline, output: StructType, aggregates: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The spec Landing.land takes (as JSON), for the join output `output`: with the given aggregates, else
    the file's."""
    ordinal = _ordinals(output)
    given = pipeline.outputs.enriched
    key = ordinal(given.key_column or pipeline.events.key)
    valid_from = ordinal(f"{given.valid_from_column}_ms")
    return {
        "kind_ordinal": ordinal(KIND),
        "enriched": {
            "table": pipeline.enriched_table,
            "topic": pipeline.enriched_topic,
            "key_ordinal": key,
            "complete_ordinal": ordinal(given.complete_column),
            "columns": [
                {"name": c.name, "ordinal": ordinal(c.output), "type": c.type}
                for c in enriched_layout(pipeline)
            ],
        },
        "changelog": {
            "topic": pipeline.changelog_topic,
            "key_ordinal": key,
            "op_ordinal": ordinal(CHANGE_OP),
            "fields": [
                {"name": pipeline.profile.key, "ordinal": key, "type": pipeline.key_type},
                *(
                    {"name": name, "ordinal": ordinal(profile_column(pipeline, name)), "type": column.type}
                    for name, column in pipeline.profile.columns.items()
                ),
                {"name": VALID_FROM, "ordinal": valid_from, "type": "valid_from_ms"},
                {"name": INCOMPLETE, "ordinal": ordinal(ERROR), "type": "text"},
            ],
        },
        "histories": [
            {
                "kind": history.kind,
                "table": history.table,
                "key_columns": HISTORY_KEY_COLUMNS,
                "columns": [
                    {"name": name, "ordinal": ordinal(output_name), "type": kind}
                    for name, output_name, kind in history_layout(pipeline, history.join)
                ],
            }
            for history in join_plan.histories(pipeline)
        ],
        "dead_letters": {
            "table": names.DEAD_LETTERS_TABLE,
            "topic": pipeline.dead_letters_topic,
            "id_ordinal": ordinal(EVENT_ID),
            "error_ordinal": ordinal(ERROR),
            "source_ordinal": ordinal(SOURCE),
            "payload_ordinal": ordinal(PAYLOAD),
        },
        "aggregates": aggregate_specs(pipeline, output) if aggregates is None else aggregates,
        # outputs.format avro: the enriched and changelog schemas and ids, once registered
        # (pipeline/avro_outputs.py); null: JSON values.
        "avro": None,
    }


# The history table's primary key: its first columns, the key, valid_from and lsn.
HISTORY_KEY_COLUMNS = 3


def history_layout(pipeline: Pipeline, join: join_plan.TableJoin) -> list[tuple[str, str, str]]:
    """A join's history table's columns in its order: (column, the join output column of its version rows,
    type). A version row has the key, valid_from, op and lsn where a change row has them, and the values in
    the join's output columns (under its prefix)."""
    valid_from = f"{pipeline.outputs.enriched.valid_from_column}_ms"
    sources = {
        join.table.key: (
            pipeline.outputs.enriched.key_column or pipeline.events.key,
            join.table.key_type,
        ),
        "valid_from": (valid_from, "valid_from_ms"),
        "lsn": (records.CHANGE_LSN, "bigint"),
        "op": (CHANGE_OP, "text"),
        "incomplete": (ERROR, "text"),
        **{name: (join.output(name), c.type) for name, c in join.table.columns.items()},
    }
    return [(c.name, *sources[c.name]) for c in history_columns(join)]


def sink_spec_json(pipeline: Pipeline, output: StructType) -> str:
    return json.dumps(sink_spec(pipeline, output))


def _aggregate(
    pipeline: Pipeline, i: int, aggregate: Aggregate, ordinal: Callable[[str], int]
) -> dict[str, Any]:
    _, primary_key = aggregate_columns(pipeline, aggregate)
    keys = []
    for column, ref in aggregate.group_by.items():
        where = f"aggregates.{i}.group_by.{column}"
        source, name = pipeline.resolve(ref, where)
        kind = pipeline.reference_type(source, name)
        # A key Postgres indexes by its md5 has the digest column in the primary key instead.
        md5 = column not in primary_key
        at = ordinal(joined_column(pipeline, source, name))
        keys.append({"column": column, "ordinal": at, "type": kind, "md5": md5})
    sums = []
    for column, ref in aggregate.sums.items():
        _, name = pipeline.resolve(ref, f"aggregates.{i}.sums.{column}")
        field = pipeline.events.fields[name]
        sums.append({"column": column, "ordinal": ordinal(pipeline.event_column(name)), "type": field.type})
    events = pipeline.events
    # Without a count field every event counts 1.
    count = ordinal(pipeline.outputs.enriched.count_column or events.count) if events.count else None
    return {
        "name": aggregate.name,
        "table": pipeline.aggregate_table(aggregate),
        "topic": pipeline.aggregate_topic(aggregate),
        "keys": keys,
        "conflict_columns": primary_key,
        "count_column": aggregate.count_column,
        "count_ordinal": count,
        "sums": sums,
    }


def _ordinals(output: StructType) -> Callable[[str], int]:
    """name -> ordinal in the join's output; a missing or ambiguous name is an error naming the columns."""
    fields = output.fieldNames()
    twice = sorted({n for n in fields if fields.count(n) > 1})
    if twice:
        raise ValueError(f"the join's output has the columns {twice} twice: the sink reads columns by name")

    def ordinal(name: str) -> int:
        if name not in fields:
            raise ValueError(f"the join's output has no column {name!r} (it has {', '.join(fields)})")
        return fields.index(name)

    return ordinal
