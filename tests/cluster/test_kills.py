"""kill -9 on the cluster while clicks and profile changes stream in: of one worker (its executor dies in
the middle of a batch; the job goes on with the other worker), then of the driver (the job restarts on its
checkpoint). Afterwards the continuous job drains the input and stops cleanly: nothing lost, nothing doubled
(the oracle, row by row).
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from common import names
from pipeline import status_files
from stack import lifecycle
from tests.support import cluster
from tests.support import pipeline as sp
from tests.support.traffic import Traffic, add_users, kafka_sender

pytestmark = pytest.mark.cluster

APP, QUERY = "streamfold-kafka", "clicks-kafka"
TASK_LINE = re.compile(r"(Running|Finished) task (\S+ in stage \S+ \(TID \d+\))")
TRAFFIC = 150_000  # clicks at most, ~1,000/s from when the job is up until the driver's kill
KILLED_WORKER = "spark-worker-1"
START_S = 300  # generous: the machine's two cores run the whole stack, a driver and two executors
DRAIN_S = 420


def last_batch(sandbox: sp.Sandbox) -> tuple[int, int]:
    """The newest batch with a landed partition, and how many of its partitions have landed."""
    with sandbox.connect() as conn:
        row = conn.execute(
            "SELECT batch_id, count(*) FROM streamfold.sink_batches GROUP BY 1 ORDER BY 1 DESC LIMIT 1"
        ).fetchone()
    return (row[0], row[1]) if row else (-1, 0)


def landing_begins(sandbox: sp.Sandbox) -> tuple[int, int]:
    """Waits for the first partition of a new batch to land: the batch's other partitions are then being
    written (one transaction each, on both executors). Returns that batch and its partitions landed."""
    seen, _ = last_batch(sandbox)

    def begun() -> tuple[int, int] | None:
        batch = last_batch(sandbox)
        return batch if batch[0] > seen else None

    return sp.wait_until_value(begun, START_S, "a batch to begin landing", 0.1)


def progress(sandbox: sp.Sandbox) -> int:
    """The job's last completed batch (its query's status file), -1 before the first; a batch with nothing
    to write (no click, change or dead letter) completes without a row in sink_batches."""
    status = status_files.read_json(status_files.status_dir(sandbox.home) / f"{QUERY}.json")
    return status["progress"]["batchId"] if status else -1


def batches_after(sandbox: sp.Sandbox, batch: int, count: int, what: str, job: subprocess.Popen) -> int:
    def done() -> bool:
        assert job.poll() is None, f"the job exited ({job.returncode}): {tail(sandbox)}"
        return progress(sandbox) >= batch + count

    sp.wait_until(done, START_S, f"{count} batches after batch {batch} {what}", 1.0)
    return progress(sandbox)


def started(home: Path, sandbox: sp.Sandbox, job: subprocess.Popen, before: set[str]) -> dict:
    """The job's application on the master, once it has completed a batch."""
    app = sp.wait_until_value(lambda: cluster.active_app(home, APP), START_S, "the job's application", 1.0)
    assert app["id"] not in before
    batches_after(sandbox, progress(sandbox), 1, "since the start", job)
    return app


def unfinished_tasks(home: Path, app_id: str, worker: str) -> list[str]:
    """The tasks the application's executor on `worker` had begun and not finished when its log ends."""
    running: dict[str, str] = {}
    for stderr in (home / "data" / worker / app_id).glob("*/stderr"):
        for line in stderr.read_text(errors="replace").splitlines():
            if match := TASK_LINE.search(line):
                state, task = match.groups()
                if state == "Running":
                    running[task] = line
                else:
                    running.pop(task, None)
    return list(running)


def tail(sandbox: sp.Sandbox, lines: int = 60) -> str:
    return "\n".join((sandbox.home / "job.log").read_text(errors="replace").splitlines()[-lines:])


def drain_stop_and_check(sandbox: sp.Sandbox, job: subprocess.Popen, bootstrap: str) -> str:
    """With the traffic stopped: the job lands every click, a SIGTERM stops it (exit 0), then the oracle."""
    want = sp.expected(
        sandbox.inputs("kafka", bootstrap), sp.profile_history(bootstrap), sp.cdc_dead_letters(bootstrap)
    )

    def drained() -> bool:
        assert job.poll() is None, f"the job exited ({job.returncode}): {tail(sandbox)}"
        with sandbox.connect() as conn:
            rows = conn.execute(f"SELECT count(*) FROM {names.ENRICHED_CLICKS_TABLE}").fetchone()[0]
            dead = conn.execute(f"SELECT count(*) FROM {names.DEAD_LETTERS_TABLE}").fetchone()[0]
        return rows >= len(want.rows) and dead >= len(want.dead)

    sp.wait_until(drained, DRAIN_S, f"{len(want.rows)} clicks landed")
    job.send_signal(signal.SIGTERM)
    assert job.wait(240) == 0, tail(sandbox)
    with sandbox.connect() as conn:
        sp.assert_matches(conn, want)
    return f"{len(want.rows)} clicks, {len(want.dead)} dead letters, {sp.batches(sandbox)} partitions landed"


