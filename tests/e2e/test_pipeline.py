"""The whole pipeline on the real stack: Debezium -> Kafka -> Spark temporal join -> Postgres + Kafka.

Runs in order on one sink sandbox ("kafka"): the story of a user moving region, then totals against
an independent computation, then PII and Kafka outputs.
Crashes: test_crash.py. Kinesis as the click source: test_kinesis_pipeline.py.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
import time
import uuid

import psycopg
import pytest

from common import kinesis, names, topics
from tests.e2e.conftest import SNAPSHOT_USERS
from tests.support import pipeline as sp
from tests.support.kafka import read_all

pytestmark = pytest.mark.e2e

PII_NAME, PII_EMAIL, PII_PHONE = "Alice Secretname", "alice.secret@example.com", "650-SECRET-1"


def now_ms() -> int:
    return int(time.time() * 1000)


def produce(bootstrap: str, topic: str, records: list[tuple[str, bytes]]) -> None:
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def click(user: str, t: int, url: str = "/home", n: int = 1) -> tuple[str, bytes]:
    body = {"userid": user, "url": url, "device_id": "mobile", "ip": "10.0.0.1", "event_time": t, "clicks": n}
    return user, json.dumps(body).encode()


@pytest.fixture(scope="module")
def kafka_sandbox(streamfold_setup, tmp_path_factory):
    return sp.make_sandbox(streamfold_setup.pg_dsn, "sink_kafka", tmp_path_factory.mktemp("job-kafka"))


@pytest.fixture(scope="module")
def story(streamfold_setup, kafka_sandbox):
    """Alice moves from asia to europe between two clicks; her clicks arrive in the wrong order."""
    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as pg:
        return tell_story(pg, streamfold_setup, kafka_sandbox)


def tell_story(pg, streamfold_setup, sandbox, source: str = "kafka"):
    """The story's profile changes and clicks (through `source`: kafka or kinesis), then `run --once`."""
    alice, ghost = f"alice-{uuid.uuid4().hex[:6]}", f"ghost-{uuid.uuid4().hex[:6]}"
    poisoned = f"poisoned-{uuid.uuid4().hex[:6]}"
    before_alice = now_ms() - 5_000
    odd = f"odd-{uuid.uuid4().hex[:6]}"  # a regionid of 10,000 characters: the change is a dead letter
    pg.execute("INSERT INTO public.users (userid, regionid) VALUES (%s, %s)", (odd, UNINDEXABLE))
    big = f"big-{uuid.uuid4().hex[:6]}"  # a profile of ~1 MB: its user_clicks record passes 1 MB
    pg.execute(
        "INSERT INTO public.users (userid, regionid, interests) VALUES (%s, 'bigregion', %s)",
        (big, BIG_INTERESTS),
    )
    pg.execute(
        "INSERT INTO public.users (userid, name, email, regionid, gender, interests, contactinfo, "
        "registertime) VALUES (%s, %s, %s, 'asia', 'FEMALE', ARRAY['News','Movies'], %s, 1665780360439)",
        (alice, PII_NAME, PII_EMAIL, json.dumps({"phone": PII_PHONE})),
    )
    time.sleep(1.5)
    in_asia = now_ms()
    time.sleep(1.5)
    pg.execute("UPDATE public.users SET regionid = 'europe' WHERE userid = %s", (alice,))
    time.sleep(1.5)
    in_europe = now_ms()
    time.sleep(1.5)  # the delete's commit time must be later than the europe click, not the same ms
    pg.execute("DELETE FROM public.users WHERE userid = %s", (alice,))
    time.sleep(1.5)
    after_delete = now_ms()
    records = [
        click(alice, in_europe, "/europe", 2),  # newest first: arrival order must not matter
        click(alice, after_delete, "/gone"),
        click(alice, in_asia, "/asia", 3),
        click(alice, before_alice, "/early"),
        click(ghost, in_asia, "/ghost"),
        click(SNAPSHOT_USERS[0][0], 978_307_200_000, "/y2k"),  # 2001: snapshot rows are valid from the start
        ("bad", b"this is not json"),
        ("bad", json.dumps({"userid": alice, "url": "/x"}).encode()),
        (
            "bad",
            json.dumps({"userid": alice, "url": "/x", "device_id": "d", "ip": "i", "event_time": 5}).encode(),
        ),
        ("bad", b'{"userid": "big", "pad": "' + b"x" * 70_000 + b'"}'),
        *poison_records(poisoned, in_asia),
        click(big, in_asia, LONG_URL * 3),  # 60 KB, under the 64 KiB record limit
        click(odd, in_asia, "/odd"),
    ]
    forged = f"forged-{uuid.uuid4().hex[:6]}"
    produce_cdc(streamfold_setup.kafka_bootstrap, forged_cdc_records(forged))
    records.append(click(forged, in_asia, "/forged"))
    deliver(streamfold_setup.kafka_bootstrap, sandbox, source, records)
    result = sandbox.run_once(source)
    return {
        "alice": alice,
        "ghost": ghost,
        "poisoned": poisoned,
        "forged": forged,
        "big": big,
        "odd": odd,
        "log": result.stderr,
    }


