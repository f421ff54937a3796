"""Debezium envelopes (JSON converter, schemas off) folded into typed changes and progress."""

import json
from pathlib import Path

import pytest

from common import names, plan
from common import pipeline_file as pf
from pipeline.cdc_fold import (
    HEARTBEAT_SCHEMA,
    HEARTBEAT_TABLE,
    MAX_CHANGE_BYTES,
    fold,
    fold_records,
    fold_type,
    folded_columns,
)
from spec.envelopes import (
    BEGINNING_OF_TIME_MS,
    MAX_COMMIT_MS,
    MISSING,
    UNAVAILABLE,
    BadEnvelope,
    Change,
    Progress,
    Truncate,
    parse_envelope,
)
from tests.support.records import CHANGE

TOPIC = names.CDC_USERS_TOPIC
ALICE = {"userid": "alice", "regionid": "asia", "gender": "FEMALE", "interests": ["News"], "registertime": 1}


def envelope(op: str, before=None, after=None, ts_ms=1_000, lsn=42, snapshot: str | None = None) -> bytes:
    source = {
        "connector": "postgresql",
        "ts_ms": ts_ms,
        "lsn": lsn,
        "snapshot": snapshot or ("true" if op == "r" else "false"),
    }
    return json.dumps(
        {"before": before, "after": after, "op": op, "source": source, "ts_ms": ts_ms + 5}
    ).encode()


KEY = json.dumps({"userid": "alice"}).encode()
# The default pipeline file's profile spec (the demo's public.users).
DEFAULT_PROFILE_SPEC = plan.of(pf.load()).profile_spec
FOLDED_COLUMNS = folded_columns(DEFAULT_PROFILE_SPEC)


def parse(topic: str, key: bytes | None, value: bytes | None) -> Change | Progress | None:
    return parse_envelope(topic, key, value, DEFAULT_PROFILE_SPEC)


def profile(regionid=None, gender=None, interests=None, registertime=None) -> dict:
    return {"regionid": regionid, "gender": gender, "interests": interests, "registertime": registertime}


def test_the_default_spec_folds_to_the_changelog_record():
    """The demo's fold row is records.CHANGE (tests/support) between kind and progress_ms, error."""
    want = [("kind", "string"), *((f.name, f.dataType.simpleString()) for f in CHANGE.fields)]
    want += [("progress_ms", "bigint"), ("error", "string")]
    assert [(f.name, f.dataType.simpleString()) for f in fold_type(DEFAULT_PROFILE_SPEC).fields] == want


def test_insert_and_update_are_valid_from_commit_time():
    change = parse(TOPIC, KEY, envelope("u", after=ALICE, ts_ms=5_000))
    assert change == Change("alice", "u", 5_000, 42, 5_000, profile("asia", "FEMALE", ["News"], 1))


def test_snapshot_read_is_valid_from_the_beginning_of_time_but_reports_progress():
    change = parse(TOPIC, KEY, envelope("r", after=ALICE, ts_ms=7_000))
    assert change.valid_from_ms == BEGINNING_OF_TIME_MS
    assert change.progress_ms == 7_000
    for marker in ("first", "last", "first_in_data_collection", "last_in_data_collection"):
        read = parse(TOPIC, KEY, envelope("r", after=ALICE, snapshot=marker))
        assert read.valid_from_ms == BEGINNING_OF_TIME_MS


def test_incremental_snapshot_read_is_valid_from_when_it_was_read():
    """`streamfold setup` recaptures a table whose capture was lost with an incremental snapshot: its rows
    are versions from their read on, not from the beginning of time (which would rewrite the past)."""
    change = parse(TOPIC, KEY, envelope("r", after=ALICE, ts_ms=7_000, snapshot="incremental"))
    assert change == Change("alice", "r", 7_000, 42, 7_000, profile("asia", "FEMALE", ["News"], 1))


def test_delete_takes_userid_from_before_and_has_no_profile():
    change = parse(TOPIC, KEY, envelope("d", before={"userid": "alice"}, ts_ms=9_000))
    assert change == Change("alice", "d", 9_000, 42, 9_000, profile())


def test_delete_without_before_falls_back_to_the_key():
    assert parse(TOPIC, KEY, envelope("d", ts_ms=9_000)).key == "alice"


def test_a_truncate_has_no_key_and_ends_every_profile_at_its_commit_time():
    """Debezium 3.4's truncate event (skipped.operations=none): no key, no rows, op t."""
    value = json.dumps({"source": {"ts_ms": 7_000, "lsn": 88, "table": "users"}, "op": "t", "ts_ms": 7_010})
    assert parse(TOPIC, None, value.encode()) == Truncate(7_000, 88, 7_000)
    with pytest.raises(BadEnvelope, match="^source.ts_ms must be an integer"):
        parse(TOPIC, None, json.dumps({"source": {"lsn": 88}, "op": "t"}).encode())


