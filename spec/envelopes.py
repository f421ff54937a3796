"""The CDC fold's reference: Debezium change envelopes of a profile table into typed, keyed changes.

Debezium (JSON converter, schemas off) writes a profile table's changes to one topic (one partition, WAL
commit order):
    key   {"<key column>": ...}
    value {"before": {...}|null, "after": {...}|null, "op": c|u|d|r, "source": {"ts_ms", "lsn", ...}, ...}
then a tombstone (null value) after each delete. A read of the initial snapshot (op=r) is valid from the
beginning of time; a read of an incremental snapshot (op=r, source.snapshot "incremental": `streamfold setup`
recapturing a table whose capture was lost, connectors/setup.py) from its source.ts_ms, when it was read.
A TRUNCATE of the table is one event with no key, op=t and no rows (the connector sets skipped.operations
to none: Debezium skips truncates by default): a Truncate, which ends every key's profile at its commit
time (spec/temporal_state.py).

The profile spec says which table (the pipeline file's profile section, as a plain dict):
    {"key": {"column": "userid", "type": "text"},
     "columns": [{"name": "regionid", "type": "text", "max_bytes": 1024}, ...],
     "heartbeat": {"schema": "streamfold", "table": "cdc_heartbeat"},
     "max_change_bytes": 1048576}

CDC progress (the largest source.ts_ms seen) drives the temporal join's completeness. It comes from:
- every change event: its source.ts_ms (the commit time) is exact, the topic being in commit order;
- heartbeat-table events: Debezium's `heartbeat.action.query` upserts the spec's heartbeat table every
  200 ms and a RegexRouter SMT sends that table's change events into the profile topic too (a key without
  the key column: never a profile). They arrive in the same partition in WAL commit order, so their
  source.ts_ms is exact progress with no margin; they are progress only, never a change, whatever their op
  (a delete of the row included) - recognised by source.schema/source.table, before anything else;
- not Debezium's own heartbeat topic ({"ts_ms": ...}): Debezium sends it whether or not the table is still
  captured, so it would move progress past changes it can no longer see (db/capture.py); its records are
  checked (a bad one is a dead letter) and skipped. The job still reads the topic so that its checkpoints,
  whose Kafka source subscribes to it, resume.

The key: a `text` key is a non-empty string, an `integer` (32-bit) or `bigint` key a JSON integer carried
as its decimal text. It comes from the row (after; before for a delete) or, when the row has none (missing,
null or ""), from the Kafka key object. At most MAX_KEY_BYTES in UTF-8: Postgres indexes it.

Each column's JSON value (Debezium's JSON converter; the connector sets decimal.handling.mode=string and
time.precision.mode=adaptive_time_microseconds) becomes its Spark value (pipeline/field_types.py); JSON null
or a missing field is NULL:
  text         a string, or an integer as its decimal text (a column changed to a number type)
  integer      an integer in 32 bits; bigint: an integer (64 bits)
  double       a number, or "NaN", "Infinity", "-Infinity" (how Jackson writes those); not one past the
               double range
  numeric      a string or a number whose text is a decimal number (DECIMAL), or "NaN": that text
  boolean      true or false
  timestamptz, timestamp
               ISO-8601 text of the form ISO_TIMESTAMP (Debezium's ZonedTimestamp), or an integer (epoch
               microseconds, Debezium's MicroTimestamp): epoch microseconds
  text[]       an array of strings or nulls
  jsonb        a string holding strict JSON (Debezium's io.debezium.data.Json): that string; an object or
               an array: its compact JSON text (members in document order, strings quoted as Jackson
               quotes them, integers in decimal, other numbers as written)
A column with `max_bytes` (Postgres indexes it) is a dead letter past that many UTF-8 bytes (its text,
numeric or jsonb text).

Drift: the table no longer matches the pipeline file. A carried column the row lacks (an absent field, not
JSON null: PostgreSQL renames a column inside the publication's column list too, and a dropped one leaves
it) or holds as a value its type cannot take (a float for a text, an object for an integer...: a retyped
column) is unknown: it folds to None and Change.drifted says why (MISSING, or `retyped`). The change is
still a version (its key and other columns are right), but the join must not take that column's value from
the previous version, which may be stale (spec/temporal_state.py DRIFTED). A delete's row is checked too
when it carries columns besides the key (REPLICA IDENTITY FULL); its version stays a tombstone.

Debezium's placeholder for an unchanged TOASTed value is never data. Without REPLICA IDENTITY FULL (the
publication's column list rules it out) pgoutput does not send a large value an UPDATE left unchanged, and
Debezium 3.4 writes UNAVAILABLE in its place: the string for a text, numeric (decimal.handling.mode=string)
or jsonb column, [UNAVAILABLE] for a text[] (UnchangedToastedPlaceholder). Fixed-width types are never
TOASTed; the rule is the same for every type all the same. Such a column folds to None and its index (in
spec order) is in Change.unavailable: the join takes its value from the key's previous version
(spec/temporal_state.py). The placeholder as the key, or inside a longer text[], is no form Debezium writes:
a dead letter.

`parse_envelope` is the executable reference; pipeline.cdc_fold.fold is the same logic in the JVM
(jvm/.../cdc/EnvelopeFold.java, its fast path PlainEnvelope.java), held to it by the differential tests in
tests/unit/test_parsers_spark.py. JSON is strict (spec/strict_json.py).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from common import drift, names
from common.names import BEGINNING_OF_TIME_MS
from spec.strict_json import is_int, loads_strict

# A commit time (source.ts_ms, a heartbeat's ts_ms) outside 1970-01-01..9999-12-31 is a dead letter: no
# PostgreSQL commit has one, and the join makes CDC progress a Spark timestamp (microseconds in 64 bits) and
# valid_from a timestamptz. A forged ts_ms of 9e18 would overflow there and fail every batch after it.
MIN_COMMIT_MS = 0
MAX_COMMIT_MS = 253_402_300_799_999
# A key longer than this in UTF-8 is a dead letter: Postgres indexes it, a B-tree row holds ~2.7 KB.
MAX_KEY_BYTES = 1024
# What Debezium writes for a column it did not get (an unchanged TOASTed value).
UNAVAILABLE = "__debezium_unavailable_value"
# Why a drifted column is unknown (Change.drifted), the same words in jvm/.../cdc/ProfileValues.java.
MISSING = drift.MISSING
# The same patterns in jvm/.../cdc/ProfileValues.java and Timestamps.java.
DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)?|NaN")
ISO_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(Z|[+-][0-9]{2}:[0-9]{2})"
)
_DOUBLE_WORDS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


@dataclass(frozen=True)
class Change:
    key: str
    op: str
    valid_from_ms: int
    lsn: int
    progress_ms: int
    # Each spec column by name, in spec order: all None for a delete.
    columns: dict[str, Any]
    # The indexes (in spec order) of the columns Debezium did not send (an unchanged TOASTed value): None in
    # `columns`, the previous version's value in the join.
    unavailable: tuple[int, ...] = ()
    # Per column index, why the row does not hold a value the column can take (drift): None in `columns`,
    # unknown in the join.
    drifted: dict[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Truncate:
    """The table truncated: every key's profile ends at valid_from_ms (its commit time)."""

    valid_from_ms: int
    lsn: int
    progress_ms: int