def deliver(bootstrap: str, sandbox: sp.Sandbox, source: str, records: list[tuple[str, bytes]]) -> None:
    if source == "kinesis":
        # A Kinesis partition key holds at most 256 characters (the 10,000-character userid's click).
        keyed = [(key[:256], value) for key, value in records]
        kinesis.put_records(kinesis.client(), sandbox.stream(), keyed)
    else:
        produce(bootstrap, sandbox.clicks_topic, records)


def produce_cdc(bootstrap: str, records: list[tuple[str, bytes | None, bytes]]) -> None:
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for topic, key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def forged_cdc_records(user: str) -> list[tuple[str, bytes | None, bytes]]:
    """CDC records no Debezium writes, with commit times a Spark timestamp cannot hold: a ts_ms of 9e18 once
    overflowed the join's watermark column and failed every batch after it."""
    change = {
        "before": None,
        "after": {"userid": user, "regionid": "forged", "interests": ["News"], "registertime": 1},
        "source": {"schema": "public", "table": "users", "ts_ms": 9 * 10**18, "lsn": 1},
        "op": "u",
    }
    return [
        (names.CDC_USERS_TOPIC, json.dumps({"userid": user}).encode(), json.dumps(change).encode()),
        (names.HEARTBEAT_TOPIC, user.encode(), json.dumps({"ts_ms": -(2**63)}).encode()),
    ]


BIG_INTERESTS = ["i" * 10_200] * 100  # a change event just under cdc_fold.MAX_CHANGE_BYTES
LONG_URL = "/" + "u" * 20_000  # under the 64 KiB record limit, over a b-tree index row
# 10,000 characters Postgres cannot compress into an index row (~2.7 KB): as a userid or regionid, once a
# failed COPY at every restart; now over common.limits.MAX_KEY_BYTES, so a dead letter.
UNINDEXABLE = "".join(random.Random(7).choices(string.ascii_letters + string.digits, k=10_000))


def poison_records(user: str, t: int) -> list[tuple[str, bytes]]:
    """Records that once stopped the job for good; each must join or be dead-lettered, and the job go on."""
    fields = f'"userid": "{user}", "device_id": "d", "ip": "i", "event_time": {t}'.encode()
    return [
        click(user, t, "/nul\u0000here"),  # NUL: joined, stored as U+FFFD (Postgres text holds no NUL)
        click(user, t, LONG_URL),  # joined; its url x region total is keyed by md5(url)
        (user, b'{"pad": "' + b"x" * 990_000 + b'"}'),  # ~1 MB: dead letter, clicks_dlq record bounded
        (user, b'{"deep": ' + b"[" * 5_000 + b"]" * 5_000 + b"}"),
        (user, b'{"url": "/n", ' + fields + b', "clicks": ' + b"9" * 5_000 + b"}"),
        (user, b'{"url": "/\\ud800", ' + fields + b"}"),  # a lone surrogate escape
        (user, b'\xff\xfe{"url": "/utf", ' + fields + b"}"),  # not UTF-8
        click(user + UNINDEXABLE, t, "/long-userid"),  # over a B-tree row: a dead letter, not a failed COPY
    ]


def test_each_click_joins_the_profile_valid_when_it_happened(story, kafka_sandbox):
    with kafka_sandbox.connect() as conn:
        rows = conn.execute(
            f"SELECT click_url, user_regionid, user_gender, user_interests, clicks, profile_valid_from "
            f"FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s ORDER BY click_time",
            (story["alice"],),
        ).fetchall()
    assert [(r[0], r[1]) for r in rows] == [
        ("/early", "UNKNOWN"),  # before her first version
        ("/asia", "asia"),
        ("/europe", "europe"),
        ("/gone", "UNKNOWN"),  # the delete ended validity
    ]
    early, asia, europe, gone = rows
    assert asia[2:5] == ("FEMALE", ["News", "Movies"], 3) and asia[5] is not None
    assert europe[4] == 2 and europe[5] > asia[5]
    assert early[2:4] == (None, None) and early[5] is None and gone[5] is None


