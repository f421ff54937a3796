"""The real-time mode's sink (io.streamfold.sink.RealtimeWriter) across kill -9: a query in Spark's real-time
mode (tests/support/realtime_writer_job.py) is killed while rows stream through it and restarted on its
checkpoint; every event is then in Postgres once, every dead letter and profile version once, every
aggregate total is the sum over the enriched rows, and each aggregate topic's last record per key is the
total in Postgres, as the micro-batch driver writes it."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest

from common import names, plan
from common import pipeline_file as pf
from pipeline import aggregates, records
from pipeline.sink_spec import sink_spec
from tests.support import pipeline as sp
from tests.support.kafka import read_all
from tests.support.traffic import kafka_sender

pytestmark = pytest.mark.e2e

EVENTS = 6_000
REJECTS = 120
CHANGES = 100
HISTORY_TABLE = "streamfold.profile_history_clicks"
# While the query runs, records are sent CHUNK at a time, PAUSE_S apart (~500 a second), so that the kill
# finds rows streaming in.
CHUNK = 50
PAUSE_S = 0.1


def job(sandbox: sp.Sandbox, checkpoint: Path, log: Path) -> subprocess.Popen:
    """The real-time query, in its own process group so that a kill takes its JVM too."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.realtime_writer_job", sandbox.clicks_topic, str(checkpoint)],
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
        env=sandbox.env(),
        cwd=sp.ROOT,
        start_new_session=True,
    )


def running(query: subprocess.Popen, log: Path, predicate: Callable[[], object]) -> Callable[[], object]:
    """`predicate`, failing at once if the query's process has exited (its log's end says why)."""

    def check() -> object:
        if query.poll() is not None:
            raise AssertionError(f"the query exited with {query.returncode}: {log.read_text()[-3000:]}")
        return predicate()

    return check


