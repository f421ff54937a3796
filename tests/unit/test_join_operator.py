"""Differential test: the Java join operator on a real local Spark against the Python model it ports.

Hundreds of random histories run through one streaming query, one micro-batch per step, and through
spec.temporal_state driven by the same schedule (each batch's watermark as Spark reports it; input rows first,
then every key whose timer the watermark has passed). Every output row must be identical and come out in the
same batch. Each mode runs two schemas side by side, one query each: the default pipeline file's and a random
one (random event fields and profile columns, some with if_missing, random output names; in event-time mode
every column type as an event field and as a profile column, in latest mode a few of random types), each with
random values of its types (null, empty, non-ASCII, extremes). The histories mix out-of-order and late events,
inserts, updates, deletes and re-inserts, snapshot rows, replayed changes, equal timestamps (an event at a
version's valid-from, two versions with one valid-from), progress that stalls and then jumps, releases by the
wall clock (join.max_wait) rather than by CDC progress, versions old enough to expire, changes lacking values
(unchanged TOASTed values Debezium did not send: filled from the previous version, or unknown), drifted
columns (never filled) and truncates
of the table (no key: every key's profile ends). The operator's changelog rows (the versions as stored, with
their lsn) must equal the model's too, and so must each event's CDC progress at its release and whether
join.max_wait released it. Rejected records ride along (the pipeline passes them through the operator):
each must come out unchanged in its own batch, including from buckets that hold nothing else. Set
JOIN_DIFF_SEED to try other seeds (and other random schemas); a failure names its seed.
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
from common.pipeline_file import Pipeline
from pipeline import records
from pipeline.join_config import LATEST, JoinConfig
from pipeline.temporal_join import join_spec
from spec.temporal_state import (
    UNAVAILABLE,
    Click,
    Drifted,
    Enriched,
    IfMissing,
    UserState,
    Version,
    advance,
    advance_latest,
    incomplete,
    unknown,
)
from tests.support.join_harness import Harness, run_together
from tests.support.pipelines import DEFAULT, VALUES, random_pipeline

pytestmark = pytest.mark.spark

SECOND = 1_000
MAX_WAIT_MS = 2 * SECOND
HISTORIES = 400  # the default file's; the random schema runs fewer beside it
RANDOM_HISTORIES = 100
STEPS = 14
RETENTION_MS = 30 * SECOND
SEED = int(os.environ.get("JOIN_DIFF_SEED", "20261122"))


@dataclass(frozen=True)
class Shape:
    """A pipeline's columns as the harness writes them and the model reads them."""

    key: str  # the event's key field
    fields: tuple[tuple[str, str], ...]  # (name, type) of each event field
    time_ms: str
    count: str
    profile_key: str
    columns: tuple[tuple[str, str], ...]  # (name, type) of each profile column
    if_missing: IfMissing

    @staticmethod
    def of(pipeline: Pipeline) -> Shape:
        click = records.click(pipeline).fieldNames()
        return Shape(
            key=pipeline.events.key,
            fields=tuple((name, f.type) for name, f in pipeline.events.fields.items()),
            time_ms=click[-2],
            count=click[-1],
            profile_key=pipeline.profile.key,
            columns=tuple((name, c.type) for name, c in pipeline.profile.columns.items()),
            if_missing=IfMissing.of(join_spec(pipeline)["profile_columns"]),
        )


@dataclass
class Step:
    clicks: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    progress: list[dict[str, int]] = field(default_factory=list)
    rejects: list[dict[str, Any]] = field(default_factory=list)