def test_tombstone_is_skipped():
    assert parse(TOPIC, KEY, None) is None


def test_a_debezium_heartbeat_is_no_progress():
    """Debezium sends them whether or not the table is still captured (db/capture.py): only the heartbeat
    table's events, which stop with the capture, are progress. A bad one is still a dead letter."""
    beat = json.dumps({"ts_ms": 12_345}).encode()
    assert parse(names.HEARTBEAT_TOPIC, b'{"serverName":"cdc"}', beat) is None
    with pytest.raises(BadEnvelope, match="heartbeat.ts_ms must be an integer"):
        parse(names.HEARTBEAT_TOPIC, None, b'{"ts_ms": "soon"}')


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
        (
            envelope("u", after={**ALICE, "regionid": "x" * MAX_CHANGE_BYTES}),
            f"change event of {MAX_CHANGE_BYTES + 236} bytes exceeds the {MAX_CHANGE_BYTES}-byte limit",
        ),
    ],
)
def test_bad_envelopes_are_rejected_with_reason(value, reason):
    with pytest.raises(BadEnvelope, match=reason):
        parse(TOPIC, None, value)


def heartbeat_row_event(op: str = "u", ts_ms: int = 7_000) -> bytes:
    source = {
        "connector": "postgresql",
        "ts_ms": ts_ms,
        "lsn": 99,
        "schema": HEARTBEAT_SCHEMA,
        "table": HEARTBEAT_TABLE,
    }
    return json.dumps(
        {"before": None, "after": {"id": 1, "ts": "2026-11-22T15:00:00Z"}, "op": op, "source": source}
    ).encode()


@pytest.mark.parametrize("ts_ms", [-1, MAX_COMMIT_MS + 1, 9_000_000_000_000_000_000, -(2**63)])
def test_a_commit_time_outside_1970_to_9999_is_a_dead_letter_in_every_form(ts_ms):
    """A forged ts_ms of 9e18 once overflowed the join's timestamp and failed every batch after it."""
    reason = f"ts_ms {ts_ms} is outside 1970-01-01..9999-12-31"
    for topic, value in [
        (TOPIC, envelope("u", after=ALICE, ts_ms=ts_ms)),
        (TOPIC, envelope("r", after=ALICE, ts_ms=ts_ms)),
        (TOPIC, envelope("d", before=ALICE, ts_ms=ts_ms)),
        (TOPIC, heartbeat_row_event("u", ts_ms)),
        (names.HEARTBEAT_TOPIC, json.dumps({"ts_ms": ts_ms}).encode()),
    ]:
        with pytest.raises(BadEnvelope, match=reason):
            parse(topic, KEY, value)


def test_a_userid_or_regionid_over_1024_utf8_bytes_is_a_dead_letter():
    """Postgres indexes both: a 10,000-character one once failed the batch at every restart."""
    longest = {**ALICE, "userid": "é" * 512, "regionid": "r" * 1024}
    fits = parse(TOPIC, KEY, envelope("u", after=longest))
    assert (fits.key, fits.columns["regionid"]) == ("é" * 512, "r" * 1024)
    with pytest.raises(BadEnvelope, match="^userid of 1026 bytes exceeds the 1024-byte limit$"):
        parse(TOPIC, KEY, envelope("u", after={**ALICE, "userid": "é" * 513}))
    with pytest.raises(BadEnvelope, match="^userid of 1025 bytes exceeds the 1024-byte limit$"):
        parse(TOPIC, KEY, envelope("d", before={**ALICE, "userid": "u" * 1025}))
    with pytest.raises(BadEnvelope, match="^after.regionid of 1028 bytes exceeds the 1024-byte limit$"):
        parse(TOPIC, KEY, envelope("u", after={**ALICE, "regionid": "😀" * 257}))


def test_the_ends_of_the_commit_time_range_fold():
    assert parse(TOPIC, KEY, envelope("u", after=ALICE, ts_ms=0)).valid_from_ms == 0
    latest = parse(TOPIC, KEY, envelope("u", after=ALICE, ts_ms=MAX_COMMIT_MS))
    assert latest.progress_ms == MAX_COMMIT_MS
    assert parse(TOPIC, KEY, heartbeat_row_event("u", 0)) == Progress(0)


