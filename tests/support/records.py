"""Record shapes as users see them (docs/contracts.md "Topics"), written out: the spec the code is held to."""

from pyspark.sql.types import ArrayType, DataType, IntegerType, LongType, StringType, StructField, StructType

# A user_clicks value's fields, in the order the sink writes them: the enriched click, times in epoch ms.
# Why the join released a click when it did (`streamfold explain`): the user_clicks record's last fields.
RELEASE_FIELDS = ("cdc_progress", "released_by_max_wait")
USER_CLICKS_FIELDS = (
    "event_id",
    "uid",
    "click_time",
    "click_url",
    "device_type",
    "click_location",
    "clicks",
    "user_regionid",
    "user_gender",
    "user_interests",
    "user_registertime",
    "profile_valid_from",
    "profile_complete",
    *RELEASE_FIELDS,
)


# The default pipeline file's parsed event and profile change (pipeline/records.py click(p), change(p)).
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
    ("valid_from_ms", _LONG),  # source.ts_ms; common.names.BEGINNING_OF_TIME_MS for op=r
    ("lsn", _LONG),
    ("regionid", _STR),
    ("gender", _STR),
    ("interests", _STRS),
    ("registertime", _LONG),
    ("unavailable", ArrayType(IntegerType())),  # the columns Debezium did not send (unchanged TOASTed values)
    ("drifted", _STRS),  # per column, why the change holds no value of its type (drift)
)
