"""`streamfold status`: reading Spark's offset log, envelope times, and a screen that survives errors.
(The figures against a running job: tests/e2e/test_status.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from pipeline.status_files import REQUEST_FILE, WAITING_FILE, WaitingClicks, request_count, status_dir
from streamfold.status import (
    MIB,
    SLOT_WAL_WARN_VAR,
    committed_offsets,
    drift_seen,
    envelope_ts,
    needs_attention,
    queries,
    section,
    slot_wal_warn_bytes,
    slot_warnings,
)
from streamfold.status_view import render

KAFKA = {"clicks": {"2": 17, "0": 12, "1": 9}}
CDC = {"cdc.public.users": {"0": 104}}
KINESIS = {"v": 1, "shards": {"shardId-000": {"parents": [], "after": "49", "since_ms": None, "done": False}}}


def offset_log(folder: Path, batch: int, sources: list[object], committed: bool) -> None:
    """A batch entry as Spark writes it: version, metadata, one line per source ("-": none yet)."""
    (folder / "offsets").mkdir(parents=True, exist_ok=True)
    (folder / "commits").mkdir(exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1})]
    lines += ["-" if s is None else json.dumps(s) for s in sources]
    (folder / "offsets" / str(batch)).write_text("\n".join(lines))
    if committed:
        (folder / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_the_newest_committed_batch_gives_the_processed_offsets(tmp_path):
    query = tmp_path / "clicks-kafka"
    offset_log(query, 6, [{"clicks": {"0": 1}}, CDC, 40], committed=True)
    offset_log(query, 7, [KAFKA, CDC, 42], committed=True)
    offset_log(query, 8, [{"clicks": {"0": 99}}, CDC, 43], committed=False)  # planned, not done
    (query / "commits" / ".7.crc").write_text("")
    offset_log(tmp_path / "clicks-kinesis", 0, [KINESIS, None, 1], committed=True)
    (tmp_path / "changelog" / "offsets").mkdir(parents=True)  # started, nothing committed yet

    found = committed_offsets(tmp_path)

    assert found["clicks-kafka"].batch_id == 7
    assert dict(found["clicks-kafka"].kafka()) == {"clicks": {"0": 12, "1": 9, "2": 17}, **CDC}
    assert list(found["clicks-kinesis"].kinesis()) == [KINESIS]
    assert list(found["clicks-kinesis"].kafka()) == []
    assert found["changelog"].batch_id is None


def test_the_real_time_sources_offsets_are_read_like_sparks_connectors(tmp_path):
    query = tmp_path / "clicks-kafka-realtime"
    clicks = {"topic": "clicks", "partitions": {"0": 12, "1": 9}}
    cdc = {"topic": "cdc.public.users", "partitions": {"0": 42}}
    offset_log(query, 3, [clicks, cdc], committed=True)

    found = committed_offsets(tmp_path)["clicks-kafka-realtime"]

    assert dict(found.kafka()) == {"clicks": {"0": 12, "1": 9}, "cdc.public.users": {"0": 42}}


def test_envelope_time_is_the_source_commit_time_and_anything_else_is_none():
    assert envelope_ts(b'{"op": "u", "source": {"ts_ms": 1763856000123}}') == 1763856000123
    for raw in (b"{not json", b'{"source": {}}', b"[]", b'{"source": {"ts_ms": "x"}}', b"\xff"):
        assert envelope_ts(raw) is None, raw


def test_an_unreachable_service_becomes_its_sections_error():
    def down() -> None:
        raise ConnectionRefusedError("connection refused")

    assert section(down) == {"error": "ConnectionRefusedError: connection refused"}


def test_the_screen_renders_errors_and_empty_sections():
    console = Console(record=True, width=160)
    failing = {"error": "KafkaException: broker down"}
    render(
        {
            "job": None,
            "queries": {"clicks-kafka": {"committed_batch": None}},
            "kafka_lag": failing,
            "kinesis_lag": [],
            "cdc_progress": None,
            "join_waiting": None,
            "dead_letters_last_hour": {},
            "dead_letters_by_reason": {"waiting": 0, "replayed": 0, "reasons": []},
            "connector": {"error": "ConnectionError: refused"},
            "replication_slot": {"error": "OperationalError: refused"},
        },
        console,
    )
    text = console.export_text()
    assert "never started" in text and "broker down" in text and "Kinesis lag: none" in text
    assert "ConnectionError: refused" in text and "replication slot: OperationalError: refused" in text


def test_a_lost_capture_is_a_red_line_and_a_problem_for_check():
    message = (
        "capture lost: public.users is not in publication streamfold_users, so ...; run `streamfold setup`"
    )
    lost = {
        "table": "public.users",
        "publication": "streamfold_users",
        "lost": {"columns": [], "message": message},
    }
    console = Console(record=True, width=400)
    render({**EMPTY, "capture": lost}, console)
    assert f"capture: {message}" in console.export_text()
    assert needs_attention({"capture": lost}) == [message]
    captured = {**lost, "lost": None}
    assert needs_attention({"capture": captured}) == []
    assert needs_attention({"capture": {"error": "OperationalError: refused"}}) == []


EMPTY: dict[str, object] = {
    "job": None,
    "queries": {},
    "kafka_lag": [],
    "kinesis_lag": [],
    "cdc_progress": None,
    "join_waiting": None,
    "dead_letters_last_hour": {},
    "dead_letters_by_reason": {"waiting": 0, "replayed": 0, "reasons": []},
    "connector": {"name": "streamfold-users", "state": "RUNNING", "tasks": []},
    "replication_slot": {"error": "OperationalError: refused"},
}


def slot(**figures: object) -> dict[str, object]:
    return {
        "name": "streamfold_users",
        "exists": True,
        "active": True,
        "retained_wal_bytes": 200 * MIB,
        "wal_status": "reserved",
        "safe_wal_size_bytes": 3900 * MIB,
        "max_slot_wal_keep_size_bytes": 4096 * MIB,
        "warn_bytes": 1024 * MIB,
        **figures,
    }


def test_a_slot_warns_past_its_threshold_and_when_postgres_gives_it_up():
    assert slot_warnings(slot()) == []
    [piling] = slot_warnings(slot(active=False, retained_wal_bytes=1500 * MIB))
    assert piling == (
        "slot streamfold_users holds 1.5 GiB of WAL (over 1.0 GiB; invalidated past 4.0 GiB): "
        "is the Debezium connector running?"
    )
    [unlimited] = slot_warnings(
        slot(retained_wal_bytes=2 * MIB, warn_bytes=MIB, max_slot_wal_keep_size_bytes=None)
    )
    assert (
        "2.0 MiB" in unlimited and "no max_slot_wal_keep_size: it grows until the disk is full" in unlimited
    )
    [unreserved] = slot_warnings(slot(wal_status="unreserved", retained_wal_bytes=900 * MIB))
    assert "invalidates it at its next checkpoint" in unreserved
    [lost] = slot_warnings(slot(wal_status="lost", retained_wal_bytes=None, safe_wal_size_bytes=None))
    assert "invalidated (wal_status lost)" in lost and "drop the slot and take a new snapshot" in lost


def test_the_slot_threshold_is_whole_mib(monkeypatch):
    monkeypatch.setenv(SLOT_WAL_WARN_VAR, "3")
    assert slot_wal_warn_bytes() == 3 * MIB
    for bad in ("0", "1.5", "-2", "lots"):
        monkeypatch.setenv(SLOT_WAL_WARN_VAR, bad)
        with pytest.raises(ValueError, match=f"{SLOT_WAL_WARN_VAR}={bad}: expected a whole number of MiB"):
            slot_wal_warn_bytes()


def test_the_screen_shows_the_slot_and_its_warnings():
    console = Console(record=True, width=200)
    render_slot = slot(active=False, retained_wal_bytes=1500 * MIB)
    render_slot["warnings"] = slot_warnings(render_slot)
    render(
        {
            "job": None,
            "queries": {},
            "kafka_lag": [],
            "kinesis_lag": [],
            "cdc_progress": None,
            "join_waiting": None,
            "dead_letters_last_hour": {},
            "dead_letters_by_reason": {"waiting": 0, "replayed": 0, "reasons": []},
            "connector": {"name": "streamfold-users", "state": "PAUSED", "tasks": ["PAUSED"]},
            "replication_slot": render_slot,
        },
        console,
    )
    text = console.export_text()
    assert "replication slot: streamfold_users inactive (no consumer), 1.5 GiB of WAL retained" in text
    assert "wal_status reserved, 3.8 GiB until invalidated" in text
    assert "warning: slot streamfold_users holds 1.5 GiB of WAL" in text


def test_the_job_counts_on_a_request_and_ignores_a_file_that_is_not_one(tmp_path):
    """WaitingClicks.refresh runs in the job's poll loop: whatever lies in status/join.request, it must
    not raise, and only a real request makes it count (here a checkpoint with no join state yet: 0)."""
    said: list[str] = []
    waiting = WaitingClicks(tmp_path, tmp_path / "checkpoint", said.append)
    request = status_dir(tmp_path) / REQUEST_FILE
    answer = status_dir(tmp_path) / WAITING_FILE
    request.parent.mkdir(parents=True)
    for junk in (b"[1]", b'{"requested_ms": "soon"}', b'{"requested_ms": true}', b"{}", b"\xff\xfe", b"{"):
        request.write_bytes(junk)
        waiting.refresh(None)  # type: ignore[arg-type]
        assert not answer.exists(), junk

    asked = request_count(tmp_path)
    waiting.refresh(None)  # type: ignore[arg-type]
    counted = json.loads(answer.read_text())
    assert counted["clicks"] == 0 and counted["as_of_ms"] >= asked and said == []


def test_drifted_current_versions_need_attention_and_the_job_s_count_is_shown(tmp_path):
    """`status --check` fails on the profiles whose current version has drifted columns (read from the
    history, so it holds across restarts and clears once newer versions replace them); the drift the running
    job's listener (ProgressListener) saw since it started is shown beside it, not failed on."""
    reason = (
        "interests: missing from the change event: renamed or dropped?; score: a string in the change event"
    )
    found = {"table": "public.users", "profiles": 3, "reasons": [reason]}
    [problem] = needs_attention({"drifted_profiles": found})
    assert problem.startswith("3 profiles' current versions have drifted columns (public.users.interests: ")
    assert "; public.users.score: a string" in problem and "`streamfold setup`" in problem
    assert needs_attention({"drifted_profiles": {**found, "profiles": 0, "reasons": []}}) == []
    assert needs_attention({"drifted_profiles": {"error": "OperationalError: refused"}}) == []

    offset_log(tmp_path / "checkpoints" / "clicks-kafka", 3, [KAFKA, CDC, 42], committed=True)
    progress = {"batchId": 3, "batchDuration": 9, "numInputRows": 2, "processedRowsPerSecond": 1.0}
    column = "public.users.interests: missing from the change event: renamed or dropped?"
    report = {"written_ms": 1, "drift": {"changes": 2, "columns": [column]}, "progress": progress}
    status_dir(tmp_path).mkdir(parents=True)
    (status_dir(tmp_path) / "clicks-kafka.json").write_text(json.dumps(report))
    figures = {"queries": queries(tmp_path, committed_offsets(tmp_path / "checkpoints"))}
    assert drift_seen(figures) == [
        f"clicks-kafka: 2 changes with drifted columns since the job started ({column})"
    ]
    assert needs_attention(figures) == []
    assert drift_seen({"queries": {"error": "OSError: no"}}) == []
