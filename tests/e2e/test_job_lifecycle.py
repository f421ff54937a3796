"""The continuous job's lifecycle: a SIGTERM (`docker compose stop`, systemd) or a Ctrl-C stops it cleanly."""

from __future__ import annotations

import os
import signal
import time

import pytest

from streamfold import generate
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e


def committed_batches(sandbox: sp.Sandbox) -> int:
    with sandbox.connect() as conn:
        return conn.execute("SELECT count(*) FROM streamfold.sink_batches").fetchone()[0]


@pytest.mark.parametrize(
    ("name", "send"),
    [
        ("SIGTERM", lambda job: job.send_signal(signal.SIGTERM)),
        # A terminal's Ctrl-C: SIGINT to the whole foreground process group (the JVM and Python workers
        # too), while the driver waits inside a Py4J call. Until 2026-11-26 that ended in a Py4J traceback.
        ("SIGINT", lambda job: os.killpg(job.pid, signal.SIGINT)),
    ],
)
def test_a_signal_stops_the_job_cleanly(streamfold_setup, tmp_path_factory, name, send) -> None:
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, f"sink_{name.lower()}", tmp_path_factory.mktemp(name))
    clicks = generate.encoded(generate.ClickSpec(count=50, users=5))
    generate.send_kafka(streamfold_setup.kafka_bootstrap, clicks, lambda _sent: None, sandbox.clicks_topic)
    log = sandbox.home / "job.log"
    job = sandbox.start("kafka", log)
    try:
        sp.wait_until(lambda: committed_batches(sandbox) > 0, 180, "a committed batch")
        time.sleep(1.5)  # most likely mid-batch: the trigger fires every 500 ms
        send(job)
        assert job.wait(timeout=90) == 0
    finally:
        if job.poll() is None:
            sp.kill9(job)
    output = log.read_text(errors="replace")
    assert f"stopping ({name})" in output
    for noise in ("Traceback", "StackOverflowError", "Py4JError", "Exception in thread"):
        assert noise not in output, output[-3000:]
