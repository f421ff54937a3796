"""Rescaling by reprocessing, on the 2-worker cluster: a version with twice the join's state partitions
(`spark.sql.shuffle.partitions`, fixed per checkpoint) rebuilds the outputs of a user's own pipeline
exactly, row by row against the oracle (tests/support/own_pipeline.py), on both workers."""

from __future__ import annotations

import json
import random
import time

import pytest

from common import plan, topics
from common import versions as v
from tests.support import cluster
from tests.support import own_pipeline as own
from tests.support import pipeline as sp

pytestmark = pytest.mark.cluster

LIVE_PARTITIONS, RESCALED = 4, 8


@pytest.fixture(scope="module")
def views(streamfold_setup, tmp_path_factory):
    made = own.create(streamfold_setup.pg_dsn, tmp_path_factory.mktemp("rescale"))
    yield made
    made.streamfold("drop-version", "big")  # stops its job, removes its outputs
    own.drop(made, streamfold_setup.connect_url)


def test_a_version_with_twice_the_state_partitions_is_exact(views, streamfold_setup, home):
    bootstrap, p = streamfold_setup.kafka_bootstrap, views.pipeline
    assert p.events.kafka_topic
    rng = random.Random(4)
    with views.connect() as pg:
        for i in range(1, 41):
            own.insert_customer(pg, p, i, rng.choice(["NO", "SE", "DK"]), tier=rng.choice(["gold", ""]))
    time.sleep(1.5)
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for _ in range(2000):
        k = rng.randrange(1, 45)  # some never customers
        producer.produce(p.events.kafka_topic, key=str(k), value=own.view(k, int(time.time() * 1000)))
    assert producer.flush(30) == 0
    views.streamfold("run", "--source", "kafka", "--once")

    before = cluster.app_ids(home)
    views.streamfold("reprocess", "--version", "big", "--conf", f"spark.sql.shuffle.partitions={RESCALED}")
    big = v.versioned(p, "big")
    versions, cdc_dead = own.history(bootstrap, p)
    want = own.expected(views.inputs("kafka", bootstrap), versions, cdc_dead, big)

    def complete() -> bool:
        with views.connect() as conn:
            (n,) = conn.execute(f"SELECT count(*) FROM {plan.of(big).enriched_table}").fetchone()
        return n == len(want.rows)

    sp.wait_until(complete, 600, "the rescaled version to land every event")
    cluster.ran_on_every_worker(home, before, "streamfold-kafka")
    with views.connect() as conn:
        own.assert_matches(conn, want, big)
        own.assert_matches(conn, own.expected(views.inputs("kafka", bootstrap), versions, cdc_dead, p), p)
    checkpoints = views.home / "checkpoints"
    assert sp.state_partitions(checkpoints / v.query_name(p)) == set(range(LIVE_PARTITIONS))
    assert sp.state_partitions(checkpoints / v.query_name(big)) == set(range(RESCALED))
    listed = {row["name"]: row for row in json.loads(views.streamfold("versions", "--json").stdout)}
    assert listed["big"]["conf"] == {"spark.sql.shuffle.partitions": str(RESCALED)}
