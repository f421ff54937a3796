"""Click records: the JSON contract, validation, and the reason a record is rejected.

A click is one JSON object per record:
    {"userid": str, "url": str, "device_id": str, "ip": str, "event_time": epoch-ms int,
     "clicks": int (optional, default 1)}
Anything else goes to the dead letters with a reason; nothing is silently dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeGuard

import pyarrow as pa

MAX_RECORD_BYTES = 64 * 1024
# Event times before this are not real clicks (2000-01-01T00:00:00Z).
MIN_EVENT_MS = 946_684_800_000
# Device clocks drift a little; a click stamped further ahead of the batch's processing time is bogus
# (and would hold back `--once`, which waits for the watermark to pass every click).
MAX_FUTURE_MS = 60 * 1000
MAX_CLICKS = 1_000_000

# Rows that reach the join: parsed clicks, and rejected ones carrying `error` and the raw payload.
PARSED_SCHEMA = pa.schema(
    [
        ("event_id", pa.string()),
        ("userid", pa.string()),
        ("event_time_ms", pa.int64()),
        ("url", pa.string()),
        ("device_id", pa.string()),
        ("ip", pa.string()),
        ("clicks", pa.int32()),
        ("error", pa.string()),
        ("source", pa.string()),
        ("payload", pa.binary()),
    ]
)
PARSED_DDL = (
    "event_id string, userid string, event_time_ms long, url string, device_id string, ip string, "
    "clicks int, error string, source string, payload binary"
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
        obj = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Rejected(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise Rejected(f"expected a JSON object, got {type(obj).__name__}")
    clicks = obj.get("clicks", 1)
    if not _is_int(clicks) or not 1 <= clicks <= MAX_CLICKS:
        raise Rejected(f"clicks must be an integer in 1..{MAX_CLICKS}, got {clicks!r}")
    return Click(
        userid=_text(obj, "userid"),
        url=_text(obj, "url"),
        device_id=_text(obj, "device_id"),
        ip=_text(obj, "ip"),
        event_time_ms=_event_time(obj, now_ms),
        clicks=clicks,
    )


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _text(obj: dict[str, Any], field: str) -> str:
    value = obj.get(field)
    if not isinstance(value, str) or not value.strip():
        raise Rejected(f"{field} must be a non-empty string, got {value!r}")
    return value


def _event_time(obj: dict[str, Any], now_ms: int) -> int:
    value = obj.get("event_time")
    if not _is_int(value):
        raise Rejected(f"event_time must be epoch milliseconds (integer), got {value!r}")
    if value < MIN_EVENT_MS or value > now_ms + MAX_FUTURE_MS:
        raise Rejected(f"event_time {value} is outside the plausible range (2000-01-01 .. now + 1 minute)")
    return value


def parse_batches(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow body. Input columns: event_id, source, payload, now_ms. Output: PARSED_SCHEMA."""
    for batch in batches:
        rows = [_parse_row(r) for r in batch.to_pylist()]
        yield pa.RecordBatch.from_pylist(rows, schema=PARSED_SCHEMA)


def _parse_row(row: dict[str, Any]) -> dict[str, Any]:
    base = {"event_id": row["event_id"], "source": row["source"]}
    try:
        click = parse_click(row["payload"], row["now_ms"])
    except Rejected as exc:
        return {**base, "error": str(exc), "payload": row["payload"]}
    return {**base, **click.__dict__}