@dataclass(frozen=True)
class Progress:
    progress_ms: int


class BadEnvelope(ValueError):
    """A CDC record that cannot be folded; goes to the dead letters with this reason."""


def parse_envelope(
    topic: str, key: bytes | None, value: bytes | None, spec: dict[str, Any]
) -> Change | Truncate | Progress | None:
    """One Debezium record of the profile table `spec` describes -> a Change, a Truncate, a Progress
    report, or None for a tombstone or a Debezium heartbeat."""
    if topic.startswith(f"{names.HEARTBEAT_TOPIC_PREFIX}."):  # Debezium's own heartbeat topic
        _commit_ms(_json(value, "heartbeat"), "ts_ms", "heartbeat")
        return None  # no progress: see the module's docstring
    if value is None:
        return None  # the tombstone after a delete: the delete event itself carries the change
    limit = spec["max_change_bytes"]
    if len(value) > limit:
        raise BadEnvelope(f"change event of {len(value)} bytes exceeds the {limit}-byte limit")
    envelope = _json(value, "change event")
    source = envelope.get("source")
    heartbeat = spec["heartbeat"]
    if (
        isinstance(source, dict)
        and source.get("schema") == heartbeat["schema"]
        and source.get("table") == heartbeat["table"]
    ):
        return Progress(_commit_ms(source, "ts_ms", "source"))
    op = envelope.get("op")
    if op not in ("c", "u", "d", "r", "t") or not isinstance(source, dict):
        raise BadEnvelope(f"not a Debezium row change (op={op!r})")
    ts_ms = _commit_ms(source, "ts_ms", "source")
    lsn = source.get("lsn")
    if lsn is not None and not is_int(lsn):
        raise BadEnvelope(f"source.lsn must be an integer, got {lsn!r}")
    if op == "t":
        return Truncate(ts_ms, lsn or 0, ts_ms)
    side = "before" if op == "d" else "after"
    row = envelope.get(side)
    if op != "d" and not isinstance(row, dict):
        raise BadEnvelope(f"op={op} event without an 'after' row")
    if row is not None and not isinstance(row, dict):
        raise BadEnvelope("op=d event whose 'before' is not an object")
    profile: dict[str, Any] = row or {}
    user_key = _key(spec, profile.get(spec["key"]["column"]), key)
    valid_from = read_valid_from(source, ts_ms) if op == "r" else ts_ms
    columns = {column["name"]: None for column in spec["columns"]}
    unavailable: list[int] = []
    drifted = {i: MISSING for i, column in enumerate(spec["columns"]) if column["name"] not in profile}
    if op == "d":
        carries = len(drifted) < len(spec["columns"])
        drifted = (
            _retyped_in_delete(spec, profile, drifted, partial(_literal, value, side)) if carries else {}
        )
        return Change(user_key, op, valid_from, lsn or 0, ts_ms, columns, (), drifted)
    for index, column in enumerate(spec["columns"]):
        name = column["name"]
        raw = profile.get(name)
        if index in drifted:
            continue
        if is_unavailable(column, raw):
            unavailable.append(index)
            continue
        typed = _column(column, raw, partial(_literal, value, side, name))
        if typed is _MISMATCH:
            drifted[index] = retyped(column, raw)
        else:
            columns[name] = typed
    return Change(user_key, op, valid_from, lsn or 0, ts_ms, columns, tuple(unavailable), drifted)


