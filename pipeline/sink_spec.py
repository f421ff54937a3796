"""The sink spec: how the JVM landing (jvm/src/main/java/io/streamfold/sink/) writes the join's output, built
from the pipeline file (docs/contracts.md "The pipeline file").

The spec names the enriched table and topic, the changelog topic, each history table, the dead
letters, and each aggregate's table and topic, and says for each column the sink writes which column of the
join's output it is (its ordinal, found by NAME in the output's schema, so the join may order its columns
as it likes) and its type:
a pipeline column type, or `epoch_ms` (the event time) or `valid_from_ms` (a profile version's start,
negative for a snapshot version). The JVM checks each type against the output's Spark type.

Every name, type and output column comes from the resolved plan (common/plan.py): the enriched columns are
the plan's, in their order, each from the output column the plan says (the event time and valid-from, which
the join carries in ms as `<name>_ms`, and the CDC progress at release, `cdc_progress_ms`); the aggregates'
keys and sums are the plan's. The history columns are history_layout's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pyspark.sql.types import StructType

from common import names, plan
from db.pipeline_tables import history_columns
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


def profile_column(resolved: plan.Plan, column: str) -> str:
    """A profile column's column in the enriched table and the join's output."""
    return resolved.joins[0].output(column)


def aggregate_specs(resolved: plan.Plan, output: StructType) -> list[dict[str, Any]]:
    """Each aggregate of the file: its keys and sums as columns of the join output `output`, and the table
    and topic its totals go to (the landing sums them per partition: GroupTotals.java)."""
    ordinal = _ordinals(output)
    return [_aggregate(resolved, a, ordinal) for a in resolved.aggregates]


def sink_spec(
    resolved: plan.Plan, output: StructType, aggregates: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The spec Landing.land takes (as JSON), for the join output `output`: with the given aggregates, else
    the file's."""
    ordinal = _ordinals(output)
    profile, named = resolved.joins[0], resolved.names
    key = ordinal(named.key)
    valid_from = ordinal(named.valid_from_ms)
    return {
        "kind_ordinal": ordinal(KIND),
        "enriched": {
            "table": resolved.enriched_table,
            "topic": resolved.enriched_topic,
            "key_ordinal": key,
            "complete_ordinal": ordinal(named.complete),
            "columns": [
                {"name": c.name, "ordinal": ordinal(c.output), "type": c.type} for c in resolved.enriched
            ],
        },
        "changelog": {
            "topic": resolved.changelog_topic,
            "key_ordinal": key,
            "op_ordinal": ordinal(CHANGE_OP),
            "fields": [
                {"name": profile.table.key, "ordinal": key, "type": profile.table.key_type},
                *(
                    {"name": name, "ordinal": ordinal(profile.output(name)), "type": column.type}
                    for name, column in profile.table.columns.items()
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
                    for name, output_name, kind in history_layout(resolved, history.join)
                ],
            }
            for history in resolved.histories
        ],
        "dead_letters": {
            "table": names.DEAD_LETTERS_TABLE,
            "topic": resolved.dead_letters_topic,
            "id_ordinal": ordinal(EVENT_ID),
            "error_ordinal": ordinal(ERROR),
            "source_ordinal": ordinal(SOURCE),
            "payload_ordinal": ordinal(PAYLOAD),
        },
        "aggregates": aggregate_specs(resolved, output) if aggregates is None else aggregates,
        # outputs.format avro: the enriched and changelog schemas and ids, once registered
        # (pipeline/avro_outputs.py); null: JSON values.
        "avro": None,
    }


# The history table's primary key: its first columns, the key, valid_from and lsn.
HISTORY_KEY_COLUMNS = 3


def history_layout(resolved: plan.Plan, join: plan.TableJoin) -> list[tuple[str, str, str]]:
    """A join's history table's columns in its order: (column, the join output column of its version rows,
    type). A version row has the key, valid_from, op and lsn where a change row has them, and the values in
    the join's output columns (under its prefix)."""
    names = resolved.names
    sources = {
        join.table.key: (names.key, join.table.key_type),
        "valid_from": (names.valid_from_ms, plan.VALID_FROM_MS),
        "lsn": (records.CHANGE_LSN, "bigint"),
        "op": (CHANGE_OP, "text"),
        "incomplete": (ERROR, "text"),
        **{name: (join.output(name), c.type) for name, c in join.table.columns.items()},
    }
    return [(c.name, *sources[c.name]) for c in history_columns(join)]


def sink_spec_json(resolved: plan.Plan, output: StructType) -> str:
    return json.dumps(sink_spec(resolved, output))


def _aggregate(
    resolved: plan.Plan, aggregate: plan.AggregatePlan, ordinal: Callable[[str], int]
) -> dict[str, Any]:
    count_column = resolved.names.count_column
    return {
        "name": aggregate.name,
        "table": aggregate.table,
        "topic": aggregate.topic,
        "keys": [
            {"column": k.column, "ordinal": ordinal(k.output), "type": k.type, "md5": k.md5}
            for k in aggregate.keys
        ],
        "conflict_columns": aggregate.primary_key,
        "count_column": aggregate.count_column,
        # Without a count field every event counts 1.
        "count_ordinal": None if count_column is None else ordinal(count_column),
        "sums": [{"column": s.column, "ordinal": ordinal(s.output), "type": s.type} for s in aggregate.sums],
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
