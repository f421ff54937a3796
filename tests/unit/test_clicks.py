"""The click contract: what is accepted, and the reason for everything that is not."""

import json

import pytest

from pipeline.clicks import MAX_RECORD_BYTES, PARSED_COLUMNS, Click, Rejected, parse, parse_click

NOW = 1_763_800_000_000
GOOD = {"userid": "User_1", "url": "/home", "device_id": "mobile", "ip": "10.0.0.1", "event_time": NOW - 5}


def raw(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_valid_click_defaults_clicks_to_one():
    assert parse_click(raw(), NOW) == Click("User_1", "/home", "mobile", "10.0.0.1", NOW - 5, 1)


def test_a_userid_of_1024_utf8_bytes_is_a_click():
    assert parse_click(raw(userid="😀" * 256), NOW).userid == "😀" * 256


def test_explicit_clicks_kept():
    assert parse_click(raw(clicks=3), NOW).clicks == 3


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
    out = parse(frame)
    assert tuple(out.columns) == PARSED_COLUMNS
    good, bad = sorted(out.collect(), key=lambda r: r["event_id"])
    assert good["error"] is None and good["userid"] == "User_1" and good["payload"] is None
    assert (good["click_time_ms"], good["clicks"]) == (NOW - 5, 1)
    assert bad["event_id"] == "kafka:clicks:0:2" and bad["payload"] == b"{oops" and "not JSON" in bad["error"]
