"""`streamfold run --mode realtime` on the session's stack: the default pipeline in Spark's real-time mode
(the project's Kafka source, the CDC fold, the real-time join operator, the real-time sink), in a query that
keeps running.

The installation switches from micro-batches: a backlog of events has landed through `run --once` in
micro-batches, and the real-time query, a checkpoint of its own, reads it again from the start. Then a user
moves from asia to europe and her events arrive out of order, with a user who has no profile and records
that are no events. Every event is in PostgreSQL once, joined with the profile version valid at its time
as the oracle joins it; every record that is no event is a dead letter; the aggregate tables equal a GROUP
BY over the enriched rows; and all of it lands while the real-time query's first batch is still open (its
commit file does not exist yet): rows move as they arrive, not at a batch's end.
"""

from __future__ import annotations

import json
import time
import uuid

import psycopg
import pytest

from common import config
from common import pipeline_file as pf
from pipeline import topology
from streamfold import generate
from tests.support import pipeline as sp
from tests.support.traffic import kafka_sender

pytestmark = pytest.mark.e2e

# Far longer than the test: its first batch is still open when every row has landed.
BATCH_DURATION = "30m"


def now_ms() -> int:
    return int(time.time() * 1000)


def click(user: str, t: int, url: str) -> tuple[str, bytes]:
    body = {"userid": user, "url": url, "device_id": "mobile", "ip": "10.0.0.1", "event_time": t, "clicks": 2}
    return user, json.dumps(body).encode()


def story(pg: psycopg.Connection) -> list[tuple[str, bytes]]:
    """A user moves from asia to europe between two of her events, which arrive newest first; a user
    without a profile; two records that are no events."""
    user, ghost = f"rt-{uuid.uuid4().hex[:6]}", f"rt-ghost-{uuid.uuid4().hex[:6]}"
    pg.execute("INSERT INTO public.users (userid, regionid) VALUES (%s, 'asia')", (user,))
    time.sleep(1.5)
    in_asia = now_ms()
    time.sleep(1.5)
    pg.execute("UPDATE public.users SET regionid = 'europe' WHERE userid = %s", (user,))
    time.sleep(1.5)
    in_europe = now_ms()
    return [
        click(user, in_europe, "/rt/europe"),
        click(user, in_asia, "/rt/asia"),
        click(ghost, in_asia, "/rt/ghost"),
        ("bad", b"this is not json"),
        ("bad", json.dumps({"userid": user, "url": "/x"}).encode()),
    ]


def test_the_default_pipeline_lands_in_real_time_mode_while_its_batch_is_open(
    streamfold_setup: config.Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "sink_realtime", tmp_path_factory.mktemp("realtime"))
    bootstrap = streamfold_setup.kafka_bootstrap
    send = kafka_sender(bootstrap, sandbox.clicks_topic)
    send(list(generate.encoded(generate.ClickSpec(count=300, users=20), bad_every=50)))  # the backlog
    sandbox.run_once("kafka")  # in micro-batches, the pipeline file's mode
    log = sandbox.home / "job.log"
    job = sandbox.start("kafka", log, conf=(f"trigger.batch_duration={BATCH_DURATION}",), mode=pf.REALTIME)

    def landed_while_running(want: sp.Expected) -> bool:
        assert job.poll() is None, log.read_text(errors="replace")[-4000:]
        return sp.landed(sandbox, want)

    try:
        with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as pg:
            send(story(pg))
        inputs = sandbox.inputs("kafka", bootstrap)
        records = sp.expected(inputs, {}, set())  # which records are events, which are dead letters
        assert (len(records.rows), len(records.dead)) == (300 - 300 // 50 + 3, 300 // 50 + 2)
        sp.wait_until(lambda: landed_while_running(records), 240, "every event in PostgreSQL")
        # The join has read the CDC topic past the story's changes: the oracle reads them now. The dead
        # letters: the CDC topic's, and the heartbeat topic's that the `--once` pass read (a micro-batch
        # query reads that topic too; other tests of the session put records there that are no heartbeats).
        want = sp.expected(inputs, sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap))
        sp.wait_until(lambda: landed_while_running(want), 60, "the CDC topic's dead letters")
        query = f"{pf.load().name}-kafka{topology.REALTIME_SUFFIX}"
        commits = sandbox.home / "checkpoints" / query / "commits"
        assert not any(commits.glob("[0-9]*")), "rows came with a batch's commit, not as they arrived"
        with sandbox.connect() as conn:
            sp.assert_matches(conn, want)  # joined as the oracle joins; totals equal a GROUP BY
        sp.stop_realtime_job(job, log)
    finally:
        if job.poll() is None:
            sp.kill9(job)
