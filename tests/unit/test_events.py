"""The event contract (spec/events.py): what is accepted, and the reason for everything that is not, for the
default pipeline's clicks and for other event specs."""

import json
from datetime import UTC, datetime

import pytest
from pyspark.sql.types import StructType

from common import pipeline_file as pf
from common import plan
from pipeline import records
from pipeline.events import MAX_RECORD_BYTES, parse, parse_type, parsed_columns
from spec.events import Event, JsonFloat, Rejected, epoch_seconds_ms, parse_event
from tests.support import records as support_records

# The default pipeline file's event spec (the demo's clicks).
DEFAULT_EVENT_SPEC = plan.of(pf.load()).event_spec

NOW = 1_763_800_000_000
GOOD = {"userid": "User_1", "url": "/home", "device_id": "mobile", "ip": "10.0.0.1", "event_time": NOW - 5}


def raw(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def parse_click(payload: bytes | None, now_ms: int) -> Event:
    return parse_event(payload, now_ms, DEFAULT_EVENT_SPEC)


def test_valid_click_defaults_clicks_to_one():
    fields = {"url": "/home", "device_id": "mobile", "ip": "10.0.0.1"}
    assert parse_click(raw(), NOW) == Event("User_1", fields, NOW - 5, 1)


def test_a_userid_of_1024_utf8_bytes_is_a_click():
    assert parse_click(raw(userid="😀" * 256), NOW).key == "😀" * 256


def test_explicit_clicks_kept():
    assert parse_click(raw(clicks=3), NOW).count == 3


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (None, "empty record"),
        (b"not json at all", "not JSON"),
        (b"\xff\xfe\x00", "not JSON"),
        (b"[1, 2]", "expected a JSON object"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "userid"}).encode(), "userid must be"),
        (raw(userid=""), "userid must be"),
        (raw(userid=42), "userid must be"),
        (raw(url=None), "url must be"),
        (raw(event_time="1700000000000"), "event_time must be epoch milliseconds"),
        (raw(event_time=1.7e12), "event_time must be epoch milliseconds"),
        (raw(event_time=True), "event_time must be epoch milliseconds"),
        (raw(event_time=12), "outside the plausible range"),
        (raw(event_time=NOW + 61_000), "outside the plausible range"),
        (raw(clicks=0), "clicks must be an integer"),
        (raw(clicks=-3), "clicks must be an integer"),
        (raw(clicks="2"), "clicks must be an integer"),
        (b'{"pad": "' + b"x" * MAX_RECORD_BYTES + b'"}', "exceeds"),
        (raw(userid=" \t\u3000"), "userid must be"),
        (raw(userid="u" * 1025), "^userid of 1025 bytes exceeds the 1024-byte limit$"),
        (raw(userid="😀" * 256 + "é"), "^userid of 1026 bytes exceeds the 1024-byte limit$"),
        (raw(clicks=True), "clicks must be an integer"),
        (raw(clicks=None), "clicks must be an integer"),
        (raw(event_time=2**63), "event_time must be epoch milliseconds"),
        (b'{"userid": "a", "userid": "b"}', "not JSON: duplicate key"),
        (b'{"n": NaN}', "not JSON"),
        (b'{"userid": "\\ud800"}', "not JSON: lone UTF-16 surrogate"),
        (b'{"n": ' + b"9" * 5000 + b"}", "not JSON: number longer"),
        (b"[" * 30_000 + b"]" * 30_000, "not JSON"),
        (raw() + b" x", "not JSON"),
    ],
)
def test_rejections_name_the_reason(payload, reason):
    with pytest.raises(Rejected, match=reason):
        parse_click(payload, NOW)


@pytest.mark.spark
def test_spark_parse_keeps_rejects_with_payload_and_reason(spark):
    rows = [
        ("kafka:clicks:0:1", "kafka:clicks", raw(), NOW),
        ("kafka:clicks:0:2", "kafka:clicks", b"{oops", NOW),
    ]
    frame = spark.createDataFrame(rows, "event_id string, source string, payload binary, now_ms long")
    out = parse(frame, DEFAULT_EVENT_SPEC)
    assert tuple(out.columns) == parsed_columns(DEFAULT_EVENT_SPEC)
    good, bad = sorted(out.collect(), key=lambda r: r["event_id"])
    assert good["error"] is None and good["userid"] == "User_1" and good["payload"] is None
    assert (good["click_time_ms"], good["clicks"]) == (NOW - 5, 1)
    assert bad["event_id"] == "kafka:clicks:0:2" and bad["payload"] == b"{oops" and "not JSON" in bad["error"]


