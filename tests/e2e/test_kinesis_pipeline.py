"""`run --source kinesis` gives exactly the results of `run --source kafka` on the same clicks."""

from __future__ import annotations

import json
import time

import pytest

from common import kinesis, names, topics
from streamfold.generate import ClickSpec, clicks
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

MARKER = "eq-marker"


def totals(sandbox: sp.Sandbox) -> tuple[list, list]:
    with sandbox.connect() as conn:
        per_region = conn.execute(
            f"SELECT user_regionid, count(*), sum(clicks) FROM {names.ENRICHED_CLICKS_TABLE} "
            "WHERE uid LIKE 'eq-%' GROUP BY 1 ORDER BY 1"
        ).fetchall()
        dead = conn.execute(
            f"SELECT reason FROM {names.DEAD_LETTERS_TABLE} "
            "WHERE position(%s::bytea in payload) > 0 ORDER BY 1",
            (MARKER.encode(),),
        ).fetchall()
    return per_region, dead


def test_kinesis_and_kafka_give_the_same_postgres_totals(pg, streamfold_setup, tmp_path_factory):
    users = [f"eq-{i}" for i in range(20)]
    pg.cursor().executemany(
        "INSERT INTO public.users (userid, regionid) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        [(u, f"Region_{i % 3}") for i, u in enumerate(users)],
    )
    records = []
    for part in range(2):
        for c in clicks(ClickSpec(count=500, users=len(users), seed=part)):
            user = users[int(c["userid"].split("_")[1]) - 1]
            records.append((user, json.dumps({**c, "userid": user}).encode()))
        records.append(("eq-bad", f'{{"userid": "eq-1", "{MARKER}": '.encode()))
        if part == 0:  # half the users move between the two halves of the clicks
            time.sleep(1)
            pg.execute("UPDATE public.users SET regionid = 'moved' WHERE userid = ANY(%s)", (users[::2],))
            time.sleep(1)
    via_kafka = sp.make_sandbox(streamfold_setup.pg_dsn, "sink_eq_kafka", tmp_path_factory.mktemp("eq-kafka"))
    via_kinesis = sp.make_sandbox(
        streamfold_setup.pg_dsn, "sink_eq_kinesis", tmp_path_factory.mktemp("eq-kin")
    )
    producer = topics.producer(streamfold_setup.kafka_bootstrap)
    for key, value in records:
        producer.produce(via_kafka.clicks_topic, key=key, value=value)
    assert producer.flush(30) == 0
    kinesis.put_records(kinesis.client(), via_kinesis.stream(), records)
    via_kafka.run_once("kafka")
    via_kinesis.run_once("kinesis")

    kafka_totals, kinesis_totals = totals(via_kafka), totals(via_kinesis)
    assert kafka_totals == kinesis_totals
    per_region, dead = kinesis_totals
    assert sum(n for _, n, _ in per_region) == 1000 and len(dead) == 2
    assert "moved" in {region for region, _, _ in per_region}
    # And everything the Kinesis job wrote matches the independent computation over the stream.
    want = sp.expected(
        via_kinesis.inputs("kinesis", streamfold_setup.kafka_bootstrap),
        sp.profile_history(streamfold_setup.kafka_bootstrap),
        sp.cdc_dead_letters(streamfold_setup.kafka_bootstrap),
    )
    with via_kinesis.connect() as conn:
        sp.assert_matches(conn, want)