class Histories:
    """Random per-key histories laid out as one list of steps (micro-batches) shared by all keys."""

    def __init__(self, seed: int, t0: int, shape: Shape, histories: int) -> None:
        self.rng = random.Random(seed)
        self.reject_rng = random.Random(seed + 1)  # its own stream: the histories stay the same
        self.drift_rng = random.Random(seed + 2)  # likewise
        self.shape = shape
        self.histories = histories
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
            for h in range(self.histories):
                for u in range(rng.randint(1, 2)):
                    self._events(step, f"h{h}u{u}", now)
            if rng.random() < 0.12:  # a TRUNCATE of the table: no key, every key's profile ends
                self.lsn += 1
                valid_from = now + rng.randint(-3 * SECOND, 4 * SECOND)
                step.changes.append({"kind": "truncate", "valid_from_ms": valid_from, "lsn": self.lsn})
            step.rejects = [self._reject() for _ in range(self.reject_rng.choice([0, 1, 5, 40]))]
            steps.append(step)
        # Flush: progress far ahead releases every waiting event; the next batch runs the timers.
        steps.append(Step(progress=[{"progress_ms": now + 10 * RETENTION_MS}]))
        steps.append(Step(progress=[{"progress_ms": now + 10 * RETENTION_MS}]))
        return steps

    def _events(self, step: Step, key: str, now: int) -> None:
        rng = self.rng
        for _ in range(rng.choice([0, 0, 1, 2, 3])):
            step.clicks.append(self._click(key, now))
        roll = rng.random()
        if roll < 0.25:
            step.changes.append(self._change(key, now))
        elif roll < 0.28 and self.sent:
            step.changes.append(dict(rng.choice(self.sent), **{self.shape.profile_key: key}))  # a replay
        elif roll < 0.30:
            step.changes.append(self._change(key, now, op="r"))

    def _click(self, key: str, now: int) -> dict[str, Any]:
        rng, shape = self.rng, self.shape
        self.clicks += 1
        t = now + rng.choice([0, rng.randint(-5 * SECOND, 5 * SECOND), -2 * RETENTION_MS, 20 * SECOND])
        if self.sent and rng.random() < 0.1:
            t = max(self.sent[-1]["valid_from_ms"], self.t0)  # exactly at a version's valid_from
        # Values the state codec must keep exactly: null, empty, non-ASCII (2-, 3-, 4-byte UTF-8), extremes.
        return {
            "event_id": f"e{self.clicks}",
            shape.key: key,
            shape.time_ms: t,
            **{name: rng.choice(VALUES[kind]) for name, kind in shape.fields},
            shape.count: rng.choice([1, 1, 2, None]),
        }

    def _reject(self) -> dict[str, Any]:
        self.rejects += 1
        payload = self.reject_rng.choice(["", "{", "[1]", '{"userid": 7}', "é\u2028", None])
        return {"event_id": f"r{self.rejects}", "error": "not JSON", "source": "test", "payload": payload}

    def _change(self, key: str, now: int, op: str | None = None) -> dict[str, Any]:
        rng = self.rng
        op = op or rng.choice("cuud")
        self.lsn += 1
        valid_from = BEGINNING_OF_TIME_MS if op == "r" else now + rng.randint(-3 * SECOND, 4 * SECOND)
        if op != "r" and self.sent and rng.random() < 0.1:
            valid_from = self.sent[-1]["valid_from_ms"]  # two versions valid from the same instant
        change: dict[str, Any] = {
            self.shape.profile_key: key,
            "op": op,
            "valid_from_ms": valid_from,
            "lsn": self.lsn,
        }
        if op != "d":
            change |= {name: rng.choice(VALUES[kind]) for name, kind in self.shape.columns}
            if rng.random() < 0.3:  # values Debezium did not send (unchanged TOASTed values): null here
                columns = range(len(self.shape.columns))
                change["unavailable"] = sorted(rng.sample(columns, rng.randint(1, len(columns))))
                for i in change["unavailable"]:
                    change[self.shape.columns[i][0]] = None
        if self.drift_rng.random() < 0.1:  # columns the change held no value of (drift); a delete's too
            reasons = [None, None, "renamed?", "retyped?"]
            drifted = [self.drift_rng.choice(reasons) for _ in self.shape.columns]
            change["drifted"] = drifted
            for (name, _), why in zip(self.shape.columns, drifted, strict=True):
                if why is not None and op != "d":
                    change[name] = None
        self.sent.append(change)
        return change


