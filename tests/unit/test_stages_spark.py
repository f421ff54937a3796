"""Differential test: the join of several tables as the job runs it (pipeline/stages.py: one Java stage per
join, chained in one streaming query on a real local Spark) against its model, spec/cascade.py (itself held
to the per-event reference, spec/several_tables.py, by tests/unit/test_cascade.py).

One random commit-ordered CDC stream of four tables (a chain parcels -> senders -> accounts and an
independent lookup of depots: inserts, updates, deletes, re-inserts, null and dangling foreign keys, values
Debezium did not send and drifted columns, heartbeats) with events at random times (before, at and after
the changes they join) spliced in at random places, cut into micro-batches: each batch, the events the
last stage releases must be the model's, each with every join's key, columns, valid_from and known; CDC
records that could not be folded pass through every stage once, as rejects. Set STAGES_DIFF_SEED to try
other seeds; a failure names its seed.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from common import plan
from pipeline import cdc_fold, records, stages
from pipeline.join_config import JoinConfig
from pipeline.temporal_join import DRIFT_METRIC, pending_clicks
from spec import cascade
from spec.cascade import Change, Event, Progress
from spec.several_tables import Joined
from spec.temporal_state import UNAVAILABLE, Drifted, Version
from tests.unit.test_several_tables import scans

pytestmark = pytest.mark.spark

SEED = int(os.environ.get("STAGES_DIFF_SEED", "20261206"))
PIPELINE = scans()
JOINS = plan.joins(PIPELINE)
SPEC = cdc_fold.tables_spec(PIPELINE)
TABLES = [t["table"] for t in SPEC["tables"]]
COLUMNS = {t["table"]: [c["name"] for c in t["spec"]["columns"]] for t in SPEC["tables"]}
# Postgres table -> its keys, and a draw of each of its columns' values (dangling foreign keys among them).
KEYS = {
    "public.parcels": [str(k) for k in range(1, 31)],
    "public.senders": [str(k) for k in range(1, 21)],
    "public.accounts": list("abcdefghijkl"),
    "public.depots": ["x", "y", "z"],
}
VALUES = {
    "sender_id": [*range(1, 23), None],
    "weight": ["1.5", "0.25", None],
    "country": ["DE", "FR", "", None],
    "account": [*"abcdefghijklmn", "", None],
    "plan": ["gold", "silver", "", None],
    "city": ["Hamburg", "Köln", None],
}
COMMITS, EVENTS, BATCHES, END_MS = 250, 300, 10, 4_000
ONLY_CDC = JoinConfig(max_wait_ms=10**13, version_retention_ms=10**9)  # only CDC progress releases events


def _draw_changes(rng: random.Random) -> list[Change]:
    """Commits in order, one per millisecond (docs/decisions/join-cascade.md: ties are progress's margin)."""
    out = []
    for lsn, ms in enumerate(sorted(rng.sample(range(1, 3_000), COMMITS)), start=1):
        table = rng.choice(TABLES)
        op = rng.choice("cuud")
        values: list[Any] = [None if op == "d" else rng.choice(VALUES[c]) for c in COLUMNS[table]]
        if op == "u" and rng.random() < 0.15:
            values[rng.randrange(len(values))] = UNAVAILABLE  # an unchanged TOASTed value
        elif op != "d" and rng.random() < 0.05:
            values[rng.randrange(len(values))] = Drifted("retyped?")
        out.append(Change(table, rng.choice(KEYS[table]), Version(ms, lsn, op, tuple(values))))
    return out


def _draw_stream(rng: random.Random) -> list[list[cascade.Row]]:
    cdc: list[Change | Progress] = [
        *_draw_changes(rng),
        *(Progress(rng.randrange(1, 3_000)) for _ in range(30)),
    ]
    rows: list[cascade.Row] = sorted(cdc, key=_commit_order)
    for i in range(EVENTS):
        fields = {"parcel_id": str(rng.randint(1, 33)), "depot": rng.choice(["x", "y", "z", "w", None])}
        rows.insert(rng.randrange(len(rows) + 1), Event(f"e{i}", rng.randrange(0, 3_100), fields))
    cuts = sorted(rng.sample(range(1, len(rows)), BATCHES - 1))
    batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, len(rows)], strict=True)]
    return [*batches, [Progress(END_MS)]]


def _commit_order(row: Change | Progress) -> tuple[int, int]:
    return (row.ms, 1) if isinstance(row, Progress) else (row.version.valid_from_ms, 0)


