"""Click records: the JSON contract, validation, and the reason a record is rejected.

A click is one JSON object per record:
    {"userid": str, "url": str, "device_id": str, "ip": str, "event_time": epoch-ms int,
     "clicks": int (optional, default 1)}
Anything else goes to the dead letters with a reason; nothing is silently dropped.

`parse_click` is the executable contract (the e2e oracle uses it); `parse` is the same contract in
the JVM (no Python per record): jvm/.../clicks/ClickParse.java, with a streaming fast path for plain clicks
(PlainClick.java), held to `parse_click` by a differential fuzz test (tests/unit/test_parsers_spark.py).
"JSON" is strict JSON as spec.strict_json reads it. A non-empty string has a character that is not
whitespace (Python's str.isspace()).

Reasons (the JVM's wording; `parse_click`'s differs only in how the offending value is shown, JSON text
there, Python's repr here):
    empty record (null value) | record of N bytes exceeds the 65536-byte limit |
    not JSON: <why> | expected a JSON object, got <type> |
    clicks must be an integer in 1..1000000, got <value> | <field> must be a non-empty string, got <value> |
    event_time must be epoch milliseconds (integer), got <value> |
    event_time N is outside the plausible range (2000-01-01 .. arrival + 1 minute)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import records
from spec.strict_json import is_int, loads_strict

MAX_RECORD_BYTES = 64 * 1024
# Event times before this are not real clicks (2000-01-01T00:00:00Z).
MIN_EVENT_MS = 946_684_800_000
# Device clocks drift a little; a click stamped further ahead of the time its record reached the source
# (Kafka's record timestamp, Kinesis's arrival time) is bogus (and would hold back `--once`, which waits
# for the watermark to pass every click).
MAX_FUTURE_MS = 60 * 1000
MAX_CLICKS = 1_000_000
# A userid (and a profile's regionid, pipeline/cdc_fold.py) longer than this, in UTF-8, is a dead letter:
# Postgres indexes them (enriched_clicks (uid, click_time), clicks_per_region), a B-tree row holds ~2.7 KB,
# and a 10,000-character userid once failed the batch at every restart.
MAX_KEY_BYTES = 1024
PARSE_UDF = "streamfold_parse_click"
# The row ClickParse returns (jvm/src/main/java/io/streamfold/clicks/ClickParse.java): the click's fields, all
# null on a reject, and the reason.
PARSE_TYPE = records.udf_type(*records.CLICK.fields[1:], records.REJECT["error"])
# What `parse` returns: a click and the reject columns (null on a click).
PARSED_COLUMNS = (*records.names(records.CLICK), *records.names(records.REJECT))


@dataclass(frozen=True)
class Click:
    userid: str
    url: str
    device_id: str
    ip: str
    click_time_ms: int
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
        userid=within_key_limit(_text(obj, "userid"), "userid", Rejected),
        url=_text(obj, "url"),
        device_id=_text(obj, "device_id"),
        ip=_text(obj, "ip"),
        click_time_ms=_event_time(obj, now_ms),
        clicks=clicks,
    )


def within_key_limit(value: str, where: str, error: type[ValueError]) -> str:
    """A userid or regionid of at most MAX_KEY_BYTES, else `error` with the reason."""
    size = len(value.encode())
    if size > MAX_KEY_BYTES:
        raise error(f"{where} of {size} bytes exceeds the {MAX_KEY_BYTES}-byte limit")
    return value


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
        plausible = "(2000-01-01 .. arrival + 1 minute)"
        raise Rejected(f"event_time {value} is outside the plausible range {plausible}")
    return value


# --- the same contract in the JVM ----------------------------------------------------------------------


def parse(raw: DataFrame) -> DataFrame:
    """Columns event_id, source, payload (binary), now_ms -> PARSED_COLUMNS; error NULL for a click,
    else the reason, with the original payload (NULL for a click).

    One Java UDF (jvm/src/main/java/io/streamfold/clicks/ClickParse.java) parses a record or says why it is
    rejected: plain clicks through its streaming fast path (PlainClick, a few microseconds), the rest read
    into a tree. So the plan is two small projections (a parser in Spark's native functions was a stack of
    them, planned and code-generated again every micro-batch).
    """
    raw.sparkSession.udf.registerJavaFunction(PARSE_UDF, "io.streamfold.clicks.ClickParse", PARSE_TYPE)
    parsed = raw.select(
        "event_id",
        "source",
        "payload",
        F.call_function(PARSE_UDF, "payload", "now_ms").alias("_click"),
    )
    return parsed.select(
        "event_id",
        *(F.col(f"_click.{name}").alias(name) for name in records.names(records.CLICK)[1:]),
        "_click.error",
        "source",
        F.when(F.col("_click.error").isNotNull(), F.col("payload")).alias("payload"),
    )
