"""kill -9 at random points while clicks and profile changes stream in: nothing lost, nothing doubled, in the
enriched rows, the totals and the profile history; in micro-batches (Kafka and Kinesis) and in Spark's
real-time mode."""

from __future__ import annotations

import random
import signal
import time

import pytest

from common import pipeline_file as pf
from pipeline import topology
from pipeline.temporal_join import committed_batches
from tests.support import pipeline as sp
from tests.support.traffic import Traffic, add_users, kafka_sender, kinesis_sender

pytestmark = pytest.mark.e2e

KILLS = 3
# A real-time batch commits the join's state and the sources' offsets this often: the kills fall before,
# during and after commits.
REALTIME_BATCH = "trigger.batch_duration=5s"


@pytest.mark.parametrize("source", ["kafka", "kinesis"])
def test_kill_9_at_random_points_loses_and_doubles_nothing(source, pg, streamfold_setup, tmp_path_factory):
    sandbox = sp.make_sandbox(
        streamfold_setup.pg_dsn, f"sink_crash_{source}", tmp_path_factory.mktemp(source)
    )
    bootstrap = streamfold_setup.kafka_bootstrap
    users = [f"crash-{source}-{i}" for i in range(30)]
    add_users(pg, users)
    send = (
        kinesis_sender(sandbox.stream())
        if source == "kinesis"
        else kafka_sender(bootstrap, sandbox.clicks_topic)
    )
    log = sandbox.home / "job.log"
    delays = [random.uniform(0, 8) for _ in range(KILLS)]
    with Traffic(send, pg, users):  # until the kills are done
        for delay in delays:
            # Kill at a random moment after the job has made progress again: mid-batch, mid-commit, idle.
            with sp.killed_after_a_batch(
                lambda: sandbox.start(source, log), lambda: sp.batches(sandbox), 180
            ):
                time.sleep(delay)
    with sandbox.connect() as conn:
        before_drain = sp.summary(conn)
    sandbox.run_once(source)

    want = sp.expected(
        sandbox.inputs(source, bootstrap), sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap)
    )
    history = sp.profile_history(bootstrap)
    with sandbox.connect() as conn:
        sp.assert_matches(conn, want)
        # Every version of the users' profiles in the history, each once, through the kills.
        assert sp.stored_history(conn, users) == {u: history[u] for u in users if u in history}
    print(
        f"{source}: kills after {[round(d, 1) for d in delays]} s; "
        f"rows before the final drain {before_drain}; "
        f"expected {len(want.rows)} rows, {len(want.dead)} dead letters; "
        f"{sp.batches(sandbox)} partitions of batches landed"
    )


def caught_up(sandbox: sp.Sandbox, query: str, since_ms: float) -> bool:
    """Whether `streamfold status` says the running real-time job's query has processed the events topic to
    its end (the CDC topic's heartbeats never end), and has counted no event waiting in the join after
    since_ms."""
    figures = sandbox.status()
    if not figures["job"]["running"]:  # the job.json of the run killed before, until this one writes its own
        return False
    assert figures["job"]["mode"] == pf.REALTIME, figures["job"]
    rows = figures["kafka_lag"]
    lag = [r["lag"] for r in rows if r["query"] == query and r["topic"] == sandbox.clicks_topic]
    waiting = figures["join_waiting"]
    counted = waiting is not None and waiting["as_of_ms"] >= since_ms
    return bool(lag) and sum(lag) == 0 and counted and waiting["clicks"] == 0


def test_kill_9_in_real_time_mode_loses_and_doubles_nothing(pg, streamfold_setup, tmp_path_factory):
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "sink_crash_realtime", tmp_path_factory.mktemp("rt"))
    bootstrap = streamfold_setup.kafka_bootstrap
    users = [f"crash-rt-{i}" for i in range(30)]
    add_users(pg, users)
    log = sandbox.home / "job.log"
    checkpoint = sandbox.home / "checkpoints" / f"{pf.load().name}-kafka{topology.REALTIME_SUFFIX}"

    def start():
        return sandbox.start("kafka", log, conf=(REALTIME_BATCH,), mode=pf.REALTIME)

    delays = [random.uniform(0, 8) for _ in range(KILLS)]
    with Traffic(kafka_sender(bootstrap, sandbox.clicks_topic), pg, users):
        for delay in delays:
            # Killed after the restarted job has committed a batch: its state and offsets come back.
            with sp.killed_after_a_batch(start, lambda: len(committed_batches(checkpoint)), 240):
                time.sleep(delay)

    want = sp.expected(
        sandbox.inputs("kafka", bootstrap),
        sp.profile_history(bootstrap),
        sp.realtime_cdc_dead_letters(bootstrap),
    )
    job = start()  # the last run, in real-time mode too, until every record has landed
    try:

        def landed_while_running() -> bool:
            assert job.poll() is None, log.read_text(errors="replace")[-4000:]
            return sp.landed(sandbox, want)

        sp.wait_until(landed_while_running, 300, "every record landed")
        landed_ms = time.time() * 1000
        # `streamfold status` reads the real-time query: its offsets at the topics' ends and nothing waiting
        # in the join, once a batch has committed after the last record landed.
        sp.wait_until(lambda: caught_up(sandbox, checkpoint.name, landed_ms), 120, "status: caught up")
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == 0
    finally:
        if job.poll() is None:
            sp.kill9(job)
    history = sp.profile_history(bootstrap)
    with sandbox.connect() as conn:
        sp.assert_matches(conn, want)  # nothing doubled: rows, totals and dead letters, each once
        assert sp.stored_history(conn, users) == {u: history[u] for u in users if u in history}
    batches = len(committed_batches(checkpoint))
    print(f"real-time: kills after {[round(d, 1) for d in delays]} s; {batches} batches")
