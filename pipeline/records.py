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

Names come from the plan (common/plan.py EnrichedNames, from the file's outputs.enriched): the key, the
event time (`<time>_ms` along the path, the sink writes `<time>`), each event field, the count, each
profile column (prefixed), each further table's columns (under its prefix), `<valid_from>_ms` and the
complete flag. A record's id, its source position, is
`event_id` for events and CDC records alike (`dead_letter_id` in streamfold.dead_letters). Inside the
join, `ts_ms` is the one time column events and changes share.

The parsers return the rows of click(p) (without event_id) and change(p), by position, for any pipeline's
specs (tests/support/records.py writes the default pipeline's out).
"""

from __future__ import annotations

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

from common import plan
from common.pipeline_file import Pipeline
from pipeline.field_types import spark_type

_STR, _LONG, _INT, _STRS = StringType(), LongType(), IntegerType(), ArrayType(StringType())


def _struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])


REJECT = _struct(
    ("error", _STR),
    ("source", _STR),
    ("payload", BinaryType()),
)


def click(pipeline: Pipeline) -> StructType:
    """An event as parsed: event_id, the key (named as its field), each field, the time in ms, the count."""
    events, named = pipeline.events, plan.of(pipeline).names
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
    spec/temporal_state.py). Each join's columns under its prefix, the profile's first."""
    resolved = plan.of(pipeline)
    named = resolved.names
    return _unique(
        _struct(
            ("event_id", _STR),
            (named.key, _STR),
            (named.time_ms, _LONG),
            *((named.fields[name], spark_type(f.type)) for name, f in pipeline.events.fields.items()),
            (named.count, _INT),
            *(
                (join.output(name), spark_type(c.type))
                for join in resolved.joins
                for name, c in join.table.columns.items()
            ),
            (named.valid_from_ms, _LONG),
            (named.complete, BooleanType()),
        )
    )


# The join's output columns after change_op: a change row's lsn; an event row's CDC progress when the join
# released it (null in join.mode=latest and before any progress) and whether join.max_wait released it.
CHANGE_LSN = "change_lsn"
CDC_PROGRESS_MS = plan.CDC_PROGRESS_MS
RELEASED_BY_MAX_WAIT = plan.RELEASED_BY_MAX_WAIT


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
