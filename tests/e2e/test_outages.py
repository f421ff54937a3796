"""A 60 s outage of PostgreSQL, of the Kafka broker, of Kafka Connect or of the Kinesis endpoint while the
continuous job runs: the job waits and retries, stays alive, and the totals come out exact (row by row and
in every aggregate) once the service is back.

Connect is not a dependency of the job: while it is down CDC progress stalls, and clicks are released by
`join.max_wait` with the latest profile version known (no profile changes while it is down, so that is
still the right one) and counted as such in the batch's log line.

The Kinesis endpoint goes down behind a TCP relay (tests/support/relay.py): the job reaches the endpoint
only through it, so for the job the endpoint refuses connections and drops open ones, while the endpoint
keeps running and the test keeps writing clicks to it."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from common import config, kinesis, names, topics
from connectors import setup as connector_setup
from stack import lifecycle
from streamfold.generate import ClickSpec, clicks
from tests.support import pipeline as sp
from tests.support.relay import TcpRelay

pytestmark = pytest.mark.e2e

OUTAGE_S = 60


def committed_batches(sandbox: sp.Sandbox) -> int:
    """Batches that landed at least one partition (the ledger has a row per partition)."""
    with sandbox.connect() as conn:
        query = "SELECT count(DISTINCT (query, batch_id)) FROM streamfold.sink_batches"
        return conn.execute(query).fetchone()[0]


def restore_connector(connect_url: str) -> None:
    """Debezium may fail its task while its database is down: restart what failed, wait until RUNNING."""
    requests.post(
        f"{connect_url}/connectors/{names.CONNECTOR_NAME}/restart",
        params={"includeTasks": "true", "onlyFailed": "true"},
        timeout=30,
        auth=config.connect_auth(),
    )
    connector_setup.wait_until_running(connect_url, names.CONNECTOR_NAME, timeout_s=180)


# What the job's log says while it waits: the sink's retry line names the dependency. Spark waits for
# Kafka silently (fetching offsets, or inside a batch's read); then the phase line says what it does.
WAITING = {
    "postgres": ("Postgres unavailable (",),
    "kafka": (
        "Kafka (",
        ": Getting offsets from KafkaV2[Subscribe[clicks-outage-kafka-",  # the scenario's own topic
        ": Processing new data for ",
    ),
    # The planning reads' retry line, or the read-ahead's when the outage falls while a batch runs.
    "kinesis": (
        "Kinesis unavailable (EndpointConnectionError: Could not connect to the endpoint URL",
        "reading the next batch ahead stopped (EndpointConnectionError: Could not connect to the endpoint",
    ),
    "connect": (),  # checked by RELEASED instead
}
RELEASED = re.compile(r"batch \d+: \d+ events \(([1-9]\d*) released by join.max_wait\)")
# Where the clicks come from: the Kinesis outage is an outage of the job's source.
SOURCE = {"postgres": "kafka", "kafka": "kafka", "connect": "kafka", "kinesis": "kinesis"}
# Outages of the job's source: no batch can be planned while it is down, so at most the batch in flight
# when it went down lands (a check that the outage really was one; Postgres down can't be counted then).
STALLED = ("kafka", "kinesis")


@contextmanager
def outage(home: Path, service: str, relay: TcpRelay) -> Iterator[None]:
    """The service unavailable for the duration: stopped, or for Kinesis its relay down."""
    if service == "kinesis":
        relay.down()
        try:
            yield
        finally:
            relay.up()
        return
    lifecycle.stop_service(home, service)
    try:
        yield
    finally:
        lifecycle.start_service(home, service)


@pytest.mark.parametrize("service", ["postgres", "kafka", "connect", "kinesis"])
def test_job_survives_an_outage_with_exact_totals(service, pg, streamfold_setup, tmp_path_factory):
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, f"outage_{service}", tmp_path_factory.mktemp("outage"))
    bootstrap = streamfold_setup.kafka_bootstrap
    users = [f"outage-{service}-{i}" for i in range(20)]
    pg.cursor().executemany(
        "INSERT INTO public.users (userid, regionid) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        [(u, f"R{i % 3}") for i, u in enumerate(users)],
    )
    source = SOURCE[service]
    producer = topics.producer(bootstrap, {"linger.ms": 5})
    stream = kinesis.client()
    clicks_stream = sandbox.stream() if source == "kinesis" else ""
    stop = threading.Event()

    def send(records: list[tuple[str, bytes]]) -> None:
        if source == "kinesis":
            kinesis.put_records(stream, clicks_stream, records)
            return
        for key, value in records:
            producer.produce(sandbox.clicks_topic, key=key, value=value)
        producer.flush(30)

    def traffic() -> None:
        """~500 clicks/s until batches flow again after the outage (queued by the producer while the broker
        is down), so there is something to commit then; at most 150,000 (5 minutes)."""
        sent = 0
        while not stop.is_set() and sent < 150_000:
            records = []
            for c in clicks(ClickSpec(count=50, users=len(users), seed=10_000 + sent)):
                user = users[int(c["userid"].split("_")[1]) - 1]
                records.append((user, json.dumps({**c, "userid": user}).encode()))
            send(records)
            sent += 50
            time.sleep(0.1)

    home = config.home()
    log = sandbox.home / "job.log"
    sender = threading.Thread(target=traffic)
    sender.start()
    endpoint = urlsplit(os.environ["STREAMFOLD_KINESIS_ENDPOINT"])
    relay = TcpRelay(endpoint.hostname or "127.0.0.1", endpoint.port or 80)
    job = sandbox.start(source, log, STREAMFOLD_KINESIS_ENDPOINT=relay.url)
    try:
        sp.wait_until(lambda: committed_batches(sandbox) > 0, 240, "a first committed batch")
        before = committed_batches(sandbox)
        with outage(home, service, relay):
            time.sleep(OUTAGE_S)
            assert job.poll() is None, f"the job ended while {service} was down:\n" + log.read_text()[-3000:]
            if service in STALLED:
                landed = committed_batches(sandbox) - before
                tail = log.read_text()[-3000:]
                assert landed <= 1, f"{landed} batches landed while {service} was down:\n{tail}"
        before = committed_batches(sandbox)
        sp.wait_until(lambda: committed_batches(sandbox) > before + 1, 180, "batches after the outage")
        assert job.poll() is None, "the job ended after the outage:\n" + log.read_text()[-3000:]
    finally:
        stop.set()
        sender.join()
        if job.poll() is None:
            sp.kill9(job)
        relay.down()
        if any(s.name == service and s.state == "down" for s in lifecycle.status(home)):
            lifecycle.start_service(home, service)
    restore_connector(streamfold_setup.connect_url)
    text = log.read_text()
    if service == "connect":
        assert RELEASED.search(text), text[-3000:]
    else:
        assert any(line in text for line in WAITING[service]), text[-3000:]
    assert "|FAIL|rdkafka" not in text  # one line per retry, not librdkafka's line per reconnect

    sandbox.run_once(source)  # drain what the continuous job had not reached
    want = sp.expected(
        sandbox.inputs(source, bootstrap), sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap)
    )
    with sandbox.connect() as conn:
        sp.assert_matches(conn, want)
