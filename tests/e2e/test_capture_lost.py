"""A capture lost and repaired, on the real stack (db/capture.py): `ALTER TABLE ... DROP COLUMN ... CASCADE`
of a carried column drops the table from the publication while Debezium keeps running. CDC progress must stop
there (the heartbeat commits only while the table is published), so events after it wait and come out
incomplete; `status --check` fails naming the table; `setup` publishes it again and recaptures the table, so
the change made in the gap reaches the join. A renamed column, renamed back, is recaptured the same way."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from common import plan, topics
from tests.support import own_pipeline as own
from tests.support import pipeline as sp
from tests.support.kafka import read_all

pytestmark = pytest.mark.e2e

MAX_WAIT = "3s"


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def customers(streamfold_setup, tmp_path: Path) -> Iterator[own.OwnPipeline]:
    made = own.create(streamfold_setup.pg_dsn, tmp_path / "capture-lost")
    yield made
    own.drop(made, streamfold_setup.connect_url)


def send_view(bootstrap: str, pipeline, t_ms: int, path: str) -> None:
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    producer.produce(pipeline.events.kafka_topic, key="1", value=own.view(1, t_ms, path))
    assert producer.flush(30) == 0


def joined(customers: own.OwnPipeline, path: str) -> tuple[str, bool] | None:
    """The enriched view of `path`: its country and profile_complete, once the job landed it."""
    with customers.connect() as conn:
        row = conn.execute(
            "SELECT profile_country, profile_complete FROM "
            f"{plan.of(customers.pipeline).enriched_table} WHERE path = %s",
            (path,),
        ).fetchone()
    return None if row is None else (row[0], row[1])


def recaptured(bootstrap: str, topic: str) -> bool:
    """Whether the incremental snapshot's read of customer 1 reached the CDC topic."""
    for message in read_all(bootstrap, topic):
        envelope = message.value
        if isinstance(envelope, dict) and envelope.get("op") == "r":
            source = envelope["source"]
            if source.get("snapshot") == "incremental" and envelope["after"]["id"] == 1:
                return True
    return False


def status_check(customers: own.OwnPipeline) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamfold", "status", "--check"],
        capture_output=True, text=True, timeout=300, env=customers.env(), cwd=own.ROOT,
    )  # fmt: skip


def test_a_lost_capture_holds_progress_and_setup_recaptures_the_gap(customers, streamfold_setup, tmp_path):
    bootstrap, p = streamfold_setup.kafka_bootstrap, customers.pipeline
    with customers.connect() as pg:
        own.insert_customer(pg, p, 1, "NO", tier="gold")
    job = subprocess.Popen(
        [sys.executable, "-m", "streamfold", "run", "--source", "kafka", f"--conf=join.max_wait={MAX_WAIT}"],
        stdout=(tmp_path / "job.log").open("a"), stderr=subprocess.STDOUT, env=customers.env(), cwd=own.ROOT,
        start_new_session=True,
    )  # fmt: skip
    try:
        time.sleep(1)
        send_view(bootstrap, p, now_ms(), "/before")
        before = sp.wait_until_value(lambda: joined(customers, "/before"), 300, "the first view joined")
        assert before == ("NO", True)
        assert status_check(customers).returncode == 0

        with customers.connect() as pg:
            pg.execute(f"ALTER TABLE {p.profile.table} DROP COLUMN tier CASCADE")
            pg.execute(f"UPDATE {p.profile.table} SET country = 'SE' WHERE id = 1")
        time.sleep(1)
        send_view(bootstrap, p, now_ms(), "/gap")
        gap = sp.wait_until_value(lambda: joined(customers, "/gap"), 120, "the view in the gap released")
        assert gap == ("NO", False)  # released by join.max_wait, not by heartbeats of a lost capture
        check = status_check(customers)
        assert check.returncode == 1
        screen = " ".join(check.stdout.split())
        assert f"capture lost: {p.profile.table} is not in publication {plan.of(p).publication}" in screen
        assert "streamfold setup" in screen

        with customers.connect() as pg:
            pg.execute(f"ALTER TABLE {p.profile.table} ADD COLUMN tier text")
        result = customers.streamfold("setup")
        repaired = " ".join((result.stdout + result.stderr).split())
        assert f"capture of {p.profile.table} had been lost and is restored" in repaired
        assert "incremental snapshot of the table requested" in repaired
        sp.wait_until(lambda: recaptured(bootstrap, plan.of(p).cdc_topic), 120, "the table read again")
        assert status_check(customers).returncode == 0
        send_view(bootstrap, p, now_ms() + 1000, "/after")
        after = sp.wait_until_value(lambda: joined(customers, "/after"), 120, "the view after the repair")
        assert after == ("SE", True)

        # A renamed column drifts: the customer's next version holds it unknown, and status stays red
        # (read from the history) until setup, with the column back, recaptures the table.
        with customers.connect() as pg:
            pg.execute(f"ALTER TABLE {p.profile.table} RENAME COLUMN country TO land")
            pg.execute(f"UPDATE {p.profile.table} SET tier = 'silver' WHERE id = 1")
        sp.wait_until(lambda: "drifted columns" in status_check(customers).stdout, 120, "the drift in status")
        with customers.connect() as pg:
            pg.execute(f"ALTER TABLE {p.profile.table} RENAME COLUMN land TO country")
        result = customers.streamfold("setup")
        repaired = " ".join((result.stdout + result.stderr).split())
        assert f"capture of {p.profile.table} left 1 profiles with drifted columns" in repaired
        sp.wait_until(lambda: status_check(customers).returncode == 0, 120, "the drift replaced")
    finally:
        sp.kill9(job)
    log = (tmp_path / "job.log").read_text()
    stalled = [line for line in log.splitlines() if "CDC stalled" in line]
    assert any(f"capture lost: {p.profile.table} is not in publication" in line for line in stalled), log[
        -3000:
    ]
