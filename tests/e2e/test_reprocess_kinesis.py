"""Reprocessing a pipeline whose events come only from Kinesis (docs/reprocess.md), on a user's own
pipeline (tests/support/own_pipeline.py) and its row-by-row oracle.

The live job reads the stream and has landed events; `reprocess --version k2` (the source defaults to
Kinesis, the file naming no Kafka topic) rebuilds every output from TRIM_HORIZON while events keep
arriving, catches up, and becomes current by `swap`; after a drain it equals the oracle over every record
of the stream. `reprocess --version k3 --from TIME` counts only the events that arrived from TIME on.
`drop-version` leaves the stream, a shared input, alone. A start before what the stream retains cannot be
produced on kinesalite (a stream keeps at least 24 hours): tests/unit/test_versions.py covers it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

import psycopg
import pytest
from psycopg import sql

from common import kinesis, plan
from common import pipeline_file as pf
from common import versions as v
from connectors.setup import STREAM_RETENTION_HOURS
from db import versions as registry
from pipeline.status_files import now_ms
from tests.support import own_pipeline as own
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

KEYS = list(range(1, 11))


@pytest.fixture(scope="module")
def views(streamfold_setup, tmp_path_factory):
    made = own.create(
        streamfold_setup.pg_dsn, tmp_path_factory.mktemp("reprocess-kinesis"), kinesis_only=True
    )
    yield made
    p = made.pipeline
    subprocess.run(  # best effort: k3 may not exist after a failure
        [sys.executable, "-m", "streamfold", "drop-version", "k3"],
        capture_output=True, timeout=600, env=made.env(), cwd=own.ROOT,
    )  # fmt: skip
    with made.connect() as conn:  # k2 stays current (the live job is stopped): its outputs go by hand
        for version in registry.all_of(conn, p.name):
            registry.drop_outputs(conn, version)  # its tables, the users' views over them with them
        with contextlib.suppress(psycopg.errors.UndefinedTable):
            conn.execute("DELETE FROM streamfold.output_swaps WHERE pipeline_name = %s", (p.name,))
        for users_name, table in v.users_tables(v.moved_live(p), v.LIVE).items():
            with contextlib.suppress(psycopg.Error):
                conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.SQL(users_name)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(table)))
    own.drop(made, streamfold_setup.connect_url)


def send(stream: str, path: str, count: int = 20) -> None:
    own.send_kinesis(stream, [(str(k), own.view(k, now_ms(), path, 100)) for k in KEYS[:count]] * 2)


class Traffic:
    """Page views into the stream and a country change, every 0.2 s until stopped."""

    def __init__(self, views: own.OwnPipeline, stream: str) -> None:
        self.views, self.stream = views, stream
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        p, turn = self.views.pipeline, 0
        with self.views.connect() as pg:
            while not self.stopped.is_set():
                turn += 1
                send(self.stream, "/live")
                country = ["NO", "SE", "DK"][turn % 3]
                pg.execute(
                    f"UPDATE {p.profile.table} SET country = %s WHERE id = %s", (country, KEYS[turn % 10])
                )
                time.sleep(0.2)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(timeout=60)


def landed_all(views: own.OwnPipeline, version: pf.Pipeline, inputs: list[sp.Input]) -> bool:
    """Whether the version's enriched table holds as many events as `inputs` (every one an event)."""
    with views.connect() as conn:
        (n,) = conn.execute(f"SELECT count(*) FROM {plan.of(version).enriched_table}").fetchone()
    return n >= len(inputs)


