"""The sink: the driver's retry loop, and the executors' landing (jvm/.../sink/Landing.java) on local
Spark, a real PostgreSQL and a real Kafka broker (the local stack's services, in a temporary home): the
ledger and its two write paths, partitions landing once each, the Kafka records byte for byte against
Spark's own `to_json` (the spec), text Postgres can hold, bounded dead letters, a Postgres outage. No mocks:
outages are a real stopped server, errors real exceptions."""

from __future__ import annotations

import json
import logging
import random
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, StructField, StructType

from common import config, names, plan
from db import schema
from pipeline import records, retry, sink_spec, sinks
from stack import lifecycle
from stack.home import StackError, open_stack
from stack.prerequisites import pg_bindir
from tests.support.pipelines import DEFAULT
from tests.support.records import USER_CLICKS_FIELDS


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the retry loop -----------------------------------------------------------------------------------


def test_retrying_recovers_from_real_connection_errors_with_backoff(caplog) -> None:
    dead = f"host=127.0.0.1 port={closed_port()} dbname=x user=x connect_timeout=2"
    waits: list[float] = []
    calls = {"n": 0}

    def attempt() -> str:
        calls["n"] += 1
        if calls["n"] <= 3:
            psycopg.connect(dead)  # raises a real OperationalError: connection refused
        return "done"

    with caplog.at_level(logging.WARNING, logger=retry.__name__):
        assert retry.retrying("Postgres", attempt, sinks.PG_TRANSIENT, 60, sleep=waits.append) == "done"
    assert waits == [1.0, 2.0, 4.0]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3
    assert all(line.startswith("Postgres unavailable (OperationalError: ") for line in lines)
    assert lines[0].endswith("), retrying in 1s")
    assert all("\n" not in line for line in lines)


def test_retrying_gives_up_after_its_budget() -> None:
    dead = f"host=127.0.0.1 port={closed_port()} dbname=x user=x connect_timeout=2"
    with pytest.raises(psycopg.OperationalError):
        retry.retrying("Postgres", lambda: psycopg.connect(dead), sinks.PG_TRANSIENT, 0.0)


def test_retrying_does_not_retry_other_errors() -> None:
    calls = {"n": 0}

    def attempt() -> None:
        calls["n"] += 1
        raise ValueError("a bug, not an outage")

    with pytest.raises(ValueError):
        retry.retrying("Postgres", attempt, sinks.PG_TRANSIENT, 60, sleep=lambda s: None)
    assert calls["n"] == 1


def test_retry_budget_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(retry.RETRY_ENV, "42")
    assert retry.retry_budget_s() == 42.0
    monkeypatch.delenv(retry.RETRY_ENV)
    assert retry.retry_budget_s() == retry.DEFAULT_RETRY_S


def test_kafka_outage_messages_are_recognised() -> None:
    assert sinks.is_kafka_outage("org.apache.kafka.common.errors.TimeoutException: Topic x not present")
    assert not sinks.is_kafka_outage("AnalysisException: cannot resolve column")


