"""The event parser's executable spec: one record read against an event spec, or the reason it is rejected.

An event spec (a dict; pipeline/events.py DEFAULT_EVENT_SPEC is the default pipeline's, the demo's clicks)
names the event's key, its fields with their types, the event-time field and its format, an optional count
field, and the limits. An event is one JSON object per record, for the default spec:
    {"userid": str, "url": str, "device_id": str, "ip": str, "event_time": epoch-ms int,
     "clicks": int (optional, default 1)}
Anything else goes to the dead letters with a reason; nothing is silently dropped. Fields the spec does not
name are ignored.

Rules:
- JSON is strict JSON as spec.strict_json reads it; a record is at most max_record_bytes.
- The count (if the spec names one) may be missing (1), else an integer in 1..max.
- The key: a `text` key is a non-empty string (a character that is not whitespace, Python's str.isspace())
  of at most max_key_bytes in UTF-8; an `integer`/`bigint` key a JSON integer, carried as its decimal text.
- A field that is `required` (the default) must be there and not JSON null; an optional one may be either
  (None). text: a string, non-empty when required. integer / bigint: a JSON integer in 32 / 64 bits.
  double: a JSON number, finite as a double. numeric: a JSON number PostgreSQL's numeric holds exactly, as
  its decimal text. boolean: true or false. timestamptz / timestamp: an ISO_TIME string, or a JSON integer
  of epoch microseconds, within the years 0001..9999 (UTC), as epoch microseconds. text[]: an array of
  strings or nulls. jsonb: any JSON value, as its JSON text.
- The event time, by its format: epoch_ms a JSON integer; epoch_s a JSON number of seconds; iso8601 an
  ISO_TIME string; as epoch ms (rounded down, computed exactly from the number's text), from min_time_ms up
  to max_future_ms after the record's arrival.
- The checks run in this order: size, JSON, object, count, key, the fields in spec order, time.

`parse_event` is the reference (the e2e oracle uses it too); pipeline.events.parse is the same rules in the
JVM (jvm/.../events/EventParse.java, with a streaming fast path for plain events, PlainEvent.java), held to
`parse_event` by differential fuzz tests (tests/unit/test_parsers_spark.py) over the default spec and
random ones.

Reasons (the JVM's wording; the values it shows are JSON text, here Python's repr):
    empty record (null value) | record of N bytes exceeds the <max_record_bytes>-byte limit |
    not JSON: <why> | expected a JSON object, got <type> |
    <count> must be an integer in 1..<max>, got <value> |
    <key> must be a non-empty string, got <value> | <key> of N bytes exceeds the <max_key_bytes>-byte limit |
    <field> must be <what its type takes>, got <value> |
    <time> must be epoch milliseconds (integer), got <value> | ... epoch seconds (a number), got <value> |
    <time> must be an ISO-8601 time (...), got <value> |
    <time> <value> is outside the plausible range (<min_time> .. arrival + <max_future>)
"""

from __future__ import annotations

import calendar
import json
import math
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any, TypeGuard

from common.limits import MAX_KEY_BYTES
from spec.strict_json import is_int, loads_strict

# The one ISO-8601 form a time may take (jvm/.../events/EventValues.java ISO_TIME is the same text):
# YYYY-MM-DDTHH:MM:SS, 1 to 9 fraction digits, then Z or an offset +HH:MM / -HH:MM.
ISO_TIME = (
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(Z|([+-])([0-9]{2}):([0-9]{2}))"
)
_ISO = re.compile(ISO_TIME)
_EPOCH = date(1970, 1, 1).toordinal()
_DAY_MS = 86_400_000
# A time is within the years 0001..9999 in UTC (Python's datetime, and PostgreSQL's range with room).
MIN_MICROS = (date(1, 1, 1).toordinal() - _EPOCH) * _DAY_MS * 1000
MAX_MICROS = (date(9999, 12, 31).toordinal() + 1 - _EPOCH) * _DAY_MS * 1000 - 1
# PostgreSQL's numeric: at most this many digits before the decimal point and after it.
NUMERIC_MAX_WHOLE_DIGITS = 131_072
NUMERIC_MAX_SCALE = 16_383
# A number's exponent of more digits than this is not read (beyond any time or numeric).
MAX_EXPONENT_DIGITS = 9
_INT32 = (-(2**31), 2**31 - 1)


@dataclass(frozen=True)
class Event:
    key: str
    fields: dict[str, Any]  # by name, in spec order
    time_ms: int
    count: int


class Rejected(ValueError):
    """Why a record is not an event."""


@dataclass(frozen=True)
class JsonFloat:
    """A JSON number with a fraction or an exponent, as written: the rules that need its value exactly
    (epoch seconds, numeric) read it from the text, as the JVM does."""

    text: str

    def __repr__(self) -> str:
        return self.text


