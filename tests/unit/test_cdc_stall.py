"""The job's CDC stall line (pipeline/cdc_stall.py): once when a stall begins, every few minutes while it
lasts, once when CDC progress advances again; never for a slow batch or a healthy stream."""

from __future__ import annotations

import logging

from pipeline.cdc_stall import CdcStall, Notice, seconds
from pipeline.job import JobLogFormatter

TOPIC = "cdc.public.users"
T0 = 1_800_000_000_000
WAIT = 10_000


def stall(repeat_ms: int = 300_000) -> CdcStall:
    return CdcStall(TOPIC, WAIT, started_ms=T0, repeat_ms=repeat_ms)


def test_a_healthy_stream_and_clicks_released_while_progress_advances_say_nothing():
    watch = stall()
    for i in range(1, 200):
        now = T0 + i * 500
        # Heartbeats every 200 ms: every batch sees newer progress, whatever it releases.
        assert watch.batch(now, now - 300, released=3) is None
    assert not watch.stalled


def test_no_release_or_a_short_pause_is_no_stall():
    watch = stall()
    assert watch.batch(T0 + 1_000, T0, released=0) is None
    # Progress stands still for 60 s but nothing is released: no event is joined incomplete.
    assert watch.batch(T0 + 61_000, None, released=0) is None
    watch2 = stall()
    watch2.batch(T0 + 1_000, T0, released=0)
    # Released, but progress advanced only max_wait ago (a slow batch): not yet a stall.
    assert watch2.batch(T0 + 1_000 + WAIT, None, released=5) is None


def test_a_stall_is_said_once_then_every_repeat_then_its_end_once():
    watch = stall(repeat_ms=120_000)
    assert watch.batch(T0 + 1_000, T0 + 900, released=0) is None
    first = watch.batch(T0 + 20_000, None, released=4)
    assert first == Notice(
        logging.WARNING,
        "CDC stalled: progress on cdc.public.users has not advanced for 19 s (newest commit time read "
        "2027-01-15 08:00:00 UTC, 19 s ago); 4 events released by join.max_wait (10 s) without it, marked "
        "profile_complete = false; likely the Debezium connector is stopped, paused or failed, Kafka Connect "
        "is down, or the replication slot was invalidated (wal_status lost); check `streamfold status` "
        "(connector, replication slot)",
    )
    quiet = [watch.batch(T0 + 20_000 + i * 500, T0 + 900, released=1) for i in range(1, 200)]
    assert quiet == [None] * 199  # the same progress again is no advance; no line per batch
    again = watch.batch(T0 + 141_000, None, released=2)
    assert again is not None and again.level == logging.WARNING
    assert "has not advanced for 2 min 20 s" in again.text and "205 events released" in again.text
    assert watch.batch(T0 + 142_000, None, released=1) is None
    end = watch.batch(T0 + 150_000, T0 + 149_800, released=0)
    assert end == Notice(
        logging.INFO,
        "CDC progress on cdc.public.users advances again after 2 min 29 s stalled; 206 events were released "
        "by join.max_wait meanwhile (profile_complete = false)",
    )
    assert not watch.stalled
    assert watch.batch(T0 + 151_000, T0 + 150_800, released=0) is None
    # A second stall starts its own count.
    later = watch.batch(T0 + 170_000, None, released=1)
    assert later is not None and "19 s" in later.text and "; 1 events released" in later.text


def test_a_job_started_during_a_stall_says_it_has_read_no_progress():
    watch = stall()
    notice = watch.batch(T0 + 45_000, None, released=7)
    assert notice is not None and notice.level == logging.WARNING
    assert "has not advanced for 45 s (none read since the job started 45 s ago); 7 events" in notice.text


def test_durations_read_as_seconds_minutes_or_hours():
    assert [seconds(ms) for ms in (-5, 999, 42_000, 185_000, 7_620_000)] == [
        "0 s",
        "0 s",
        "42 s",
        "3 min 05 s",
        "2 h 07 min",
    ]


def test_the_jobs_log_names_the_level_of_warnings_only():
    formatter = JobLogFormatter()

    def line(level: int, text: str) -> str:
        return formatter.format(logging.LogRecord("pipeline.sinks", level, __file__, 1, text, None, None))

    assert line(logging.INFO, "batch 3: 10 events").split(" ", 1)[1] == "batch 3: 10 events"
    assert line(logging.WARNING, "CDC stalled: x").split(" ", 1)[1] == "WARNING CDC stalled: x"
