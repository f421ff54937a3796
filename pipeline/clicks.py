"""Click records: the JSON contract, validation, and the reason a record is rejected.

A click is one JSON object per record:
    {"userid": str, "url": str, "device_id": str, "ip": str, "event_time": epoch-ms int,
     "clicks": int (optional, default 1)}
Anything else goes to the dead letters with a reason; nothing is silently dropped.

`parse_click` is the executable contract (the e2e oracle uses it); `parse` is the same contract in
the JVM (no Python per record): a Java fast path for plain clicks (jvm/.../clicks/PlainClick.java) and
Spark's native JSON functions for everything else, both held to `parse_click` by a differential fuzz
test (tests/unit/test_parsers_spark.py). "JSON" is strict JSON as pipeline.strict_json reads it. A non-empty
string has a character that is not whitespace (Python's str.isspace()).

Reasons (Spark wording; `parse_click`'s differs only in how the offending value is shown):
    empty record (null value) | record of N bytes exceeds the 65536-byte limit |
    not JSON: <why> | expected a JSON object, got <type> |
    clicks must be an integer in 1..1000000, got <value> | <field> must be a non-empty string, got <value> |
    event_time must be epoch milliseconds (integer), got <value> |
    event_time N is outside the plausible range (2000-01-01 .. now + 1 minute)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.strict_json import barrier, is_int, json_type, loads_strict, shown, with_json

MAX_RECORD_BYTES = 64 * 1024
# Event times before this are not real clicks (2000-01-01T00:00:00Z).
MIN_EVENT_MS = 946_684_800_000
# Device clocks drift a little; a click stamped further ahead of the batch's processing time is bogus
# (and would hold back `--once`, which waits for the watermark to pass every click).
MAX_FUTURE_MS = 60 * 1000
MAX_CLICKS = 1_000_000
# Python's str.isspace() characters, as a Java regex class (a unit test holds it to str.isspace()).
WHITESPACE = (
    "\\u0009-\\u000d\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
)
TEXT_FIELDS = ("userid", "url", "device_id", "ip")
PLAIN_CLICK_UDF = "streamfold_plain_click"
# The row PlainClick returns (jvm/src/main/java/io/streamfold/clicks/PlainClick.java), field by field.
PLAIN_CLICK_TYPE = (
    "struct<userid:string,url:string,device_id:string,ip:string,event_time_ms:bigint,clicks:int>"
)
PARSED_COLUMNS = (
    "event_id",
    "userid",
    "event_time_ms",
    "url",
    "device_id",
    "ip",
    "clicks",
    "error",
    "source",
    "payload",
)


@dataclass(frozen=True)
class Click:
    userid: str
    url: str
    device_id: str
    ip: str
    event_time_ms: int
    clicks: int


class Rejected(ValueError):
    """Why a record is not a click."""


def parse_click(payload: bytes | None, now_ms: int) -> Click:
    """Validate one record against the click contract, or raise Rejected with the reason."""
    if payload is None:
        raise Rejected("empty record (null value)")
    if len(payload) > MAX_RECORD_BYTES:
        raise Rejected(f"record of {len(payload)} bytes exceeds the {MAX_RECORD_BYTES}-byte limit")
    try:
        obj = loads_strict(payload)
    except ValueError as exc:
        raise Rejected(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise Rejected(f"expected a JSON object, got {type(obj).__name__}")
    clicks = obj.get("clicks", 1)
    if not is_int(clicks) or not 1 <= clicks <= MAX_CLICKS:
        raise Rejected(f"clicks must be an integer in 1..{MAX_CLICKS}, got {clicks!r}")
    return Click(
        userid=_text(obj, "userid"),
        url=_text(obj, "url"),
        device_id=_text(obj, "device_id"),
        ip=_text(obj, "ip"),
        event_time_ms=_event_time(obj, now_ms),
        clicks=clicks,
    )


def _text(obj: dict[str, Any], field: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value.strip():
        raise Rejected(f"{field} must be a non-empty string, got {value!r}")
    return value


def _event_time(obj: dict[str, Any], now_ms: int) -> int:
    value = obj.get("event_time")
    if not is_int(value):
        raise Rejected(f"event_time must be epoch milliseconds (integer), got {value!r}")
    if value < MIN_EVENT_MS or value > now_ms + MAX_FUTURE_MS:
        raise Rejected(f"event_time {value} is outside the plausible range (2000-01-01 .. now + 1 minute)")
    return value


# --- the same contract in Spark's native functions -----------------------------------------------------


def is_text(value: Column, type_: Column) -> Column:
    """A JSON string (type_ = json_type(value)) with at least one non-whitespace character."""
    return (type_ == "string") & ~F.try_variant_get(value, "$", "string").rlike(f"^[{WHITESPACE}]*$")


def parse(raw: DataFrame) -> DataFrame:
    """Columns event_id, source, payload (binary), now_ms -> PARSED_COLUMNS; error NULL for a click,
    else the reason, with the original payload (NULL for a click).

    Two paths in one projection (a union would read the source twice): the JVM fast path
    (`PlainClick`, a few microseconds) returns the fields of a plain, valid click; only the records it
    gives up on go through the full parser below (try_parse_json, schema_of_variant, regexes: ~35 us
    a record), which finds the reason or accepts the unusual but valid ones. The full parser runs in
    stages (one select each), so that each parsed value is computed once and the generated code stays
    small.
    """
    spark = raw.sparkSession
    spark.udf.registerJavaFunction(PLAIN_CLICK_UDF, "io.streamfold.clicks.PlainClick", PLAIN_CLICK_TYPE)
    plain = raw.select(
        "event_id",
        "source",
        "now_ms",
        F.call_function(PLAIN_CLICK_UDF, "payload", "now_ms").alias("_plain"),
        "payload",
    )
    unusual = plain.select(
        "event_id",
        "source",
        "now_ms",
        "_plain",
        F.when(F.col("_plain").isNull(), F.col("payload")).alias("payload"),
    )
    fields = (*TEXT_FIELDS, "event_time", "clicks")
    parsed = with_json(unusual, "payload", "_obj")
    typed = parsed.select(
        "*",
        json_type(F.col("_obj")).alias("_obj_type"),
        *(F.try_variant_get("_obj", f"$.{name}", "variant").alias(f"_v_{name}") for name in fields),
    ).select("*", *(json_type(F.col(f"_v_{name}")).alias(f"_t_{name}") for name in fields))

    def v(name: str) -> Column:
        return F.col(f"_v_{name}")

    def t(name: str) -> Column:
        return F.col(f"_t_{name}")

    clicks = F.coalesce(F.try_variant_get(v("clicks"), "$", "bigint"), F.lit(1))
    event_time = F.try_variant_get(v("event_time"), "$", "bigint")
    size = F.octet_length("payload")
    error = (
        F.when(F.col("payload").isNull(), "empty record (null value)")
        .when(
            size > MAX_RECORD_BYTES,
            F.format_string(f"record of %d bytes exceeds the {MAX_RECORD_BYTES}-byte limit", size),
        )
        .when(F.col("_obj_error").isNotNull(), F.col("_obj_error"))
        .when(
            F.col("_obj_type") != "object",
            F.concat(F.lit("expected a JSON object, got "), F.col("_obj_type")),
        )
        .when(
            v("clicks").isNotNull() & ((t("clicks") != "integer") | ~clicks.between(1, MAX_CLICKS)),
            F.concat(F.lit(f"clicks must be an integer in 1..{MAX_CLICKS}, got "), shown(v("clicks"))),
        )
    )
    for name in TEXT_FIELDS:
        error = error.when(
            v(name).isNull() | ~is_text(v(name), t(name)),
            F.concat(F.lit(f"{name} must be a non-empty string, got "), shown(v(name))),
        )
    error = error.when(
        v("event_time").isNull() | (t("event_time") != "integer"),
        F.concat(F.lit("event_time must be epoch milliseconds (integer), got "), shown(v("event_time"))),
    ).when(
        (event_time < MIN_EVENT_MS) | (event_time > F.col("now_ms") + MAX_FUTURE_MS),
        F.format_string(
            "event_time %d is outside the plausible range (2000-01-01 .. now + 1 minute)", event_time
        ),
    )
    checked = typed.select("*", F.when(F.col("_plain").isNull(), error).alias("error"))
    ok = F.col("error").isNull()

    def valid(column: Column, name: str) -> Column:
        return F.when(ok, F.coalesce(F.col(f"_plain.{name}"), column)).alias(name)

    return barrier(
        checked.select(
            "event_id",
            valid(F.try_variant_get(v("userid"), "$", "string"), "userid"),
            valid(event_time, "event_time_ms"),
            valid(F.try_variant_get(v("url"), "$", "string"), "url"),
            valid(F.try_variant_get(v("device_id"), "$", "string"), "device_id"),
            valid(F.try_variant_get(v("ip"), "$", "string"), "ip"),
            valid(clicks.cast("int"), "clicks"),
            "error",
            "source",
            F.when(~ok, F.col("payload")).alias("payload"),
        ),
        "error",
    )