def parse_event(payload: bytes | None, now_ms: int, spec: dict[str, Any]) -> Event:
    """Validate one record against the event spec, or raise Rejected with the reason."""
    if payload is None:
        raise Rejected("empty record (null value)")
    max_bytes = spec["max_record_bytes"]
    if len(payload) > max_bytes:
        raise Rejected(f"record of {len(payload)} bytes exceeds the {max_bytes}-byte limit")
    try:
        obj = loads_strict(payload, parse_float=JsonFloat)
    except ValueError as exc:
        raise Rejected(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise Rejected(f"expected a JSON object, got {type(obj).__name__}")
    count = _count(obj, spec.get("count"))
    key = _key(obj, spec)
    fields = {field["name"]: _field(field, obj.get(field["name"])) for field in spec["fields"]}
    return Event(key=key, fields=fields, time_ms=_event_time(obj, spec, now_ms), count=count)


def within_key_limit(value: str, where: str, error: type[ValueError], max_bytes: int = MAX_KEY_BYTES) -> str:
    """A key (or an indexed column) of at most max_bytes in UTF-8, else `error` with the reason."""
    size = len(value.encode())
    if size > max_bytes:
        raise error(f"{where} of {size} bytes exceeds the {max_bytes}-byte limit")
    return value


def _count(obj: dict[str, Any], count: dict[str, Any] | None) -> int:
    if count is None:
        return 1
    name, most = count["field"], count["max"]
    value = obj.get(name, 1)
    if not is_int(value) or not 1 <= value <= most:
        raise Rejected(f"{name} must be an integer in 1..{most}, got {value!r}")
    return value


def _key(obj: dict[str, Any], spec: dict[str, Any]) -> str:
    name, kind = spec["key"]["field"], spec["key"]["type"]
    value = _field({"name": name, "type": kind, "required": True}, obj.get(name))
    if kind == "text":
        return within_key_limit(value, name, Rejected, spec["max_key_bytes"])
    return str(value)


def _field(field: dict[str, Any], value: Any) -> Any:
    """A field's value of its type; None for an optional field that is missing or JSON null."""
    if value is None:
        if field.get("required", True):
            raise _invalid(field, value)
        return None
    typed = _typed(field, value)
    if typed is None:
        raise _invalid(field, value)
    return typed


def _invalid(field: dict[str, Any], value: Any) -> Rejected:
    return Rejected(f"{field['name']} must be {expected(field)}, got {value!r}")


def expected(field: dict[str, Any]) -> str:
    """What a field must be, in words (EventParse.expected says it the same way)."""
    required = field.get("required", True)
    what = {
        "text": "a non-empty string" if required else "a string",
        "integer": "a 32-bit integer",
        "bigint": "a 64-bit integer",
        "double": "a finite number",
        "numeric": "a number numeric holds (131072 digits before the point, 16383 after)",
        "boolean": "true or false",
        "timestamptz": "an ISO-8601 time or epoch microseconds (years 0001..9999)",
        "timestamp": "an ISO-8601 time or epoch microseconds (years 0001..9999)",
        "text[]": "an array of strings or nulls",
        "jsonb": "a JSON value",
    }[field["type"]]
    return what if required else f"{what} or null"


def _typed(field: dict[str, Any], value: Any) -> Any:
    """A value (not JSON null) of the field's type, else None."""
    kind = field["type"]
    if kind == "text":
        ok = isinstance(value, str) and (not field.get("required", True) or value.strip())
        return value if ok else None
    if kind == "integer":
        return value if is_int(value) and _INT32[0] <= value <= _INT32[1] else None
    if kind == "bigint":
        return value if is_int(value) else None
    if kind == "double":
        return _finite_double(value) if _is_number(value) else None
    if kind == "numeric":
        return _numeric(value) if _is_number(value) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind in ("timestamptz", "timestamp"):
        if isinstance(value, str):
            return iso_micros(value)
        return value if is_int(value) and MIN_MICROS <= value <= MAX_MICROS else None
    if kind == "text[]":
        ok = isinstance(value, list) and all(v is None or isinstance(v, str) for v in value)
        return list(value) if ok else None
    if kind == "jsonb":
        return json_text(value)
    raise ValueError(f"unknown type {kind}")


def _is_number(value: Any) -> TypeGuard[int | JsonFloat]:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, JsonFloat)


def _exact(number: int | JsonFloat) -> Decimal | None:
    """A JSON number's exact value; None if its exponent has more than MAX_EXPONENT_DIGITS digits."""
    if isinstance(number, int):
        return Decimal(number)
    _, _, exponent = number.text.lower().partition("e")
    if len(exponent.lstrip("+-").lstrip("0")) > MAX_EXPONENT_DIGITS:
        return None
    return Decimal(number.text)