# --- a real PostgreSQL --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_home() -> Iterator[Path]:
    try:
        pg_bindir()
    except StackError as error:
        pytest.skip(str(error))
    home = Path(tempfile.mkdtemp(prefix="streamfold-unit-pg-"))
    home.chmod(0o755)  # as root, the postgres OS user must reach its data folder
    try:
        lifecycle.start_service(home, "postgres")
        yield home
    finally:
        lifecycle.down(home)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def dsn(pg_home: Path) -> str:
    env = open_stack(pg_home).env()
    dsn = env["STREAMFOLD_PG_DSN"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS streamfold CASCADE")  # the version table with it
    schema.upgrade(dsn)
    return dsn


@pytest.fixture(scope="module")
def bootstrap(pg_home: Path) -> Iterator[str]:
    """The stack's Kafka broker in the same home (started once), with the sink's topics; its client login
    exported meanwhile, for the sink and the helpers below."""
    lifecycle.start_service(pg_home, "kafka")
    env = open_stack(pg_home).env()
    with pytest.MonkeyPatch.context() as patch:
        for name in (config.KAFKA_USER_VAR, config.KAFKA_PASSWORD_VAR):
            patch.setenv(name, env[name])
        fresh_topics(env["STREAMFOLD_KAFKA_BOOTSTRAP"])  # the broker creates no topic on its own
        yield env["STREAMFOLD_KAFKA_BOOTSTRAP"]


def topic_records(bootstrap: str, topic: str, expect: int) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of every record in a topic since fresh_topics marked it, all partitions."""
    consumer = Consumer(
        {**config.kafka_client_settings(bootstrap), "group.id": f"unit-{topic}", "enable.auto.commit": False}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, MARKS.get((topic, p), 0)) for p in partitions])
        got: list[tuple[bytes | None, bytes | None]] = []
        deadline = time.monotonic() + 30
        while len(got) < expect and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                got.append((message.key(), message.value()))
        return got
    finally:
        consumer.close()


def topic_counts(bootstrap: str) -> dict[str, int]:
    """Records in user_clicks, users_changelog and clicks_dlq since fresh_topics marked them."""
    ends = end_offsets(bootstrap, SINK_TOPICS)
    return {
        topic: sum(end - MARKS.get(tp, 0) for tp, end in ends.items() if tp[0] == topic)
        for topic in SINK_TOPICS
    }


def end_offsets(bootstrap: str, topics: tuple[str, ...]) -> dict[tuple[str, int], int]:
    """Each partition's end offset: {(topic, partition): offset}."""
    consumer = Consumer({**config.kafka_client_settings(bootstrap), "group.id": "unit"})
    try:
        return {
            (topic, p): consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for topic in topics
            for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions
        }
    finally:
        consumer.close()


SINK_TOPICS = (names.USER_CLICKS_TOPIC, names.USERS_CHANGELOG_TOPIC, names.DLQ_TOPIC)
PARTITIONS = 2  # of each topic fresh_topics creates
MARKS: dict[tuple[str, int], int] = {}  # where each partition's records of the current test start


def fresh_topics(bootstrap: str, wanted: tuple[str, ...] = SINK_TOPICS) -> None:
    """The topics created if missing (PARTITIONS each), and their ends marked: topic_records and
    topic_counts read from the marks. Never deleted and recreated: the sink's idempotent producer, shared
    by the tests, stalled once on a topic recreated under it (every record expired after 60 s)."""
    admin = AdminClient(config.kafka_client_settings(bootstrap))
    existing = tuple(t for t in wanted if t in admin.list_topics(timeout=10).topics)
    missing = [t for t in wanted if t not in existing]
    created = admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in missing]) if missing else {}
    for future in created.values():
        future.result()
    MARKS.update({(t, p): 0 for t in missing for p in range(PARTITIONS)})
    MARKS.update(end_offsets(bootstrap, existing))


# The join's output for the default pipeline (records.join_output), what the sink receives, and the
# default pipeline file's sink spec for it.
OUTPUT = records.join_output(DEFAULT)
FIELDS = list(OUTPUT.fieldNames())
SPEC = sink_spec.sink_spec_json(plan.of(DEFAULT), OUTPUT)


def clicks(n: int, start: int = 0, url: str = "https://e.com/") -> list[dict]:
    """n enriched clicks as the join emits them: every fifth released by max_wait, a snapshot version."""
    return [
        {
            "kind": "event",
            "event_id": f"kafka:clicks:0:{i}",
            "uid": f"User_{i % 7}",
            "click_time_ms": 1_767_225_600_123,
            "click_url": f"{url}{i % 3}",
            "device_type": "mobile\u0000",
            "click_location": None,
            "clicks": 1 + i % 2,
            "user_regionid": f"Region_{i % 2}",
            "user_gender": "MALE",
            "user_interests": ["News", 'a "b"'],
            "user_registertime": 1,
            "profile_valid_from_ms": -1,
            "profile_complete": i % 5 != 0,
        }
        for i in range(start, start + n)
    ]


def rejects(n: int) -> list[dict]:
    return [
        {
            "kind": "reject",
            "event_id": f"kafka:clicks:1:{i}",
            "uid": f"User_{i % 7}",
            "error": "not JSON",
            "source": "kafka:clicks",
            "payload": bytearray(b"\x00\xff%d" % i),
        }
        for i in range(n)
    ]


def changes(items: list[tuple[str, str, str | None, int]]) -> list[dict]:
    """(userid, op, regionid, valid_from_ms) profile changes as the join passes them through, the nth with
    lsn n."""
    return [
        {
            "kind": "change",
            "uid": user,
            "change_op": op,
            "user_regionid": region,
            "profile_valid_from_ms": valid_from,
            "change_lsn": lsn,
        }
        for lsn, (user, op, region, valid_from) in enumerate(items, start=1)
    ]


def frame(spark: SparkSession, rows: list[dict], partitions: int = 1, by: str = "uid") -> DataFrame:
    """A batch of the join's output in `partitions` partitions (hashed by `by`). Rows name their kind,
    which the output carries when it has a kind column."""
    full = [tuple(row.get(name) for name in FIELDS) for row in rows]
    return spark.createDataFrame(full, OUTPUT).repartition(partitions, by)