def test_unknown_users_count_as_unknown_and_snapshot_rows_join_from_the_start(story, kafka_sandbox):
    with kafka_sandbox.connect() as conn:
        ghost = conn.execute(
            f"SELECT user_regionid, user_gender FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s",
            (story["ghost"],),
        ).fetchall()
        y2k = conn.execute(
            f"SELECT user_regionid, profile_valid_from::text FROM {names.ENRICHED_CLICKS_TABLE} "
            "WHERE click_url = '/y2k'"
        ).fetchall()
    assert ghost == [("UNKNOWN", None)]
    assert y2k == [(SNAPSHOT_USERS[0][1], "-infinity")]


def dead_letter_reasons(conn: psycopg.Connection, where: str, params: tuple[object, ...]) -> list[str]:
    query = f"SELECT reason FROM {names.DEAD_LETTERS_TABLE} WHERE {where}"
    return [r[0] for r in conn.execute(query, params)]


def urls_and_regions(conn: psycopg.Connection, user: str) -> list[tuple[str, str]]:
    return conn.execute(
        f"SELECT click_url, user_regionid FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s", (user,)
    ).fetchall()


def test_malformed_records_reach_the_dead_letters_with_a_reason(story, kafka_sandbox, streamfold_setup):
    with kafka_sandbox.connect() as conn:
        reasons = [r[0] for r in conn.execute(f"SELECT reason FROM {names.DEAD_LETTERS_TABLE}")]
    assert any("not JSON" in r for r in reasons)
    assert any("device_id must be" in r for r in reasons)
    assert any("outside the plausible range" in r for r in reasons)
    assert any("exceeds" in r for r in reasons)
    dlq = read_all(streamfold_setup.kafka_bootstrap, names.DLQ_TOPIC)
    assert any(m.value["payload"] == "this is not json" for m in dlq)
    assert all(m.value["reason"] for m in dlq)


def test_poison_records_join_or_reach_the_dead_letters_and_the_job_goes_on(
    story, kafka_sandbox, streamfold_setup
):
    user = story["poisoned"]
    with kafka_sandbox.connect() as conn:
        joined = conn.execute(
            f"SELECT click_url FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s ORDER BY length(click_url)",
            (user,),
        ).fetchall()
        long_total = conn.execute(
            f"SELECT click_count FROM {names.URL_REGION_TABLE} WHERE url = %s", (LONG_URL,)
        ).fetchall()
        reasons = dead_letter_reasons(
            conn,
            "position(%s IN payload) > 0 OR payload = ANY(%s)",
            (user.encode(), [v for _, v in poison_records(user, 0)[2:4]]),
        )
    assert joined == [("/nul\ufffdhere",), (LONG_URL,)]
    assert long_total == [(1,)]
    for reason in (
        "exceeds the 65536-byte limit",
        f"userid of {len(user) + 10_000} bytes exceeds the 1024-byte limit",
        "nesting deeper than 1000",
        "lone UTF-16 surrogate",
        "invalid UTF-8",
    ):
        assert any(reason in r for r in reasons), (reason, reasons)
    assert len(reasons) == 6
    dlq = [
        m for m in read_all(streamfold_setup.kafka_bootstrap, names.DLQ_TOPIC) if m.key and "kafka:" in m.key
    ]
    megabyte = hashlib.sha256(poison_records(user, 0)[2][1]).hexdigest()
    big = [m.value for m in dlq if m.value["payload_sha256"] == megabyte]
    assert len(big) == 1 and big[0]["payload_truncated"] and len(big[0]["payload"]) == 16 * 1024
    assert max(len(m.raw_value) for m in dlq) < 64 * 1024


def test_forged_cdc_commit_times_reach_the_dead_letters_and_the_job_goes_on(story, kafka_sandbox):
    user = story["forged"]
    with kafka_sandbox.connect() as conn:
        reasons = dead_letter_reasons(
            conn, "payload = ANY(%s)", ([value for _, _, value in forged_cdc_records(user)],)
        )
        joined = urls_and_regions(conn, user)
    assert sorted(reasons) == [
        f"heartbeat.ts_ms {-(2**63)} is outside 1970-01-01..9999-12-31 (a commit time in ms)",
        f"source.ts_ms {9 * 10**18} is outside 1970-01-01..9999-12-31 (a commit time in ms)",
    ]
    assert joined == [("/forged", names.UNKNOWN_REGION)]  # the forged version never became a profile


