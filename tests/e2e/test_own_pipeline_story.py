"""A user's own table and events end to end, from one pipeline file (tests/support/own_pipeline.py): setup,
profiles changing under events from Kafka and Kinesis, `run --once` per source against a row-by-row oracle
that reads the same file, PII that never leaves the database, and kill -9 while events stream in."""

from __future__ import annotations

import dataclasses
import random
import threading
import time

import pytest

from common import pipeline_file as pf
from common import plan, topics
from tests.support import own_pipeline as own
from tests.support import pipeline as sp
from tests.support.kafka import read_all

pytestmark = pytest.mark.e2e


def now_ms() -> int:
    return int(time.time() * 1000)


def landed_batches(made: own.OwnPipeline) -> int:
    """Partitions of batches the pipeline's job landed (its queries' ledger rows)."""
    with made.connect() as conn:
        return conn.execute(
            "SELECT count(*) FROM streamfold.sink_batches WHERE query LIKE %s", (f"{made.pipeline.name}-%",)
        ).fetchone()[0]


def produce(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def views(streamfold_setup, tmp_path_factory):
    made = own.create(streamfold_setup.pg_dsn, tmp_path_factory.mktemp("own-pipeline"))
    yield made
    own.drop(made, streamfold_setup.connect_url)


def test_a_users_own_table_and_events_join_exactly(views, streamfold_setup):
    bootstrap, p = streamfold_setup.kafka_bootstrap, views.pipeline
    with views.connect() as pg:
        prefs = {"lang": "nb", "tags": [1, 2.5]}
        since = "2020-01-02T03:04:05Z"
        own.insert_customer(pg, p, 1, "NO", tier="gold", credit="12.50", vip=True, since=since, prefs=prefs)
        own.insert_customer(pg, p, 2, "SE", tier="", credit=None, vip=False)
        own.insert_customer(pg, p, 3, None)
        time.sleep(1.5)
        before_move = now_ms()
        time.sleep(1.5)
        pg.execute(f"UPDATE {p.profile.table} SET country = 'DK', credit = 99.99 WHERE id = 1")
        pg.execute(f"DELETE FROM {p.profile.table} WHERE id = 3")
        time.sleep(1.5)
        after_move = now_ms()
    kafka = [
        ("1", own.view(1, before_move, "/a", 1200, views=2)),
        ("1", own.view(1, after_move, "/b", 300)),
        ("2", own.view(2, after_move, "/a", 50, views=3)),
        ("3", own.view(3, before_move, "/c", 10)),  # before the delete: joins the old version
        ("3", own.view(3, after_move, "/c", 10)),  # after: no profile (if_missing)
        ("9", own.view(9, after_move, "/a", 10)),  # never a customer
        ("1", own.view("1", after_move)),  # a string key for a bigint: a dead letter
        ("1", b'{"customer_id": 1, "ts": "yesterday", "path": "/a", "ms_on_page": 1}'),
        ("x", b"\xff\xfe not json"),
    ]
    assert p.events.kafka_topic and p.events.kinesis_stream
    produce(bootstrap, p.events.kafka_topic, kafka)
    own.send_kinesis(p.events.kinesis_stream, [("1", own.view(1, after_move, "/k", 5)), ("k", b"[]")])
    views.streamfold("run", "--source", "kafka", "--once")
    views.streamfold("run", "--source", "kinesis", "--once")

    versions, cdc_dead = own.history(bootstrap, p)
    inputs = [*views.inputs("kafka", bootstrap), *views.inputs("kinesis", bootstrap)]
    want = own.expected(inputs, versions, cdc_dead, p)
    assert len(want.rows) == 7 and len(want.dead) >= 4
    with views.connect() as conn:
        own.assert_matches(conn, want, p)
        joined = dict(
            conn.execute(f"SELECT path || ms_on_page, profile_country FROM {plan.of(p).enriched_table}")
        )
        prefs = conn.execute(
            f"SELECT profile_prefs FROM {plan.of(p).enriched_table} WHERE path = '/a' AND customer_id = 1"
        ).fetchone()
    assert joined["/a1200"] == "NO" and joined["/b300"] == "DK"  # event time decides, not arrival
    assert prefs == ({"lang": "nb", "tags": [1, 2.5]},)
    # PII never left the database: not in the CDC topic, the changelog or the enriched records.
    for topic in (plan.of(p).cdc_topic, plan.of(p).changelog_topic, plan.of(p).enriched_topic):
        raw = b"".join(m.raw_value or b"" for m in read_all(bootstrap, topic))
        assert raw and b"secret1@example.com" not in raw and b"PII-NOTE" not in raw, topic


def test_kill_9_while_events_stream_in_loses_and_doubles_nothing(views, streamfold_setup):
    bootstrap, p = streamfold_setup.kafka_bootstrap, views.pipeline
    assert p.events.kafka_topic
    keys = list(range(100, 130))
    with views.connect() as pg:
        for i in keys:
            own.insert_customer(pg, p, i, random.choice(["NO", "SE", "FI"]), tier="silver", vip=i % 2 == 0)
    stop = threading.Event()

    def traffic() -> None:
        rng = random.Random(7)
        with views.connect() as pg:
            while not stop.is_set():
                batch = [(str(k), own.view(k, now_ms(), rng.choice(["/a", "/b", "/c"]), rng.randrange(1000)))
                         for k in rng.choices(keys, k=100)]  # fmt: skip
                produce(bootstrap, p.events.kafka_topic, batch)
                pg.execute(f"UPDATE {p.profile.table} SET country = %s WHERE id = %s",
                           (rng.choice(["NO", "SE", "DK"]), rng.choice(keys)))  # fmt: skip
                time.sleep(0.1)

    sender = threading.Thread(target=traffic, daemon=True)
    sender.start()
    log = views.home / "job.log"
    try:
        for delay in [random.uniform(0, 6) for _ in range(2)]:
            with sp.killed_after_a_batch(lambda: views.start("kafka", log), lambda: landed_batches(views)):
                time.sleep(delay)
    finally:
        stop.set()
        sender.join(timeout=30)
    views.streamfold("run", "--source", "kafka", "--once")
    views.streamfold("run", "--source", "kinesis", "--once")

    versions, cdc_dead = own.history(bootstrap, p)
    inputs = [*views.inputs("kafka", bootstrap), *views.inputs("kinesis", bootstrap)]
    with views.connect() as conn:
        own.assert_matches(conn, own.expected(inputs, versions, cdc_dead, p), p)


def test_a_column_added_to_the_file_is_carried_by_the_restarted_job(views, streamfold_setup):
    """The file gains a carried column and an aggregate; `setup` applies them, and the job resumes its
    checkpoint: the join's state written before reads null for the new column, later versions carry it."""
    bootstrap, p = streamfold_setup.kafka_bootstrap, views.pipeline
    assert p.events.kafka_topic
    with views.connect() as pg:
        pg.execute(f"ALTER TABLE {p.profile.table} ADD COLUMN segment text")
        own.insert_customer(pg, p, 200, "NO", tier="gold")
    time.sleep(1.5)
    before_grow = now_ms()
    produce(bootstrap, p.events.kafka_topic, [("200", own.view(200, before_grow, "/g", 1))])
    views.streamfold("run", "--source", "kafka", "--once")

    text = views.file.read_text().replace(
        "    prefs: jsonb\n", "    prefs: jsonb\n    segment: {type: text, if_missing: unsegmented}\n"
    )
    segments = f"views_per_segment_{p.name.removeprefix('views_')}"
    views.file.write_text(text + f"  - name: {segments}\n    group_by: {{segment: segment}}\n")
    grown = dataclasses.replace(views, pipeline=pf.load(views.file))
    grown.streamfold("setup")
    with views.connect() as pg:
        pg.execute(f"UPDATE {p.profile.table} SET segment = 'pro' WHERE id = 200")
        own.insert_customer(pg, p, 201, "SE", segment="new")
    time.sleep(1.5)
    after_grow = now_ms()
    produce(bootstrap, p.events.kafka_topic, [
        ("200", own.view(200, before_grow, "/g", 2)),  # joins the version the state held before the change
        ("200", own.view(200, after_grow, "/g", 3)),
        ("201", own.view(201, after_grow, "/g", 4)),
    ])  # fmt: skip
    grown.streamfold("run", "--source", "kafka", "--once")

    versions, cdc_dead = own.history(bootstrap, grown.pipeline)
    inputs = [*grown.inputs("kafka", bootstrap), *grown.inputs("kinesis", bootstrap)]
    with views.connect() as conn:
        own.assert_matches(conn, own.expected(inputs, versions, cdc_dead, grown.pipeline), grown.pipeline)
        landed = dict(
            conn.execute(
                f"SELECT ms_on_page, profile_segment FROM {plan.of(p).enriched_table} WHERE path = '/g'"
            )
        )
        totals = dict(conn.execute(f"SELECT segment, count FROM streamfold.{segments}"))
    # Landed before the change: null. Joined since with a version written before the column: if_missing.
    assert landed == {1: None, 2: "unsegmented", 3: "pro", 4: "new"}
    assert totals == {"unsegmented": 1, "pro": 1, "new": 1}  # the events enriched from the change on
