"""The sink's retry loop, its ledger and its two write paths on a real PostgreSQL (the local stack's
postgres service alone, in a temporary home: ~2 s), partitions landing on local Spark with the stack's
Kafka broker, plus the text and dead-letter rules. No mocks: outages are a real stopped server, errors
real psycopg exceptions."""

from __future__ import annotations

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
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from compose import local_stack
from db import schema
from pipeline import aggregates, retry, sinks
from streamfold import names


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
        local_stack.pg_bindir()
    except local_stack.StackError as error:
        pytest.skip(str(error))
    home = Path(tempfile.mkdtemp(prefix="streamfold-unit-pg-"))
    home.chmod(0o755)  # as root, the postgres OS user must reach its data folder
    try:
        local_stack.start_service(home, "postgres")
        yield home
    finally:
        local_stack.down(home)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture()
def dsn(pg_home: Path) -> str:
    env = local_stack.open_stack(pg_home).env()
    dsn = env["STREAMFOLD_PG_DSN"]
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS streamfold CASCADE")  # the version table with it
    schema.upgrade(dsn)
    return dsn


@pytest.fixture(scope="module")
def bootstrap(pg_home: Path) -> str:
    """The stack's Kafka broker in the same home (started once, for the tests that produce)."""
    local_stack.start_service(pg_home, "kafka")
    return local_stack.open_stack(pg_home).env()["STREAMFOLD_KAFKA_BOOTSTRAP"]


def topic_counts(bootstrap: str) -> dict[str, int]:
    """Records in user_clicks, users_changelog and clicks_dlq (end offsets: the topics are created empty
    per test)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unit"})
    try:
        return {
            topic: sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions
            )
            for topic in SINK_TOPICS
        }
    finally:
        consumer.close()


SINK_TOPICS = (names.USER_CLICKS_TOPIC, names.USERS_CHANGELOG_TOPIC, names.DLQ_TOPIC)


def fresh_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted = SINK_TOPICS
    existing = [t for t in wanted if t in admin.list_topics(timeout=10).topics]
    for future in admin.delete_topics(existing).values() if existing else []:
        future.result()
    deadline = time.monotonic() + 30
    while set(wanted) & set(admin.list_topics(timeout=10).topics) and time.monotonic() < deadline:
        time.sleep(0.2)
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in wanted]).values():
        future.result()


def rows(n: int, start: int = 0, url: str = "https://e.com/") -> pa.Table:
    """A partition of a batch as sinks.landing_columns hands it to Landing (STAGING_COLUMNS)."""
    ids = range(start, start + n)
    return pa.table(
        {
            "event_id": [f"kafka:clicks:0:{i}" for i in ids],
            "uid": [f"User_{i % 7}" for i in ids],
            "click_time_ms": pa.array([1_767_225_600_123 for _ in ids], pa.int64()),
            "click_url": [f"{url}{i % 3}" for i in ids],
            "device_type": ["mobile\u0000" for _ in ids],
            "click_location": [None for _ in ids],
            "clicks": pa.array([1 + i % 2 for i in ids], pa.int32()),
            "user_regionid": [f"Region_{i % 2}" for i in ids],
            "user_gender": ["MALE" for _ in ids],
            "user_interests": ['{"News","a \\"b\\""}' for _ in ids],
            "user_registertime": pa.array([1 for _ in ids], pa.int64()),
            "profile_valid_from_ms": pa.array([-1 for _ in ids], pa.int64()),
            "profile_complete": [i % 5 != 0 for i in ids],
        }
    )


def write_batch(sink: sinks.EnrichedClicksSink, batch_id: int, arrow: pa.Table) -> str | None:
    """What a partition's Landing does with its rows, here on the driver: the write path taken, or None
    when the ledger already had the batch."""
    table = sinks.to_table(arrow)
    totals = aggregates.batch_totals(table)
    path: list[str] = []
    claimed = sink.pg.commit(
        "q", batch_id, table.num_rows, lambda conn: path.append(sinks.write_rows(conn, table, arrow, totals))
    )
    return path[0] if claimed else None


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


def sink_for(dsn: str, retry_s: float = 30) -> sinks.EnrichedClicksSink:
    return sinks.EnrichedClicksSink("q", dsn, f"127.0.0.1:{closed_port()}", retry_s=retry_s)


def test_undelivered_records_raise_kafka_unavailable() -> None:
    """Only failed deliveries are reported: a broker that never answers must still fail the attempt."""
    producer = sinks.RecordProducer(f"127.0.0.1:{closed_port()}", {"message.timeout.ms": 1000})
    with pytest.raises(sinks.KafkaUnavailable, match="did not acknowledge every record"):
        producer.produce_all([(names.USER_CLICKS_TOPIC, b"k", b"v")] * 3)
    assert len(producer.failures) == 3


def test_ledger_makes_a_replayed_batch_a_no_op(dsn: str) -> None:
    sink = sink_for(dsn)
    assert write_batch(sink, 0, rows(100)) == "COPY"
    assert write_batch(sink, 0, rows(100)) is None  # the replay finds its id taken
    assert assert_totals_exact(dsn) == (100, 150)
    with psycopg.connect(dsn) as conn:
        assert conn.execute(
            "SELECT query, batch_id, partition_id, rows FROM streamfold.sink_batches"
        ).fetchall() == [("q", 0, 0, 100)]
        assert conn.execute(
            "SELECT DISTINCT profile_valid_from = '-infinity', user_interests, device_type, "
            "click_time = '2026-01-01 00:00:00.123+00' FROM streamfold.enriched_clicks"
        ).fetchall() == [(True, ["News", 'a "b"'], "mobile\ufffd", True)]
    assert incomplete_event_ids(dsn) == {f"kafka:clicks:0:{i}" for i in range(0, 100, 5)}


def incomplete_event_ids(dsn: str) -> set[str]:
    """The clicks stored with profile_complete = false (rows() marks every fifth)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT event_id FROM streamfold.enriched_clicks WHERE NOT profile_complete")
        return {r[0] for r in rows}