class Model:
    """spec.temporal_state driven the way Spark drives the operator: in each batch the join's watermark
    is max(Spark's watermark, the CDC progress read so far, this batch's included), and a row is complete
    when that CDC progress has reached its event."""

    def __init__(self, cfg: JoinConfig, shape: Shape) -> None:
        self.cfg, self.shape = cfg, shape
        self.users: dict[str, UserState] = defaultdict(UserState)
        self.progress_ms = -(2**63)
        self.changelog: dict[str, list[tuple]] = {}  # the last batch's, per key
        self.released: dict[str, tuple] = {}  # the last batch's events: (CDC progress, released by max_wait)
        self.filled = self.unknown = 0  # values taken from a previous version; changes left with unknowns
        self.drifted = 0  # versions stored with drifted values
        self.truncated = 0  # tombstones stored for a truncate

    def batch(self, step: Step, spark_watermark_ms: int) -> list[tuple]:
        self.progress_ms = max([self.progress_ms, *(p["progress_ms"] for p in step.progress)])
        cdc = lambda row: self.cfg.mode == LATEST or row.time_ms <= self.progress_ms  # noqa: E731
        self.changelog = defaultdict(list)
        rows = self._rows(step, max(spark_watermark_ms, self.progress_ms))
        progress = None if self.cfg.mode == LATEST or self.progress_ms == -(2**63) else self.progress_ms
        self.released = {row.row()[0]: (progress, not cdc(row)) for row in rows}
        return [(*row.row(), cdc(row) and row.known) for row in rows]

    def version(self, change: dict[str, Any]) -> Version:
        unavailable = change.get("unavailable") or ()
        drifted = change.get("drifted") if change["op"] != "d" else None
        profile = tuple(
            Drifted(drifted[i])
            if drifted and drifted[i] is not None
            else UNAVAILABLE
            if i in unavailable
            else change.get(name)
            for i, (name, _) in enumerate(self.shape.columns)
        )
        return Version(change["valid_from_ms"], change["lsn"], change["op"], profile)

    def changelog_record(self, version: Version) -> tuple:
        """A stored version as the operator's change row has it: op, lsn, valid_from, profile, complete,
        error."""
        why = incomplete([name for name, _ in self.shape.columns], version.profile)
        profile = tuple(None if unknown(v) else v for v in version.profile)
        return (version.op, version.lsn, version.valid_from_ms, profile, False if why else None, why)

    def click(self, row: dict[str, Any]) -> Click:
        shape = self.shape
        count = 1 if row[shape.count] is None else row[shape.count]
        fields = tuple(row[name] for name, _ in shape.fields)
        return Click(row["event_id"], row[shape.key], row[shape.time_ms], fields, count)

    def _rows(self, step: Step, watermark_ms: int) -> list[Enriched]:
        changes: dict[str, list[Version]] = defaultdict(list)
        clicks: dict[str, list[Click]] = defaultdict(list)
        truncates = []
        nothing = (None,) * len(self.shape.columns)
        for change in step.changes:
            if change.get("kind") == "truncate":
                truncates.append(Version(change["valid_from_ms"], change["lsn"], "d", nothing))
            else:
                changes[change[self.shape.profile_key]].append(self.version(change))
        for row in step.clicks:
            clicks[row[self.shape.key]].append(self.click(row))
        # A truncate reaches every key with versions, as it reaches every bucket.
        held = {user for user, state in self.users.items() if state.versions} if truncates else set()
        rows: list[Enriched] = []
        for user in changes.keys() | clicks.keys() | held:  # input rows first ...
            rows += self._step(user, changes[user], clicks[user], watermark_ms, truncates)
        if self.cfg.mode != LATEST:  # ... then the timers the watermark has passed
            for user, state in list(self.users.items()):
                if user not in changes and user not in clicks and _due(state, watermark_ms):
                    rows += self._step(user, [], [], watermark_ms)
        return rows

    def _step(
        self,
        user: str,
        changes: list[Version],
        clicks: list[Click],
        watermark_ms: int,
        truncates: list[Version] | None = None,
    ) -> list[Enriched]:
        state, if_missing, cut = self.users[user], self.shape.if_missing, truncates or []
        if self.cfg.mode == LATEST:
            result = advance_latest(state, changes, clicks, if_missing, cut)
        else:
            retention = self.cfg.version_retention_ms
            result = advance(state, changes, clicks, watermark_ms, retention, if_missing, cut)
        self.users[user] = UserState(result.state.versions, result.state.pending, result.wakeup_ms)
        given = {(c.valid_from_ms, c.lsn): c.profile.count(UNAVAILABLE) for c in changes}
        for stored in result.changes:
            self.changelog[user].append(self.changelog_record(stored))
            left = stored.profile.count(UNAVAILABLE)
            self.filled += given.get((stored.valid_from_ms, stored.lsn), 0) - left
            self.unknown += left > 0
            self.drifted += any(isinstance(v, Drifted) for v in stored.profile)
            self.truncated += (stored.valid_from_ms, stored.lsn) not in given
        return result.rows