def _retyped_in_delete(
    spec: dict[str, Any], profile: dict[str, Any], drifted: dict[int, str], literal: Callable[[str], Any]
) -> dict[int, str]:
    """A delete's row with columns: `drifted` (those it lacks) and those it holds as values their types
    cannot take (its values are not kept, so neither byte limits nor the placeholder matter here)."""
    found = dict(drifted)
    for index, column in enumerate(spec["columns"]):
        raw = profile.get(column["name"])
        if index in drifted or raw is None or is_unavailable(column, raw):
            continue
        if _TYPED[column["type"]](raw, partial(literal, column["name"])) is None:
            found[index] = retyped(column, raw)
    return found


def retyped(column: dict[str, Any], value: Any) -> str:
    """Why a column's JSON value is unknown when its type cannot take it: the value's JSON kind (not the
    value: it goes to the history) and the column's type."""
    return drift.retyped(_json_kind(value), _EXPECTED[column["type"]])


def _json_kind(value: Any) -> str:
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a number"


def read_valid_from(source: dict[str, Any], ts_ms: int) -> int:
    """A snapshot read's valid_from: the beginning of time for the initial snapshot's, the read's time
    (source.ts_ms) for an incremental snapshot's, which recaptures a table after a gap."""
    return ts_ms if source.get("snapshot") == "incremental" else BEGINNING_OF_TIME_MS


def is_unavailable(column: dict[str, Any], value: Any) -> bool:
    """Whether a column's JSON is Debezium's placeholder for an unchanged TOASTed value: UNAVAILABLE, or
    [UNAVAILABLE] for a text[]."""
    return value == UNAVAILABLE or (column["type"] == "text[]" and value == [UNAVAILABLE])


