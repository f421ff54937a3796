"""The CDC fold: Debezium change envelopes into a typed, keyed changelog of user profiles.

Debezium (JSON converter, schemas off) writes to `cdc.public.users` (one partition, WAL commit order):
    key   {"userid": ...}
    value {"before": {...}|null, "after": {...}|null, "op": c|u|d|r, "source": {"ts_ms", "lsn", ...}, ...}
then a tombstone (null value) after each delete. A snapshot read (op=r) is valid from the beginning of time.

CDC progress (the largest source.ts_ms seen) drives the temporal join's completeness. It comes from:
- every change event: its source.ts_ms (the commit time) is exact, the topic being in commit order;
- heartbeat-table events: Debezium's `heartbeat.action.query` upserts streamfold.cdc_heartbeat every
  200 ms and a RegexRouter SMT sends that table's change events into `cdc.public.users` too (key
  {"id": 1}: no userid, never a user). They arrive in the same partition in WAL commit order, so their
  source.ts_ms is exact progress with no margin; they are progress only, never a user change, whatever
  their op (a delete of the row included) - recognised by source.schema/source.table, before anything else;
- Debezium's own heartbeat topic ({"ts_ms": ...}, stamped when sent, not in commit order with the
  changes): kept as a fallback, counted HEARTBEAT_SAFETY_MS earlier. With table heartbeats flowing it
  is always behind them, so it no longer sets the pace.
CDC progress moves the join's watermark for good, so `fold` counts it at most MAX_PROGRESS_LEAD_MS past the
record's Kafka timestamp: one commit time far ahead (a forged record, a database clock running ahead)
would otherwise release every waiting click as complete and expire versions later clicks still need. The
record itself folds as recorded (a change keeps its valid_from). Why the record's timestamp and not the
batch's time: a Spark batch time is a literal in the generated code, so every batch compiled the fold
again (2 compilations, ~40 ms). Kafka brokers (4.0+) refuse a timestamp more than an hour ahead of their
clock (`message.timestamp.after.max.ms`), so a forged one moves progress at most that far.

Profile fields are typed leniently where a source column type changes: regionid and gender accept a
JSON string or an integer (a number becomes its decimal text: the column was changed to a number type);
interests must be an array of strings (or nulls); registertime an integer. JSON null or a missing field
is NULL. Anything else (a float, a boolean, an object...) sends the record to the dead letters with a
reason naming the field, instead of failing the batch. An integer is a JSON integer that fits in 64 bits.

`parse_envelope` is the executable reference; `fold` is the same logic in the JVM (no Python per record):
jvm/.../cdc/EnvelopeFold.java, with a streaming fast path for plain change events (PlainEnvelope.java),
held to it by the differential tests in tests/unit/test_parsers_spark.py. JSON is strict as in
pipeline/clicks.py (no duplicate keys, NaN, trailing data, lone surrogates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField

from common import names
from pipeline import records
from pipeline.clicks import MAX_FUTURE_MS, within_key_limit
from pipeline.temporal_state import BEGINNING_OF_TIME_MS
from spec.strict_json import is_int, loads_strict

PROFILE_FIELDS = ("regionid", "gender", "interests", "registertime")
# The heartbeat table (db/tables.py) whose change events Debezium routes into the CDC users topic.
HEARTBEAT_SCHEMA = "streamfold"
HEARTBEAT_TABLE = "cdc_heartbeat"
# A Debezium heartbeat-topic record is stamped when Debezium sends it, and a change committed just before
# may still be on its way from the WAL: count it as progress up to a second earlier.
HEARTBEAT_SAFETY_MS = 1000
# A change event larger than this is dead-lettered, not folded: the profile it carries would ride on
# every one of the user's enriched clicks (user_clicks records take names.OUTPUT_RECORD_MAX_BYTES). The
# CDC topic and Connect's producer accept up to 16 MiB (connectors/setup.py), so Debezium keeps going.
MAX_CHANGE_BYTES = 1024 * 1024
# A commit time (source.ts_ms, a heartbeat's ts_ms) outside 1970-01-01..9999-12-31 is a dead letter: no
# PostgreSQL commit has one, and the join makes CDC progress a Spark timestamp (microseconds in 64 bits) and
# valid_from a timestamptz. A forged ts_ms of 9e18 once overflowed there and failed every batch after it.
MIN_COMMIT_MS = 0
MAX_COMMIT_MS = 253_402_300_799_999
# How far past its record's Kafka timestamp CDC progress counts: the clock drift a click may have
# (pipeline/clicks.py).
MAX_PROGRESS_LEAD_MS = MAX_FUTURE_MS
# The fold in the JVM (jvm/src/main/java/io/streamfold/cdc/EnvelopeFold.java) and the row it returns.
FOLD_UDF = "streamfold_fold_envelope"
_KIND = StructField("kind", StringType())  # change | progress | skip | error
_PROGRESS = StructField("progress_ms", LongType())
FOLD_TYPE = records.udf_type(_KIND, *records.CHANGE.fields, _PROGRESS, records.REJECT["error"])
# What `fold_records` returns: the UDF's row, and the record's id and bytes when it is an error.
FOLDED_COLUMNS = ("kind", *records.names(records.CHANGE), "progress_ms", "error", "event_id", "payload")


@dataclass(frozen=True)
class Change:
    userid: str
    op: str
    valid_from_ms: int
    lsn: int
    progress_ms: int
    regionid: str | None = None
    gender: str | None = None
    interests: list[str | None] | None = None
    registertime: int | None = None


@dataclass(frozen=True)
class Progress:
    progress_ms: int


class BadEnvelope(ValueError):
    """A CDC record that cannot be folded; goes to the dead letters with this reason."""


def parse_envelope(topic: str, key: bytes | None, value: bytes | None) -> Change | Progress | None:
    """One Debezium record -> a Change, a Progress report, or None for a tombstone."""
    if topic == names.HEARTBEAT_TOPIC:
        beat = _json(value, "heartbeat")
        return Progress(_commit_ms(beat, "ts_ms", "heartbeat") - HEARTBEAT_SAFETY_MS)
    if value is None:
        return None  # the tombstone after a delete: the delete event itself carries the change
    if len(value) > MAX_CHANGE_BYTES:
        raise BadEnvelope(f"change event of {len(value)} bytes exceeds the {MAX_CHANGE_BYTES}-byte limit")
    envelope = _json(value, "change event")
    source = envelope.get("source")
    if (
        isinstance(source, dict)
        and source.get("schema") == HEARTBEAT_SCHEMA
        and source.get("table") == HEARTBEAT_TABLE
    ):
        return Progress(_commit_ms(source, "ts_ms", "source"))
    op = envelope.get("op")
    if op not in ("c", "u", "d", "r") or not isinstance(source, dict):
        raise BadEnvelope(f"not a Debezium row change (op={op!r})")
    ts_ms = _commit_ms(source, "ts_ms", "source")
    lsn = source.get("lsn")
    if lsn is not None and not is_int(lsn):
        raise BadEnvelope(f"source.lsn must be an integer, got {lsn!r}")
    row = envelope.get("before" if op == "d" else "after")
    if op != "d" and not isinstance(row, dict):
        raise BadEnvelope(f"op={op} event without an 'after' row")
    if row is not None and not isinstance(row, dict):
        raise BadEnvelope("op=d event whose 'before' is not an object")
    profile: dict[str, Any] = row or {}
    userid = profile.get("userid")
    if userid is None or userid == "":
        userid = _key_userid(key)
    if not isinstance(userid, str) or not userid:
        raise BadEnvelope("change event without a userid")
    within_key_limit(userid, "userid", BadEnvelope)
    valid_from = BEGINNING_OF_TIME_MS if op == "r" else ts_ms
    if op == "d":
        return Change(userid, op, valid_from, lsn or 0, ts_ms)
    return Change(
        userid,
        op,
        valid_from,
        lsn or 0,
        ts_ms,
        regionid=_region(profile),
        gender=_profile_text(profile, "gender"),
        interests=_profile_interests(profile),
        registertime=_profile_int(profile, "registertime"),
    )


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


def _int(obj: dict[str, Any], field: str, where: str) -> int:
    value = obj.get(field)
    if not is_int(value):
        raise BadEnvelope(f"{where}.{field} must be an integer, got {value!r}")
    return value


def _commit_ms(obj: dict[str, Any], field: str, where: str) -> int:
    value = _int(obj, field, where)
    if not MIN_COMMIT_MS <= value <= MAX_COMMIT_MS:
        raise BadEnvelope(f"{where}.{field} {value} is outside 1970-01-01..9999-12-31 (a commit time in ms)")
    return value


def _key_userid(key: bytes | None) -> str | None:
    try:
        obj = loads_strict(key) if key is not None else None
    except ValueError:
        return None
    userid = obj.get("userid") if isinstance(obj, dict) else None
    return userid if isinstance(userid, str) and userid else None


def _profile_text(row: dict[str, Any], field: str) -> str | None:
    value = row.get(field)
    if value is None or isinstance(value, str):
        return value
    if is_int(value):
        return str(value)
    raise BadEnvelope(f"after.{field} must be a string (or an integer), got {value!r}")


def _region(row: dict[str, Any]) -> str | None:
    region = _profile_text(row, "regionid")
    return None if region is None else within_key_limit(region, "after.regionid", BadEnvelope)


def _profile_interests(row: dict[str, Any]) -> list[str | None] | None:
    value = row.get("interests")
    if value is None or (isinstance(value, list) and all(v is None or isinstance(v, str) for v in value)):
        return value
    raise BadEnvelope(f"after.interests must be an array of strings, got {value!r}")


def _profile_int(row: dict[str, Any], field: str) -> int | None:
    value = row.get(field)
    if value is None or is_int(value):
        return value
    raise BadEnvelope(f"after.{field} must be an integer, got {value!r}")


def fold(cdc_raw: DataFrame) -> DataFrame:
    """Raw CDC records (topic, key, value, event_id, written_ms) -> the join's CDC input, FOLDED_COLUMNS:
    every change, progress and unfoldable record ("error", a dead letter the join passes through); skipped
    ones dropped. progress_ms counts at most MAX_PROGRESS_LEAD_MS past written_ms, the record's Kafka
    timestamp."""
    folded = fold_records(cdc_raw, "written_ms").where("kind IN ('change', 'progress', 'error')")
    limit = F.col("written_ms") + F.lit(MAX_PROGRESS_LEAD_MS)
    progress = F.col("progress_ms")
    capped = F.when(progress > limit, limit).otherwise(progress)  # null stays null
    return folded.withColumn("progress_ms", capped).drop("written_ms")


def fold_records(cdc_raw: DataFrame, *keep: str) -> DataFrame:
    """parse_envelope in the JVM: every record -> FOLDED_COLUMNS, tagged by kind.

    One Java UDF (jvm/src/main/java/io/streamfold/cdc/EnvelopeFold.java) folds a record or says why it
    cannot, so the plan is two small projections (a fold in Spark's native functions was a 16-deep chain
    of them, planned and code-generated again every micro-batch). `keep` names input columns to carry along.
    """
    cdc_raw.sparkSession.udf.registerJavaFunction(FOLD_UDF, "io.streamfold.cdc.EnvelopeFold", FOLD_TYPE)
    folded = cdc_raw.select(
        "event_id",
        "value",
        *keep,
        F.call_function(FOLD_UDF, F.col("topic") == names.HEARTBEAT_TOPIC, "key", "value").alias("_fold"),
    )
    error = F.col("_fold.kind") == "error"
    return folded.select(
        *(F.col(f"_fold.{name}").alias(name) for name in FOLDED_COLUMNS[:-2]),
        F.when(error, F.col("event_id")).alias("event_id"),
        F.when(error, F.col("value")).alias("payload"),
        *keep,
    )