def _due(state: UserState, watermark_ms: int) -> bool:
    return state.wakeup_ms is not None and state.wakeup_ms <= watermark_ms


def _as_reject(row: Row) -> tuple:
    """A reject as it came in; payloads come out as bytes (the harness casts its text input)."""
    payload = row.payload.encode() if isinstance(row.payload, str) else row.payload
    return (row.event_id, row.error, row.source, None if payload is None else bytes(payload))


@dataclass
class Case:
    """One schema's query, its model, its histories and where its columns are in an output row."""

    name: str
    harness: Harness
    model: Model
    steps: list[Step]
    seed: int

    @property
    def shape(self) -> Shape:
        return self.model.shape

    def enriched(self, row: Row) -> tuple:
        """An event row's columns after kind, through complete."""
        return tuple(row)[1 : 1 + len(records.enriched(self.harness.pipeline))]

    def changelog(self, rows: list[Row]) -> dict[str, list[tuple]]:
        """The versions the operator stored, as change rows: each key's (op, lsn, valid_from, profile,
        complete, error), in output order."""
        columns = len(self.shape.columns)
        start = 5 + len(self.shape.fields)  # kind, event_id, key, time, fields, count
        out: dict[str, list[tuple]] = defaultdict(list)
        for r in rows:
            values = tuple(r)
            profile, (valid_from, complete, error) = (
                values[start : start + columns],
                values[start + columns :][:3],
            )
            out[values[2]].append((r.change_op, r.change_lsn, valid_from, profile, complete, error))
        return dict(out)


def _cases(spark: SparkSession, root: Path, cfg: JoinConfig, seed: int) -> list[Case]:
    """The default file's schema and a random one: every type in event-time mode (waiting events are
    stored too), any in latest mode."""
    # Event time starts 15 s behind the wall clock: CDC progress (about 4 s into the history at first,
    # 13 s during its stall) trails the wall clock's watermark (wall clock - max_wait, at least 13 s in) on
    # any machine, however fast its batches, so the wall clock (max_wait) releases events early on; CDC
    # progress releases the rest. The model replays Spark's actual schedule: each batch's watermark as
    # Spark reports it.
    t0 = int(time.time() * 1000) - 15 * SECOND
    every_type = cfg.mode != LATEST
    schemas = [
        ("default", DEFAULT, HISTORIES),
        ("random", random_pipeline(random.Random(seed), every_type), RANDOM_HISTORIES),
    ]
    cases = []
    for number, (name, pipeline, histories) in enumerate(schemas):
        (root / str(number)).mkdir()
        shape = Shape.of(pipeline)
        cases.append(
            Case(
                name,
                Harness(spark, root / str(number), cfg, pipeline),
                Model(cfg, shape),
                Histories(seed + 10 * number, t0, shape, histories).steps(),
                seed,
            )
        )
    return cases


