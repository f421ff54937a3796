"""Differential test: the Java join operator on a real local Spark against the Python model it ports.

Hundreds of random histories run through one streaming query, one micro-batch per step, and through
spec.temporal_state driven by the same schedule (each batch's watermark as Spark reports it; input rows
first, then every user whose timer the watermark has passed). Every output row must be identical and
come out in the same batch. The histories mix out-of-order and late clicks, inserts, updates, deletes
and re-inserts, snapshot rows, replayed changes, equal timestamps (a click at a version's valid-from, two
versions with one valid-from), progress that stalls and then jumps, releases by the wall clock
(join.max_wait) rather than by CDC progress, and versions old enough to expire. Rejected records ride
along (the pipeline passes them through the operator): each must come out unchanged in its own batch,
including from buckets that hold nothing else. Set JOIN_DIFF_SEED to try other seeds; a failure names its
seed.
"""

from __future__ import annotations

import os
import random
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import Row, SparkSession

from common.names import BEGINNING_OF_TIME_MS
from pipeline.join_config import LATEST, JoinConfig
from spec.temporal_state import (
    Click,
    Enriched,
    UserState,
    Version,
    advance,
    advance_latest,
)
from tests.support.join_harness import Harness

pytestmark = pytest.mark.spark

SECOND = 1_000
MAX_WAIT_MS = 2 * SECOND
HISTORIES = 400
STEPS = 14
RETENTION_MS = 30 * SECOND
SEED = int(os.environ.get("JOIN_DIFF_SEED", "20261122"))


@dataclass
class Step:
    clicks: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    progress: list[dict[str, int]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)


class Histories:
    """Random per-user histories laid out as one list of steps (micro-batches) shared by all users."""

    def __init__(self, seed: int, t0: int) -> None:
        self.rng = random.Random(seed)
        self.reject_rng = random.Random(seed + 1)  # its own stream: the histories stay the same
        self.rejects = 0
        self.t0 = t0
        self.lsn = 0
        self.clicks = 0
        self.sent: list[dict[str, Any]] = []  # changes already sent, for replays

    def steps(self) -> list[Step]:
        rng = self.rng
        now = self.t0
        steps = []
        for _ in range(STEPS):
            step = Step()
            now += rng.choice(
                [0, 0, SECOND, 2 * SECOND, 3 * SECOND, 15 * SECOND]
            )  # 15 s: a stall, then a jump
            if rng.random() < 0.8:
                step.progress.append({"progress_ms": now + rng.randint(-2 * SECOND, SECOND)})
            for h in range(HISTORIES):
                for u in range(rng.randint(1, 2)):
                    self._events(step, f"h{h}u{u}", now)
            step.rejects = [self._reject() for _ in range(self.reject_rng.choice([0, 1, 5, 40]))]
            steps.append(step)
        # Flush: progress far ahead releases every waiting click; the next batch runs the timers.
        steps.append(Step(progress=[{"progress_ms": now + 10 * RETENTION_MS}]))
        steps.append(Step(progress=[{"progress_ms": now + 10 * RETENTION_MS}]))
        return steps

    def _events(self, step: Step, user: str, now: int) -> None:
        rng = self.rng
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            step.clicks.append(self._click(user, now))
        roll = rng.random()
        if roll < 0.25:
            step.changes.append(self._change(user, now))
        elif roll < 0.28 and self.sent:
            step.changes.append(dict(rng.choice(self.sent), userid=user))  # a replay (same valid_from, lsn)
        elif roll < 0.30:
            step.changes.append(self._change(user, now, op="r"))

    def _click(self, user: str, now: int) -> dict[str, Any]:
        rng = self.rng
        self.clicks += 1
        t = now + rng.choice([0, rng.randint(-5 * SECOND, 5 * SECOND), -2 * RETENTION_MS, 20 * SECOND])
        if self.sent and rng.random() < 0.1:
            t = max(self.sent[-1]["valid_from_ms"], self.t0)  # exactly at a version's valid_from
        return {
            "event_id": f"e{self.clicks}",
            "userid": user,
            "click_time_ms": t,
            # Texts the state codec must keep exactly: none, empty, non-ASCII (2-, 3- and 4-byte UTF-8).
            "url": rng.choice(["/a", "/b", None, "", "/caf\u00e9/\u6771\u4eac/\U0001f3cc"]),
            "device_id": rng.choice(["ios", "android", None]),
            "ip": "10.0.0.1",
            "clicks": rng.choice([1, 1, 2, None]),
        }

    def _reject(self) -> dict[str, Any]:
        self.rejects += 1
        payload = self.reject_rng.choice(["", "{", "[1]", '{"userid": 7}', "é\u2028", None])
        return {"event_id": f"r{self.rejects}", "error": "not JSON", "source": "test", "payload": payload}

    def _change(self, user: str, now: int, op: str | None = None) -> dict[str, Any]:
        rng = self.rng
        op = op or rng.choice("cuud")
        self.lsn += 1
        valid_from = BEGINNING_OF_TIME_MS if op == "r" else now + rng.randint(-3 * SECOND, 4 * SECOND)
        if op != "r" and self.sent and rng.random() < 0.1:
            valid_from = self.sent[-1]["valid_from_ms"]  # two versions valid from the same instant
        change: dict[str, Any] = {"userid": user, "op": op, "valid_from_ms": valid_from, "lsn": self.lsn}
        if op != "d":
            change |= {
                "regionid": rng.choice(["asia", "europe", "", None, "\u6771\u4eac"]),
                "gender": rng.choice(["F", "M", None]),
                "interests": rng.choice([["golf", "chess"], [], None, ["\u00e9checs \u265f", None, ""]]),
                "registertime": rng.choice([7, None]),
            }
        self.sent.append(change)
        return change


