"""The records that flow through the job, each defined once from the pipeline file (common/pipeline_file.py):
the Spark schemas, the UDFs' return types and the column lists of the parsers, pipeline/temporal_join.py
and the naive baseline's staging table are derived from these.

  click(p)        an event as parsed (the parser's row, by position: the key, each field, the time in ms,
                  the count), with the id of its record
  change(p)       a profile version folded from a Debezium envelope (pipeline/cdc_fold.py)
  REJECT          why a record is a dead letter, where it came from, and its original bytes
  enriched(p)     an event joined with the profile version valid at its time: a row of the enriched table,
                  times in epoch ms (the sink writes them as timestamptz)
  join_output(p)  what the join emits (io.streamfold.join.OutputRows builds its rows by position, Python
                  names the columns; tests/unit/test_temporal_join_spark.py holds them together): `kind`
                  ("event", "reject" or "change") first, then the enriched columns, the REJECT columns,
                  change_op and change_lsn (set on a profile change passed through for the changelog and
                  the history), cdc_progress_ms and released_by_max_wait (an event's release)

Names come from the file's outputs.enriched: the key, the event time (`<time>_ms` along the path, the
sink writes `<time>`), each event field, the count, each profile column (prefixed), each further table's
columns (under its prefix), `<valid_from>_ms` and the complete flag. A record's id, its source position, is
`event_id` for events and CDC records alike (`dead_letter_id` in streamfold.dead_letters). Inside the
join, `ts_ms` is the one time column events and changes share.

The parsers return the rows of click(p) (without event_id) and change(p), by position, for any pipeline's
specs (tests/support/records.py writes the default pipeline's out).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from common import join_plan
from common.pipeline_file import Pipeline, ProfileColumn
from pipeline.field_types import spark_type

_STR, _LONG, _INT, _STRS = StringType(), LongType(), IntegerType(), ArrayType(StringType())


def _struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])


REJECT = _struct(
    ("error", _STR),
    ("source", _STR),
    ("payload", BinaryType()),
)


@dataclass(frozen=True)
class EnrichedNames:
    """The enriched columns' names (outputs.enriched), each defaulting to the field's own name."""

    key: str
    time_ms: str
    fields: tuple[str, ...]
    count: str  # always there: 1 per event when the file has no count field
    profile: tuple[str, ...]
    valid_from_ms: str
    complete: str


def enriched_names(pipeline: Pipeline) -> EnrichedNames:
    out, events = pipeline.outputs.enriched, pipeline.events
    return EnrichedNames(
        key=out.key_column or events.key,
        time_ms=f"{out.time_column or events.time.field}_ms",
        fields=tuple(out.event_columns.get(name, name) for name in events.fields),
        count=out.count_column or events.count or "count",
        profile=tuple(f"{out.profile_prefix}{name}" for name in pipeline.profile.columns),
        valid_from_ms=f"{out.valid_from_column}_ms",
        complete=out.complete_column,
    )


def click(pipeline: Pipeline) -> StructType:
    """An event as parsed: event_id, the key (named as its field), each field, the time in ms, the count."""
    events, named = pipeline.events, enriched_names(pipeline)
    return _unique(
        _struct(
            ("event_id", _STR),
            (events.key, _STR),
            *((name, spark_type(f.type)) for name, f in events.fields.items()),
            (named.time_ms, _LONG),
            (named.count, _INT),
        )
    )


# A change's columns Debezium did not send (an unchanged TOASTed value), by index: spec/envelopes.py.
UNAVAILABLE = StructField("unavailable", ArrayType(IntegerType()))
# Per carried column (in order), why a change holds no value of its type (drift: the column renamed,
# dropped or retyped), null where it does; null when no column drifted: spec/envelopes.py.
DRIFTED = StructField("drifted", _STRS)


def change(pipeline: Pipeline) -> StructType:
    """A profile version: the key (named as its column), op (c, u, d or r), valid_from_ms (source.ts_ms;
    BEGINNING_OF_TIME_MS for op=r), lsn, each carried column, then `unavailable`: the indexes of the columns
    Debezium did not send (null when it sent them all), and `drifted` (DRIFTED)."""
    profile = pipeline.profile
    return _unique(
        _struct(
            (profile.key, _STR),
            ("op", _STR),
            ("valid_from_ms", _LONG),
            ("lsn", _LONG),
            *((name, spark_type(c.type)) for name, c in profile.columns.items()),
            (UNAVAILABLE.name, UNAVAILABLE.dataType),
            (DRIFTED.name, DRIFTED.dataType),
        )
    )


def enriched(pipeline: Pipeline) -> StructType:
    """An enriched event; the profile columns hold if_missing when it had no profile version, and
    complete is false when join.max_wait released it before CDC progress reached it (CDC stalled), or when
    the version's value of a column is unknown (an unchanged TOASTed value, or drift:
    spec/temporal_state.py)."""
    events, profile, named = pipeline.events, pipeline.profile, enriched_names(pipeline)
    return _unique(
        _struct(
            ("event_id", _STR),
            (named.key, _STR),
            (named.time_ms, _LONG),
            *(
                (name, spark_type(f.type))
                for name, f in zip(named.fields, events.fields.values(), strict=True)
            ),
            (named.count, _INT),
            *(
                (name, spark_type(c.type))
                for name, c in zip(named.profile, profile.columns.values(), strict=True)
            ),
            *((name, spark_type(c.type)) for name, c in table_columns(pipeline)),
            (named.valid_from_ms, _LONG),
            (named.complete, BooleanType()),
        )
    )


def table_columns(pipeline: Pipeline) -> list[tuple[str, ProfileColumn]]:
    """Each further table's columns (none in a one-table file), in the plan's order: the enriched name
    (under the table's prefix) and the column."""
    return [
        (join.output(name), column)
        for join in join_plan.joins(pipeline)[1:]
        for name, column in join.table.columns.items()
    ]


# The join's output columns after change_op: a change row's lsn; an event row's CDC progress when the join
# released it (null in join.mode=latest and before any progress) and whether join.max_wait released it.
CHANGE_LSN = "change_lsn"
CDC_PROGRESS_MS = "cdc_progress_ms"
RELEASED_BY_MAX_WAIT = "released_by_max_wait"


def join_output(pipeline: Pipeline) -> StructType:
    """What the join emits: kind, the enriched columns, the REJECT columns (a rejected record passed
    through; null on the other rows), change_op (a profile version as stored: c, u, d or r; such a row has
    the key, the version's profile columns and valid_from, and when some of its values are unknown, complete
    false and error saying which), then change_lsn (a change row's), cdc_progress_ms and
    released_by_max_wait (an event row's)."""
    return _unique(
        StructType(
            [
                StructField("kind", _STR),
                *enriched(pipeline).fields,
                *REJECT.fields,
                StructField("change_op", _STR),
                StructField(CHANGE_LSN, _LONG),
                StructField(CDC_PROGRESS_MS, _LONG),
                StructField(RELEASED_BY_MAX_WAIT, BooleanType()),
            ]
        )
    )


def _unique(schema: StructType) -> StructType:
    names = schema.fieldNames()
    clashing = sorted({n for n in names if names.count(n) > 1})
    if clashing:
        raise ValueError(f"the pipeline's columns {clashing} clash: rename them in outputs.enriched")
    return schema


def names(schema: StructType) -> tuple[str, ...]:
    return tuple(schema.fieldNames())


def udf_type(*fields: StructField) -> str:
    """A Java UDF's return type as registerJavaFunction takes it: struct<name:type,...>."""
    return StructType(list(fields)).simpleString()
