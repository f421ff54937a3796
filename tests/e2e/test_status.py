"""`streamfold status --json` against a real job with known lag: Kafka offsets behind, clicks waiting in the
join while CDC progress stalls (Connect stopped), dead letters, the connector's state, Kinesis shards behind,
and Spark's Prometheus servlet."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from common import config, kinesis, names, topics
from connectors import setup as connector_setup
from stack import lifecycle
from streamfold.generate import ClickSpec, clicks
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

QUERY = "clicks-kafka"


def clicks_lag(sandbox: sp.Sandbox, figures: dict[str, Any]) -> int:
    rows = [r for r in figures["kafka_lag"] if r["query"] == QUERY and r["topic"] == sandbox.clicks_topic]
    assert rows, figures["kafka_lag"]
    return sum(r["lag"] for r in rows)


def send_clicks(sandbox: sp.Sandbox, bootstrap: str, count: int, seed: int, bad: int = 0) -> None:
    producer = topics.producer(bootstrap)
    for c in clicks(ClickSpec(count=count, users=5, seed=seed)):
        producer.produce(sandbox.clicks_topic, key=c["userid"], value=json.dumps(c).encode())
    for i in range(bad):
        producer.produce(sandbox.clicks_topic, key=f"bad-{seed}-{i}", value=b"{not json")
    assert producer.flush(30) == 0


def waiting_after(sandbox: sp.Sandbox, since_ms: int) -> int | None:
    """The join's waiting count, once the job has counted it after `since_ms` and the lag is 0."""
    figures = sandbox.status()
    waiting = figures["join_waiting"]
    if clicks_lag(sandbox, figures) or not waiting or waiting["as_of_ms"] < since_ms:
        return None
    return waiting["clicks"]


def test_status_reports_lag_waiting_clicks_dead_letters_and_connector(pg, streamfold_setup, tmp_path):
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "status_kafka", tmp_path / "home")
    bootstrap = streamfold_setup.kafka_bootstrap
    home = config.home()
    log = tmp_path / "job.log"
    job = sandbox.start("kafka", log, conf=("join.max_wait=10m",))
    try:
        send_clicks(sandbox, bootstrap, 20, seed=501, bad=3)
        sp.wait_until(
            lambda: sandbox.status()["queries"].get(QUERY, {}).get("committed_batch") is not None,
            240,
            "a committed batch",
        )
        sp.wait_until(lambda: clicks_lag(sandbox, sandbox.status()) == 0, 180, "the job to catch up")
        # Heartbeats every 200 ms: once the first (slow) batches are behind it, CDC progress stays fresh.
        sp.wait_until(lambda: sandbox.status()["cdc_progress"]["age_s"] < 15, 180, "fresh CDC progress")
        figures = sandbox.status()
        assert figures["job"]["running"] and figures["job"]["source"] == "kafka"
        assert figures["connector"]["state"] == "RUNNING", figures["connector"]
        query = figures["queries"][QUERY]
        assert query["last_batch_ms"] > 0 and query["rows_per_s"] >= 0, query
        source = f"kafka:{sandbox.clicks_topic}"
        with sandbox.connect() as conn:
            dead = conn.execute(
                "SELECT count(*) FROM streamfold.dead_letters WHERE source = %s", (source,)
            ).fetchone()[0]
        assert dead >= 3 and figures["dead_letters_last_hour"][source] == dead
        metrics = requests.get(figures["job"]["prometheus"], timeout=10)
        assert metrics.status_code == 200, metrics.text[:2000]
        # Spark's own streaming metrics, under the stable namespace (pipeline/spark.py), not the app id.
        assert "metrics_streamfold_driver_spark_streaming_clicks_kafka_latency_Value" in metrics.text, (
            metrics.text[:2000]
        )

        # CDC progress stalls while Connect is down: new clicks wait in the join (max_wait is 10 min).
        lifecycle.stop_service(home, "connect")
        try:
            time.sleep(3)  # the last heartbeats reach the job
            before = sp.wait_until_value(lambda: waiting_after(sandbox, 0), 120, "a first waiting count")
            sent_ms = int(time.time() * 1000)
            send_clicks(sandbox, bootstrap, 25, seed=502)
            sp.wait_until(
                lambda: waiting_after(sandbox, sent_ms) == before + 25, 120, "25 more clicks waiting"
            )
            figures = sandbox.status()
            assert "error" in figures["connector"], figures["connector"]
            assert figures["cdc_progress"]["age_s"] >= 3, figures["cdc_progress"]
        finally:
            lifecycle.start_service(home, "connect")
        connector_setup.wait_until_running(streamfold_setup.connect_url, names.CONNECTOR_NAME, timeout_s=180)
        # A count taken once Connect runs again (the time is fixed here: the job counts every 10 s, so asking
        # for a count newer than each poll's own start would only pass when a count lands mid-poll).
        running_ms = int(time.time() * 1000)
        sp.wait_until(lambda: waiting_after(sandbox, running_ms) == 0, 120, "the clicks released")
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait(120)
    assert job.returncode == 0, log.read_text()[-3000:]

    # The job stopped: the lag is exactly what arrived since.
    figures = sandbox.status()
    assert not figures["job"]["running"]
    assert clicks_lag(sandbox, figures) == 0
    send_clicks(sandbox, bootstrap, 30, seed=503)
    assert clicks_lag(sandbox, sandbox.status()) == 30