def _cdc_record(row: Change | Progress) -> dict[str, Any]:
    """A row of cdc_fold.fold_tables: a change's columns under t<i>_, unavailable and drifted by index."""
    if isinstance(row, Progress):
        return {"kind": "progress", "progress_ms": row.ms}
    i, version = TABLES.index(row.table), row.version
    columns = {f"t{i}_{name}": v for name, v in zip(COLUMNS[row.table], version.profile, strict=True)}
    unavailable = [n for n, v in enumerate(version.profile) if v is UNAVAILABLE]
    drifted = [v.reason if isinstance(v, Drifted) else None for v in version.profile]
    return {
        "kind": "change",
        "table": row.table,
        "key": row.key,
        "op": version.op,
        "valid_from_ms": version.valid_from_ms,
        "lsn": version.lsn,
        **{name: None if isinstance(v, Drifted) or v is UNAVAILABLE else v for name, v in columns.items()},
        "unavailable": unavailable or None,
        "drifted": drifted if any(drifted) else None,
        "progress_ms": version.valid_from_ms,
    }


def _cdc_error(record_id: str) -> dict[str, Any]:
    """A CDC record the fold could not fold: a dead letter every stage passes on."""
    return {"kind": "error", "error": "not JSON", "event_id": record_id, "payload": "{"}