@pytest.mark.parametrize("mode", ["event_time", "latest"])
def test_jvm_operator_matches_the_python_model(spark: SparkSession, tmp_path: Path, mode: str) -> None:
    seed = SEED + (mode == LATEST)
    cfg = JoinConfig(mode=mode, max_wait_ms=MAX_WAIT_MS, version_retention_ms=RETENTION_MS)
    cases = _cases(spark, tmp_path, cfg, seed)
    for number in range(STEPS + 2):
        for case in cases:
            step = case.steps[number]
            for stream, rows in (("events", step.clicks), ("changes", step.changes)):
                case.harness.write(stream, rows)
            case.harness.write("progress", step.progress)
            case.harness.write("rejects", step.rejects)
        changes_before = [len(case.harness.changes) for case in cases]
        emitted = run_together([case.harness for case in cases])
        for case, rows, before in zip(cases, emitted, changes_before, strict=True):
            _check_batch(case, number, list(rows.values()), case.harness.changes[before:])
    for case in cases:
        _check_run(case, mode)


def _check_batch(case: Case, number: int, emitted: list[Row], changes: list[Row]) -> None:
    where = f"seed {case.seed}, {case.name} schema, batch {number}"
    step = case.steps[number]
    assert {r.kind for r in changes} <= {"change"}
    passed = {r.event_id: _as_reject(r) for r in emitted if r.kind == "reject"}
    assert passed == {r["event_id"]: _as_reject(Row(**r)) for r in step.rejects}, (
        f"{where}: rejects not passed through as they came"
    )
    got = {r.event_id: case.enriched(r) for r in emitted if r.kind == "event"}
    want = {row[0]: row for row in case.model.batch(step, case.harness.watermark_ms())}
    assert case.changelog(changes) == dict(case.model.changelog), (
        f"{where}: changes not stored once each as the model fills them, in version order per key"
    )
    assert got.keys() == want.keys(), (
        f"{where}: emitted by Spark only {sorted(got.keys() - want.keys())[:5]}, "
        f"by the model only {sorted(want.keys() - got.keys())[:5]}"
    )
    differ = {k: (got[k], want[k]) for k in got if got[k] != want[k]}
    assert not differ, f"{where}: rows differ (spark, model): {list(differ.items())[:3]}"
    released = {r.event_id: (r.cdc_progress_ms, r.released_by_max_wait) for r in emitted if r.kind == "event"}
    assert released == case.model.released, (
        f"{where}: CDC progress at release, or released by max_wait, differ"
    )


def _check_run(case: Case, mode: str) -> None:
    where = f"seed {case.seed}, {case.name} schema"
    output = case.harness.output
    total = sum(len(s.clicks) + len(s.rejects) for s in case.steps)
    assert len(output) == total, f"{where}: every event and reject exactly once"
    assert any(s.rejects for s in case.steps)
    joined = [case.enriched(r) for r in output if r.kind == "event"]
    with_profile = Counter(row[-2] is not None for row in joined)  # valid_from: a profile version or none
    assert with_profile[True] and with_profile[False], f"{where}: the histories really exercise the join"
    filled, unknown = case.model.filled, case.model.unknown
    assert filled and unknown, (
        f"{where}: unavailable values both filled ({filled}) and left unknown ({unknown})"
    )
    assert case.model.drifted, f"{where}: versions with drifted values"
    if mode != LATEST:
        released = Counter(row[-1] for row in joined)  # by CDC progress (True), by max_wait (False)
        assert released[True] and released[False], f"{where}: both kinds of release, got {released}"
