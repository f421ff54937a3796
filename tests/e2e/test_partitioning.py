"""Every keyed record in the stack's topics sits where a Java producer would put it (murmur2(key) %
partitions), so Java applications (Kafka Streams, ksqlDB, Flink) can join streamfold's topics without
re-partitioning.

The topics hold what every earlier test of the session wrote too; this test adds a run of its own so that
each output topic has records, spread over its partitions."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient

from common import config, names
from streamfold import generate
from tests.support import pipeline as sp
from tests.support.kafka import java_partition, read_all

pytestmark = pytest.mark.e2e

SPREAD_TOPICS = (names.USERS_CHANGELOG_TOPIC, names.USER_CLICKS_TOPIC, names.URL_REGION_TOPIC)


def test_every_keyed_record_sits_in_its_java_partition(pg, streamfold_setup, tmp_path_factory):
    bootstrap = streamfold_setup.kafka_bootstrap
    sandbox = sp.make_sandbox(
        streamfold_setup.pg_dsn, "partitioning", tmp_path_factory.mktemp("partitioning")
    )
    users = [f"partition-{i}" for i in range(30)]
    pg.cursor().executemany(
        "INSERT INTO public.users (userid, regionid) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        [(u, f"R{i % 4}") for i, u in enumerate(users)],
    )
    now = int(time.time() * 1000)
    records = [
        (
            u,
            json.dumps(
                {"userid": u, "url": f"/p/{i}", "device_id": "ios", "ip": "10.0.0.1", "event_time": now}
            ),
        )
        for i, u in enumerate(users)
    ]
    records.append(("partition-poison", "not a click"))  # for clicks_dlq
    generate.send_kafka(
        bootstrap, ((k, v.encode()) for k, v in records), lambda _sent: None, sandbox.clicks_topic
    )
    sandbox.run_once("kafka")

    topics = AdminClient(config.kafka_client_settings(bootstrap)).list_topics(timeout=30).topics
    used: dict[str, set[int]] = {}
    outputs = [t for t, _ in names.PIPELINE_TOPICS if t != names.CLICKS_TOPIC]
    for topic in [sandbox.clicks_topic, *outputs, names.CDC_USERS_TOPIC]:
        partitions = len(topics[topic].partitions)
        keyed = [m for m in read_all(bootstrap, topic) if m.raw_key is not None]
        assert keyed, f"{topic}: no keyed records"
        misplaced = [m for m in keyed if m.partition != java_partition(m.raw_key, partitions)]
        assert not misplaced, (
            f"{topic}: {len(misplaced)} of {len(keyed)} records off their Java partition, e.g. key "
            f"{misplaced[0].raw_key!r} in {misplaced[0].partition}, "
            f"murmur2 says {java_partition(misplaced[0].raw_key, partitions)} of {partitions}"
        )
        used[topic] = {m.partition for m in keyed}
    assert all(len(used[topic]) > 1 for topic in (sandbox.clicks_topic, *SPREAD_TOPICS)), used
