"""The profile history (docs/history.md): the join's change rows landed by the executors
(jvm/.../sink/Landing.java) into the default pipeline's history table on a real PostgreSQL, then read back
through the view and the function `streamfold setup` creates (db/history.py), against a Python oracle.

The change rows come from the join's differential generator (tests/unit/test_join_operator.py: inserts,
updates, deletes, re-inserts, snapshot rows, replays, equal valid_from, unavailable values, truncates) run
through the model the operator ports (spec/temporal_state.py; the differential test holds the operator's
change rows to the model's). The oracle of "profile of K at T" is the model's version_at over every version
the key ever had."""

from __future__ import annotations

import random
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession

from common import plan
from common.names import BEGINNING_OF_TIME_MS
from db import history, schema
from pipeline import records
from pipeline.sink_spec import profile_column
from spec.temporal_state import (
    UNAVAILABLE,
    UNKNOWN_VALUES,
    UserState,
    Version,
    advance,
    version_at,
)
from tests.support.pipelines import DEFAULT
from tests.unit.test_join_operator import Histories, Shape
from tests.unit.test_sinks import bootstrap, dsn, frame, land, pg_home

__all__ = ["bootstrap", "dsn", "pg_home"]  # the Postgres and Kafka fixtures of test_sinks

SHAPE = Shape.of(DEFAULT)
pytestmark = pytest.mark.spark

COLUMNS = [name for name, _ in SHAPE.columns]
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NEVER = -(2**63)  # a watermark that expires nothing: the history keeps every version


class Join:
    """The model's state per key, fed change by change; each step's stored versions are the change rows."""

    def __init__(self) -> None:
        self.versions: dict[str, list[Version]] = defaultdict(list)

    def step(self, changes: list[dict[str, Any]]) -> list[dict[str, Any]]:
        per_key: dict[str, list[Version]] = defaultdict(list)
        truncates = []
        for change in changes:
            if change.get("kind") == "truncate":
                truncates.append(Version(change["valid_from_ms"], change["lsn"], "d", (None,) * len(COLUMNS)))
            else:
                per_key[change[SHAPE.profile_key]].append(version(change))
        held = {key for key, versions in self.versions.items() if versions} if truncates else set()
        rows = []
        for key in per_key.keys() | held:
            state = UserState(self.versions[key])
            result = advance(state, per_key[key], [], NEVER, 0, SHAPE.if_missing, truncates)
            self.versions[key] = result.state.versions
            rows += [change_row(key, v) for v in result.changes]
        return rows


def version(change: dict[str, Any]) -> Version:
    unavailable = change.get("unavailable") or ()
    profile = tuple(UNAVAILABLE if i in unavailable else change.get(c) for i, c in enumerate(COLUMNS))
    return Version(change["valid_from_ms"], change["lsn"], change["op"], profile)


def change_row(key: str, v: Version) -> dict[str, Any]:
    """The operator's change row of a stored version (OutputRows.change)."""
    unknown = [c for c, value in zip(COLUMNS, v.profile, strict=True) if value is UNAVAILABLE]
    row: dict[str, Any] = {
        "kind": "change",
        "uid": key,
        "change_op": v.op,
        records.CHANGE_LSN: v.lsn,
        "profile_valid_from_ms": v.valid_from_ms,
        **{
            profile_column(plan.of(DEFAULT), c): None if x is UNAVAILABLE else x
            for c, x in zip(COLUMNS, v.profile, strict=True)
        },
    }
    if unknown:
        row |= {"profile_complete": False, "error": UNKNOWN_VALUES + ", ".join(unknown)}
    return row


def landed(value: Any) -> Any:
    """A value as Postgres holds it: the sink leaves a text[]'s null elements out (PgCsv.textArray)."""
    if value is UNAVAILABLE:
        return None
    return [x for x in value if x is not None] if isinstance(value, list) else value