def _version(change: dict[str, Any]) -> Version:
    return Version(
        change["valid_from_ms"],
        change["lsn"],
        change["op"],
        change.get("regionid"),
        change.get("gender"),
        change.get("interests"),
        change.get("registertime"),
    )


def _click(row: dict[str, Any]) -> Click:
    clicks = 1 if row["clicks"] is None else row["clicks"]
    return Click(
        row["event_id"], row["userid"], row["click_time_ms"], row["url"], row["device_id"], row["ip"], clicks
    )


class Model:
    """spec.temporal_state driven the way Spark drives the operator: in each batch the join's watermark
    is max(Spark's watermark, the CDC progress read so far, this batch's included), and a row is complete
    when that CDC progress has reached its click."""

    def __init__(self, cfg: JoinConfig) -> None:
        self.cfg = cfg
        self.users: dict[str, UserState] = defaultdict(UserState)
        self.progress_ms = -(2**63)

    def batch(self, step: Step, spark_watermark_ms: int) -> list[tuple]:
        self.progress_ms = max([self.progress_ms, *(p["progress_ms"] for p in step.progress)])
        complete = lambda row: self.cfg.mode == LATEST or row.click_time_ms <= self.progress_ms  # noqa: E731
        rows = self._rows(step, max(spark_watermark_ms, self.progress_ms))
        return [(*row, complete(row)) for row in rows]

    def _rows(self, step: Step, watermark_ms: int) -> list[Enriched]:
        changes: dict[str, list[Version]] = defaultdict(list)
        clicks: dict[str, list[Click]] = defaultdict(list)
        for change in step.changes:
            changes[change["userid"]].append(_version(change))
        for row in step.clicks:
            clicks[row["userid"]].append(_click(row))
        rows: list[Enriched] = []
        for user in changes.keys() | clicks.keys():  # input rows first ...
            rows += self._step(user, changes[user], clicks[user], watermark_ms)
        if self.cfg.mode != LATEST:  # ... then the timers the watermark has passed
            for user, state in list(self.users.items()):
                if user not in changes and user not in clicks and _due(state, watermark_ms):
                    rows += self._step(user, [], [], watermark_ms)
        return rows

    def _step(
        self, user: str, changes: list[Version], clicks: list[Click], watermark_ms: int
    ) -> list[Enriched]:
        state = self.users[user]
        if self.cfg.mode == LATEST:
            result = advance_latest(state, changes, clicks)
        else:
            result = advance(state, changes, clicks, watermark_ms, self.cfg.version_retention_ms)
        self.users[user] = UserState(result.state.versions, result.state.pending, result.wakeup_ms)
        return result.rows