def _json(raw: bytes | None, what: str) -> dict[str, Any]:
    if raw is None:
        raise BadEnvelope(f"{what} with a null value")
    try:
        obj = loads_strict(raw)
    except ValueError as exc:
        raise BadEnvelope(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadEnvelope(f"{what} is not a JSON object")
    return obj


def _commit_ms(obj: dict[str, Any], field: str, where: str) -> int:
    value = obj.get(field)
    if not is_int(value):
        raise BadEnvelope(f"{where}.{field} must be an integer, got {value!r}")
    if not MIN_COMMIT_MS <= value <= MAX_COMMIT_MS:
        raise BadEnvelope(f"{where}.{field} {value} is outside 1970-01-01..9999-12-31 (a commit time in ms)")
    return value


# --- the key ------------------------------------------------------------------------------------------


def _key(spec: dict[str, Any], from_row: Any, kafka_key: bytes | None) -> str:
    """The row's key, else (none in the row: missing, null or "") the Kafka key's; checked."""
    name, kind = spec["key"]["column"], spec["key"]["type"]
    no_key = from_row is None or from_row == ""
    found = _kafka_key(kafka_key, name, kind) if no_key else _key_text(from_row, kind)
    if found is None:
        raise BadEnvelope(f"change event without a {name}")
    if found == UNAVAILABLE:
        raise BadEnvelope(f"{name} is Debezium's unavailable-value placeholder (an unchanged TOASTed value)")
    return _within(found, name, MAX_KEY_BYTES)


def _key_text(value: Any, kind: str) -> str | None:
    """A key's text: a non-empty string (text), an integer in range (integer, bigint) in decimal."""
    if kind == "text":
        return value if isinstance(value, str) and value else None
    in_range = is_int(value) and (kind == "bigint" or -(2**31) <= value < 2**31)
    return str(value) if in_range else None


def _kafka_key(raw: bytes | None, name: str, kind: str) -> str | None:
    try:
        obj = loads_strict(raw) if raw is not None else None
    except ValueError:
        return None
    return _key_text(obj.get(name), kind) if isinstance(obj, dict) else None


def _within(value: str, where: str, limit: int) -> str:
    size = len(value.encode())
    if size > limit:
        raise BadEnvelope(f"{where} of {size} bytes exceeds the {limit}-byte limit")
    return value


# --- the columns --------------------------------------------------------------------------------------


# What _column returns for a value the column's type cannot take (drift).
_MISMATCH: Any = object()


def _column(column: dict[str, Any], value: Any, literal: Callable[[], Any]) -> Any:
    """A column's value (its Spark value), or _MISMATCH when its type cannot take it; `literal` gives its
    JSON again with each non-integer number's text as written (a numeric's digits, a jsonb's text)."""
    where = f"after.{column['name']}"
    if value is None:
        return None
    if column["type"] == "text[]" and isinstance(value, list) and UNAVAILABLE in value:
        raise BadEnvelope(f"{where} holds Debezium's unavailable-value placeholder beside other elements")
    typed = _TYPED[column["type"]](value, literal)
    if typed is None:
        return _MISMATCH
    limit = column.get("max_bytes")
    return _within(typed, where, limit) if limit and isinstance(typed, str) else typed


def _text(value: Any, _: Callable[[], Any]) -> str | None:
    if isinstance(value, str):
        return value
    return str(value) if is_int(value) else None


def _integer(value: Any, _: Callable[[], Any]) -> int | None:
    return value if is_int(value) and -(2**31) <= value < 2**31 else None


def _bigint(value: Any, _: Callable[[], Any]) -> int | None:
    return value if is_int(value) else None


def _double(value: Any, _: Callable[[], Any]) -> float | None:
    if isinstance(value, str):
        return _DOUBLE_WORDS.get(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an integer past the double range
        return None
    return None if math.isinf(number) else number


def _numeric(value: Any, literal: Callable[[], Any]) -> str | None:
    if isinstance(value, str):
        return value if DECIMAL.fullmatch(value) else None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # beyond 64 bits too: its text as written
    return literal().text if isinstance(value, float) else None


def _boolean(value: Any, _: Callable[[], Any]) -> bool | None:
    return value if isinstance(value, bool) else None


def _timestamp(value: Any, _: Callable[[], Any]) -> int | None:
    if is_int(value):
        return value
    return epoch_micros(value) if isinstance(value, str) else None


def _strings(value: Any, _: Callable[[], Any]) -> list[str | None] | None:
    if isinstance(value, list) and all(v is None or isinstance(v, str) for v in value):
        return value
    return None


def _jsonb(value: Any, literal: Callable[[], Any]) -> str | None:
    if isinstance(value, dict | list):
        return json_text(literal())
    if isinstance(value, str):
        try:
            loads_strict(value.encode())
        except ValueError:
            return None
        return value
    return None


_TYPED: dict[str, Callable[[Any, Callable[[], Any]], Any]] = {
    "text": _text,
    "integer": _integer,
    "bigint": _bigint,
    "double": _double,
    "numeric": _numeric,
    "boolean": _boolean,
    "timestamptz": _timestamp,
    "timestamp": _timestamp,
    "text[]": _strings,
    "jsonb": _jsonb,
}
_EXPECTED = {
    "text": "a string (or an integer)",
    "integer": "a 32-bit integer",
    "bigint": "an integer",
    "double": 'a number (or "NaN", "Infinity", "-Infinity")',
    "numeric": "a decimal number (a string or a number)",
    "boolean": "a boolean",
    "timestamptz": "a timestamp (ISO-8601 text or epoch microseconds)",
    "timestamp": "a timestamp (ISO-8601 text or epoch microseconds)",
    "text[]": "an array of strings",
    "jsonb": "JSON",
}


# --- timestamps and JSON text ---------------------------------------------------------------------------


def epoch_micros(text: str) -> int | None:
    """ISO_TIMESTAMP text in epoch microseconds (digits past the microsecond dropped), or None when the
    text is not of that form or names no real time (a 13th month, a 31st of April, a 24th hour, an offset
    past ±18:59)."""
    m = ISO_TIMESTAMP.fullmatch(text)
    if m is None:
        return None
    year, month, day, hour, minute, second = (int(m.group(i)) for i in range(1, 7))
    real_day = 1 <= month <= 12 and 1 <= day <= _days_in(year, month)
    if not real_day or hour > 23 or minute > 59 or second > 59:
        return None
    zone = m.group(8)
    offset = 0
    if zone != "Z":
        offset_hours, offset_minutes = int(zone[1:3]), int(zone[4:6])
        if offset_hours > 18 or offset_minutes > 59:
            return None
        offset = (-1 if zone[0] == "-" else 1) * (offset_hours * 3600 + offset_minutes * 60)
    nanos = int(((m.group(7) or "") + "000000000")[:9])
    seconds = _days(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second - offset
    return seconds * 1_000_000 + nanos // 1000


def _days_in(year: int, month: int) -> int:
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 29 if month == 2 and leap else (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]


def _days(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil)."""
    y = year - 1 if month <= 2 else year
    era = y // 400
    year_of_era = y - era * 400
    day_of_year = (153 * ((month + 9) % 12) + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146_097 + day_of_era - 719_468


@dataclass(frozen=True)
class Literal:
    """A JSON number that is not an integer, as written."""

    text: str


def _literal(raw: bytes, side: str, name: str) -> Any:
    """A column's JSON read again from the record (strict: loads_strict read it), each non-integer number
    a Literal."""
    return json.loads(raw.decode("utf-8"), parse_float=Literal)[side][name]


# Jackson's quoting (com.fasterxml.jackson.core.io.JsonStringEncoder): the short escapes, other control
# characters as \u00XX in upper case, nothing else.
_QUOTED = {i: f"\\u{i:04X}" for i in range(0x20)} | {
    ord('"'): '\\"',
    ord("\\"): "\\\\",
    0x08: "\\b",
    0x09: "\\t",
    0x0A: "\\n",
    0x0C: "\\f",
    0x0D: "\\r",
}


def json_text(value: Any) -> str:
    """A value (of _literal) as compact JSON text, as jvm/.../json/StrictJson.text writes it."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{json_text(k)}:{json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    if isinstance(value, str):
        return '"' + value.translate(_QUOTED) + '"'
    if isinstance(value, Literal):
        return value.text
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
