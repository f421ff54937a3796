"""`streamfold dead-letters replay` without a stack: choosing letters (--reason, --since, --source), the
batches a replay claims and sends, the reasons' kinds `status` counts, and the command line's errors. The
replay itself, against real Kafka, Kinesis, PostgreSQL and the job: tests/e2e/test_dead_letters.py."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest
from typer.testing import CliRunner

from spec.events import Rejected, parse_event
from streamfold import cli
from streamfold import dead_letters as dl
from tests.support.pipeline import DEFAULT_EVENT_SPEC

NOW = dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.UTC)
REPLAYABLE = ("kafka:clicks", "kinesis:clicks")
# Settings that name no reachable service: the errors below come before any connection.
OFFLINE = {
    "STREAMFOLD_PG_DSN": "postgresql://nobody@127.0.0.1:9/none",
    "STREAMFOLD_KAFKA_BOOTSTRAP": "127.0.0.1:9",
    "STREAMFOLD_CONNECT_URL": "http://127.0.0.1:9",
    "STREAMFOLD_WRITER_PASSWORD": "unused",
}


@pytest.mark.parametrize(
    ("text", "since"),
    [
        ("2h", NOW - dt.timedelta(hours=2)),
        ("30m", NOW - dt.timedelta(minutes=30)),
        ("7d", NOW - dt.timedelta(days=7)),
        ("2026-12-01T08:00:00Z", dt.datetime(2026, 12, 1, 8, tzinfo=dt.UTC)),
        ("2026-12-01T08:00:00", dt.datetime(2026, 12, 1, 8, tzinfo=dt.UTC)),
        ("2026-12-01T09:00:00+01:00", dt.datetime(2026, 12, 1, 8, tzinfo=dt.UTC)),
    ],
)
def test_since_is_a_time_or_a_duration_back_from_now(text: str, since: dt.datetime) -> None:
    assert dl.parse_since(text, NOW) == since


@pytest.mark.parametrize("text", ["yesterday", "2h ago", "-2h", "2026-13-01"])
def test_since_refuses_anything_else_and_says_what_it_takes(text: str) -> None:
    with pytest.raises(dl.ReplayError, match="ISO-8601 time or a duration back from now"):
        dl.parse_since(text, NOW)


def test_only_the_pipelines_event_sources_are_replayable() -> None:
    dl.check_source(None, REPLAYABLE)
    dl.check_source("kinesis:clicks", REPLAYABLE)
    for other in ("kafka:cdc.public.users", "kafka:other", "clicks"):
        with pytest.raises(
            dl.ReplayError, match="only events are replayed, from kafka:clicks or kinesis:clicks"
        ):
            dl.check_source(other, REPLAYABLE)


def test_the_selection_becomes_one_condition_per_option() -> None:
    assert dl.matching(dl.Selection()) == ("TRUE", {})
    condition, params = dl.matching(dl.Selection("not JSON", NOW, "kafka:clicks"))
    assert condition == (
        "TRUE AND strpos(reason, %(reason)s) > 0 AND recorded_at >= %(since)s AND source = %(source)s"
    )
    assert params == {"reason": "not JSON", "since": NOW, "source": "kafka:clicks"}


def letter(n: int, source: str = "kafka:clicks", size: int = 10) -> dl.Letter:
    return dl.Letter(f"{source}:0:{n}", source, size, None)


def test_batches_keep_one_source_and_their_limits() -> None:
    letters = [letter(n) for n in range(dl.BATCH_RECORDS + 2)] + [letter(0, "kinesis:clicks")]
    assert [len(b) for b in dl.batches(letters)] == [dl.BATCH_RECORDS, 2, 1]
    big = [letter(0, size=dl.BATCH_BYTES), letter(1, size=1), letter(2, size=dl.BATCH_BYTES - 1)]
    assert [[x.dead_letter_id for x in b] for b in dl.batches(big)] == [
        ["kafka:clicks:0:0"],
        ["kafka:clicks:0:1", "kafka:clicks:0:2"],
    ]
    assert list(dl.batches([])) == []


def reason(payload: bytes, now_ms: int = 1_764_928_800_000) -> str:
    with pytest.raises(Rejected) as rejected:
        parse_event(payload, now_ms, DEFAULT_EVENT_SPEC)
    return str(rejected.value)


def kind(text: str) -> str:
    """REASON_VALUES applied as reason_kind_sql has PostgreSQL apply them (first match, same syntax)."""
    for pattern, replacement in dl.REASON_VALUES:
        text = re.sub(pattern, replacement, text, count=1)
    return text


def click(**fields: object) -> bytes:
    base = {"userid": "u", "url": "/", "device_id": "d", "ip": "i", "event_time": 1_764_928_800_000}
    return json.dumps({**base, **fields}).encode()


def test_reasons_of_one_kind_differ_only_in_their_values_and_group_together() -> None:
    cases = {
        "event_time … is outside the plausible range (2000-01-01 .. arrival + 1 minute)": [
            click(event_time=1_764_928_800_000 + 61_000),
            click(event_time=9_999_999_999_999),
            click(event_time=5),
        ],
        "not JSON: …": [b"{not json", b"[1, 2", b'{"a": NaN}'],
        "url must be a non-empty string, got …": [click(url=3), click(url=""), click(url=None)],
        "record of … bytes exceeds the 65536-byte limit": [b" " * 65_537, b" " * 100_000],
        "expected a JSON object, got …": [b"[]", b"3"],
    }
    for expected, payloads in cases.items():
        assert {kind(reason(p)) for p in payloads} == {expected}, [reason(p) for p in payloads]
    assert kind("empty record (null value)") == "empty record (null value)"


def test_the_reason_kind_sql_applies_every_pattern_in_order() -> None:
    sql = dl.reason_kind_sql()
    assert sql.count("regexp_replace(") == len(dl.REASON_VALUES)
    assert sql.startswith("regexp_replace(regexp_replace(regexp_replace(reason, '(, got |: ).*$', '\\1…')")


def test_the_outcome_reads_as_a_sentence() -> None:
    assert dl.describe(dl.Report()) == "replayed 0 dead letters"
    report = dl.Report(replayed=3, found=2, already=4, not_replayable={"kafka:old": 1})
    assert dl.describe(report) == (
        "replayed 5 dead letters (2 sent by an interrupted replay, marked now); 4 matching letters were "
        "replayed before, so not again; 1 letters of kafka:old not replayed (not an events source of this "
        "pipeline)"
    )


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, ["dead-letters", "replay", *args], env=OFFLINE)
    return result.exit_code, " ".join(result.output.split())


def test_the_command_takes_reason_since_and_source() -> None:
    code, output = invoke("--help")
    assert code == 0
    for option in ("--reason", "--since", "--source", "--json"):
        assert option in output


def test_the_command_refuses_a_bad_since_or_a_cdc_source_before_touching_anything() -> None:
    code, output = invoke("--since", "last week")
    assert code == 1 and "error: --since takes an ISO-8601 time or a duration" in output, output
    code, output = invoke("--source", "kafka:cdc.public.users", "--reason", "op=")
    assert code == 1 and "only events are replayed" in output and "fix the row in PostgreSQL" in output, (
        output
    )