def test_the_default_spec_parses_into_the_click_records():
    """The default spec's row is today's click row: support_records.CLICK without event_id, then the error."""
    want = StructType([*support_records.CLICK.fields[1:], records.REJECT["error"]])
    assert parse_type(DEFAULT_EVENT_SPEC) == want
    assert parsed_columns(DEFAULT_EVENT_SPEC) == (
        *records.names(support_records.CLICK),
        *records.names(records.REJECT),
    )


def test_a_spec_whose_names_clash_with_the_jobs_columns_is_refused():
    for name in ("clicks", "click_time_ms", "error", "event_id", "url"):
        spec = {
            **DEFAULT_EVENT_SPEC,
            "fields": [*DEFAULT_EVENT_SPEC["fields"], {"name": name, "type": "text"}],
        }
        with pytest.raises(ValueError, match="clash"):
            parse_type(spec)


# --- other event specs --------------------------------------------------------------------------------

TYPED = {
    "key": {"field": "id", "type": "bigint"},
    "fields": [
        {"name": "t", "type": "text", "required": False},
        {"name": "i", "type": "integer", "required": False},
        {"name": "b", "type": "bigint", "required": False},
        {"name": "d", "type": "double", "required": False},
        {"name": "n", "type": "numeric", "required": False},
        {"name": "ok", "type": "boolean", "required": False},
        {"name": "at", "type": "timestamptz", "required": False},
        {"name": "local", "type": "timestamp", "required": False},
        {"name": "tags", "type": "text[]", "required": False},
        {"name": "doc", "type": "jsonb", "required": False},
    ],
    "time": {"field": "ts", "format": "epoch_s"},
    "count": None,
    "max_record_bytes": 4096,
    "min_time_ms": 1_000_000_000_000,
    "max_future_ms": 90_000,
    "max_key_bytes": 16,
}
AT = NOW // 1000  # seconds


def typed(**values) -> bytes:
    return json.dumps({"id": 7, "ts": AT, **values}).encode()


def test_each_type_reads_its_json_value():
    event = parse_event(
        typed(
            t=" ",
            i=-(2**31),
            b=2**63 - 1,
            d=1,
            n=1.50,
            ok=False,
            at="2026-11-22T10:00:00.1234567+01:30",
            local=-5,
            tags=["a", None],
            doc={"x": [1, 2.5, None]},
            clicks=0,  # not the spec's: ignored
        ),
        NOW,
        TYPED,
    )
    at = int(datetime(2026, 11, 22, 8, 30, tzinfo=UTC).timestamp()) * 1_000_000 + 123_456
    assert event == Event(
        "7",
        {
            "t": " ",
            "i": -(2**31),
            "b": 2**63 - 1,
            "d": 1.0,
            "n": "1.5",
            "ok": False,
            "at": at,
            "local": -5,
            "tags": ["a", None],
            "doc": '{"x":[1,2.5,null]}',
        },
        AT * 1000,
        1,
    )


def test_optional_fields_may_be_missing_or_null():
    event = parse_event(typed(t=None, doc=None), NOW, TYPED)
    assert set(event.fields.values()) == {None}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("t", 5),
        ("i", 2**31),
        ("i", 1.0),
        ("b", 2**63),
        ("b", True),
        ("d", "1"),
        ("n", "1"),
        ("ok", 1),
        ("at", "2026-11-22 10:00:00Z"),
        ("at", "2026-02-29T10:00:00Z"),
        ("at", "2026-11-22T10:00:00"),
        ("at", "2026-11-22T24:00:00Z"),
        ("at", "2026-11-22T10:00:00.Z"),
        ("at", "2026-11-22T10:00:00.1234567890Z"),
        ("at", "2026-11-22T10:00:00+24:00"),
        ("at", "0000-01-01T00:00:00Z"),
        ("at", "0001-01-01T00:00:00+00:01"),
        ("at", "２026-11-22T10:00:00Z"),
        ("local", 2**62),
        ("tags", ["a", 1]),
        ("tags", "a"),
    ],
)
def test_a_value_not_of_its_fields_type_is_rejected(field, value):
    with pytest.raises(Rejected, match=f"^{field} must be .* or null, got "):
        parse_event(typed(**{field: value}), NOW, TYPED)


