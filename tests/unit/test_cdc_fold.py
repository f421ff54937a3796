"""Debezium envelopes (JSON converter, schemas off) folded into typed changes and progress."""

import json

import pyarrow as pa
import pytest

from pipeline.cdc_fold import (
    BEGINNING_OF_TIME_MS,
    FOLDED_SCHEMA,
    BadEnvelope,
    Change,
    Progress,
    fold_batches,
    parse_envelope,
)
from streamfold import names

TOPIC = names.CDC_USERS_TOPIC
ALICE = {"userid": "alice", "regionid": "asia", "gender": "FEMALE", "interests": ["News"], "registertime": 1}


def envelope(op: str, before=None, after=None, ts_ms=1_000, lsn=42) -> bytes:
    source = {
        "connector": "postgresql",
        "ts_ms": ts_ms,
        "lsn": lsn,
        "snapshot": "true" if op == "r" else "false",
    }
    return json.dumps(
        {"before": before, "after": after, "op": op, "source": source, "ts_ms": ts_ms + 5}
    ).encode()


KEY = json.dumps({"userid": "alice"}).encode()


def test_insert_and_update_are_valid_from_commit_time():
    change = parse_envelope(TOPIC, KEY, envelope("u", after=ALICE, ts_ms=5_000))
    assert change == Change("alice", "u", 5_000, 42, 5_000, "asia", "FEMALE", ["News"], 1)


def test_snapshot_read_is_valid_from_the_beginning_of_time_but_reports_progress():
    change = parse_envelope(TOPIC, KEY, envelope("r", after=ALICE, ts_ms=7_000))
    assert change.valid_from_ms == BEGINNING_OF_TIME_MS
    assert change.progress_ms == 7_000


def test_delete_takes_userid_from_before_and_has_no_profile():
    change = parse_envelope(TOPIC, KEY, envelope("d", before={"userid": "alice"}, ts_ms=9_000))
    assert change == Change("alice", "d", 9_000, 42, 9_000)


def test_delete_without_before_falls_back_to_the_key():
    assert parse_envelope(TOPIC, KEY, envelope("d", ts_ms=9_000)).userid == "alice"


def test_tombstone_is_skipped():
    assert parse_envelope(TOPIC, KEY, None) is None


def test_heartbeat_reports_progress():
    beat = json.dumps({"ts_ms": 12_345}).encode()
    assert parse_envelope(names.HEARTBEAT_TOPIC, b'{"serverName":"cdc"}', beat) == Progress(12_345 - 1000)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"garbage", "not JSON"),
        (b"[]", "not a JSON object"),
        (json.dumps({"op": "x", "source": {"ts_ms": 1}}).encode(), "not a Debezium row change"),
        (
            json.dumps({"op": "c", "after": ALICE, "source": {"ts_ms": "soon"}}).encode(),
            "ts_ms must be an integer",
        ),
        (json.dumps({"op": "c", "after": None, "source": {"ts_ms": 1}}).encode(), "without an 'after' row"),
        (
            json.dumps({"op": "c", "after": {"regionid": "x"}, "source": {"ts_ms": 1}}).encode(),
            "without a userid",
        ),
    ],
)
def test_bad_envelopes_are_rejected_with_reason(value, reason):
    with pytest.raises(BadEnvelope, match=reason):
        parse_envelope(TOPIC, None, value)


def test_fold_batches_tags_every_record():
    rows = [
        {"topic": TOPIC, "key": KEY, "value": envelope("c", after=ALICE), "record_id": "a"},
        {"topic": TOPIC, "key": KEY, "value": None, "record_id": "b"},
        {"topic": names.HEARTBEAT_TOPIC, "key": None, "value": b'{"ts_ms": 5}', "record_id": "c"},
        {"topic": TOPIC, "key": None, "value": b"{bad", "record_id": "d"},
    ]
    (out,) = list(fold_batches(iter([pa.RecordBatch.from_pylist(rows)])))
    assert out.schema == FOLDED_SCHEMA
    kinds = [(r["kind"], r["record_id"]) for r in out.to_pylist()]
    assert kinds == [("change", None), ("skip", None), ("progress", None), ("error", "d")]
    assert out.to_pylist()[3]["payload"] == b"{bad"