def land(
    batch: DataFrame, dsn: str, bootstrap: str, ledger: str = "q:1", batch_id: int = 0, **kw
) -> dict[int, tuple[bool, str]]:
    """Land every partition: {partition: (landed, path)} of the non-empty ones."""
    spec = kw.pop("spec", SPEC)
    reports = sinks.land(
        batch, spec, sinks.JdbcTarget.of(dsn), bootstrap, ledger, batch_id, kw.pop("retry_s", 30), **kw
    )
    return {r.partition_id: (r.landed, r.path) for r in reports if r.path != "empty"}


def assert_totals_exact(dsn: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        diff = conn.execute(
            f"""SELECT count(*) FROM (SELECT click_url AS url, user_regionid AS region, sum(clicks) AS c
                  FROM {names.ENRICHED_CLICKS_TABLE} GROUP BY 1, 2) e
                FULL JOIN {names.URL_REGION_TABLE} t USING (url, region)
                WHERE e.c IS DISTINCT FROM t.click_count"""
        ).fetchone()
        region_diff = conn.execute(
            f"""SELECT count(*) FROM (SELECT user_regionid AS region, sum(clicks) AS c
                  FROM {names.ENRICHED_CLICKS_TABLE} GROUP BY 1) e
                FULL JOIN {names.CLICKS_PER_REGION_TABLE} t USING (region)
                WHERE e.c IS DISTINCT FROM t.clicks"""
        ).fetchone()
        assert diff == (0,) and region_diff == (0,)
        count, total = conn.execute(
            f"SELECT count(*), sum(clicks) FROM {names.ENRICHED_CLICKS_TABLE}"
        ).fetchone() or (0, 0)
        return count, total


def incomplete_event_ids(dsn: str) -> set[str]:
    """The clicks stored with profile_complete = false (clicks() marks every fifth)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT event_id FROM streamfold.enriched_clicks WHERE NOT profile_complete")
        return {r[0] for r in rows}


def test_the_default_spec_names_the_contracts_tables_and_topics() -> None:
    spec = json.loads(SPEC)
    assert (spec["enriched"]["table"], spec["enriched"]["topic"]) == (
        names.ENRICHED_CLICKS_TABLE,
        names.USER_CLICKS_TOPIC,
    )
    assert spec["changelog"]["topic"] == names.USERS_CHANGELOG_TOPIC
    assert (spec["dead_letters"]["table"], spec["dead_letters"]["topic"]) == (
        names.DEAD_LETTERS_TABLE,
        names.DLQ_TOPIC,
    )
    assert [(a["table"], a["topic"]) for a in spec["aggregates"]] == [
        (names.CLICKS_PER_REGION_TABLE, names.CLICKS_PER_REGION_TOPIC),
        (names.URL_REGION_TABLE, names.URL_REGION_TOPIC),
    ]
    # The enriched topic's records hold the enriched table's columns, by the same names.
    assert tuple(c["name"] for c in spec["enriched"]["columns"]) == USER_CLICKS_FIELDS
    release = ["cdc_progress_ms", "released_by_max_wait"]
    assert [FIELDS[c["ordinal"]] for c in spec["enriched"]["columns"]] == [
        *FIELDS[1:14],
        *release,
    ]  # after kind
    assert [(c["name"], FIELDS[c["ordinal"]], c["type"]) for c in spec["changelog"]["fields"]] == [
        ("userid", "uid", "text"),
        ("regionid", "user_regionid", "text"),
        ("gender", "user_gender", "text"),
        ("interests", "user_interests", "text[]"),
        ("registertime", "user_registertime", "bigint"),
        ("valid_from", "profile_valid_from_ms", "valid_from_ms"),
        ("incomplete", "error", "text"),
    ]
    url_region = spec["aggregates"][1]
    assert [(k["column"], FIELDS[k["ordinal"]], k["md5"]) for k in url_region["keys"]] == [
        ("url", "click_url", True),
        ("region", "user_regionid", False),
    ]
    assert url_region["conflict_columns"] == ["url_md5", "region"]
    assert url_region["count_column"] == "click_count"
    assert FIELDS[url_region["count_ordinal"]] == "clicks"
    assert spec["kind_ordinal"] == 0  # the join says what each row is
    assert spec["histories"][0]["table"] == "streamfold.profile_history_clicks"
    assert [(c["name"], FIELDS[c["ordinal"]]) for c in spec["histories"][0]["columns"]] == [
        ("userid", "uid"),
        ("valid_from", "profile_valid_from_ms"),
        ("lsn", "change_lsn"),
        ("op", "change_op"),
        ("incomplete", "error"),
        ("regionid", "user_regionid"),
        ("gender", "user_gender"),
        ("interests", "user_interests"),
        ("registertime", "user_registertime"),
    ]


def test_a_spec_the_output_contradicts_is_refused(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    """The JVM holds each column's declared type to the join output's Spark type before any row moves."""
    spec = json.loads(SPEC)
    spec["enriched"]["columns"][3]["type"] = "boolean"  # click_url is a string
    with pytest.raises(Exception, match="enriched column click_url is boolean but the join's output carries"):
        land(frame(spark, clicks(1)), dsn, bootstrap, spec=json.dumps(spec))


def test_ledger_makes_a_replayed_batch_a_no_op(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    batch = frame(spark, clicks(100))
    assert land(batch, dsn, bootstrap, "q") == {0: (True, "COPY")}
    assert land(batch, dsn, bootstrap, "q") == {0: (False, "replay")}  # the replay finds its id taken
    assert assert_totals_exact(dsn) == (100, 150)
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT query, batch_id, partition_id, rows FROM streamfold.sink_batches"
        ).fetchall() == [("q", 0, 0, 100)]
        assert conn.execute(
            "SELECT DISTINCT profile_valid_from = '-infinity', user_interests, device_type, "
            "click_time = '2026-01-01 00:00:00.123+00', click_location IS NULL "
            "FROM streamfold.enriched_clicks"
        ).fetchall() == [(True, ["News", 'a "b"'], "mobile\ufffd", True, True)]
    assert incomplete_event_ids(dsn) == {f"kafka:clicks:0:{i}" for i in range(0, 100, 5)}


def test_clicks_already_there_take_the_deduplicating_path(
    spark: SparkSession, dsn: str, bootstrap: str
) -> None:
    land(frame(spark, clicks(100)), dsn, bootstrap)
    # A topic reprocessed under a new checkpoint: a new batch id, half its clicks already there.
    assert land(frame(spark, clicks(100, start=50)), dsn, bootstrap, batch_id=1) == {
        0: (True, "deduplicated")
    }
    count, _ = assert_totals_exact(dsn)
    assert count == 150
    assert incomplete_event_ids(dsn) == {f"kafka:clicks:0:{i}" for i in range(0, 150, 5)}


def test_partitions_of_a_batch_land_once_each(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    """A batch that failed after some partitions landed: its replay lands only the missing ones, a second
    replay nothing; another query's batch 0 is its own; totals stay exact throughout. Kafka gets every
    partition's records on every attempt (at least once)."""
    fresh_topics(bootstrap)
    batch = frame(spark, clicks(300) + rejects(6), partitions=3)
    first = batch.where(F.spark_partition_id() != 2)
    assert land(first, dsn, bootstrap) == {0: (True, "COPY"), 1: (True, "COPY")}
    assert_totals_exact(dsn)
    assert land(batch, dsn, bootstrap) == {0: (False, "replay"), 1: (False, "replay"), 2: (True, "COPY")}
    assert land(batch, dsn, bootstrap) == {p: (False, "replay") for p in range(3)}
    assert assert_totals_exact(dsn) == (300, 450)
    other = frame(spark, clicks(30, start=1000), partitions=3)
    assert set(land(other, dsn, bootstrap, ledger="r:2").values()) == {(True, "COPY")}
    assert assert_totals_exact(dsn)[0] == 330
    with psycopg.connect(dsn) as conn:
        ledger = conn.execute(
            "SELECT query, batch_id, partition_id, rows FROM streamfold.sink_batches ORDER BY 1, 3"
        ).fetchall()
        dead = conn.execute("SELECT count(*) FROM streamfold.dead_letters").fetchone()
    assert [(q, b, p) for q, b, p, _ in ledger] == [("q:1", 0, p) for p in range(3)] + [
        ("r:2", 0, p) for p in range(3)
    ]
    assert sum(r for q, _, _, r in ledger if q == "q:1") == 306 and dead == (6,)
    clicks_first, rejects_first = (
        first.where("error IS NULL").count(),
        first.where("error IS NOT NULL").count(),
    )
    assert 0 < clicks_first < 300 and 0 < rejects_first < 6
    assert topic_counts(bootstrap) == {
        names.USER_CLICKS_TOPIC: clicks_first + 300 + 300 + 30,
        names.USERS_CHANGELOG_TOPIC: 0,
        names.DLQ_TOPIC: rejects_first + 6 + 6,
    }


def test_profile_changes_go_to_users_changelog_in_order_and_nowhere_else(
    spark: SparkSession, dsn: str, bootstrap: str
) -> None:
    """CDC changes ride in the batch (the join passes them through): each becomes one users_changelog
    record, the profile as JSON (no valid_from for a snapshot row), a delete its tombstone, a user's
    records in their order; Postgres gets the clicks, the dead letters and each version in the profile
    history. A version whose values are unknown (unchanged TOASTed values with no earlier version) says so
    in `incomplete`, in the changelog and the history."""
    fresh_topics(bootstrap)
    items = [("User_1", "c", "a", 5), ("User_2", "r", "b", -(2**62)), ("User_1", "d", None, 9)]
    unknown = {**changes([("User_3", "u", "c", 7)])[0], "profile_complete": False, "error": "why: interests"}
    batch = spark.createDataFrame(
        [
            tuple(row.get(name) for name in FIELDS)
            for row in clicks(20) + changes(items) + [unknown] + rejects(2)
        ],
        OUTPUT,
    ).coalesce(1)
    reports = sinks.land(batch, SPEC, sinks.JdbcTarget.of(dsn), bootstrap, "q:1", 0, 30)
    assert [(r.events, r.changes, r.dead) for r in reports] == [(20, 4, 2)]
    assert assert_totals_exact(dsn)[0] == 20
    assert topic_counts(bootstrap) == {
        names.USER_CLICKS_TOPIC: 20,
        names.USERS_CHANGELOG_TOPIC: 4,
        names.DLQ_TOPIC: 2,
    }
    got = [
        (k.decode(), None if v is None else v.decode())
        for k, v in topic_records(bootstrap, names.USERS_CHANGELOG_TOPIC, 4)
        if k is not None
    ]
    assert [v for k, v in got if k == "User_1"] == ['{"userid":"User_1","regionid":"a","valid_from":5}', None]
    assert [v for k, v in got if k == "User_2"] == ['{"userid":"User_2","regionid":"b"}']
    want = '{"userid":"User_3","regionid":"c","valid_from":7,"incomplete":"why: interests"}'
    assert [v for k, v in got if k == "User_3"] == [want]
    with psycopg.connect(dsn) as conn:
        history = conn.execute(
            "SELECT userid, valid_from = '-infinity', lsn, op, regionid, incomplete"
            " FROM streamfold.profile_history_clicks ORDER BY userid, valid_from, lsn"
        ).fetchall()
    assert history == [
        ("User_1", False, 1, "c", "a", None),
        ("User_1", False, 3, "d", None, None),
        ("User_2", True, 2, "r", "b", None),
        ("User_3", False, 1, "u", "c", "why: interests"),
    ]


def last_values(bootstrap: str, topic: str, expect: int) -> dict[str, str]:
    """The newest value per key of a topic (a key's records keep their order in its partition)."""
    got = topic_records(bootstrap, topic, expect)
    assert len(got) == expect
    return {key.decode(): value.decode() for key, value in got if key is not None and value is not None}


def test_aggregate_topics_get_the_current_totals_of_the_keys_a_batch_touched(
    spark: SparkSession, dsn: str, bootstrap: str
) -> None:
    """The driver publishes, after each batch, each touched key's current total: key and value as the
    aggregate topics' consumers know them (values joined by "|", json.dumps of the row)."""
    aggregate_topics = (names.CLICKS_PER_REGION_TOPIC, names.URL_REGION_TOPIC)
    fresh_topics(bootstrap, aggregate_topics)
    sink = sinks.Sink("q", dsn, bootstrap, DEFAULT, OUTPUT, retry_s=30)
    spark.sparkContext.setLocalProperty("sql.streaming.queryId", "unit")
    try:
        sink(frame(spark, clicks(30), partitions=2), 0)
        sink(frame(spark, clicks(30, start=30, url="https://f.com/"), partitions=2), 1)
    finally:
        spark.sparkContext.setLocalProperty("sql.streaming.queryId", None)  # type: ignore[arg-type]
    assert_totals_exact(dsn)
    with psycopg.connect(dsn) as conn:
        regions = conn.execute(f"SELECT region, clicks FROM {names.CLICKS_PER_REGION_TABLE}").fetchall()
        pairs = conn.execute(f"SELECT url, region, click_count FROM {names.URL_REGION_TABLE}").fetchall()
    # Each batch touches both regions and 3 URLs x 2 regions.
    assert last_values(bootstrap, names.CLICKS_PER_REGION_TOPIC, 4) == {
        region: json.dumps({"region": region, "clicks": total}) for region, total in regions
    }
    assert last_values(bootstrap, names.URL_REGION_TOPIC, 12) == {
        f"{url}|{region}": json.dumps({"url": url, "region": region, "click_count": total})
        for url, region, total in pairs
    }


def test_a_url_longer_than_a_btree_key_is_counted(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    long_url = "https://e.com/" + "x" * 20_000
    land(frame(spark, clicks(4, url=long_url)), dsn, bootstrap)
    assert_totals_exact(dsn)
    with psycopg.connect(dsn) as conn:
        urls = conn.execute(
            "SELECT url, region, click_count FROM streamfold.url_region_click_count"
        ).fetchall()
    assert {len(u) for u, _, _ in urls} == {len(long_url) + 1}


def test_old_url_region_table_is_migrated_to_the_md5_key(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        # An install from before Alembic (no version table) and before the md5 key.
        conn.execute("DROP SCHEMA streamfold CASCADE")
        conn.execute("CREATE SCHEMA streamfold")
        conn.execute(
            "CREATE TABLE streamfold.url_region_click_count (url text NOT NULL, region text NOT NULL, "
            "click_count bigint NOT NULL, PRIMARY KEY (url, region))"
        )
        conn.execute("INSERT INTO streamfold.url_region_click_count VALUES ('u', 'r', 3)")
        schema.upgrade(dsn)
        schema.upgrade(dsn)  # idempotent
        assert conn.execute(
            "SELECT url, region, click_count, url_md5 = md5('u')::uuid FROM streamfold.url_region_click_count"
        ).fetchall() == [("u", "r", 3, True)]


def test_a_batch_survives_a_postgres_outage(
    spark: SparkSession, dsn: str, bootstrap: str, pg_home: Path
) -> None:
    """The executors wait out a stopped Postgres (their log lines, `Postgres unavailable (...), retrying in
    Ns`, are checked on the job's log by tests/e2e/test_outages.py), then the batch lands once."""
    land(frame(spark, clicks(10)), dsn, bootstrap)  # the executors hold a live connection
    lifecycle.stop_service(pg_home, "postgres")

    def come_back() -> None:
        time.sleep(4)
        lifecycle.start_service(pg_home, "postgres")

    restarter = threading.Thread(target=come_back)
    restarter.start()
    began = time.monotonic()
    assert land(frame(spark, clicks(10, start=10)), dsn, bootstrap, batch_id=1, retry_s=120) == {
        0: (True, "COPY")
    }
    restarter.join()
    assert time.monotonic() - began >= 3
    assert assert_totals_exact(dsn)[0] == 20


def test_records_the_broker_never_acknowledges_fail_the_attempt(spark: SparkSession, dsn: str) -> None:
    """After the Postgres commit, records to a broker that never answers fail the attempt (a Kafka outage
    the driver then waits out), rather than being dropped."""
    dead = f"127.0.0.1:{closed_port()}"
    with pytest.raises(Exception) as failed:
        land(frame(spark, clicks(3)), dsn, dead, retry_s=0, kafka_attempt_ms=2000)
    assert sinks.is_kafka_outage(str(failed.value)), str(failed.value)[:2000]
    assert assert_totals_exact(dsn)[0] == 3  # Postgres committed first; a retry replays it as a no-op


# --- what the records and rows hold ---------------------------------------------------------------------


def test_text_postgres_cannot_hold_becomes_replacement_characters(
    spark: SparkSession, dsn: str, bootstrap: str
) -> None:
    """NUL and invalid UTF-8 (Spark strings are unchecked bytes) in any text column become U+FFFD."""
    bad = F.unhex(F.lit("61FF62630063")).cast("string")  # a \\xff b c NUL c
    batch = frame(spark, clicks(1)).withColumn("user_gender", bad).withColumn("click_location", bad)
    land(batch, dsn, bootstrap)
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT user_gender, click_location FROM streamfold.enriched_clicks"
        ).fetchone() == (
            "a\ufffdbc\ufffdc",
            "a\ufffdbc\ufffdc",
        )


def test_interests_round_trip_through_postgres(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    interests = [
        ["News", "Movies"],
        ['say "hi"', "back\\slash", "\\", '"', "a,b", "{braces}", " spaced ", "NULL", "", "ünï", "a\nb"],
        [],
        None,
        ["kept", None, "null elements are left out"],
    ]
    rows = [
        {**row, "user_interests": value} for row, value in zip(clicks(len(interests)), interests, strict=True)
    ]
    land(frame(spark, rows), dsn, bootstrap)
    with psycopg.connect(dsn) as conn:
        stored = dict(
            conn.execute("SELECT event_id, user_interests FROM streamfold.enriched_clicks").fetchall()
        )
    assert [stored[row["event_id"]] for row in rows] == [
        None if v is None else [e for e in v if e is not None] for v in interests
    ]


def test_times_are_stored_as_timestamptz(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    """Click times and profile valid-from as epoch ms, from 1970 to 9999 (leap days, month ends, random
    ones), read back from Postgres as the same instants; a snapshot version is -infinity, none is NULL."""
    rng = random.Random(7)
    edges = [0, 951_782_400_000, 951_868_799_999, 1_767_225_599_999, 4_107_542_400_000, 253_402_300_799_999]
    times = edges + [rng.randint(0, 253_402_300_799_999) for _ in range(300)]
    valid_from = [-1, None, *times[2:]]
    rows = [
        {**row, "click_time_ms": t, "profile_valid_from_ms": v}
        for row, t, v in zip(clicks(len(times)), times, valid_from, strict=True)
    ]
    land(frame(spark, rows), dsn, bootstrap)
    with psycopg.connect(dsn) as conn:
        got = conn.execute(
            "SELECT event_id, (extract(epoch FROM click_time) * 1000)::bigint, "
            "profile_valid_from = '-infinity', CASE WHEN isfinite(profile_valid_from) "
            "THEN (extract(epoch FROM profile_valid_from) * 1000)::bigint END FROM streamfold.enriched_clicks"
        ).fetchall()
    stored = {e: (t, inf, v) for e, t, inf, v in got}
    assert [stored[row["event_id"]] for row in rows] == [
        (t, None if v is None else v < 0, None if v is None or v < 0 else v)
        for t, v in zip(times, valid_from, strict=True)
    ]


def to_json_value() -> Column:
    """The user_clicks value as Spark's to_json writes it: the spec the JVM landing is held to, byte for
    byte (times in epoch ms, named without _ms (click_time, cdc_progress), profile_valid_from left out for
    a snapshot version)."""

    def field(name: str) -> Column:
        if name == "profile_valid_from":
            return F.when(F.col("profile_valid_from_ms") >= 0, F.col("profile_valid_from_ms")).alias(name)
        return F.col(f"{name}_ms" if name in ("click_time", "cdc_progress") else name).alias(name)

    return F.to_json(F.struct(*[field(name) for name in USER_CLICKS_FIELDS]))


def random_text(rng: random.Random) -> str | None:
    alphabet = '\x00\x01\x1f\x7f\n\t\r\b\f"\\/ aZ9é€\u2028\ufffd😀\U0010ffff'
    if rng.random() < 0.15:
        return None
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def test_user_clicks_values_are_what_to_json_writes(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    """2,000 seeded clicks (control characters, quotes, non-ASCII, astral and invalid UTF-8 text, nulls
    wherever the join may leave one, empty and null arrays and elements, extreme numbers): each user_clicks
    record's value equals to_json's bytes, its key is the uid, and every click is in Postgres."""
    fresh_topics(bootstrap)
    rng = random.Random(20261125)
    big = [-(2**63), -1, 0, 1, 2**31 - 1, 2**63 - 1, -(2**62)]

    def number() -> int | None:
        return None if rng.random() < 0.1 else rng.choice([*big, rng.randint(-(10**15), 10**15)])

    rows = [
        {
            "kind": "event",
            "event_id": f"kafka:clicks:0:{i}",
            "uid": random_text(rng) or "u",
            "click_time_ms": rng.choice([0, 1, 1_767_225_600_123, 253_402_300_799_999]),
            "click_url": bytes(rng.randrange(256) for _ in range(rng.randint(0, 6))),  # as text below
            "device_type": random_text(rng),
            "click_location": random_text(rng),
            "clicks": rng.choice([1, 2, 2**31 - 1]),
            "user_regionid": random_text(rng) or "UNKNOWN",
            "user_gender": random_text(rng),
            "user_interests": None
            if rng.random() < 0.15
            else [random_text(rng) for _ in range(rng.randint(0, 4))],
            "user_registertime": number(),
            # any time a Postgres timestamptz holds; negative: a snapshot version (-infinity)
            "profile_valid_from_ms": rng.choice([None, -(2**62), -1, 0, 1, rng.randint(0, 10**13)]),
            "profile_complete": rng.choice([True, False]),
        }
        for i in range(2_000)
    ]
    ddl = StructType(
        [StructField(f.name, BinaryType()) if f.name == "click_url" else f for f in OUTPUT.fields]
    )
    full = [tuple(row.get(name) for name in FIELDS) for row in rows]
    batch = (
        spark.createDataFrame(full, ddl)
        .withColumn("click_url", F.col("click_url").cast("string"))
        .coalesce(2)
    )
    want = {
        r.event_id: r.value.encode()
        for r in batch.select("event_id", to_json_value().alias("value")).collect()
    }
    keys = {r.event_id: r.uid.encode() for r in batch.select("event_id", "uid").collect()}
    land(batch, dsn, bootstrap)
    got = topic_records(bootstrap, names.USER_CLICKS_TOPIC, len(rows))
    assert len(got) == len(rows)
    by_id = {json.loads(value)["event_id"]: (key, value) for key, value in got if value is not None}
    differ = [(want[e], by_id.get(e)) for e in want if by_id.get(e) != (keys[e], want[e])]
    assert not differ, f"{len(differ)} of {len(want)} differ, e.g. {differ[:2]}"
    assert len(set(want.values())) > 1_900  # the rows are varied, not a few repeated
    assert assert_totals_exact(dsn)[0] == len(rows)


def dlq_spec(dead_letters: DataFrame) -> DataFrame:
    """A clicks_dlq value as Spark's expressions write it: the spec the JVM landing is held to."""
    payload_bytes = 16 * 1024

    def clean(col: Column) -> Column:
        return F.replace(F.make_valid_utf8(col), F.lit("\u0000"), F.lit("\ufffd"))

    payload = F.col("payload")
    head = F.substring(payload, 1, payload_bytes)
    return dead_letters.select(
        F.col("event_id"),
        F.to_json(
            F.struct(
                clean(F.col("event_id")).alias("dead_letter_id"),
                clean(F.col("source")).alias("source"),
                F.substring(clean(F.col("error")), 1, 2048).alias("reason"),
                clean(head.cast("string")).alias("payload"),
                # one line (Spark's base64 breaks lines every 76 characters, as MIME does)
                F.replace(F.base64(head), F.lit("\r\n"), F.lit("")).alias("payload_base64"),
                F.length(payload).alias("payload_bytes"),
                F.sha2(payload, 256).alias("payload_sha256"),
                (F.length(payload) > payload_bytes).alias("payload_truncated"),
            )
        ).alias("value"),
    )


def test_dead_letters_are_bounded_in_kafka_and_whole_in_postgres(
    spark: SparkSession, dsn: str, bootstrap: str
) -> None:
    """A rejected record: its clicks_dlq value is what Spark's expressions write (reason cut at 2,048
    characters, the payload's first 16 KiB as cleaned text and as base64, its full length and sha256), far
    under Kafka's limit; streamfold.dead_letters keeps the full bytes and a cleaned reason."""
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415

    fresh_topics(bootstrap)
    big = b'{"url": "' + b"\x00\xff" * 300_000 + b"x" * (1024 * 1024) + b'"}'
    dead = [
        ("kafka:clicks:0:7", "record too large \u0000 " + "é" * 3000, "kafka:clicks", bytearray(big)),
        ("kafka:clicks:0:8", "not JSON", "kafka:clicks", bytearray(b"ab\x00c")),
        ("kafka:clicks:0:9", "no payload", "kinesis:clicks", None),
    ]
    batch = frame(
        spark,
        [
            {"kind": "reject", **dict(zip(("event_id", "error", "source", "payload"), d, strict=True))}
            for d in dead
        ],
    )
    want = {r.event_id: r.value.encode() for r in dlq_spec(batch).collect()}
    land(batch, dsn, bootstrap)
    got = {key.decode(): value for key, value in topic_records(bootstrap, names.DLQ_TOPIC, 3) if key}
    for key in want:  # fields one by one: the values are long
        assert json.loads(got[key]) == json.loads(want[key]), key
    assert got == want
    # worst case: each of 16 KiB of bytes becomes a 3-byte U+FFFD, plus base64 and the reason: ~75 KB
    assert len(got["kafka:clicks:0:7"]) < 100 * 1024
    value = json.loads(got["kafka:clicks:0:7"])
    assert value["payload_bytes"] == len(big) and value["payload_truncated"] is True
    assert value["payload_sha256"] == hashlib.sha256(big).hexdigest()
    assert base64.b64decode(value["payload_base64"]) == big[: 16 * 1024]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT dead_letter_id, reason, payload FROM streamfold.dead_letters").fetchall()
        stored = {r[0]: (r[1], r[2]) for r in rows}
    assert stored["kafka:clicks:0:7"] == ("record too large \ufffd " + "é" * 3000, big)
    assert stored["kafka:clicks:0:9"] == ("no payload", None)


def test_a_batch_without_a_streaming_query_id_is_refused(spark: SparkSession) -> None:
    """No ledger key falls back to a shared constant: two checkpoints would skip each other's batches."""
    with pytest.raises(RuntimeError, match="no query id"):
        sinks.query_id(spark.range(1))