def test_clicks_already_there_take_the_deduplicating_path(dsn: str) -> None:
    sink = sink_for(dsn)
    write_batch(sink, 0, rows(100))
    # A topic reprocessed under a new checkpoint: a new batch id, half its clicks already there.
    assert write_batch(sink, 1, rows(100, start=50)) == "deduplicated"
    count, _ = assert_totals_exact(dsn)
    assert count == 150
    assert incomplete_event_ids(dsn) == {f"kafka:clicks:0:{i}" for i in range(0, 150, 5)}


def batch_frame(
    spark: SparkSession,
    clicks: pa.Table,
    rejects: int,
    partitions: int,
    changes: list[tuple[str, str, str | None, int]] = [],  # noqa: B006  # read only
) -> DataFrame:
    """A batch as EnrichedClicksSink hands it to Landing (sinks.landing_columns of the join's rows), with
    `rejects` dead letters and the (userid, op, regionid, valid_from_ms) profile changes `changes` as the
    join passes them through, in `partitions` partitions by uid. The clicks' interests are an array again,
    as the join emits them: ["News", 'a "b"']."""
    schema = clicks.schema.set(
        clicks.schema.get_field_index("click_location"), pa.field("click_location", pa.string())
    )
    schema = schema.set(
        schema.get_field_index("user_interests"), pa.field("user_interests", pa.list_(pa.string()))
    )
    schema = schema.append(pa.field("error", pa.string())).append(pa.field("source", pa.string()))
    schema = schema.append(pa.field("payload", pa.binary())).append(pa.field("change_op", pa.string()))
    valid = {name: clicks.column(name).to_pylist() for name in clicks.column_names}
    valid["user_interests"] = [["News", 'a "b"']] * clicks.num_rows
    valid |= {"error": [None] * clicks.num_rows, "source": ["kafka:clicks"] * clicks.num_rows}
    valid |= {"change_op": [None] * clicks.num_rows}
    changed = {name: [None] * len(changes) for name in schema.names}
    changed |= {
        "uid": [user for user, *_ in changes],
        "change_op": [op for _, op, *_ in changes],
        "user_regionid": [region for _, _, region, _ in changes],
        "profile_valid_from_ms": [valid_from for *_, valid_from in changes],
    }
    bad = {name: [None] * rejects for name in schema.names}
    bad |= {
        "event_id": [f"kafka:clicks:1:{i}" for i in range(rejects)],
        "uid": [f"User_{i % 7}" for i in range(rejects)],
        "error": ["not JSON"] * rejects,
        "source": ["kafka:clicks"] * rejects,
        "payload": [b"\x00\xff%d" % i for i in range(rejects)],
    }
    table = pa.concat_tables(
        [
            pa.Table.from_pydict(valid | {"payload": [None] * clicks.num_rows}, schema),
            pa.Table.from_pydict(changed, schema),
            pa.Table.from_pydict(bad, schema),
        ]
    ).combine_chunks()  # one batch: createDataFrame stops at an empty one
    frame = spark.createDataFrame(table).repartition(partitions, "uid")
    sinks.register_udfs(spark)
    return frame.select(*sinks.landing_columns())