class Harness:
    """Two file streams (events, CDC rows as fold_tables gives them) into pipeline.stages.join_tables."""

    def __init__(self, spark: SparkSession, root: Path, cfg: JoinConfig = ONLY_CDC) -> None:
        self.spark, self.root, self.files, self.cfg = spark, root, 0, cfg
        self.out: list[Row] = []
        self.outputs: dict[str, Row] = {}  # the same rows as the job's output, by event_id
        self.drift: set[str] = set()  # the drift metric's columns over every batch
        for name in ("events", "cdc"):
            (root / name).mkdir()

    def write(self, stream: str, rows: list[dict[str, Any]]) -> None:
        self.files += 1
        final = self.root / stream / f"{self.files:04d}.json"
        hidden = final.with_name(f".{final.name}")
        hidden.write_text("".join(json.dumps(r) + "\n" for r in rows))
        hidden.rename(final)

    def joined(self) -> DataFrame:
        read = self.spark.readStream.format("json")
        events = read.schema(records.click(PIPELINE)).load(str(self.root / "events"))
        fold = cdc_fold.tables_fold_type(SPEC)
        text = StructType(
            [*fold.fields, StructField("event_id", StringType()), StructField("payload", StringType())]
        )
        cdc = read.schema(text).load(str(self.root / "cdc"))
        cdc = cdc.withColumn("payload", F.col("payload").cast("binary"))
        return stages.join_tables(events, cdc, self.cfg, PIPELINE)

    def run(self) -> list[Row]:
        before = len(self.out)

        def collect(batch: DataFrame, _batch_id: int) -> None:
            self.out.extend(batch.where("kind IN ('event', 'reject')").collect())
            self.outputs.update((r.event_id, r) for r in stages.outputs(batch, PIPELINE).collect())

        query = (
            self.joined()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(self.root / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        finally:
            query.stop()
        for progress in query.recentProgress:
            metric = (progress.get("observedMetrics") or {}).get(DRIFT_METRIC)
            self.drift.update(metric["columns"] if metric else ())
        return self.out[before:]


def _joined(row: Row) -> dict[str, Joined]:
    """Every join of an event row, as the model gives it."""
    out = {}
    for j, join in enumerate(JOINS):
        values = tuple(row[f"j{j}_{name}"] for name in join.table.columns)
        out[join.name] = Joined(row[f"j{j}_key"], values, row[f"j{j}_valid_from_ms"], row[f"j{j}_known"])
    return out


def test_the_spark_stages_join_as_the_model_does(spark: SparkSession, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    batches = _draw_stream(rng)
    harness = Harness(spark, tmp_path)
    time_ms, count = records.click(PIPELINE).fieldNames()[-2:]
    released = 0
    seen: dict[str, dict[str, Joined]] = {}
    for number, batch in enumerate(batches):
        where = f"seed {SEED}, batch {number}"
        events = [r for r in batch if isinstance(r, Event)]
        clicks = [{"event_id": e.event_id, **e.fields, time_ms: e.time_ms, count: None} for e in events]
        harness.write("events", clicks)
        rejects = [_cdc_error(f"cdc{number}-{n}") for n in range(rng.choice([0, 1, 3]))]
        harness.write("cdc", [*(_cdc_record(r) for r in batch if not isinstance(r, Event)), *rejects])
        got = harness.run()
        model = cascade.run(JOINS, batches[: number + 1], retention_ms=10**9)
        want = dict(model[released:])
        released = len(model)
        rows = [r for r in got if r.kind == "event"]
        assert sorted(r.event_id for r in rows) == sorted(want), f"{where}: released events differ"
        for r in rows:
            assert _joined(r) == want[r.event_id], f"{where}: {r.event_id} joined otherwise"
            assert r.released_by_max_wait is False, f"{where}: released by CDC progress"
            seen[r.event_id] = want[r.event_id]
        passed = sorted((r.event_id, r.source) for r in got if r.kind == "reject")
        assert passed == sorted((x["event_id"], f"kafka:{plan.of(PIPELINE).cdc_topic}") for x in rejects), (
            where
        )
    assert len(seen) == EVENTS, f"seed {SEED}: every event once"
    drifted = {
        f"{c.table}.{name}: {v.reason}"
        for batch in batches
        for c in batch
        if isinstance(c, Change)
        for name, v in zip(COLUMNS[c.table], c.version.profile, strict=True)
        if isinstance(v, Drifted)
    }
    assert drifted and harness.drift == drifted, f"seed {SEED}: the drift metric names each change's table"
    _assert_exercised(seen)
    _assert_outputs(harness.outputs, seen)


def _assert_outputs(outputs: dict[str, Row], seen: dict[str, dict[str, Joined]]) -> None:
    """The job's output rows (records.join_output): each table's columns under its prefix, the profile's
    valid_from, and complete the AND over the joins."""
    assert list(outputs[next(iter(seen))].asDict()) == records.join_output(PIPELINE).fieldNames()
    named = plan.of(PIPELINE).names
    for event_id, joined in seen.items():
        row = outputs[event_id].asDict()
        for join in JOINS:
            values = tuple(row[join.output(name)] for name in join.table.columns)
            assert values == joined[join.name].values, f"{event_id}: {join.name}'s columns"
        assert row[named.valid_from_ms] == joined["profile"].valid_from_ms
        assert row[named.complete] is all(j.known for j in joined.values()), f"{event_id}: complete"
    rejects = [r for r in outputs.values() if r.kind == "reject"]
    assert rejects and all(r.error == "not JSON" and r[named.complete] is None for r in rejects)


def _assert_exercised(seen: dict[str, dict[str, Joined]]) -> None:
    """The history really holds every case of a chain: found, dangling, null, unknown keys."""
    account = [joined["account"] for joined in seen.values()]
    assert any(j.valid_from_ms is not None for j in account), "a chain of two found"
    assert any(j.key is not None and j.valid_from_ms is None for j in account), "a dangling foreign key"
    assert any(j.key is None and j.known for j in account), "no key (null or no version): complete"
    assert any(not j.known for j in account), "an unknown key or value: incomplete"


def test_join_max_wait_releases_an_event_through_every_stage(spark: SparkSession, tmp_path: Path) -> None:
    """CDC stalled: the wall clock (join.max_wait) releases an event from the first stage, and every later
    stage releases it in the same batch (their watermark is the first's), incomplete."""
    harness = Harness(spark, tmp_path, JoinConfig(max_wait_ms=1_000, version_retention_ms=10**9))
    time_ms, count = records.click(PIPELINE).fieldNames()[-2:]
    old = int(time.time() * 1000) - 60_000
    parcel = _cdc_record(Change("public.parcels", "7", Version(old - 10, 1, "c", (1, "1.5"))))
    sender = _cdc_record(Change("public.senders", "1", Version(old - 9, 2, "c", ("DE", "a"))))
    harness.write("cdc", [parcel, sender])
    harness.write("events", [{"event_id": "e", "parcel_id": "7", "depot": "x", time_ms: old, count: None}])
    # Spark's watermark is the batches' before: the CDC progress after the first, the wall clock's ticks
    # (read from the second on) after the second, so the third batch is the one the first stage releases
    # the event in: the last stage must too.
    runs, pending = [], []
    for _ in range(3):
        runs.append(harness.run())
        # `--once` (temporal_join.run_until_drained) reads what waits from the first stage's state.
        pending.append(pending_clicks(spark, str(harness.root / "checkpoint")))
    assert [[r.event_id for r in run if r.kind == "event"] for run in runs] == [[], [], ["e"]]
    assert [(p.clicks, p.earliest_ms) for p in pending] == [(1, old), (1, old), (0, None)]
    [row] = runs[2]
    assert row.released_by_max_wait is True
    assert (row.j1_key, row.j1_country, row.j2_key) == ("1", "DE", "a")
    [out] = [r for e, r in harness.outputs.items() if e == "e"]
    assert out[plan.of(PIPELINE).names.complete] is False
