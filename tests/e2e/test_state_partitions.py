"""A new checkpoint gets as many state partitions as Spark has cores (at least 4), so a machine or a
cluster with more cores than 4 runs the join on all of them; a checkpoint keeps its number on a master
with other cores. The sink stays exact on both runs, row by row against the oracle."""

from __future__ import annotations

import json
import random
import time
import uuid

import psycopg
import pytest

from common import topics
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

CORES = 6  # more than the default's 4, on a local master of that many threads


def send_clicks(bootstrap: str, topic: str, users: list[str], count: int, rng: random.Random) -> None:
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for i in range(count):
        user = rng.choice(users)
        body = {"userid": user, "url": f"/p/{i % 7}", "device_id": "d", "ip": "10.0.0.1",
                "event_time": int(time.time() * 1000)}  # fmt: skip
        producer.produce(topic, key=user, value=json.dumps(body).encode())
    assert producer.flush(30) == 0


def assert_exact(sandbox: sp.Sandbox, bootstrap: str) -> None:
    want = sp.expected(
        sandbox.inputs("kafka", bootstrap), sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap)
    )
    with sandbox.connect() as conn:
        sp.assert_matches(conn, want)


def test_a_new_checkpoint_takes_the_cores_and_keeps_them(streamfold_setup, tmp_path_factory):
    bootstrap = streamfold_setup.kafka_bootstrap
    sandbox = sp.make_sandbox(
        streamfold_setup.pg_dsn, "state_partitions", tmp_path_factory.mktemp("partitions")
    )
    rng = random.Random(6)
    users = [f"cores-{uuid.uuid4().hex[:6]}-{i}" for i in range(40)]
    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as pg:
        pg.cursor().executemany(
            "INSERT INTO public.users (userid, regionid) VALUES (%s, %s)",
            [(u, rng.choice(["north", "south", "east"])) for u in users],
        )
    time.sleep(1.5)  # the changes reach the CDC topic before the clicks that follow them
    send_clicks(bootstrap, sandbox.clicks_topic, [*users, "cores-nobody"], 600, rng)
    checkpoint = sandbox.home / "checkpoints" / "clicks-kafka"

    first = sandbox.run_once("kafka", conf=(f"spark.master=local[{CORES}]",))
    assert f"a new checkpoint with {CORES} state partitions" in first.stdout + first.stderr
    assert sp.state_partitions(checkpoint) == set(range(CORES))
    assert_exact(sandbox, bootstrap)

    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as pg:
        pg.execute("UPDATE public.users SET regionid = 'west' WHERE userid = ANY(%s)", (users[:10],))
    time.sleep(1.5)
    send_clicks(bootstrap, sandbox.clicks_topic, users, 600, rng)
    second = sandbox.run_once("kafka", conf=("spark.master=local[2]",))
    assert "a new checkpoint" not in second.stdout + second.stderr
    assert sp.state_partitions(checkpoint) == set(range(CORES))
    assert_exact(sandbox, bootstrap)
