"""The CDC fold: Debezium change envelopes into a typed, keyed changelog of user profiles.

Debezium (JSON converter, schemas off) writes to `cdc.public.users`:
    key   {"userid": ...}
    value {"before": {...}|null, "after": {...}|null, "op": c|u|d|r, "source": {"ts_ms", "lsn", ...}, ...}
then a tombstone (null value) after each delete, and heartbeats {"ts_ms": ...} to its heartbeat topic.
Every change and heartbeat also reports CDC progress (the largest source.ts_ms seen), which drives the
temporal join's completeness. A snapshot read (op=r) is valid from the beginning of time.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline.temporal_state import BEGINNING_OF_TIME_MS
from streamfold import names

PROFILE_FIELDS = ("regionid", "gender", "interests", "registertime")
# A heartbeat is stamped when Debezium sends it, and a change committed just before may still be on its
# way from the WAL: count a heartbeat as progress up to a second earlier. (A change event's own
# source.ts_ms is exact: the topic has one partition, in commit order.)
HEARTBEAT_SAFETY_MS = 1000

FOLDED_SCHEMA = pa.schema(
    [
        ("kind", pa.string()),  # change | progress | skip | error
        ("userid", pa.string()),
        ("op", pa.string()),
        ("valid_from_ms", pa.int64()),
        ("lsn", pa.int64()),
        ("regionid", pa.string()),
        ("gender", pa.string()),
        ("interests", pa.list_(pa.string())),
        ("registertime", pa.int64()),
        ("progress_ms", pa.int64()),
        ("error", pa.string()),
        ("record_id", pa.string()),
        ("payload", pa.binary()),
    ]
)
FOLDED_DDL = (
    "kind string, userid string, op string, valid_from_ms long, lsn long, regionid string, gender string, "
    "interests array<string>, registertime long, progress_ms long, error string, record_id string, "
    "payload binary"
)


@dataclass(frozen=True)
class Change:
    userid: str
    op: str
    valid_from_ms: int
    lsn: int
    progress_ms: int
    regionid: str | None = None
    gender: str | None = None
    interests: list[str] | None = None
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
        return Progress(_int(beat, "ts_ms", "heartbeat") - HEARTBEAT_SAFETY_MS)
    if value is None:
        return None  # the tombstone after a delete: the delete event itself carries the change
    envelope = _json(value, "change event")
    op = envelope.get("op")
    source = envelope.get("source")
    if op not in ("c", "u", "d", "r") or not isinstance(source, dict):
        raise BadEnvelope(f"not a Debezium row change (op={op!r})")
    ts_ms = _int(source, "ts_ms", "source")
    lsn = source.get("lsn") or 0
    row = envelope.get("before" if op == "d" else "after")
    if op != "d" and not isinstance(row, dict):
        raise BadEnvelope(f"op={op} event without an 'after' row")
    userid = (row or {}).get("userid") or _key_userid(key)
    if not isinstance(userid, str) or not userid:
        raise BadEnvelope("change event without a userid")
    valid_from = BEGINNING_OF_TIME_MS if op == "r" else ts_ms
    if op == "d":
        return Change(userid, op, valid_from, lsn, ts_ms)
    profile: dict[str, Any] = row or {}
    return Change(userid, op, valid_from, lsn, ts_ms, **{f: profile.get(f) for f in PROFILE_FIELDS})


def _json(raw: bytes | None, what: str) -> dict[str, Any]:
    if raw is None:
        raise BadEnvelope(f"{what} with a null value")
    try:
        obj = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadEnvelope(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadEnvelope(f"{what} is not a JSON object")
    return obj


def _int(obj: dict[str, Any], field: str, where: str) -> int:
    value = obj.get(field)
    if not isinstance(value, int) or isinstance(value, bool):
        raise BadEnvelope(f"{where}.{field} must be an integer, got {value!r}")
    return value


def _key_userid(key: bytes | None) -> str | None:
    try:
        return json.loads(key).get("userid") if key else None
    except (ValueError, AttributeError):
        return None


def fold_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body. Input: topic, key, value, record_id. Output: FOLDED_SCHEMA."""
    for batch in batches:
        rows = [_fold_row(r) for r in batch.to_pylist()]
        yield pa.RecordBatch.from_pylist(rows, schema=FOLDED_SCHEMA)


def _fold_row(row: dict[str, Any]) -> dict[str, Any]:
    try:
        parsed = parse_envelope(row["topic"], row["key"], row["value"])
    except BadEnvelope as exc:
        return {"kind": "error", "error": str(exc), "record_id": row["record_id"], "payload": row["value"]}
    if parsed is None:
        return {"kind": "skip"}
    if isinstance(parsed, Progress):
        return {"kind": "progress", "progress_ms": parsed.progress_ms}
    return {"kind": "change", **parsed.__dict__}


@dataclass(frozen=True)
class Folded:
    records: DataFrame  # every record, tagged by `kind`
    changes: DataFrame  # userid, op, valid_from_ms, lsn, profile fields
    progress: DataFrame  # progress_ms


def fold(cdc_raw: DataFrame) -> Folded:
    """Raw CDC records (topic, key, value, record_id) -> tagged records, changes and progress."""
    folded = cdc_raw.mapInArrow(fold_batches, FOLDED_DDL)
    changes = folded.where("kind = 'change'").select("userid", "op", "valid_from_ms", "lsn", *PROFILE_FIELDS)
    progress = folded.where("kind IN ('change', 'progress')").select("progress_ms")
    return Folded(folded, changes, progress)


def changelog_records(changes: DataFrame) -> DataFrame:
    """users_changelog: key userid, value = non-PII profile, null (tombstone) on delete."""
    profile = F.struct(
        "userid",
        *PROFILE_FIELDS,
        F.when(F.col("op") == "r", F.lit(None)).otherwise(F.col("valid_from_ms")).alias("valid_from"),
    )
    value = F.when(F.col("op") == "d", F.lit(None).cast("string")).otherwise(F.to_json(profile))
    return changes.select(F.col("userid").alias("key"), value.alias("value"))
