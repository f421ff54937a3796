"""kill -9 at random points while clicks and profile changes stream in: nothing lost, nothing doubled."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable

import pytest

from common import kinesis, topics
from streamfold.generate import ClickSpec, clicks
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

KILLS = 3


def kafka_sender(bootstrap: str, topic: str) -> Callable[[list[tuple[str, bytes]]], None]:
    producer = topics.producer(bootstrap, {"linger.ms": 5})

    def send(records: list[tuple[str, bytes]]) -> None:
        for key, value in records:
            producer.produce(topic, key=key, value=value)
        assert producer.flush(30) == 0

    return send


def kinesis_sender(stream: str) -> Callable[[list[tuple[str, bytes]]], None]:
    client = kinesis.client()
    return lambda records: kinesis.put_records(client, stream, records)


def batches(sandbox: sp.Sandbox) -> int:
    with sandbox.connect() as conn:
        return conn.execute("SELECT count(*) FROM streamfold.sink_batches").fetchone()[0]


@pytest.mark.parametrize("source", ["kafka", "kinesis"])
def test_kill_9_at_random_points_loses_and_doubles_nothing(source, pg, streamfold_setup, tmp_path_factory):
    sandbox = sp.make_sandbox(
        streamfold_setup.pg_dsn, f"sink_crash_{source}", tmp_path_factory.mktemp(source)
    )
    bootstrap = streamfold_setup.kafka_bootstrap
    users = [f"crash-{source}-{i}" for i in range(30)]
    pg.cursor().executemany(
        "INSERT INTO public.users (userid, regionid) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        [(u, f"R{i % 4}") for i, u in enumerate(users)],
    )
    send = (
        kinesis_sender(sandbox.stream())
        if source == "kinesis"
        else kafka_sender(bootstrap, sandbox.clicks_topic)
    )
    stop = threading.Event()

    def traffic() -> None:
        """~1,000 clicks/s, one profile change every few batches, until the kills are done."""
        rng, sent = random.Random(5), 0
        while not stop.is_set() and sent < 60_000:
            batch = [
                (users[int(c["userid"].split("_")[1]) - 1], c)
                for c in clicks(ClickSpec(count=100, users=len(users), seed=sent))
            ]
            send([(user, json.dumps({**c, "userid": user}).encode()) for user, c in batch])
            sent += len(batch)
            if rng.random() < 0.2:
                pg.execute(
                    "UPDATE public.users SET regionid = %s WHERE userid = %s",
                    (f"R{rng.randrange(4)}", rng.choice(users)),
                )
            time.sleep(0.1)

    producer = threading.Thread(target=traffic)
    producer.start()
    log = sandbox.home / "job.log"
    delays = [random.uniform(0, 8) for _ in range(KILLS)]
    try:
        for delay in delays:
            # Kill at a random moment after the job has made progress again: mid-batch, mid-commit, idle.
            committed = batches(sandbox)
            job = sandbox.start(source, log)
            sp.wait_until(lambda c=committed: batches(sandbox) > c, 180, "a committed batch")
            time.sleep(delay)
            sp.kill9(job)
    finally:
        stop.set()
        producer.join()
    with sandbox.connect() as conn:
        before_drain = sp.summary(conn)
    sandbox.run_once(source)

    want = sp.expected(
        sandbox.inputs(source, bootstrap), sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap)
    )
    with sandbox.connect() as conn:
        sp.assert_matches(conn, want)
    print(
        f"{source}: kills after {[round(d, 1) for d in delays]} s; "
        f"rows before the final drain {before_drain}; "
        f"expected {len(want.rows)} rows, {len(want.dead)} dead letters; {batches(sandbox)} batches committed"
    )