@pytest.mark.parametrize("op", ["c", "u", "r", "d"])
def test_heartbeat_table_event_is_exact_progress_never_a_change(op):
    assert parse(TOPIC, b'{"id": 1}', heartbeat_row_event(op, 7_000)) == Progress(7_000)


def test_profile_number_becomes_text_and_a_value_of_another_type_is_drift():
    change = parse(TOPIC, KEY, envelope("u", after={**ALICE, "regionid": 7}))
    assert change.columns["regionid"] == "7" and change.drifted == {}
    retyped = {**ALICE, "regionid": 7.5, "interests": "News", "registertime": "1"}
    change = parse(TOPIC, KEY, envelope("u", after=retyped))
    assert change.columns == profile(gender="FEMALE")
    assert change.drifted == {
        0: "a number in the change event where the column takes a string (or an integer): retyped?",
        2: "a string in the change event where the column takes an array of strings: retyped?",
        3: "a string in the change event where the column takes an integer: retyped?",
    }


def test_a_column_missing_from_the_row_is_drift_but_json_null_is_a_value():
    """A column renamed in the table is renamed in the publication's column list too: Debezium's row then
    lacks it. Its value is unknown (the join must not take the previous version's), the rest is a version."""
    renamed = {k: v for k, v in ALICE.items() if k != "interests"} | {"hobbies": ["Golf"]}
    change = parse(TOPIC, KEY, envelope("u", after=renamed))
    want = Change("alice", "u", 1_000, 42, 1_000, profile("asia", "FEMALE", None, 1), (), {2: MISSING})
    assert change == want
    assert parse(TOPIC, KEY, envelope("u", after={**ALICE, "interests": None})).drifted == {}


def test_a_deletes_row_is_checked_only_when_it_carries_columns():
    assert parse(TOPIC, KEY, envelope("d", before={"userid": "alice"})).drifted == {}
    full = {k: v for k, v in ALICE.items() if k != "gender"} | {"interests": ["a", UNAVAILABLE]}
    change = parse(TOPIC, KEY, envelope("d", before=full))
    assert change == Change("alice", "d", 1_000, 42, 1_000, profile(), (), {1: MISSING})


def test_an_unchanged_toasted_value_is_no_value_but_listed_as_unavailable():
    """Debezium 3.4's placeholder (UnchangedToastedPlaceholder): the string for a text, numeric or jsonb, a
    one-element array for a text[]. The join fills it from the key's previous version."""
    after = {**ALICE, "gender": UNAVAILABLE, "interests": [UNAVAILABLE]}
    change = parse(TOPIC, KEY, envelope("u", after=after))
    assert change == Change("alice", "u", 1_000, 42, 1_000, profile("asia", None, None, 1), (1, 2))
    assert parse(TOPIC, KEY, envelope("u", after=ALICE)).unavailable == ()
    every = {"id": 7, **{c["name"]: UNAVAILABLE for c in SPEC["columns"]}}
    assert parse_spec(every).unavailable == tuple(range(len(SPEC["columns"])))  # whatever the type


def test_the_placeholder_beside_other_elements_or_as_the_key_is_a_dead_letter():
    reason = "^after.interests holds Debezium's unavailable-value placeholder beside other elements$"
    with pytest.raises(BadEnvelope, match=reason):
        parse(TOPIC, KEY, envelope("u", after={**ALICE, "interests": ["a", UNAVAILABLE]}))
    with pytest.raises(BadEnvelope, match="^userid is Debezium's unavailable-value placeholder"):
        parse(TOPIC, None, envelope("u", after={**ALICE, "userid": UNAVAILABLE}))


SPEC = {
    "key": {"column": "id", "type": "bigint"},
    "columns": [
        {"name": "at", "type": "timestamptz"},
        {"name": "price", "type": "numeric"},
        {"name": "ratio", "type": "double"},
        {"name": "doc", "type": "jsonb", "max_bytes": 20},
        {"name": "n", "type": "integer"},
        {"name": "ok", "type": "boolean"},
    ],
    "heartbeat": {"schema": "hb", "table": "beat"},
    "max_change_bytes": 4096,
}