def _due(state: UserState, watermark_ms: int) -> bool:
    return state.wakeup_ms is not None and state.wakeup_ms <= watermark_ms


def _as_reject(row: Row) -> tuple:
    """A reject as it came in; payloads come out as bytes (the harness casts its text input)."""
    payload = row.payload.encode() if isinstance(row.payload, str) else row.payload
    return (row.event_id, row.error, row.source, None if payload is None else bytes(payload))


def _changelog(rows: list[Row]) -> dict[str, list[tuple]]:
    """Changes passed through by the operator: each user's, in the order they came out."""
    out: dict[str, list[tuple]] = defaultdict(list)
    for r in rows:
        out[r.uid].append((r.change_op, r.profile_valid_from_ms, r.user_regionid))
    return dict(out)


def _changelog_of(changes: list[dict[str, Any]]) -> dict[str, list[tuple]]:
    """What the operator must pass through of a batch's changes: each user's in version order."""
    ordered = sorted(changes, key=lambda c: (c["valid_from_ms"], c["lsn"]))
    return _changelog(
        [
            Row(
                uid=c["userid"],
                change_op=c["op"],
                profile_valid_from_ms=c["valid_from_ms"],
                user_regionid=c.get("regionid"),
            )
            for c in ordered
        ]
    )


def _as_tuple(row: Row) -> tuple:
    values = row.asDict()
    return tuple(values[name] for name in (*Enriched._fields, "profile_complete"))


@pytest.mark.parametrize("mode", ["event_time", "latest"])
def test_jvm_operator_matches_the_python_model(spark: SparkSession, tmp_path: Path, mode: str) -> None:
    seed = SEED + (mode == LATEST)
    cfg = JoinConfig(mode=mode, max_wait_ms=MAX_WAIT_MS, version_retention_ms=RETENTION_MS)
    # Event time starts 15 s behind the wall clock: CDC progress (about 4 s into the history at first,
    # 13 s during its stall) trails the wall clock's watermark (wall clock - max_wait, at least 13 s in) on
    # any machine, however fast its batches, so the wall clock (max_wait) releases clicks early on; CDC
    # progress releases the rest. The model replays Spark's actual schedule: each batch's watermark as
    # Spark reports it.
    steps = Histories(seed, int(time.time() * 1000) - 15 * SECOND).steps()
    harness, model = Harness(spark, tmp_path, cfg), Model(cfg)
    for number, step in enumerate(steps):
        for stream in ("clicks", "changes", "progress", "rejects"):
            harness.write(stream, getattr(step, stream))
        changes_before = len(harness.changes)
        emitted = harness.run().values()
        assert _changelog(harness.changes[changes_before:]) == _changelog_of(step.changes), (
            f"seed {seed}, batch {number}: changes not passed through once each, in version order per user"
        )
        passed = {r.event_id: _as_reject(r) for r in emitted if r.error is not None}
        assert passed == {r["event_id"]: _as_reject(Row(**r)) for r in step.rejects}, (
            f"seed {seed}, batch {number}: rejects not passed through as they came"
        )
        got = {r.event_id: _as_tuple(r) for r in emitted if r.error is None}
        want = {row[0]: row for row in model.batch(step, harness.watermark_ms())}
        assert got.keys() == want.keys(), (
            f"seed {seed}, batch {number}: emitted by Spark only {sorted(got.keys() - want.keys())[:5]}, "
            f"by the model only {sorted(want.keys() - got.keys())[:5]}"
        )
        differ = {k: (got[k], want[k]) for k in got if got[k] != want[k]}
        assert not differ, (
            f"seed {seed}, batch {number}: rows differ (spark, model): {list(differ.items())[:3]}"
        )
    total = sum(len(s.clicks) + len(s.rejects) for s in steps)
    assert len(harness.output) == total, f"seed {seed}: every click and reject exactly once"
    assert any(s.rejects for s in steps)
    joined = [r for r in harness.output if r.error is None]
    assert len({r.user_regionid for r in joined}) >= 3  # the histories really exercise the join
    if mode != LATEST:
        released = Counter(r.profile_complete for r in joined)  # by CDC progress (True), by max_wait (False)
        assert released[True] and released[False], f"seed {seed}: both kinds of release, got {released}"