def _finite_double(number: int | JsonFloat) -> float | None:
    """The number as a double (correctly rounded, as Java's Double.parseDouble), if finite."""
    try:
        value = float(number.text if isinstance(number, JsonFloat) else number)
    except OverflowError:  # an integer beyond any double
        return None
    return value if math.isfinite(value) else None


def _numeric(number: int | JsonFloat) -> str | None:
    """The number as numeric's decimal text, if PostgreSQL's numeric holds it exactly."""
    value = _exact(number)
    if value is None:
        return None
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if -exponent > NUMERIC_MAX_SCALE or len(digits) + exponent > NUMERIC_MAX_WHOLE_DIGITS:
        return None
    return str(value)


def iso_micros(text: str) -> int | None:
    """An ISO_TIME within the years 0001..9999 (UTC) in epoch microseconds, else None."""
    m = _ISO.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m[i]) for i in range(1, 7))
    if (
        year < 1
        or not 1 <= month <= 12
        or not 1 <= day <= calendar.monthrange(year, month)[1]
        or hour > 23
        or minute > 59
        or second > 59
    ):
        return None
    offset_s = 0
    if m[9] is not None:
        offset_hours, offset_minutes = int(m[10]), int(m[11])
        if offset_hours > 23 or offset_minutes > 59:
            return None
        offset_s = (-1 if m[9] == "-" else 1) * (offset_hours * 3600 + offset_minutes * 60)
    days = date(year, month, day).toordinal() - _EPOCH
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s
    micros = seconds * 1_000_000 + int((m[7] or "").ljust(6, "0")[:6])
    return micros if MIN_MICROS <= micros <= MAX_MICROS else None


def epoch_seconds_ms(number: int | JsonFloat, lo: int, hi: int) -> int | None:
    """Epoch seconds as epoch ms, rounded down, if that lies in lo..hi; else None (a number with an
    exponent of more than MAX_EXPONENT_DIGITS digits is never in range)."""
    seconds = _exact(number)
    if seconds is None:
        return None
    sign, digits, exponent = seconds.as_tuple()
    assert isinstance(exponent, int)
    ms = Decimal((sign, digits, exponent + 3))  # exact: no context rounds it
    if not lo <= ms < hi + 1:  # compared before rounding, so a huge exponent is never expanded
        return None
    return math.floor(ms)


def _event_time(obj: dict[str, Any], spec: dict[str, Any], now_ms: int) -> int:
    name, form = spec["time"]["field"], spec["time"]["format"]
    value = obj.get(name)
    lo, hi = spec["min_time_ms"], now_ms + spec["max_future_ms"]
    ms: int | None
    if form == "epoch_ms":
        if not is_int(value):
            raise Rejected(f"{name} must be epoch milliseconds (integer), got {value!r}")
        ms = value if lo <= value <= hi else None
    elif form == "epoch_s":
        if not _is_number(value):
            raise Rejected(f"{name} must be epoch seconds (a number), got {value!r}")
        ms = epoch_seconds_ms(value, lo, hi)
    elif form == "iso8601":
        micros = iso_micros(value) if isinstance(value, str) else None
        if micros is None:
            raise Rejected(
                f"{name} must be an ISO-8601 time (YYYY-MM-DDTHH:MM:SS[.fraction] and Z or +HH:MM,"
                f" years 0001..9999), got {value!r}"
            )
        ms = micros // 1000
        ms = ms if lo <= ms <= hi else None
    else:
        raise ValueError(f"unknown time format {form}")
    if ms is None:
        plausible = f"({instant(lo)} .. arrival + {duration(spec['max_future_ms'])})"
        raise Rejected(f"{name} {value!r} is outside the plausible range {plausible}")
    return ms


def instant(ms: int) -> str:
    """'2000-01-01', or with the time of day when the instant is not midnight (UTC)."""
    day, in_day = divmod(ms, _DAY_MS)
    text = date.fromordinal(_EPOCH + day).isoformat()
    if in_day == 0:
        return text
    clock = f"T{in_day // 3_600_000:02d}:{in_day // 60_000 % 60:02d}:{in_day // 1000 % 60:02d}"
    return text + clock + (f".{in_day % 1000:03d}" if in_day % 1000 else "") + "Z"


def duration(ms: int) -> str:
    """'1 minute', '90 seconds', '1500 milliseconds': in the largest unit that divides it."""
    units = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1000, "second"))
    size, unit = next(((s, u) for s, u in units if ms and ms % s == 0), (1, "millisecond"))
    n = ms // size
    return f"{n} {unit}{'' if n == 1 else 's'}"


def json_text(value: Any) -> str:
    """A value read by loads_strict as compact JSON text (a JsonFloat as it was written)."""
    if isinstance(value, JsonFloat):
        return value.text
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{json_text(v)}" for k, v in value.items())
            + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)