def at(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def ms(column: str) -> str:
    """A timestamptz column as epoch ms ('-infinity', a snapshot version's start: BEGINNING_OF_TIME_MS)."""
    return (
        f"CASE WHEN {column} = '-infinity' THEN {BEGINNING_OF_TIME_MS} "
        f"ELSE (extract(epoch FROM {column}) * 1000)::bigint END"
    )


@pytest.fixture()
def queries(dsn: str) -> str:
    """The view and the function, as `streamfold setup` creates them."""
    with schema.engine(dsn).begin() as conn:
        assert history.create(conn, DEFAULT)
        assert not history.create(conn, DEFAULT)  # the second time replaces them and reports nothing
    return dsn


def land_steps(spark: SparkSession, dsn: str, bootstrap: str, steps: list[list[dict[str, Any]]]) -> None:
    for batch_id, rows in enumerate(steps):
        if rows:
            land(frame(spark, rows, partitions=3), dsn, bootstrap, batch_id=batch_id)


def stored(dsn: str) -> dict[str, list[tuple]]:
    """Every key's versions through the view: (valid_from, valid_to, op, lsn, incomplete, values...)."""
    out: dict[str, list[tuple]] = defaultdict(list)
    with psycopg.connect(dsn) as conn:
        query = (
            f"SELECT userid, {ms('valid_from')}, {ms('valid_to')}, op, lsn, incomplete, {', '.join(COLUMNS)}"
            f" FROM {plan.of(DEFAULT).histories[0].view} ORDER BY userid, valid_from, lsn"
        )
        for row in conn.execute(query):
            out[row[0]].append(tuple(row[1:]))
    return dict(out)


def expected(versions: list[Version]) -> list[tuple]:
    """A key's versions as the view should show them: each ends where the next begins."""
    out = []
    for i, v in enumerate(versions):
        end = versions[i + 1].valid_from_ms if i + 1 < len(versions) else None
        unknown = [c for c, x in zip(COLUMNS, v.profile, strict=True) if x is UNAVAILABLE]
        incomplete = UNKNOWN_VALUES + ", ".join(unknown) if unknown else None
        values = tuple(landed(x) for x in v.profile)
        out.append((v.valid_from_ms, end, v.op, v.lsn, incomplete, *values))
    return out


def profile_at(conn: psycopg.Connection, key: str, ms: int) -> tuple | None:
    rows = conn.execute(
        f"SELECT lsn, {', '.join(COLUMNS)} FROM {plan.of(DEFAULT).histories[0].function}(%s, %s)",
        (key, at(ms)),
    ).fetchall()
    assert len(rows) <= 1
    return rows[0] if rows else None


def oracle(versions: list[Version], ms: int) -> tuple | None:
    v = version_at(versions, ms)
    if v is None or v.op == "d":
        return None
    return (v.lsn, *(landed(x) for x in v.profile))


def probes(versions: list[Version], rng: random.Random) -> list[int]:
    """Times at, just before and just after each version's start, and random ones around them."""
    starts = [v.valid_from_ms for v in versions if v.valid_from_ms != BEGINNING_OF_TIME_MS]
    times = [t + d for t in starts for d in (-1, 0, 1)]
    if starts:
        times += [rng.randint(min(starts) - 10_000, max(starts) + 10_000) for _ in range(5)]
    return times


def test_random_histories_answer_profile_at_as_the_oracle(
    spark: SparkSession, queries: str, bootstrap: str
) -> None:
    seed = 37
    steps = Histories(seed, int(time.time() * 1000), SHAPE, 60).steps()
    join = Join()
    land_steps(spark, queries, bootstrap, [join.step(s.changes) for s in steps])
    got = stored(queries)
    want = {key: expected(versions) for key, versions in join.versions.items() if versions}
    differ = {k: (got.get(k), want.get(k)) for k in got.keys() | want.keys() if got.get(k) != want.get(k)}
    assert not differ, (
        f"seed {seed}: the view's versions (first) differ from the join's: {list(differ.items())[:2]}"
    )
    ops = {row[2] for rows in got.values() for row in rows}
    assert ops == {"c", "u", "d", "r"}, "the histories exercise every kind of version"
    rng, checked = random.Random(seed), 0
    with psycopg.connect(queries) as conn:
        for key, versions in join.versions.items():
            for ms in probes(versions, rng):
                assert profile_at(conn, key, ms) == oracle(versions, ms), f"seed {seed}: {key} at {ms}"
                checked += 1
    assert checked > 1000


def test_a_replayed_batch_adds_no_version(spark: SparkSession, queries: str, bootstrap: str) -> None:
    join = Join()
    rows = join.step([{"userid": "U", "op": "c", "valid_from_ms": 1_000, "lsn": 1, "regionid": "A"}])
    land_steps(spark, queries, bootstrap, [rows])
    again = land(frame(spark, rows, partitions=3), queries, bootstrap, batch_id=0)
    assert set(again.values()) == {(False, "replay")}  # the partition's claim is taken: a no-op
    assert len(stored(queries)["U"]) == 1


def test_a_delete_and_a_reinsert_are_versions(spark: SparkSession, queries: str, bootstrap: str) -> None:
    join = Join()
    changes = [
        {"userid": "U", "op": "c", "valid_from_ms": 1_000, "lsn": 1, "regionid": "A"},
        {"userid": "U", "op": "d", "valid_from_ms": 2_000, "lsn": 2},
        {"userid": "U", "op": "c", "valid_from_ms": 3_000, "lsn": 3, "regionid": "B"},
        {"kind": "truncate", "valid_from_ms": 4_000, "lsn": 4},
    ]
    land_steps(spark, queries, bootstrap, [join.step([c]) for c in changes])
    got = [(row[0], row[1], row[2], row[5]) for row in stored(queries)["U"]]
    assert got == [
        (1_000, 2_000, "c", "A"),
        (2_000, 3_000, "d", None),
        (3_000, 4_000, "c", "B"),
        (4_000, None, "d", None),  # the truncate ends the open version
    ]
    with psycopg.connect(queries) as conn:
        regions = [profile_at(conn, "U", ms) for ms in (999, 1_000, 2_500, 3_000, 4_000)]
    assert [r and r[1] for r in regions] == [None, "A", None, "B", None]


def test_thousands_of_versions_of_one_key(spark: SparkSession, queries: str, bootstrap: str) -> None:
    join, rng = Join(), random.Random(5)
    changes = [
        {
            "userid": "U",
            "op": rng.choice("cuud"),
            "valid_from_ms": 1_000 * (i // 2),
            "lsn": i,
            "regionid": f"R{i}",
        }
        for i in range(5_000)
    ]
    land_steps(spark, queries, bootstrap, [join.step(changes[i : i + 1_000]) for i in range(0, 5_000, 1_000)])
    versions = join.versions["U"]
    assert len(stored(queries)["U"]) == len(versions) == 5_000
    with psycopg.connect(queries) as conn:
        for ms in [rng.randint(-1_000, 2_600_000) for _ in range(300)]:
            assert profile_at(conn, "U", ms) == oracle(versions, ms), f"at {ms}"