def parse_spec(after: dict, key: bytes | None = None) -> Change:
    change = parse_envelope(TOPIC, key, envelope("c", after=after), SPEC)
    assert isinstance(change, Change)
    return change


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("1970-01-01T00:00:00Z", 0),
        ("2026-11-22T15:00:00.123456789Z", 1_795_359_600_123_456),
        ("2026-11-22T16:30:00.5+01:30", 1_795_359_600_500_000),
        ("1969-12-31T23:59:59.999999Z", -1),
        ("2024-02-29T00:00:00-00:00", 1_709_164_800_000_000),
        ("0000-03-01T00:00:00Z", -62_162_035_200_000_000),
    ],
)
def test_a_timestamp_is_iso_8601_or_epoch_microseconds(text, micros):
    assert parse_spec({"id": 7, "at": text}).columns["at"] == micros
    assert parse_spec({"id": 7, "at": micros}).columns["at"] == micros


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-22 15:00:00Z",
        "2026-11-22T15:00:00",
        "2023-02-29T00:00:00Z",
        "2026-11-22T24:00:00Z",
        "2026-11-22T15:00:00.1234567890Z",
        "2026-11-22T15:00:00+19:00",
        "２026-11-22T15:00:00Z",
    ],
)
def test_other_timestamp_texts_are_drift(text):
    why = "a string in the change event where the column takes a timestamp"
    assert parse_spec({"id": 7, "at": text}).drifted[0].startswith(why)


def test_numbers_keep_their_text_and_json_its_document_order():
    raw = b'{"op": "c", "source": {"ts_ms": 1}, "after": {"id": 7, "price": 1.50, "ratio": 1e400}}'
    change = parse_envelope(TOPIC, None, raw, SPEC)
    assert isinstance(change, Change) and change.drifted[2].startswith("a number in the change event where")
    after = b'{"id": 7, "price": 1.50E3, "doc": {"b": 1.0, "a": [2]}}'
    raw = b'{"op": "c", "source": {"ts_ms": 1}, "after": %s}' % after
    change = parse_envelope(TOPIC, None, raw, SPEC)
    assert isinstance(change, Change)
    assert (change.columns["price"], change.columns["doc"]) == ("1.50E3", '{"b":1.0,"a":[2]}')
    assert parse_spec({"id": 7, "price": "-12.5e-3", "ratio": "NaN"}).columns["price"] == "-12.5e-3"
    assert parse_spec({"id": 7, "ratio": "-Infinity", "doc": '[1, "x"]'}).columns["doc"] == '[1, "x"]'
    for field, value in [("price", "1."), ("price", "Infinity"), ("doc", "{"), ("doc", 5), ("n", 2**31)]:
        index = [c["name"] for c in SPEC["columns"]].index(field)
        assert parse_spec({"id": 7, field: value}).drifted[index].endswith(": retyped?")
    with pytest.raises(BadEnvelope, match="^after.doc of 21 bytes exceeds the 20-byte limit$"):
        parse_spec({"id": 7, "doc": '"' + "x" * 19 + '"'})


def test_an_integer_key_is_carried_as_its_decimal_text():
    assert parse_spec({"id": -5, "ok": True}).key == "-5"
    assert parse_spec({"ok": False}, key=b'{"id": 12}').key == "12"
    for after, key in [({"id": "5"}, None), ({}, b'{"id": "5"}'), ({"id": 1.0}, None)]:
        with pytest.raises(BadEnvelope, match="^change event without a id$"):
            parse_spec(after, key)


@pytest.mark.spark
def test_fold_tags_every_record(spark):
    rows = [
        (TOPIC, KEY, envelope("c", after=ALICE), "a"),
        (TOPIC, KEY, None, "b"),
        (names.HEARTBEAT_TOPIC, None, b'{"ts_ms": 5000}', "c"),
        (TOPIC, None, b"{bad", "d"),
        (TOPIC, b'{"id": 1}', heartbeat_row_event("u", 8_000), "e"),
        (TOPIC, KEY, envelope("u", after={**ALICE, "regionid": 7}, ts_ms=9_000), "f"),
        (TOPIC, KEY, envelope("u", after={**ALICE, "regionid": "x" * 1025}), "g"),
        (TOPIC, KEY, envelope("u", after={**ALICE, "regionid": "x" * MAX_CHANGE_BYTES}), "h"),
        (TOPIC, KEY, envelope("u", after={**ALICE, "interests": [UNAVAILABLE]}, ts_ms=9_500), "i"),
        (TOPIC, None, json.dumps({"source": {"ts_ms": 9_600, "lsn": 50}, "op": "t"}).encode(), "j"),
    ]
    schema = "topic string, key binary, value binary, event_id string, written_ms bigint"
    frame = spark.createDataFrame([(*r, 10_000) for r in rows], schema)
    records = fold_records(frame, DEFAULT_PROFILE_SPEC).collect()
    assert tuple(records[0].asDict()) == FOLDED_COLUMNS
    assert [r["kind"] for r in records] == [
        "change",
        "skip",
        "skip",  # a Debezium heartbeat: no progress
        "error",
        "progress",
        "change",
        "error",
        "error",
        "change",
        "truncate",
    ]
    assert [r["event_id"] for r in records] == [None, None, None, "d", None, None, "g", "h", None, None]
    assert records[3]["payload"] == b"{bad" and "not JSON" in records[3]["error"]
    assert "after.regionid of" in records[6]["error"]
    assert records[7]["error"] == (
        f"change event of {MAX_CHANGE_BYTES + 236} bytes exceeds the {MAX_CHANGE_BYTES}-byte limit"
    )
    cdc = fold(frame, DEFAULT_PROFILE_SPEC).collect()  # the join's input: the skipped records dropped
    changes = [c for c in cdc if c["kind"] == "change"]
    assert [(c["userid"], c["op"], c["regionid"]) for c in changes] == [
        ("alice", "c", "asia"),
        ("alice", "u", "7"),
        ("alice", "u", "asia"),
    ]
    assert changes[0]["interests"] == ["News"] and changes[0]["registertime"] == 1
    assert [c["unavailable"] for c in changes] == [None, None, [2]]  # interests: Debezium did not send it
    assert changes[2]["interests"] is None
    kinds = ["change", "error", "progress", "change", "error", "error", "change", "truncate"]
    assert [c["kind"] for c in cdc] == kinds
    progress = sorted(c["progress_ms"] for c in cdc if c["kind"] != "error")
    # One before each commit's time: another transaction may still commit in the same millisecond.
    assert progress == [999, 7_999, 8_999, 9_499, 9_599]
    assert (cdc[-1]["valid_from_ms"], cdc[-1]["lsn"], cdc[-1]["userid"]) == (9_600, 50, None)