def inputs(tag: str) -> list[tuple[str, bytes]]:
    """Events of a few users over a few regions and urls of this run's own, with rejects among them."""
    rng = random.Random(67)
    regions = [f"rt-{tag}-region-{i}" for i in range(4)]
    out: list[tuple[str, bytes]] = []
    for i in range(EVENTS):
        uid = f"rt-{tag}-user-{rng.randrange(40)}"
        event = {
            "kind": "event",
            "uid": uid,
            "url": f"/rt/{tag}/{rng.randrange(25)}",
            "region": rng.choice(regions),
            "clicks": rng.randrange(1, 4),
            "time_ms": 1_700_000_000_000 + i,
        }
        out.append((uid, json.dumps(event).encode()))
        if i % (EVENTS // REJECTS) == 0:
            out.append((uid, json.dumps({"kind": "reject", "error": "not a click"}).encode()))
        if i % (EVENTS // CHANGES) == 1:
            change = {
                "kind": "change",
                "uid": uid,
                "region": rng.choice(regions),
                "op": "u",
                "lsn": 1_000 + i,
                "valid_from_ms": event["time_ms"],
            }
            out.append((uid, json.dumps(change).encode()))
    return out


def count(sandbox: sp.Sandbox, table: str) -> int:
    with sandbox.connect() as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


def landed(sandbox: sp.Sandbox) -> int:
    return count(sandbox, names.ENRICHED_CLICKS_TABLE)


def commits(checkpoint: Path) -> list[int]:
    """The batches the query has committed (their offsets are final)."""
    return sorted(int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit())


def send_while_running(send, remaining: list[tuple[str, bytes]]) -> threading.Thread:
    def run() -> None:
        for start in range(0, len(remaining), CHUNK):
            send(remaining[start : start + CHUNK])
            time.sleep(PAUSE_S)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@dataclass
class Expected:
    """Every record of the input as the query reads it: the events' rows by event_id, the rejects' ids, and
    each user's profile versions (valid_from, lsn, region) in their order."""

    rows: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    dead: set[str] = field(default_factory=set)
    history: dict[str, list[tuple[int, int, str | None]]] = field(default_factory=dict)


def expected(sandbox: sp.Sandbox, bootstrap: str) -> Expected:
    want = Expected()
    for item in sp.kafka_inputs(bootstrap, sandbox.clicks_topic):
        record = json.loads(item.payload or b"{}")
        if record["kind"] == "event":
            want.rows[item.event_id] = (record["uid"], record["region"], record["clicks"])
        elif record["kind"] == "change":
            version = (record["valid_from_ms"], record["lsn"], record["region"])
            want.history.setdefault(record["uid"], []).append(version)
        else:
            want.dead.add(item.event_id)
    for versions in want.history.values():
        versions.sort()
    return want


def published(bootstrap: str, topic: str, tag: str) -> dict[str, str]:
    """An aggregate topic's last record (key, value) per key of this run's."""
    last: dict[str, str] = {}
    for message in read_all(bootstrap, topic):
        key = (message.raw_key or b"").decode()
        if tag in key and message.raw_value is not None:
            last[key] = message.raw_value.decode()
    return last


def current_records(conn: psycopg.Connection, tag: str) -> dict[str, dict[str, str]]:
    """Per aggregate topic, the records the micro-batch driver would publish for this run's keys
    (pipeline/aggregates.py), from the totals in Postgres."""
    pipeline = pf.load()
    spec = sink_spec(plan.of(pipeline), records.join_output(pipeline))
    out: dict[str, dict[str, str]] = {}
    for aggregate in spec["aggregates"]:
        columns = ", ".join(k["column"] for k in aggregate["keys"])
        keys = conn.execute(
            f"SELECT {columns} FROM {aggregate['table']} WHERE region LIKE %s", (f"rt-{tag}-%",)
        ).fetchall()
        rows = aggregates.current_totals(conn, aggregate, [tuple(k) for k in keys])
        out[aggregate["topic"]] = dict(aggregates.record(aggregate, row) for row in rows)
    return out


def stored_totals(conn: psycopg.Connection, tag: str) -> dict[str, int]:
    rows = conn.execute(
        f"SELECT region, clicks FROM {names.CLICKS_PER_REGION_TABLE} WHERE region LIKE %s", (f"rt-{tag}-%",)
    ).fetchall()
    return dict(rows)


def test_kill_9_mid_stream_lands_every_row_once(streamfold_setup, tmp_path_factory):
    home = tmp_path_factory.mktemp("realtime")
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "realtime_writer", home)
    bootstrap = streamfold_setup.kafka_bootstrap
    tag = uuid.uuid4().hex[:8]
    sent = inputs(tag)
    send = kafka_sender(bootstrap, sandbox.clicks_topic)
    checkpoint, log = home / "checkpoint", home / "job.log"
    half = len(sent) // 2
    send(sent[:half])

    first = job(sandbox, checkpoint, log)
    try:
        sp.wait_until(running(first, log, lambda: commits(checkpoint)), 300, "a committed batch")
        sender = send_while_running(send, sent[half:])
        # Killed while rows stream in: some of the second half landed, in a batch not yet committed.
        second_half = running(first, log, lambda: landed(sandbox) > EVENTS * 0.6)
        sp.wait_until(second_half, 300, "rows of the second half", poll_s=0.2)
    finally:
        sp.kill9(first)
    at_kill, committed = landed(sandbox), commits(checkpoint)
    sender.join()

    second = job(sandbox, checkpoint, log)
    try:
        sp.wait_until(running(second, log, lambda: landed(sandbox) >= EVENTS), 300, "every event in Postgres")
        want = expected(sandbox, bootstrap)
        sent_counts = (len(want.rows), len(want.dead), sum(map(len, want.history.values())))
        assert sent_counts == (EVENTS, REJECTS, CHANGES)
        sp.wait_until(lambda: count(sandbox, names.DEAD_LETTERS_TABLE) >= REJECTS, 120, "every dead letter")
        sp.wait_until(lambda: count(sandbox, HISTORY_TABLE) >= CHANGES, 120, "every profile version")
        with sandbox.connect() as conn:
            last_records = current_records(conn, tag)
        # Each aggregate topic gets a group's totals right after its commit: its last records catch up with
        # the totals in Postgres, in the driver's very records.
        for topic, last in last_records.items():
            sp.wait_until(lambda t=topic, w=last: published(bootstrap, t, tag) == w, 120, topic)
        # A batch that ends after everything landed: its tasks have closed and logged what they met.
        sp.wait_until(lambda: commits(checkpoint)[-1] > committed[-1] + 1, 120, "a batch after the restart")
    finally:
        sp.kill9(second)

    with sandbox.connect() as conn:
        assert sp.actual_rows(conn) == want.rows
        stored, distinct = conn.execute(
            f"SELECT count(*), count(DISTINCT event_id) FROM {names.ENRICHED_CLICKS_TABLE}"
        ).fetchone()
        assert stored == distinct == EVENTS
        per_region = Counter()
        for _, region, clicks in want.rows.values():
            per_region[region] += clicks
        assert stored_totals(conn, tag) == dict(per_region)
        sp.assert_totals_of_rows(conn)
        stored_dead = {d for (d,) in conn.execute(f"SELECT dead_letter_id FROM {names.DEAD_LETTERS_TABLE}")}
        assert stored_dead == want.dead
        assert sp.stored_history(conn, list(want.history)) == want.history
    replays = [line for line in log.read_text().splitlines() if "deduplicated" in line]
    print(
        f"real-time sink: {at_kill} of {EVENTS} events landed at the kill, batches {committed} committed; "
        f"tasks that met replayed rows: {replays}"
    )