def test_numbers_beyond_a_double_or_numeric_are_rejected():
    for field, literal in [
        ("d", b"1e400"),
        ("d", b"1" + b"0" * 400),
        ("n", b"1e-16384"),
        ("n", b"1e9999999999"),
    ]:
        with pytest.raises(Rejected, match=f"^{field} must be"):
            parse_event(typed()[:-1] + b', "' + field.encode() + b'": ' + literal + b"}", NOW, TYPED)


def test_a_required_field_must_be_there():
    spec = {**TYPED, "fields": [{"name": "doc", "type": "jsonb", "required": True}]}
    assert parse_event(typed(doc=0), NOW, spec).fields == {"doc": "0"}
    for payload in (typed(), typed(doc=None)):
        with pytest.raises(Rejected, match="^doc must be a JSON value, got None$"):
            parse_event(payload, NOW, spec)


@pytest.mark.parametrize(
    ("key_type", "value", "key"),
    [("integer", -5, "-5"), ("bigint", 2**40, str(2**40)), ("text", "abc", "abc")],
)
def test_a_key_is_carried_as_text(key_type, value, key):
    spec = {**TYPED, "key": {"field": "id", "type": key_type}}
    assert parse_event(typed(id=value), NOW, spec).key == key


@pytest.mark.parametrize(
    ("key_type", "value", "reason"),
    [
        ("integer", 2**31, "^id must be a 32-bit integer, got"),
        ("bigint", "5", "^id must be a 64-bit integer, got"),
        ("text", 5, "^id must be a non-empty string, got"),
        ("text", "\u3000", "^id must be a non-empty string, got"),
        ("text", "é" * 9, "^id of 18 bytes exceeds the 16-byte limit$"),
    ],
)
def test_a_bad_key_is_rejected(key_type, value, reason):
    spec = {**TYPED, "key": {"field": "id", "type": key_type}}
    with pytest.raises(Rejected, match=reason):
        parse_event(typed(id=value), NOW, spec)


@pytest.mark.parametrize(
    ("literal", "ms"),
    [
        (f"{AT}", AT * 1000),
        (f"{AT}.0019999999999999999999999999999", AT * 1000 + 1),
        (f"{AT}.999999999999999999999999999999", AT * 1000 + 999),
        (f"{AT // 10}.{AT % 10}5e1", AT * 1000 + 500),
        (f"{AT * 1000}e-3", AT * 1000),
        (f"{AT * 10**6 + 1}E-6", AT * 1000),
    ],
)
def test_epoch_seconds_are_read_exactly_and_rounded_down(literal, ms):
    payload = b'{"id": 1, "ts": ' + literal.encode() + b"}"
    assert parse_event(payload, NOW, TYPED).time_ms == ms


def test_epoch_seconds_before_1970_round_down_too():
    assert epoch_seconds_ms(JsonFloat("-1.0005"), -(10**6), 10**6) == -1001
    assert epoch_seconds_ms(-1, -(10**6), 10**6) == -1000


def test_an_implausible_event_time_names_the_spec_s_range():
    too_late = b'{"id": 1, "ts": ' + str(NOW // 1000 + 91).encode() + b"}"
    with pytest.raises(Rejected, match=r"^ts \d+ is outside the plausible range \(2001-09-09T01:46:40Z"):
        parse_event(too_late, NOW, TYPED)
    for literal in (b"1e9999999999", b"-1e-9999999999", b"0e99", b"999"):
        with pytest.raises(Rejected, match="is outside the plausible range"):
            parse_event(b'{"id": 1, "ts": ' + literal + b"}", NOW, TYPED)
    with pytest.raises(Rejected, match=r"^ts must be epoch seconds \(a number\), got '1'"):
        parse_event(typed(ts="1"), NOW, TYPED)


def test_iso8601_event_times_are_rounded_down_to_ms():
    spec = {**TYPED, "time": {"field": "ts", "format": "iso8601"}}
    at = datetime.fromtimestamp(AT, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert parse_event(typed(ts=at + ".0129Z"), NOW, spec).time_ms == AT * 1000 + 12
    with pytest.raises(Rejected, match=r"^ts must be an ISO-8601 time"):
        parse_event(typed(ts=AT), NOW, spec)


def test_a_count_field_counts_and_none_counts_one():
    spec = {**TYPED, "count": {"field": "n_events", "max": 5}}
    assert parse_event(typed(n_events=5), NOW, spec).count == 5
    with pytest.raises(Rejected, match=r"^n_events must be an integer in 1..5, got 6$"):
        parse_event(typed(n_events=6), NOW, spec)
    assert parse_event(typed(n_events=6), NOW, TYPED).count == 1