def test_a_1_mb_profile_with_a_60_kb_click_reaches_postgres_and_user_clicks(
    story, kafka_sandbox, streamfold_setup
):
    """Over the broker's default 1 MB together: once Kafka refused the record at every retry and the batch
    never landed (the topic and the job's producer now take names.OUTPUT_RECORD_MAX_BYTES)."""
    user = story["big"]
    with kafka_sandbox.connect() as conn:
        joined = conn.execute(
            f"SELECT user_regionid, cardinality(user_interests), length(click_url) "
            f"FROM {names.ENRICHED_CLICKS_TABLE} WHERE uid = %s",
            (user,),
        ).fetchall()
    assert joined == [("bigregion", 100, 60_003)]
    records = [
        m for m in read_all(streamfold_setup.kafka_bootstrap, names.USER_CLICKS_TOPIC) if m.key == user
    ]
    assert records and all(len(m.raw_value) > 1024 * 1024 for m in records)
    assert {(m.value["user_regionid"], tuple(m.value["user_interests"])) for m in records} == {
        ("bigregion", tuple(BIG_INTERESTS))
    }


def test_a_profile_whose_regionid_postgres_cannot_index_is_a_dead_letter(story, kafka_sandbox):
    user = story["odd"]
    with kafka_sandbox.connect() as conn:
        reasons = dead_letter_reasons(conn, "position(%s IN payload) > 0", (user.encode(),))
        joined = urls_and_regions(conn, user)
    assert reasons == ["after.regionid of 10000 bytes exceeds the 1024-byte limit"]
    assert joined == [("/odd", names.UNKNOWN_REGION)]  # no version of the user was ever valid


def test_totals_equal_an_independent_computation_over_the_inputs(story, kafka_sandbox, streamfold_setup):
    bootstrap = streamfold_setup.kafka_bootstrap
    want = sp.expected(
        kafka_sandbox.inputs("kafka", bootstrap),
        sp.profile_history(bootstrap),
        sp.cdc_dead_letters(bootstrap),
    )
    with kafka_sandbox.connect() as conn:
        sp.assert_matches(conn, want)


def test_no_pii_in_any_output_table_or_topic(story, kafka_sandbox, streamfold_setup):
    with kafka_sandbox.connect() as conn:
        columns = {
            r[0]
            for r in conn.execute(
                # streamfold.pipelines names each pipeline file (its `name`), not a person.
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name <> 'pipelines'",
                (names.SINK_SCHEMA,),
            )
        }
        dump = conn.execute(
            f"SELECT string_agg(t::text, ' ') FROM {names.ENRICHED_CLICKS_TABLE} t WHERE uid = %s",
            (story["alice"],),
        ).fetchone()[0]
    assert not {"name", "email", "contactinfo"} & columns
    topics = [
        names.CDC_USERS_TOPIC,
        names.USERS_CHANGELOG_TOPIC,
        names.USER_CLICKS_TOPIC,
        names.CLICKS_PER_REGION_TOPIC,
        names.URL_REGION_TOPIC,
        names.DLQ_TOPIC,
    ]
    texts = [dump] + [str(m.raw_value) for t in topics for m in read_all(streamfold_setup.kafka_bootstrap, t)]
    for secret in (PII_NAME, PII_EMAIL, PII_PHONE):
        assert not any(secret in text for text in texts), secret


def test_kafka_outputs(story, kafka_sandbox, streamfold_setup):
    bootstrap, alice = streamfold_setup.kafka_bootstrap, story["alice"]
    changelog = [m for m in read_all(bootstrap, names.USERS_CHANGELOG_TOPIC) if m.key == alice]
    assert [m.value and m.value["regionid"] for m in changelog] == ["asia", "europe", None]  # tombstone last
    enriched = [m.value for m in read_all(bootstrap, names.USER_CLICKS_TOPIC) if m.key == alice]
    assert sorted(
        (e["click_url"], e["user_regionid"]) for e in {e["event_id"]: e for e in enriched}.values()
    ) == [
        ("/asia", "asia"),
        ("/early", "UNKNOWN"),
        ("/europe", "europe"),
        ("/gone", "UNKNOWN"),
    ]
    with kafka_sandbox.connect() as conn:
        totals = dict(conn.execute(f"SELECT region, clicks FROM {names.CLICKS_PER_REGION_TABLE}").fetchall())
    latest = {m.key: m.value["clicks"] for m in read_all(bootstrap, names.CLICKS_PER_REGION_TOPIC)}
    assert {r: latest[r] for r in totals} == totals  # the compacted changelog's latest value per region