def test_reprocess_a_kinesis_pipeline_swap_and_start_at_a_time(views, streamfold_setup):
    bootstrap, p = streamfold_setup.kafka_bootstrap, views.pipeline
    stream = p.events.kinesis_stream
    assert stream and p.events.kafka_topic is None
    summary = kinesis.client().describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    assert summary["RetentionPeriodHours"] == STREAM_RETENTION_HOURS  # setup created it for reprocessing
    with views.connect() as pg:
        for i in KEYS:
            own.insert_customer(pg, p, i, "NO", tier="gold" if i % 2 else "", vip=i % 3 == 0)

    live = views.start("kinesis", views.home / "live.log")
    k2_pipeline = v.versioned(p, "k2")
    try:
        with Traffic(views, stream):
            sp.wait_until(lambda: views.landed(p.name, "kinesis") > 0, 300, "a batch of the live job")
            assert "events.kafka_topic" in views.refused("reprocess", "--version", "kx", "--source", "kafka")
            assert "in the future" in views.refused("reprocess", "--version", "kx", "--from", "2999-01-01")
            result = views.streamfold("reprocess", "--version", "k2")  # the file's only source: Kinesis
            assert "started the job of k2" in " ".join(result.stderr.split())
            with views.connect() as conn:
                registered = registry.get(conn, p.name, "k2")
            assert registered is not None and registered.source == "kinesis" and registered.from_ms is None
            sp.wait_until(lambda: views.versions()["k2"]["caught_up"], 600, "k2 caught up")
            assert views.versions()["live"]["lag"] != "no batch committed yet"  # its Kinesis checkpoint's

            os.kill(live.pid, signal.SIGTERM)  # the first swap moves the live tables: the live job stops
            live.wait(timeout=180)
            swapped = views.streamfold("swap", "k2")
            assert "now read k2" in " ".join(swapped.stderr.split())
            with views.connect() as conn:
                (offsets,) = conn.execute(
                    "SELECT offsets FROM streamfold.output_swaps WHERE pipeline_name = %s", (p.name,)
                ).fetchone()
            assert any(key.startswith(f"{stream}:shardId-") for key in offsets), offsets
            assert json.loads(views.streamfold("topics", "--json").stdout)["consumers_from"] is not None
            before = views.landed(k2_pipeline.name, "kinesis")
            sp.wait_until(
                lambda: views.landed(k2_pipeline.name, "kinesis") > before, 300, "k2 landing after the swap"
            )

        # A start at a time: the records that arrived before it are not k3's.
        earlier = {item.event_id for item in sp.kinesis_inputs(stream)}
        time.sleep(1.5)  # ApproximateArrivalTimestamp is the endpoint's clock: keep TIME clear of both sides
        start = now_ms()
        time.sleep(1.5)
        # Keys 1-10 land on each of the 3 shards: kinesalite never answers an AT_TIMESTAMP iterator on a
        # shard without a record at or after the time (AWS gives one at the tip; docs/reprocess.md).
        send(stream, "/after", count=10)
        views.streamfold("reprocess", "--version", "k3", "--from", v.pf_time(start))
        k3_pipeline = v.versioned(p, "k3")

        inputs = sp.kinesis_inputs(stream)
        later = [item for item in inputs if item.event_id not in earlier]
        assert len(later) == 20 and len(earlier) > len(later)
        sp.wait_until(lambda: landed_all(views, k2_pipeline, inputs), 600, "k2 to land every event")
        sp.wait_until(lambda: landed_all(views, k3_pipeline, later), 600, "k3 to land its events")
        versions, cdc_dead = own.history(bootstrap, p)  # every change, the last ones included
        want = own.expected(inputs, versions, cdc_dead, p)
        want_k3 = own.expected(later, versions, cdc_dead, p)
        with views.connect() as conn:
            own.assert_matches(conn, want, k2_pipeline)  # every record of the stream, once
            own.assert_matches(conn, want, p)  # the users' names read k2
            own.assert_matches(conn, want_k3, k3_pipeline)  # only what arrived from TIME on

        views.streamfold("drop-version", "k3")
        assert set(views.versions()) == {"live", "k2"}
        assert len(sp.kinesis_inputs(stream)) == len(inputs)  # the stream, a shared input, untouched
    finally:
        if live.poll() is None:
            sp.kill9(live)
        for name in ("k2", "k3"):
            with contextlib.suppress(OSError, ValueError):
                os.killpg(views.version_pid(name), signal.SIGKILL)