def land(frame: DataFrame, landing: sinks.Landing) -> dict[int, tuple[bool, str]]:
    """Run Landing on every partition: {partition: (landed, path)} of the non-empty ones."""
    report = frame.mapInArrow(landing, sinks.LANDED_SCHEMA).toArrow()
    return {
        r["partition_id"]: (r["landed"], r["path"])
        for r in report.filter(pc.is_null(report.column("url"))).to_pylist()
        if r["path"] != "empty"
    }


def test_partitions_of_a_batch_land_once_each(spark: SparkSession, dsn: str, bootstrap: str) -> None:
    """A batch that failed after some partitions landed: its replay lands only the missing ones, a second
    replay nothing; another query's batch 0 is its own; totals stay exact throughout. Kafka gets every
    partition's records on every attempt (at least once)."""
    fresh_topics(bootstrap)
    frame = batch_frame(spark, rows(300), rejects=6, partitions=3)
    landing = sinks.Landing(dsn, bootstrap, "q:1", batch_id=0, retry_s=30)
    assert land(frame.where(F.spark_partition_id() != 2), landing) == {0: (True, "COPY"), 1: (True, "COPY")}
    assert_totals_exact(dsn)
    assert land(frame, landing) == {0: (False, "replay"), 1: (False, "replay"), 2: (True, "COPY")}
    assert land(frame, landing) == {p: (False, "replay") for p in range(3)}
    assert assert_totals_exact(dsn) == (300, 450)
    other = sinks.Landing(dsn, bootstrap, "r:2", batch_id=0, retry_s=30)
    assert set(land(batch_frame(spark, rows(30, start=1000), 0, 3), other).values()) == {(True, "COPY")}
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
    first = frame.where(F.spark_partition_id() != 2)
    clicks, rejects = first.where("error IS NULL").count(), first.where("error IS NOT NULL").count()
    assert 0 < clicks < 300 and 0 < rejects < 6
    assert topic_counts(bootstrap) == {
        names.USER_CLICKS_TOPIC: clicks + 300 + 300 + 30,
        names.USERS_CHANGELOG_TOPIC: 0,
        names.DLQ_TOPIC: rejects + 6 + 6,
    }


def test_profile_changes_go_to_users_changelog_in_order_and_nowhere_else(
    spark: SparkSession, dsn: str, bootstrap: str
) -> None:
    """CDC changes ride in the batch (the join passes them through): each becomes one users_changelog
    record, the profile as JSON (no valid_from for a snapshot row), a delete its tombstone, a user's
    records in their order; Postgres gets only clicks and dead letters."""
    fresh_topics(bootstrap)
    changes = [("User_1", "c", "a", 5), ("User_2", "r", "b", -(2**62)), ("User_1", "d", None, 9)]
    frame = batch_frame(spark, rows(20), rejects=2, partitions=1, changes=changes)
    landing = sinks.Landing(dsn, bootstrap, "q:1", batch_id=0, retry_s=30)
    report = frame.mapInArrow(landing, sinks.LANDED_SCHEMA).toArrow()
    summary = report.filter(pc.is_null(report.column("url"))).to_pylist()
    assert [(s["clicks"], s["changes"], s["dead"]) for s in summary] == [(20, 3, 2)]
    assert assert_totals_exact(dsn)[0] == 20
    assert topic_counts(bootstrap) == {
        names.USER_CLICKS_TOPIC: 20,
        names.USERS_CHANGELOG_TOPIC: 3,
        names.DLQ_TOPIC: 2,
    }
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unit-changelog"})
    try:
        consumer.assign(
            [
                TopicPartition(names.USERS_CHANGELOG_TOPIC, p, 0)
                for p in consumer.list_topics(names.USERS_CHANGELOG_TOPIC, timeout=10)
                .topics[names.USERS_CHANGELOG_TOPIC]
                .partitions
            ]
        )
        got: list[tuple[str, str | None]] = []
        deadline = time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and not message.error():
                value = message.value()
                got.append((message.key().decode(), value.decode() if value is not None else None))
    finally:
        consumer.close()
    assert [v for k, v in got if k == "User_1"] == ['{"userid":"User_1","regionid":"a","valid_from":5}', None]
    assert [v for k, v in got if k == "User_2"] == ['{"userid":"User_2","regionid":"b"}']


