"""Reprocess into a new output version, swap while events stream in and a reader queries the totals, and
roll back (docs/reprocess.md), on a user's own pipeline (tests/support/own_pipeline.py) and its oracle.

One story, since every step needs the one before: the live job runs under load; the file gains a carried
column and an aggregate; `reprocess` rebuilds every output as version v2; v2's job is killed -9 mid
catch-up (a swap is refused meanwhile, with its lag) and restarted; the live job stops for the first swap
(which moves its tables to <table>__live) and starts again; `swap v2` happens under load with a reader
checking, in one REPEATABLE READ transaction at a time, that the totals are the sums over the enriched
table; after a drain v2 equals the oracle row by row (old events carry the new column) and `swap live`
rolls back to a whole live version. After each swap `streamfold setup` of the live file changes nothing:
the users' names, the history's view among them, keep reading the current version while the jobs land.
A Kafka consumer follows both swaps with `streamfold topics`: every event once, none lost. Bad input is
refused on the way."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from datetime import datetime

import psycopg
import pytest
import requests
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from psycopg import sql

from common import config, plan, topics
from common import pipeline_file as pf
from common import versions as v
from db import versions as registry
from pipeline.status_files import now_ms
from spec.events import Rejected, parse_event
from tests.support import own_pipeline as own
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

KEYS = list(range(1, 21))


@pytest.fixture(scope="module")
def views(streamfold_setup, tmp_path_factory):
    made = own.create(streamfold_setup.pg_dsn, tmp_path_factory.mktemp("reprocess"))
    yield made
    p = made.pipeline
    cli(made, "swap", "live")  # after a failure: best effort, so v2 can be dropped
    cli(made, "drop-version", "v2")
    with made.connect() as conn:  # the swap's views and the moved live tables, then the fixture's own
        for users_name, table in v.users_tables(v.moved_live(p), v.LIVE).items():
            with contextlib.suppress(psycopg.Error):
                conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.SQL(users_name)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(table)))
        conn.execute(sql.SQL("DROP VIEW IF EXISTS streamfold.{}").format(sql.Identifier(segments(p))))
    own.drop(made, streamfold_setup.connect_url)


def segments(p: pf.Pipeline) -> str:
    return f"views_per_segment_{p.name.removeprefix('views_')}"


def cli(views: own.OwnPipeline, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamfold", *args],
        capture_output=True, text=True, timeout=600, env=env or views.env(), cwd=own.ROOT,
    )  # fmt: skip


def stop(job: subprocess.Popen) -> None:
    """SIGTERM to the job, not its JVM: it stops between writes (pipeline/job.py BatchGate)."""
    os.kill(job.pid, signal.SIGTERM)
    job.wait(timeout=180)


class Traffic:
    """Page views for KEYS and a country change every few batches, until stopped."""

    def __init__(self, views: own.OwnPipeline, bootstrap: str) -> None:
        self.views, self.bootstrap = views, bootstrap
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        import random

        rng, p = random.Random(37), self.views.pipeline
        assert p.events.kafka_topic
        with self.views.connect() as pg:
            while not self.stopped.is_set():
                batch = [(str(k), own.view(k, now_ms(), rng.choice(["/a", "/b"]), rng.randrange(1000)))
                         for k in rng.choices(KEYS, k=20)]  # fmt: skip
                produce(self.bootstrap, p.events.kafka_topic, batch)
                change = (rng.choice(["NO", "SE", "DK"]), rng.choice(["pro", "new", None]), rng.choice(KEYS))
                pg.execute(f"UPDATE {p.profile.table} SET country = %s, segment = %s WHERE id = %s", change)
                time.sleep(0.2)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=60)


def produce(
    bootstrap: str, topic: str, records: list[tuple[str, bytes]], partition: int | None = None
) -> None:
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for key, value in records:
        if partition is None:
            producer.produce(topic, key=key, value=value)
        else:
            producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0


class Reader:
    """Queries the users' names in a loop: in each REPEATABLE READ transaction, the totals must be the sums
    over the enriched table (some committed state of one version, never a mix)."""

    def __init__(self, dsn: str, enriched: str, totals: str) -> None:
        self.dsn, self.enriched, self.totals = dsn, enriched, totals
        self.snapshots, self.wrong, self.errors, self.retried = 0, [], [], 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        with psycopg.connect(self.dsn) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            while not self.stopped.is_set():
                try:
                    with conn.transaction():
                        (total,) = conn.execute(
                            f"SELECT coalesce(sum(views), 0) FROM {self.totals}"
                        ).fetchone()
                        (rows,) = conn.execute(
                            f"SELECT coalesce(sum(views), 0) FROM {self.enriched}"
                        ).fetchone()
                except psycopg.errors.DeadlockDetected:  # crossed the swap's locks: PostgreSQL aborted it
                    self.retried += 1
                    continue
                except psycopg.Error as exc:  # anything else: the swap was not atomic for this reader
                    self.errors.append(str(exc))
                    continue
                self.snapshots += 1
                if total != rows:
                    self.wrong.append((total, rows))

    def __enter__(self) -> Reader:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=60)


class Follower:
    """A Kafka consumer of the enriched events that follows the current version as docs/reprocess.md
    ("Kafka consumers across a swap") says: `streamfold topics --json` names the version and its topic;
    at a swap it reads the old topic up to `swapped_at`, then the new one from `consumers_from`, and drops
    the event_ids it has processed already."""

    CHECK_S = 10.0  # how often it asks which version is current (a CLI call: a couple of seconds of CPU)

    def __init__(self, views: own.OwnPipeline, bootstrap: str) -> None:
        self.views, self.bootstrap = views, bootstrap
        self.processed: set[str] = set()
        self.dropped = 0
        self.followed: list[str] = []  # the versions, in the order it followed them
        self.per_topic: Counter[str] = Counter()
        self.next: dict[tuple[str, int], int] = {}  # the next offset it reads, per partition
        self.errors: list[str] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.guarded, daemon=True)

    def current(self) -> dict:
        return json.loads(self.views.streamfold("topics", "--json").stdout)

    def guarded(self) -> None:
        try:
            self.run()
        except Exception as exc:  # the test asserts there was none
            self.errors.append(repr(exc))

    def run(self) -> None:
        wanted = plan.of(self.views.pipeline).enriched_topic  # the users' name of the enriched topic
        group = {"group.id": f"follower-{uuid.uuid4().hex}", "enable.auto.commit": False}
        consumer = Consumer({**config.kafka_client_settings(self.bootstrap), **group})
        try:
            now = self.current()
            topic, self.followed = now["topics"][wanted], [now["version"]]
            self.assign(consumer, topic, None)
            checked = time.monotonic()
            while not self.stopped.is_set():
                self.take(consumer.poll(0.5))
                if time.monotonic() - checked < self.CHECK_S:
                    continue
                checked, now = time.monotonic(), self.current()
                if now["version"] != self.followed[-1]:
                    ends = self.offsets(consumer, topic, millis(now["swapped_at"]))
                    self.drain(consumer, topic, ends)
                    topic = now["topics"][wanted]
                    self.assign(consumer, topic, now["consumers_from"] and millis(now["consumers_from"]))
                    self.followed.append(now["version"])
        finally:
            consumer.close()

    def take(self, message) -> None:
        if message is None or message.error() is not None:
            return
        self.next[(message.topic(), message.partition())] = message.offset() + 1
        self.per_topic[message.topic()] += 1
        event_id = json.loads(message.value())["event_id"]
        if event_id in self.processed:
            self.dropped += 1
        self.processed.add(event_id)

    def offsets(self, consumer: Consumer, topic: str, time_ms: int | None) -> dict[int, int]:
        """Per partition: its first record stamped at or after time_ms (its end when none is yet), or its
        beginning."""
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        found = {}
        for partition in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            found[partition] = low
            if time_ms is not None:
                (at,) = consumer.offsets_for_times([TopicPartition(topic, partition, time_ms)], timeout=30)
                found[partition] = at.offset if at.offset >= 0 else high
        return found

    def assign(self, consumer: Consumer, topic: str, time_ms: int | None) -> None:
        start = self.offsets(consumer, topic, time_ms)
        self.next.update({(topic, partition): offset for partition, offset in start.items()})
        consumer.assign([TopicPartition(topic, partition, offset) for partition, offset in start.items()])

    def drain(self, consumer: Consumer, topic: str, ends: dict[int, int]) -> None:
        """The old topic, up to `ends`."""
        deadline = time.monotonic() + 120
        while any(self.next[(topic, p)] < end for p, end in ends.items()):
            assert time.monotonic() < deadline, f"could not read {topic} up to the swap"
            self.take(consumer.poll(0.5))

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=60)


def millis(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def oids(views: own.OwnPipeline, names: list[str]) -> dict[str, int | None]:
    """Each relation's oid: a view setup replaced would have a new one."""
    with views.connect() as conn:
        return {n: conn.execute("SELECT to_regclass(%s)::oid", (n,)).fetchone()[0] for n in names}