def test_status_counts_kinesis_records_behind(streamfold_setup, tmp_path):
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "status_kinesis", tmp_path / "home")
    sandbox.run_once("kinesis")
    stream = kinesis.client()
    records = [(c["userid"], json.dumps(c).encode()) for c in clicks(ClickSpec(count=20, users=5, seed=504))]
    kinesis.put_records(stream, sandbox.stream(), records)
    rows = sandbox.status()["kinesis_lag"]
    assert rows and all(r["query"] == "clicks-kinesis" for r in rows), rows
    assert sum(r["records_behind"] for r in rows) == 20, rows
    assert all(isinstance(r["millis_behind_latest"], int) for r in rows), rows


MIB = 1024 * 1024
WAL_WRITTEN = 8 * MIB
STALLED = "WARNING CDC stalled: progress on cdc.public.users has not advanced for "
FLOWS_AGAIN = "CDC progress on cdc.public.users advances again after "
RELEASED_LINE = re.compile(r"batch \d+: \d+ events \(\d+ released by join.max_wait\)")


def connector_state(connect_url: str) -> str:
    response = requests.get(
        f"{connect_url}/connectors/{names.CONNECTOR_NAME}/status", timeout=10, auth=config.connect_auth()
    )
    return str(response.json()["connector"]["state"])


def pause_connector(connect_url: str, action: str) -> None:
    """PUT /connectors/<name>/pause or /resume (Kafka Connect answers 202 and acts shortly after)."""
    response = requests.put(
        f"{connect_url}/connectors/{names.CONNECTOR_NAME}/{action}", timeout=10, auth=config.connect_auth()
    )
    assert response.status_code == 202, response.text


