"""The continuous job's lifecycle: a SIGTERM (`docker compose stop`, systemd) stops it cleanly."""

from __future__ import annotations

import signal
import time

import pytest

from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e


def committed_batches(sandbox: sp.Sandbox) -> int:
    with sandbox.connect() as conn:
        return conn.execute("SELECT count(*) FROM streamfold.sink_batches").fetchone()[0]


def test_sigterm_stops_the_job_cleanly(streamfold_setup, tmp_path_factory) -> None:
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "sink_sigterm", tmp_path_factory.mktemp("sigterm"))
    log = sandbox.home / "job.log"
    job = sandbox.start("kafka", log)
    try:
        sp.wait_until(lambda: committed_batches(sandbox) > 0, 180, "a committed batch")
        time.sleep(1.5)  # most likely mid-batch: the trigger fires every 500 ms
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=90) == 0
    finally:
        if job.poll() is None:
            sp.kill9(job)
    output = log.read_text(errors="replace")
    assert "stopping (SIGTERM)" in output
    for noise in ("Traceback", "StackOverflowError", "Py4JError", "Exception in thread"):
        assert noise not in output, output[-3000:]
