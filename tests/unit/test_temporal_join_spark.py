"""The temporal join operator on a real local Spark (file-stream sources, Trigger.AvailableNow runs).

Event times are in 2033 unless a test wants the wall clock: the wall-clock floor (now - max_wait) never
reaches them, so only the CDC progress written by the test moves the watermark.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common.names import BEGINNING_OF_TIME_MS, UNKNOWN_REGION
from pipeline import records
from pipeline.join_config import JoinConfig
from pipeline.sinks import last_cdc_progress
from pipeline.temporal_join import CDC_PROGRESS_METRIC, pending_clicks, run_until_drained
from tests.support.join_harness import Harness
from tests.support.pipelines import DEFAULT, random_pipeline
from tests.support.records import USER_CLICKS_FIELDS

pytestmark = pytest.mark.spark

T = 2_000_000_000_000
MINUTE = 60_000
DAY = 86_400_000


def click(event_id: str, userid: str, t: int) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "userid": userid,
        "click_time_ms": t,
        "url": f"/p/{event_id}",
        "device_id": "ios",
        "ip": "10.1.2.3",
        "clicks": 2,
    }


def change(userid: str, op: str, valid_from_ms: int, lsn: int, region: str | None = None) -> dict[str, Any]:
    profile = (
        {} if op == "d" else {"regionid": region, "gender": "F", "interests": ["golf"], "registertime": 7}
    )
    return {"userid": userid, "op": op, "valid_from_ms": valid_from_ms, "lsn": lsn, **profile}


def progress(ms: int) -> list[dict[str, int]]:
    return [{"progress_ms": ms}]


def test_output_schema_is_the_pipeline_files(spark: SparkSession, tmp_path: Path) -> None:
    """kind first, then the default file's enriched names (today's: user_clicks's fields, times in epoch
    ms), the reject columns, change_op and change_lsn, then the event's release (user_clicks's last
    fields)."""
    names = records.join_output(DEFAULT).fieldNames()
    tail = [
        "error",
        "source",
        "payload",
        "change_op",
        "change_lsn",
        "cdc_progress_ms",
        "released_by_max_wait",
    ]
    assert (names[0], names[-7:]) == ("kind", tail)
    enriched = [name.removesuffix("_ms") for name in [*names[1:-7], *names[-2:]]]
    assert enriched == list(USER_CLICKS_FIELDS)
    assert Harness(spark, tmp_path, JoinConfig()).joined().schema == records.join_output(DEFAULT)
    (tmp_path / "all").mkdir()
    every_type = random_pipeline(random.Random(1), every_type=True)
    assert Harness(spark, tmp_path / "all", JoinConfig(), every_type).joined().schema == records.join_output(
        every_type
    )


def test_clicks_wait_for_cdc_progress_and_join_the_version_valid_at_event_time(
    spark: SparkSession, tmp_path: Path
) -> None:
    h = Harness(spark, tmp_path, JoinConfig())
    h.write(
        "events",
        [
            click("a1", "alice", T - MINUTE),
            click("a2", "alice", T + MINUTE),
            click("b1", "bob", T + 5 * MINUTE),
            click("d1", "dave", T),
        ],
    )
    h.write("changes", [change("alice", "r", BEGINNING_OF_TIME_MS, 1, "asia")])
    h.write("progress", progress(T - 10 * MINUTE))
    assert h.run() == {}
    assert pending_clicks(spark, h.checkpoint).clicks == 4

    # Alice's move and Bob's whole life arrive after the clicks; progress (a heartbeat) passes them all.
    h.write(
        "changes",
        [
            change("alice", "u", T, 10, "europe"),
            change("bob", "c", T + 2 * MINUTE, 11, "asia"),
            change("bob", "d", T + 4 * MINUTE, 12),
        ],
    )
    h.write("progress", progress(T + 10 * MINUTE))
    out = h.run()  # the CDC progress read in this batch releases the clicks in this same batch
    assert {k: r.user_regionid for k, r in out.items()} == {
        "a1": "asia",
        "a2": "europe",
        "b1": UNKNOWN_REGION,
        "d1": UNKNOWN_REGION,
    }
    assert out["a1"].asDict() == {
        "kind": "event",
        "event_id": "a1",
        "uid": "alice",
        "click_time_ms": T - MINUTE,
        "click_url": "/p/a1",
        "device_type": "ios",
        "click_location": "10.1.2.3",
        "clicks": 2,
        "user_regionid": "asia",
        "user_gender": "F",
        "user_interests": ["golf"],
        "user_registertime": 7,
        "profile_valid_from_ms": BEGINNING_OF_TIME_MS,
        "profile_complete": True,
        "error": None,
        "source": None,
        "payload": None,
        "change_op": None,
        "change_lsn": None,
        "cdc_progress_ms": T + 10 * MINUTE,  # the progress read in this batch released it
        "released_by_max_wait": False,
    }
    assert out["a2"].profile_valid_from_ms == T
    assert out["b1"].user_gender is None and out["b1"].profile_valid_from_ms is None
    assert pending_clicks(spark, h.checkpoint).clicks == 0

    # Late rows (below the watermark) are not dropped by Spark: a late change, then a late click using it.
    h.write("changes", [change("erin", "c", T - 5 * MINUTE, 13, "america")])
    h.write("events", [click("e1", "erin", T - 4 * MINUTE), click("a0", "alice", T - 2 * MINUTE)])
    out = h.run()
    assert {k: r.user_regionid for k, r in out.items()} == {"e1": "america", "a0": "asia"}
    assert len(h.output) == 6  # every click exactly once


def test_changes_and_unfoldable_cdc_records_pass_through_the_join(
    spark: SparkSession, tmp_path: Path
) -> None:
    """users_changelog and the CDC dead letters come out of the operator: each change once, whenever its
    user's clicks are released, a user's changes in version order (valid_from, lsn) whatever order they
    came in; an unfoldable CDC record as a dead letter of the CDC topic."""
    h = Harness(spark, tmp_path, JoinConfig())
    h.write(
        "changes",
        [
            change("bob", "d", T + 4 * MINUTE, 12),
            change("alice", "r", BEGINNING_OF_TIME_MS, 1, "asia"),
            {"kind": "error", "error": "not JSON", "event_id": "kafka:cdc:0:7", "payload": "{bad"},
            change("bob", "c", T + 2 * MINUTE, 11, "asia"),
            change("alice", "u", T, 10, "europe"),
        ],
    )
    h.write("events", [click("a1", "alice", T + MINUTE)])
    out = h.run()  # no progress: the click waits, the changes do not
    assert list(out) == ["kafka:cdc:0:7"]
    dead = out["kafka:cdc:0:7"]
    assert (dead.error, dead.source, bytes(dead.payload)) == ("not JSON", "kafka:cdc.public.users", b"{bad")
    assert (dead.kind, dead.uid, dead.change_op) == ("reject", None, None)
    changelog = [(r.uid, r.change_op, r.user_regionid, r.profile_valid_from_ms) for r in h.changes]
    assert [c for c in changelog if c[0] == "alice"] == [
        ("alice", "r", "asia", BEGINNING_OF_TIME_MS),
        ("alice", "u", "europe", T),
    ]
    assert [c for c in changelog if c[0] == "bob"] == [
        ("bob", "c", "asia", T + 2 * MINUTE),
        ("bob", "d", None, T + 4 * MINUTE),
    ]
    first = h.changes[0]
    assert first.kind == "change"
    assert first.event_id is None and first.error is None and first.click_time_ms is None
    h.write("progress", progress(T + 10 * MINUTE))
    assert h.run()["a1"].user_regionid == "europe"
    assert len(h.changes) == 4  # each change once


def test_max_wait_releases_clicks_when_cdc_stalls_and_run_until_drained_emits_them_all(
    spark: SparkSession, tmp_path: Path
) -> None:
    h = Harness(spark, tmp_path, JoinConfig(max_wait_ms=1_000))
    now = int(time.time() * 1000)
    h.write("changes", [change(f"u{i}", "r", BEGINNING_OF_TIME_MS, i, "asia") for i in range(10)])
    h.write("events", [click(f"c{i}", f"u{i % 10}", now + i) for i in range(100)])
    # No progress at all: the CDC stream is stalled, only the wall clock (rate ticks) moves the watermark.
    started = time.monotonic()
    runs = run_until_drained(spark, h.start, h.checkpoint, timeout_s=60, poll_s=0.5)
    assert runs >= 3  # two runs to read everything, then the watermark must pass max_wait
    assert len(h.output) == 100 and {r.user_regionid for r in h.output} == {"asia"}
    assert pending_clicks(spark, h.checkpoint).clicks == 0
    assert time.monotonic() - started < 30


def test_each_batch_reports_its_cdc_progress_for_the_stall_line(spark: SparkSession, tmp_path: Path) -> None:
    """The largest progress_ms among a batch's CDC rows, as the query's observed metric, which the sink reads
    (pipeline/sinks.py, last_cdc_progress); none for a batch without CDC rows."""
    h = Harness(spark, tmp_path, JoinConfig())
    h.write("events", [click("a1", "alice", T)])
    h.run()
    assert h.last_query is not None and last_cdc_progress(h.last_query._jsq) is None
    h.write("progress", progress(T - MINUTE) + progress(T + MINUTE) + progress(T))
    h.run()
    assert last_cdc_progress(h.last_query._jsq) == T + MINUTE
    assert h.last_query.lastProgress.observedMetrics[CDC_PROGRESS_METRIC].progress_ms == T + MINUTE


def test_latest_mode_is_a_processing_time_join_that_never_waits(spark: SparkSession, tmp_path: Path) -> None:
    h = Harness(spark, tmp_path, JoinConfig(mode="latest"))
    h.write(
        "changes",
        [change("alice", "r", BEGINNING_OF_TIME_MS, 1, "asia"), change("alice", "u", T, 2, "europe")],
    )
    h.write("events", [click("a1", "alice", T - DAY), click("z1", "zoe", T)])
    out = h.run()  # no progress at all, and the click predates the move: latest version anyway
    assert {k: r.user_regionid for k, r in out.items()} == {"a1": "europe", "z1": UNKNOWN_REGION}
    h.write("changes", [change("alice", "d", T + MINUTE, 3)])
    h.write("events", [click("a2", "alice", T)])
    assert h.run()["a2"].user_regionid == UNKNOWN_REGION


def test_expired_versions_and_forgotten_users_shrink_the_state(spark: SparkSession, tmp_path: Path) -> None:
    h = Harness(spark, tmp_path, JoinConfig(version_retention_ms=7 * DAY))
    gone = [
        change(f"gone{i}", op, T - (30 - k) * DAY, 2 * i + k, "asia")
        for i in range(50)
        for k, op in enumerate(("c", "d"))
    ]
    history = [change("kept", "u", T - (20 - d) * DAY, 1000 + d, f"r{d}") for d in range(21)]
    h.write("changes", gone + history)
    h.write("progress", progress(T - 28 * DAY))
    h.run()
    assert _stored_versions(spark, h.checkpoint) == {"kept": 21, **{f"gone{i}": 2 for i in range(50)}}

    h.write("progress", progress(T))
    h.run()
    h.run()  # timers fire in the batch after the one that moved the watermark
    # Tombstoned users are forgotten; "kept" keeps the version valid just before T - 7d and the 8 after it.
    assert _stored_versions(spark, h.checkpoint) == {"kept": 9}


def _stored_versions(spark: SparkSession, checkpoint: str) -> dict[str, int]:
    state = (
        spark.read.format("statestore").option("path", checkpoint).option("stateVarName", "versions").load()
    )
    return {r.user_map_key.value: r.user_map_value.versions for r in state.collect()}