def test_a_paused_connector_shows_in_the_slot_and_the_jobs_log(streamfold_setup, tmp_path):
    """With Debezium paused, the replication slot holds back the WAL written meanwhile, `status` shows it
    growing and warns past STREAMFOLD_SLOT_WAL_WARN_MB; the running job says once that CDC progress
    stalls while join.max_wait releases clicks, and that it flows again after the resume."""
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "status_slot", tmp_path / "home")
    bootstrap, connect_url = streamfold_setup.kafka_bootstrap, streamfold_setup.connect_url
    log = tmp_path / "job.log"
    job = sandbox.start("kafka", log, conf=("join.max_wait=3s",))
    try:
        send_clicks(sandbox, bootstrap, 10, seed=601)
        sp.wait_until(
            lambda: sandbox.status()["queries"].get(QUERY, {}).get("committed_batch") is not None,
            240,
            "a committed batch",
        )
        sp.wait_until(lambda: clicks_lag(sandbox, sandbox.status()) == 0, 180, "the job to catch up")
        slot = sandbox.status()["replication_slot"]
        assert slot["exists"] and slot["active"] and slot["wal_status"] == "reserved", slot
        assert slot["max_slot_wal_keep_size_bytes"] == 4096 * MIB and slot["safe_wal_size_bytes"] > 0, slot
        assert slot["warnings"] == [] and slot["warn_bytes"] == 1024 * MIB, slot

        pause_connector(connect_url, "pause")
        try:
            sp.wait_until(lambda: connector_state(connect_url) == "PAUSED", 60, "the connector paused")
            held = sandbox.status()["replication_slot"]["retained_wal_bytes"]
            # WAL of another database of the cluster: the slot keeps it, Debezium publishes none of it. (Not
            # pg_logical_emit_message: Debezium publishes those to `cdc.message`, a topic that does not
            # exist, and its task fails.)
            with sandbox.connect() as conn:
                conn.execute("CREATE TABLE wal_filler (filler text)")
                rows = WAL_WRITTEN // 1000 + 1000  # rows of 1,000 bytes, stored as they are (no TOAST)
                conn.execute(
                    "INSERT INTO wal_filler SELECT repeat('x', 1000) FROM generate_series(1, %s)", (rows,)
                )
            figures = sandbox.status(STREAMFOLD_SLOT_WAL_WARN_MB="4")
            slot = figures["replication_slot"]
            assert slot["retained_wal_bytes"] >= held + WAL_WRITTEN, (held, slot)
            assert slot["warn_bytes"] == 4 * MIB and slot["wal_status"] == "reserved", slot
            [warning] = slot["warnings"]
            assert (
                warning.startswith(f"slot {slot['name']} holds ")
                and "(over 4.0 MiB; invalidated past 4.0 GiB)" in warning
            )
            assert figures["connector"]["state"] == "PAUSED", figures["connector"]

            def stall_said_and_batches_ran() -> bool:
                send_clicks(sandbox, bootstrap, 5, seed=602)  # clicks join.max_wait must release
                lines = log.read_text().splitlines()
                said = [i for i, line in enumerate(lines) if STALLED in line]
                # Still paused for 3 batches after the warning, so the check below that the warning is not
                # repeated per batch has batches to look at, however fast the resume takes effect.
                return bool(said) and len([x for x in lines[said[0] :] if RELEASED_LINE.search(x)]) >= 3

            sp.wait_until(
                stall_said_and_batches_ran, 180, "the job's stall warning, then 3 batches", poll_s=3
            )
        finally:
            pause_connector(connect_url, "resume")
        connector_setup.wait_until_running(connect_url, names.CONNECTOR_NAME, timeout_s=180)

        def slot_healthy() -> bool:
            slot = sandbox.status()["replication_slot"]
            return bool(slot["active"]) and slot["warnings"] == []

        sp.wait_until(slot_healthy, 180, "Debezium to hold its slot again")
        # Debezium first sends what it read before the pause, then reconnects: with a max_wait of 3 s that
        # gap can be a stall of its own. The last CDC line must say that progress flows.
        sp.wait_until(lambda: FLOWS_AGAIN in cdc_lines(log)[-1], 180, "the job's line that CDC flows again")
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGTERM)
            job.wait(120)
    text = log.read_text()
    assert job.returncode == 0, text[-3000:]
    said = cdc_lines(log)
    # A stall is said once and its end once (it repeats every 5 minutes only), never once per batch.
    assert [STALLED in line for line in said] == [True, False] * (len(said) // 2), said
    assert all(FLOWS_AGAIN in line for line in said[1::2]), said
    assert "`streamfold status`" in said[0] and "events released by join.max_wait (3 s)" in said[0]
    lines = text.splitlines()
    begun, ended = lines.index(said[0]), lines.index(said[1])
    batches = [line for line in lines[begun:ended] if RELEASED_LINE.search(line)]
    assert len(batches) >= 3, lines[begun : ended + 1]


def cdc_lines(log: Path) -> list[str]:
    """The job's stall and recovery lines, in order."""
    return [line for line in log.read_text().splitlines() if STALLED in line or FLOWS_AGAIN in line]