def kill_a_worker(home: Path, sandbox: sp.Sandbox, job: subprocess.Popen, app: dict) -> None:
    """kill -9 of a worker, and so of its executor, as a batch begins landing; the job goes on with the
    other worker; the worker comes back and gets an executor of the job again."""
    running = cluster.executor_ids(home, app["id"], running_only=True)
    assert len(running) == 2 and all(running.values()), f"the job's executors by worker: {running}"
    executor = cluster.running_executor(home, app["id"], KILLED_WORKER)
    assert executor is not None
    # Aim for the executor's own tasks in flight: a batch landing, and a task it has begun, not finished.
    deadline = time.monotonic() + START_S
    batch, landed = landing_begins(sandbox)
    while not unfinished_tasks(home, app["id"], KILLED_WORKER) and time.monotonic() < deadline:
        batch, landed = landing_begins(sandbox)
    lifecycle.kill_service(home, KILLED_WORKER)
    print(
        f"killed {KILLED_WORKER} (executor {executor['id']}) with batch {batch} landing ({landed} partitions "
        f"landed); tasks it had begun and not finished: {unfinished_tasks(home, app['id'], KILLED_WORKER)}"
    )
    done = batches_after(sandbox, batch, 3, "on the surviving worker", job)
    print(f"batches up to {done} done after the kill, {last_batch(sandbox)} the last landing")
    lifecycle.start_service(home, KILLED_WORKER)
    again = sp.wait_until_value(
        lambda: cluster.running_executor(home, app["id"], KILLED_WORKER),
        START_S,
        f"a new executor on the restarted {KILLED_WORKER}",
    )
    done = batches_after(sandbox, progress(sandbox), 2, "with the worker back", job)
    print(f"{KILLED_WORKER} back with executor {again['id']}; batches up to {done} done")


def kill_the_driver(
    home: Path, sandbox: sp.Sandbox, job: subprocess.Popen, app: dict, traffic: Traffic
) -> subprocess.Popen:
    """kill -9 of the job's process group (the driver) as a batch begins landing, then the job again on its
    checkpoint; returns the new job. The traffic stops with the driver: the restart has a backlog to read."""
    batch, landed = landing_begins(sandbox)
    sp.kill9(job)
    killed = time.monotonic()
    traffic.stop()
    print(f"killed the driver with batch {batch} landing ({landed} partitions landed)")
    # The master lists the application finished as soon as it loses the driver, and frees its cores, while
    # the workers are still killing its executors: a driver started meanwhile could get executors beside
    # old ones still running tasks of the killed batch. The sink claims each partition once, so that would
    # be safe, but this test restarts cleanly, once the old ones are gone (here within about a second; a
    # driver restarted at once took ~4 s to register, after they were gone).
    sp.wait_until(lambda: cluster.finished(home, app["id"]), START_S, f"{app['id']} to finish", 0.2)
    ended = time.monotonic() - killed
    zombies = cluster.executor_ids(home, app["id"], running_only=True)
    sp.wait_until(
        lambda: not any(cluster.executor_ids(home, app["id"], running_only=True).values()),
        START_S,
        f"the executors of {app['id']} to end",
        0.2,
    )
    print(
        f"{app['id']} finished {ended:.1f}s after the kill, its executors then still running "
        f"(worker port: ids) {zombies}, all gone {time.monotonic() - killed:.1f}s after the kill"
    )
    job = sandbox.start("kafka", sandbox.home / "job.log")
    try:
        started(home, sandbox, job, {app["id"]})
        done = batches_after(sandbox, batch, 3, "after the restart", job)
    except BaseException:
        sp.kill9(job)
        raise
    print(f"restarted: batches up to {done} done, {last_batch(sandbox)} the last landing")
    return job


def test_kill_9_of_a_worker_then_of_the_driver_loses_and_doubles_nothing(
    pg, streamfold_setup, home, tmp_path_factory
):
    """One job, one stream of clicks, both kills (a job start, a drain and an oracle pass are the costly
    part of each): a failure's log says which kill it followed."""
    bootstrap = streamfold_setup.kafka_bootstrap
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "sink_cluster_kills", tmp_path_factory.mktemp("kills"))
    users = [f"cluster-kills-{i}" for i in range(30)]
    add_users(pg, users)
    before = cluster.app_ids(home)
    job = sandbox.start("kafka", sandbox.home / "job.log")
    try:
        app = started(home, sandbox, job, before)
        with Traffic(kafka_sender(bootstrap, sandbox.clicks_topic), pg, users, TRAFFIC) as traffic:
            kill_a_worker(home, sandbox, job, app)
            job = kill_the_driver(home, sandbox, job, app, traffic)
    except BaseException:
        if job.poll() is None:
            sp.kill9(job)
        raise
    print(drain_stop_and_check(sandbox, job, bootstrap))
    lost = [line for line in tail(sandbox, 10_000).splitlines() if "Lost executor" in line]
    print("\n".join(lost))
    assert lost, "the driver never saw its executor die"