@pytest.mark.spark
def test_cdc_progress_counts_at_most_a_minute_past_the_records_kafka_timestamp(spark):
    """One commit time far ahead (year 9999, or a database clock an hour fast) would move the watermark for
    good: every waiting click released as complete, versions expired that later clicks need."""
    written = 1_764_000_000_000
    future = [written + 3_600_000, MAX_COMMIT_MS]
    rows = [
        (TOPIC, KEY, envelope("u", after=ALICE, ts_ms=written - 5_000), "a"),
        (TOPIC, b'{"id": 1}', heartbeat_row_event("u", written + 60_000), "b"),  # a minute ahead: kept
        *[(TOPIC, KEY, envelope("u", after=ALICE, ts_ms=ts), f"c{ts}") for ts in future],
        *[(TOPIC, b'{"id": 1}', heartbeat_row_event("u", ts), f"h{ts}") for ts in future],
        (TOPIC, None, b"{bad", "e"),
    ]
    schema = "topic string, key binary, value binary, event_id string, written_ms bigint"
    cdc = fold(spark.createDataFrame([(*r, written) for r in rows], schema), DEFAULT_PROFILE_SPEC).collect()
    assert tuple(cdc[0].asDict()) == FOLDED_COLUMNS
    assert [r["progress_ms"] for r in cdc[:2]] == [written - 5_001, written + 59_999]  # minus 1: fold()
    capped = cdc[2:-1]
    assert [r["progress_ms"] for r in capped] == [written + 59_999] * 4
    assert [r["valid_from_ms"] for r in capped[:2]] == future  # the changes fold as recorded
    assert cdc[-1]["kind"] == "error" and cdc[-1]["progress_ms"] is None  # no progress from a dead letter


def test_avro_change_events_are_folded_with_the_jobs_registry(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from common import config
    from pipeline import cdc_fold, retry

    monkeypatch.setenv("STREAMFOLD_HOME", str(tmp_path))  # no stack.env to fall back on
    monkeypatch.setenv(config.REGISTRY_URL_VAR, "http://registry:8080/apis/ccompat/v7/")
    monkeypatch.setenv(config.REGISTRY_USER_VAR, "streamfold")
    monkeypatch.setenv(config.REGISTRY_PASSWORD_VAR, "pw")
    monkeypatch.setenv(retry.RETRY_ENV, "2.5")
    text = (Path(__file__).resolve().parents[2] / pf.DEFAULT_FILE).read_text()
    assert cdc_fold.avro_registry(pf.parse(text)) is None
    avro = pf.parse(text + "cdc: {format: avro}\n")
    registry = cdc_fold.avro_registry(avro)
    assert registry is not None
    assert (registry.url, registry.user, registry.password, registry.retry_ms) == (
        "http://registry:8080/apis/ccompat/v7",
        "streamfold",
        "pw",
        2500,
    )
    monkeypatch.delenv(config.REGISTRY_URL_VAR)
    with pytest.raises(
        config.ConfigError, match=r"STREAMFOLD_REGISTRY_URL is not set: Avro change events \(cdc"
    ):
        cdc_fold.avro_registry(avro)