def test_a_url_longer_than_a_btree_key_is_counted(dsn: str) -> None:
    sink = sink_for(dsn)
    long_url = "https://e.com/" + "x" * 20_000
    write_batch(sink, 0, rows(4, url=long_url))
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


def test_a_batch_survives_a_postgres_outage(dsn: str, pg_home: Path, caplog) -> None:
    sink = sink_for(dsn, retry_s=120)
    write_batch(sink, 0, rows(10))  # the sink holds a live connection
    local_stack.stop_service(pg_home, "postgres")

    def come_back() -> None:
        time.sleep(4)
        local_stack.start_service(pg_home, "postgres")

    restarter = threading.Thread(target=come_back)
    restarter.start()
    began = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=retry.__name__):
        assert write_batch(sink, 1, rows(10, start=10)) == "COPY"
    restarter.join()
    assert time.monotonic() - began >= 3
    assert any(r.getMessage().startswith("Postgres unavailable (") for r in caplog.records)
    assert assert_totals_exact(dsn)[0] == 20


# --- text and dead letters on Spark -------------------------------------------------------------------


def test_nul_and_invalid_utf8_become_replacement_characters() -> None:
    invalid = pa.Array.from_buffers(
        pa.string(),
        2,
        [
            None,
            pa.py_buffer(b"\x00\x00\x00\x00\x03\x00\x00\x00\x05\x00\x00\x00"),
            pa.py_buffer(b"a\xffbc\x00"),
        ],
    )
    assert sinks.postgres_text(pa.chunked_array([invalid])).to_pylist() == ["a\ufffdb", "c\ufffd"]
    assert sinks.postgres_text(pa.chunked_array([["ok", None]])).to_pylist() == ["ok", None]


def test_clean_text_in_spark(spark: SparkSession) -> None:
    frame = spark.createDataFrame([("a\u0000b",)], "s string").withColumn(
        "bad", F.unhex(F.lit("61FF62")).cast("string")
    )
    row = frame.select(
        sinks.clean_text(F.col("s")).alias("s"), sinks.clean_text(F.col("bad")).alias("b")
    ).first()
    assert (row.s, row.b) == ("a\ufffdb", "a\ufffdb")


def test_pg_array_literal_round_trips_through_postgres(spark: SparkSession, dsn: str) -> None:
    interests = [
        ["News", "Movies"],
        ['say "hi"', "back\\slash", "\\", '"', "a,b", "{braces}", " spaced ", "NULL", "", "ünï"],
        [],
        None,
    ]
    frame = spark.createDataFrame([(i, v) for i, v in enumerate(interests)], "i int, interests array<string>")
    sinks.register_udfs(spark)
    literals = [
        r.lit
        for r in frame.select("i", sinks.pg_array_literal(F.col("interests")).alias("lit"))
        .sort("i")
        .collect()
    ]
    with psycopg.connect(dsn) as conn:
        parsed = [conn.execute("SELECT %s::text[]", (lit,)).fetchone()[0] for lit in literals]
    assert parsed == interests


def to_json_value() -> Column:
    """The user_clicks value as Spark's to_json wrote it before the Java UDF (sinks.enriched_value): the
    spec the UDF is held to, byte for byte."""

    def field(name: str) -> Column:
        col = F.col(name)
        if name == "profile_valid_from_ms":
            col = F.when(col < 0, F.lit(None)).otherwise(col)
        return col.alias(name.removesuffix("_ms"))

    return F.to_json(F.struct(*[field(name) for name in sinks.STAGING_COLUMNS])).cast("binary")