def setup_changes_nothing(views: own.OwnPipeline, names: list[str]) -> None:
    """`streamfold setup` of the live file after a swap: it succeeds, and since the swap pointed the users'
    names at the current version already, it replaces none of them and reports no change."""
    before = oids(views, names)
    assert None not in before.values(), before
    result = views.streamfold("setup")
    assert "tables:" not in result.stderr, result.stderr
    assert oids(views, names) == before


def columns(views: own.OwnPipeline, relation: str) -> list[str]:
    with views.connect() as conn:
        return registry.columns(conn, relation)


def test_reprocess_swap_under_load_and_roll_back(views, streamfold_setup):
    bootstrap, p = streamfold_setup.kafka_bootstrap, views.pipeline
    assert p.events.kafka_topic
    topic = p.events.kafka_topic
    with views.connect() as pg:
        pg.execute(f"ALTER TABLE {p.profile.table} ADD COLUMN segment text")  # not carried yet
        for i in KEYS:
            own.insert_customer(pg, p, i, "NO", tier="gold" if i % 2 else "", vip=i % 3 == 0, segment="pro")
    # Records Kafka no longer retains: partition 0 starts at offset 3.
    produce(bootstrap, topic, [("1", own.view(1, now_ms()))] * 3, partition=0)
    admin = AdminClient(config.kafka_client_settings(bootstrap))
    for future in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result()

    live_log = views.home / "live.log"
    live = views.start("kafka", live_log)
    v2_job: subprocess.Popen | None = None
    follower = Follower(views, bootstrap)  # a consumer of the enriched events, across both swaps
    try:
        with Traffic(views, bootstrap):
            sp.wait_until(lambda: views.landed(p.name, "kafka") > 0, 300, "a batch of the live job")
            follower.thread.start()
            # The changed file: a carried column and an aggregate over it.
            text = views.file.read_text().replace(
                "    prefs: jsonb\n", "    prefs: jsonb\n    segment: {type: text, if_missing: unsegmented}\n"
            )
            changed = views.home / "v2.yaml"
            changed.write_text(text + f"  - name: {segments(p)}\n    group_by: {{segment: segment}}\n")
            v2 = v.versioned(pf.load(changed), "v2")
            result = views.streamfold("reprocess", "--version", "v2", "--pipeline", str(changed))
            assert "started the job of v2" in " ".join(result.stderr.split())
            # v2 adds a column no set-up file carried: new, not a lost capture to snapshot again.
            assert "capture of" not in result.stderr
            with views.connect() as pg:
                signals = pg.execute(
                    "SELECT count(*) FROM streamfold.debezium_signal WHERE data LIKE %s",
                    (f"%{p.profile.table}%",),
                ).fetchone()
            assert signals == (0,), "reprocess asked for an incremental snapshot"

            # Bad input, refused with its reason.
            assert "exists already" in views.refused(
                "reprocess", "--version", "v2", "--pipeline", str(changed)
            )
            assert "no version 'nope'" in views.refused("swap", "nope")
            assert "'live' is the current version" in views.refused("drop-version", "live")
            too_early = views.refused("reprocess", "--version", "v9", "--from", "2000-01-01T00:00:00Z")
            first = first_retained_ms(bootstrap, topic, 0)
            assert f"earliest possible start is {v.pf_time(first)}" in too_early, too_early
            assert set(views.versions()) == {"live", "v2"}

            # kill -9 mid catch-up; meanwhile a swap is refused with the lag.
            committed = lambda: views.versions()["v2"]["lag"] != "no batch committed yet"  # noqa: E731
            sp.wait_until(committed, 300, "a committed batch of v2's job")
            os.killpg(views.version_pid("v2"), signal.SIGKILL)
            for partition in range(3):  # more than the caught-up threshold behind, on every partition
                burst = [(str(k), own.view(k, now_ms(), "/burst", 1)) for k in KEYS] * 60
                produce(bootstrap, topic, burst, partition=partition)
            lagging = views.refused("swap", "v2")
            assert "still catching up" in lagging and "records behind" in lagging, lagging
            v2_job = subprocess.Popen(
                [sys.executable, "-m", "streamfold", "run", "--version", "v2"],
                stdout=(views.home / "v2-restarted.log").open("a"), stderr=subprocess.STDOUT,
                env=views.env(), cwd=own.ROOT, start_new_session=True,
            )  # fmt: skip
            sp.wait_until(lambda: views.versions()["v2"]["caught_up"], 600, "v2 caught up")

            # The first swap moves the live tables: the live job stops for it, and starts again after.
            stop(live)
            enriched, tier = plan.of(p).enriched_table, plan.of(p).aggregates[2].table
            with Reader(streamfold_setup.pg_dsn, enriched, tier) as reader:
                sp.wait_until(lambda: reader.snapshots > 20, 60, "reader snapshots")
                swapped = views.streamfold("swap", "v2")
                assert "now read v2" in " ".join(swapped.stderr.split())
                before = reader.snapshots
                sp.wait_until(lambda: reader.snapshots > before + 20, 60, "reader snapshots after the swap")
            assert not reader.wrong, (
                f"totals that were not the sums over one enriched state: {reader.wrong[:5]}"
            )
            assert not reader.errors, reader.errors[:3]
            with views.connect() as conn:
                swaps = conn.execute(
                    "SELECT from_version, to_version, offsets FROM streamfold.output_swaps"
                    " WHERE pipeline_name = %s",
                    (p.name,),
                ).fetchall()
            assert [s[:2] for s in swaps] == [("live", "v2")] and f"{topic}:0" in swaps[0][2]
            assert views.versions()["v2"]["current"]
            assert "current version" in views.refused("drop-version", "v2")
            live = views.start("kafka", live_log)
            sp.wait_until(lambda: views.versions()["v2"]["caught_up"], 300, "v2 caught up again")

            # `streamfold setup` of the live file after the swap (the compose stack runs it at every up): the
            # users' names keep reading v2, history included; v2's column keeps flowing; both jobs land.
            setup_changes_nothing(views, [*v.users_tables(v2, "v2"), plan.of(p).histories[0].view])
            assert "profile_segment" in columns(views, enriched)
            assert "segment" in columns(views, plan.of(p).histories[0].view)
            assert "segment" in views.streamfold("query", "versions", "1").stdout
            connector = requests.get(
                f"{streamfold_setup.connect_url}/connectors/{plan.of(p).connector}/config",
                timeout=30, auth=config.connect_auth(),
            ).json()  # fmt: skip
            assert f"{p.profile.table}.segment," in connector["column.include.list"]
            jobs = {name: views.landed(name, "kafka") for name in (p.name, v2.name)}
            sp.wait_until(
                lambda: all(views.landed(n, "kafka") > jobs[n] for n in jobs), 300, "both jobs landing"
            )

        # Drained: every event in v2 as the oracle has it, with the new column on old events too.
        versions, cdc_dead = own.history(bootstrap, v2)
        inputs = views.inputs("kafka", bootstrap)
        want = own.expected(inputs, versions, cdc_dead, v2)

        def v2_complete() -> bool:
            with views.connect() as conn:
                (n,) = conn.execute(f"SELECT count(*) FROM {plan.of(v2).enriched_table}").fetchone()
            return n == len(want.rows)

        sp.wait_until(v2_complete, 600, "v2 to land every event")
        with views.connect() as conn:
            own.assert_matches(conn, want, v2)
            segment = dict(
                conn.execute(f"SELECT event_id, profile_segment FROM {plan.of(v2).enriched_table}")
            )
            by_segment = set(conn.execute(f"SELECT segment, count FROM {plan.of(v2).aggregates[3].table}"))
            sums = set(
                conn.execute(
                    f"SELECT profile_segment, sum(views) FROM {plan.of(v2).enriched_table} GROUP BY 1"
                )
            )
            through_views = conn.execute(f"SELECT count(*), sum(views) FROM {enriched}").fetchone()
            physical = conn.execute(
                f"SELECT count(*), sum(views) FROM {plan.of(v2).enriched_table}"
            ).fetchone()
        assert by_segment == sums
        assert through_views == physical
        # Old events carry the new column too: the version they joined has it, or if_missing says it lacks it.
        assert segment == expected_segments(inputs, versions, v2)
        assert "unsegmented" in segment.values() and len(set(segment.values())) > 1

        # Roll back: live caught up, swapped back, whole.
        sp.wait_until(lambda: views.versions()["live"]["caught_up"], 600, "the live job caught up")
        views.streamfold("swap", "live")
        assert views.versions()["live"]["current"]
        moved = v.moved_live(p)
        setup_changes_nothing(views, [*v.users_tables(moved, v.LIVE), plan.of(p).histories[0].view])
        assert "segment" not in columns(
            views, plan.of(p).histories[0].view
        )  # the history's names are live's again
        assert "segment" not in views.streamfold("query", "versions", "1").stdout
        # The live job keeps landing events, read below through the users' names.
        produce(bootstrap, topic, [(str(k), own.view(k, now_ms(), "/after", 1)) for k in KEYS])
        inputs = views.inputs("kafka", bootstrap)
        live_want = own.expected(inputs, versions, cdc_dead, p)  # the same input, the live file

        def live_complete() -> bool:
            with views.connect() as conn:
                (n,) = conn.execute(f"SELECT count(*) FROM {plan.of(moved).enriched_table}").fetchone()
            return n == len(live_want.rows)

        sp.wait_until(live_complete, 600, "the live job to land every event")
        stop(live)
        with views.connect() as conn:
            own.assert_matches(conn, live_want, moved)
            through_views = conn.execute(f"SELECT count(*), sum(views) FROM {enriched}").fetchone()
            physical = conn.execute(
                f"SELECT count(*), sum(views) FROM {plan.of(moved).enriched_table}"
            ).fetchone()
            (has_column,) = conn.execute(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'streamfold' "
                "AND table_name = %s AND column_name = 'profile_segment'", (enriched.partition(".")[2],)
            ).fetchone()  # fmt: skip
        assert through_views == physical and has_column == 0  # the live version's columns, not v2's

        # The consumer followed both swaps: every event once, none lost; it read v2's topic in between and
        # dropped the events it had processed already.
        everything = set(live_want.rows)
        done = lambda: follower.errors or follower.processed >= everything  # noqa: E731
        sp.wait_until(done, 180, "the consumer to process every event")
        follower.stop()
        assert not follower.errors, follower.errors
        assert follower.followed == ["live", "v2", "live"]
        assert follower.processed == everything
        assert follower.per_topic[plan.of(v2).enriched_topic] > 0 and follower.dropped > 0, follower.per_topic

        views.streamfold("drop-version", "v2")
        assert set(views.versions()) == {"live"}
        with views.connect() as conn:
            (left,) = conn.execute("SELECT to_regclass(%s) IS NULL", (plan.of(v2).enriched_table,)).fetchone()
        assert left
        sp.wait_until(
            lambda: plan.of(v2).enriched_topic not in admin.list_topics(timeout=30).topics,
            60,
            "v2's topics deleted",
        )
    finally:
        follower.stop()
        for job in (live, v2_job):
            if job is not None and job.poll() is None:
                sp.kill9(job)
        with contextlib.suppress(OSError, ValueError):
            os.killpg(views.version_pid("v2"), signal.SIGKILL)


def first_retained_ms(bootstrap: str, topic: str, partition: int) -> int:
    """The timestamp of the first record Kafka still holds in the partition."""
    consumer = Consumer({**config.kafka_client_settings(bootstrap), "group.id": "test-reprocess"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        consumer.assign([TopicPartition(topic, partition, low)])
        message = sp.wait_until_value(lambda: consumer.poll(1.0), 60, "the first retained record")
        return message.timestamp()[1]
    finally:
        consumer.close()


def expected_segments(
    inputs: list[sp.Input], versions: own.Versions, pipeline: pf.Pipeline
) -> dict[str, str]:
    """The oracle's new column, per event: the profile version valid at the event's time (if_missing)."""
    spec, now = plan.of(pipeline).event_spec, now_ms()
    found = {}
    for item in inputs:
        try:
            event = parse_event(item.payload, now, spec)
        except Rejected:
            continue
        found[item.event_id] = own.profile_at(versions, event.key, event.time_ms, pipeline)["segment"]
    return found
