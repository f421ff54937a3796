"""The click contract: what is accepted, and the reason for everything that is not."""

import json

import pyarrow as pa
import pytest

from pipeline.clicks import MAX_RECORD_BYTES, PARSED_SCHEMA, Click, Rejected, parse_batches, parse_click

NOW = 1_763_800_000_000
GOOD = {"userid": "User_1", "url": "/home", "device_id": "mobile", "ip": "10.0.0.1", "event_time": NOW - 5}


def raw(**changes) -> bytes:
    return json.dumps({**GOOD, **changes}).encode()


def test_valid_click_defaults_clicks_to_one():
    assert parse_click(raw(), NOW) == Click("User_1", "/home", "mobile", "10.0.0.1", NOW - 5, 1)


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
    ],
)
def test_rejections_name_the_reason(payload, reason):
    with pytest.raises(Rejected, match=reason):
        parse_click(payload, NOW)


def test_parse_batches_keeps_rejects_with_payload_and_reason():
    batch = pa.RecordBatch.from_pylist(
        [
            {"event_id": "kafka:clicks:0:1", "source": "kafka:clicks", "payload": raw(), "now_ms": NOW},
            {"event_id": "kafka:clicks:0:2", "source": "kafka:clicks", "payload": b"{oops", "now_ms": NOW},
        ]
    )
    (out,) = list(parse_batches(iter([batch])))
    assert out.schema == PARSED_SCHEMA
    good, bad = out.to_pylist()
    assert good["error"] is None and good["userid"] == "User_1" and good["payload"] is None
    assert bad["event_id"] == "kafka:clicks:0:2" and bad["payload"] == b"{oops" and "not JSON" in bad["error"]