def random_text(rng: random.Random) -> str | None:
    alphabet = '\x00\x01\x1f\x7f\n\t\r\b\f"\\/ aZ9é€\u2028\ufffd😀\U0010ffff'
    if rng.random() < 0.15:
        return None
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def test_user_clicks_values_are_what_to_json_wrote(spark: SparkSession) -> None:
    """2,000 seeded rows (control characters, quotes, non-ASCII, astral and invalid UTF-8 text, nulls
    anywhere, empty and null arrays and elements, extreme numbers): the Java UDF's bytes equal to_json's."""
    rng = random.Random(20261125)
    big = [-(2**63), -1, 0, 1, 2**31 - 1, 2**63 - 1, -(2**62)]

    def number() -> int | None:
        return None if rng.random() < 0.1 else rng.choice([*big, rng.randint(-(10**15), 10**15)])

    rows = [
        (
            random_text(rng),
            random_text(rng),
            number(),
            bytes(rng.randrange(256) for _ in range(rng.randint(0, 6))),  # invalid UTF-8 as text, below
            random_text(rng),
            random_text(rng),
            None if rng.random() < 0.1 else rng.choice([1, 2, 2**31 - 1, -(2**31)]),
            random_text(rng),
            random_text(rng),
            None if rng.random() < 0.15 else [random_text(rng) for _ in range(rng.randint(0, 4))],
            number(),
            number(),
            rng.choice([True, False, None]),
        )
        for _ in range(2_000)
    ]
    kinds = ("string", "string", "bigint", "binary", "string", "string", "int", "string", "string")
    kinds += ("array<string>", "bigint", "bigint", "boolean")
    schema = ", ".join(f"{name} {kind}" for name, kind in zip(sinks.STAGING_COLUMNS, kinds, strict=True))
    frame = spark.createDataFrame(rows, schema).withColumn("click_url", F.col("click_url").cast("string"))
    sinks.register_udfs(spark)
    got = frame.select(to_json_value().alias("want"), sinks.enriched_value().alias("got")).collect()
    differ = [(r.want, r.got) for r in got if r.want != r.got]
    assert not differ, f"{len(differ)} of {len(got)} differ, e.g. {differ[:2]}"
    assert len({bytes(r.got) for r in got}) > 1_900  # the rows are varied, not a few repeated


def test_dlq_records_are_bounded_and_state_the_full_payload(spark: SparkSession) -> None:
    import base64  # noqa: PLC0415
    import hashlib  # noqa: PLC0415
    import json  # noqa: PLC0415

    big = b'{"url": "' + b"\x00" * 100 + b"x" * (1024 * 1024) + b'"}'
    frame = spark.createDataFrame(
        [("kafka:clicks:0:7", "kafka:clicks", "record too large", bytearray(big))],
        "dead_letter_id string, source string, reason string, payload binary",
    )
    record = dlq(frame).collect()[0]
    assert len(record.value.encode()) < 64 * 1024
    value = json.loads(record.value)
    assert value["payload_bytes"] == len(big)
    assert value["payload_sha256"] == hashlib.sha256(big).hexdigest()
    assert value["payload_truncated"] is True
    assert base64.b64decode(value["payload_base64"]) == big[: sinks.DLQ_PAYLOAD_BYTES]
    assert "\u0000" not in value["payload"]
    small = spark.createDataFrame(
        [("id", "s", "r", bytearray(b"abc"))],
        "dead_letter_id string, source string, reason string, payload binary",
    )
    assert json.loads(dlq(small).collect()[0].value)["payload_truncated"] is False


def dlq(dead_letters: DataFrame) -> DataFrame:
    columns = (F.col(name) for name in ("dead_letter_id", "source", "reason", "payload"))
    return dead_letters.select(sinks.dlq_value(*columns).alias("value"))


def test_to_table_encodes_times_for_timestamptz() -> None:
    staged = rows(3).set_column(
        11, "profile_valid_from_ms", pa.array([-1, None, 1_767_225_600_000], pa.int64())
    )
    table = sinks.to_table(staged)
    assert table.column_names == list(sinks.TABLE_COLUMNS)
    assert table.column("click_time").to_pylist() == ["2026-01-01T00:00:00.123Z"] * 3
    assert table.column("profile_valid_from").to_pylist() == ["-infinity", None, "2026-01-01T00:00:00.000Z"]


def test_dead_letters_keep_the_full_payload_and_clean_text(dsn: str) -> None:
    rejects = pa.table(
        {
            "event_id": ["kafka:clicks:0:9"],
            "error": ["bad \u0000 field"],
            "source": ["kafka:clicks"],
            "payload": pa.array([b"\x00\xff" * 600_000], pa.binary()),
        }
    )
    dead = sinks.dead_letter_arrow(rejects)
    with psycopg.connect(dsn) as conn, conn.transaction():
        sinks.copy_dead_letters(conn, dead)
    with psycopg.connect(dsn) as conn:
        reason, payload = conn.execute("SELECT reason, payload FROM streamfold.dead_letters").fetchone()
    assert reason == "bad \ufffd field"
    assert payload == b"\x00\xff" * 600_000


def test_a_batch_without_a_streaming_query_id_is_refused(spark: SparkSession) -> None:
    """No ledger key falls back to a shared constant: two checkpoints would skip each other's batches."""
    with pytest.raises(RuntimeError, match="no query id"):
        sinks.query_id(spark.range(1))
