"""The records that flow through the job, each defined once: the Spark schemas, the UDFs' return types and
the column lists of pipeline/events.py, cdc_fold.py, temporal_join.py (and the naive baseline's staging
table) are derived from these.

  CLICK     a click as parsed (pipeline/events.py, the default event spec), with the id of its record
  CHANGE    a profile version folded from a Debezium envelope (pipeline/cdc_fold.py)
  REJECT    why a record is a dead letter, where it came from, and its original bytes
  ENRICHED  a click joined with the profile version valid at its time: a row of streamfold.enriched_clicks,
            times in epoch ms (the sink writes them as timestamptz: click_time, profile_valid_from)
  JOIN_OUTPUT  what the join emits (io.streamfold.join.TemporalJoin.OUTPUT_SCHEMA, held equal to this by
            tests/unit/test_temporal_join_spark.py): ENRICHED rows, REJECT rows, and each profile change
            (change_op set) for users_changelog

One name per concept along the path: a click's time is `click_time_ms` from the parser to the sink
(`event_time` only in the JSON producers write, `click_time` in Postgres and user_clicks); a record's id,
its source position, is `event_id` for clicks and CDC records alike (`dead_letter_id` in
streamfold.dead_letters). Inside the join, `ts_ms` is the one time column clicks and changes share.

The JVM reads these columns by name, except the UDFs' return rows, which it builds by position: CLICK
(without event_id) is EventParse's row for the pipeline file's event spec and CHANGE is EnvelopeFold's for
its profile spec, in this order.
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

_STR, _LONG, _INT, _STRS = StringType(), LongType(), IntegerType(), ArrayType(StringType())


def _struct(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind) for name, kind in fields])


CLICK = _struct(
    # The record's position: kafka:<topic>:<partition>:<offset> or kinesis:<stream>:<shard>:<sequence>.
    ("event_id", _STR),
    ("userid", _STR),
    ("url", _STR),
    ("device_id", _STR),
    ("ip", _STR),
    ("click_time_ms", _LONG),
    ("clicks", _INT),
)
CHANGE = _struct(
    ("userid", _STR),
    ("op", _STR),  # c | u | d | r
    ("valid_from_ms", _LONG),  # source.ts_ms; pipeline.temporal_state.BEGINNING_OF_TIME_MS for op=r
    ("lsn", _LONG),
    ("regionid", _STR),
    ("gender", _STR),
    ("interests", _STRS),
    ("registertime", _LONG),
)
REJECT = _struct(
    ("error", _STR),
    ("source", _STR),
    ("payload", BinaryType()),
)
ENRICHED = _struct(
    ("event_id", _STR),
    ("uid", _STR),
    ("click_time_ms", _LONG),
    ("click_url", _STR),
    ("device_type", _STR),
    ("click_location", _STR),
    ("clicks", _INT),
    ("user_regionid", _STR),
    ("user_gender", _STR),
    ("user_interests", _STRS),
    ("user_registertime", _LONG),
    ("profile_valid_from_ms", _LONG),
    # False when join.max_wait released the click before CDC progress reached it (CDC stalled).
    ("profile_complete", BooleanType()),
)
JOIN_OUTPUT = StructType(
    [
        *ENRICHED.fields,
        # Rejected records passed through the join operator: null on joined rows.
        *REJECT.fields,
        # A profile change passed through the operator (c, u, d or r): null on the other rows. Such a row
        # has uid and the change's profile in the user_* columns.
        StructField("change_op", _STR),
    ]
)


def names(schema: StructType) -> tuple[str, ...]:
    return tuple(schema.fieldNames())


def udf_type(*fields: StructField) -> str:
    """A Java UDF's return type as registerJavaFunction takes it: struct<name:type,...>."""
    return StructType(list(fields)).simpleString()
