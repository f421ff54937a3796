"""A reader never stalls the job: while a reader's query sleeps on the enriched table, `setup` adding an
event field waits for its lock in short tries (db/locks.py), the job keeps landing batches, and the reader
role's statement_timeout ends the query, after which setup goes through."""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from common import config
from common import pipeline_file as pf
from db import schema
from streamfold import generate
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

SLEEPER = "SELECT pg_sleep(3600) FROM streamfold.enriched_clicks LIMIT 1"


def with_event_field(pipeline: pf.Pipeline, name: str) -> pf.Pipeline:
    spec = pipeline.model_dump(mode="json")
    spec["events"]["fields"][name] = "text"
    return pf.Pipeline.model_validate(spec)


def reader_pids(sandbox: sp.Sandbox) -> list[int]:
    """The reader sessions running the sleeper on the sandbox's database."""
    with sandbox.connect() as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE usename = %s AND datname = current_database()"
            " AND state = 'active' AND query LIKE '%%pg_sleep(3600)%%'",
            (config.READER_ROLE,),
        ).fetchall()
    return [pid for (pid,) in rows]


def feed(bootstrap: str, topic: str, stop: threading.Event) -> None:
    """Clicks into the sandbox's topic until told to stop: every batch of the job has some."""
    seed = 0
    while not stop.wait(0.5):
        seed += 1
        clicks = generate.encoded(generate.ClickSpec(count=200, users=20, seed=seed))
        generate.send_kafka(bootstrap, clicks, lambda _sent: None, topic)


def test_a_sleeping_reader_delays_setup_but_never_the_job(streamfold_setup, tmp_path_factory) -> None:
    """The reader role's statement_timeout is setup's default (60s)."""
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "sink_readers", tmp_path_factory.mktemp("readers"))
    reader_dsn = make_conninfo(
        sandbox.admin_dsn, user=config.READER_ROLE, password=config.lookup("STREAMFOLD_READER_PASSWORD")
    )
    stop = threading.Event()
    feeder = threading.Thread(
        target=feed, args=(streamfold_setup.kafka_bootstrap, sandbox.clicks_topic, stop), daemon=True
    )
    feeder.start()
    job = sandbox.start("kafka", sandbox.home / "job.log")
    reader_error: list[BaseException] = []
    setup_lines: list[str] = []
    setup_error: list[BaseException] = []

    def read() -> None:
        try:
            with psycopg.connect(reader_dsn) as conn:
                conn.execute(SLEEPER)
        except psycopg.Error as exc:
            reader_error.append(exc)

    def set_up() -> None:
        try:
            schema.apply(sandbox.admin_dsn, with_event_field(pf.load(), "referrer"), echo=setup_lines.append)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            setup_error.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    setup = threading.Thread(target=set_up, daemon=True)
    try:
        sp.wait_until(lambda: sp.batches(sandbox) > 0, 300, "the job's first batch")
        reader.start()
        sp.wait_until(lambda: reader_pids(sandbox), 60, "the reader's query running", poll_s=0.2)
        setup.start()
        waiting = "waiting for a lock on streamfold.enriched_clicks"
        try:
            sp.wait_until(
                lambda: any(waiting in line for line in setup_lines), 120, "setup to wait for a lock"
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}: setup said {setup_lines}, raised {setup_error}") from None
        landed = sp.batches(sandbox)
        sp.wait_until(
            lambda: sp.batches(sandbox) >= landed + 3, 120, "batches landed while the reader sleeps"
        )
        assert reader_pids(sandbox), "the reader ended before the batches landed"
        assert setup.is_alive(), "setup finished while the reader still held its lock"

        reader.join(timeout=180)  # the role's statement_timeout ends the sleeper
        assert not reader.is_alive(), "the reader's statement_timeout did not end its query"
        assert reader_error and isinstance(reader_error[0], psycopg.errors.QueryCanceled), reader_error
        assert "statement timeout" in str(reader_error[0])
        setup.join(timeout=120)
        assert not setup.is_alive() and not setup_error, setup_error
        assert any("added column referrer to streamfold.enriched_clicks" in line for line in setup_lines)
        assert job.poll() is None, "the job stopped"
    finally:
        stop.set()
        with sandbox.connect() as conn:  # a reader left sleeping (no timeout) would hold setup for ever
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE usename = %s AND datname = current_database()",
                (config.READER_ROLE,),
            )
        sp.kill9(job)
        feeder.join(timeout=60)
        setup.join(timeout=60)
