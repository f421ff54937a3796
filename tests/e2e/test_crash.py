"""kill -9 at random points while clicks and profile changes stream in: nothing lost, nothing doubled, in the
enriched rows, the totals and the profile history."""

from __future__ import annotations

import random
import time

import pytest

from tests.support import pipeline as sp
from tests.support.traffic import Traffic, add_users, kafka_sender, kinesis_sender

pytestmark = pytest.mark.e2e

KILLS = 3


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
