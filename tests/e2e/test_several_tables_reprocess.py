"""Reprocess and swap a pipeline of several tables (docs/reprocess.md) on the three-table example: a new
version rebuilt from the retained events and the CDC topic joins every scan as the live job did, every
table at the scan's time; `swap` points the users' names at it and `swap live` back."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from common import config, plan
from common import versions as v
from tests.e2e.test_own_pipeline_story import produce
from tests.e2e.test_several_tables_join import commit_ms, parcels, scan
from tests.support import own_pipeline as own
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

__all__ = ["parcels"]  # the fixture, shared with the join's tests

COLUMNS = "status, parcel_service, sender_country, sender_tier, depot_city, depot_region"


def joined(made: own.OwnPipeline, relation: str) -> list[tuple]:
    with made.connect() as conn:
        return conn.execute(f"SELECT {COLUMNS} FROM {relation} ORDER BY status").fetchall()


@pytest.fixture
def versioned(parcels: own.OwnPipeline) -> Iterator[own.OwnPipeline]:
    """The example with a version v2 made by the test; after it, back to live and v2 dropped."""
    yield parcels
    p = parcels.pipeline
    with contextlib.suppress(Exception):
        os.killpg(parcels.version_pid("v2"), signal.SIGKILL)
    for args in (("swap", "live"), ("drop-version", "v2")):  # best effort after a failure
        with contextlib.suppress(AssertionError):
            parcels.streamfold(*args)
    with parcels.connect() as conn:  # the swap's views over the moved live tables
        for users_name, table in v.users_tables(v.moved_live(p), v.LIVE).items():
            with contextlib.suppress(psycopg.Error):
                conn.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(sql.SQL(users_name)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.SQL(table)))


def test_a_version_of_a_three_table_file_joins_as_the_live_one(
    versioned: own.OwnPipeline, streamfold_setup: config.Settings
) -> None:
    made, bootstrap = versioned, streamfold_setup.kafka_bootstrap
    p = made.pipeline
    parcel_t, sender_t, depot_t = (p.profile.table, *(t.table for t in p.tables.values()))
    with made.connect() as pg:
        pg.execute(f"INSERT INTO {depot_t} VALUES ('HAM', 'Hamburg', 'north', '+49 1')")
        pg.execute(f"INSERT INTO {sender_t} VALUES (1, 'DE', 'gold', 'a@example.com')")
        pg.execute(f"INSERT INTO {parcel_t} VALUES (7, 1, 'express', 2.5, 'Edna Hook')")
        time.sleep(0.2)
        pg.execute(f"UPDATE {sender_t} SET country = 'FR' WHERE id = 1")
    moved = commit_ms(bootstrap, p, sender_t, "u")
    assert p.events.kafka_topic
    produce(
        bootstrap, p.events.kafka_topic, [scan(7, moved - 1, "HAM", "before"), scan(7, moved, "HAM", "at")]
    )
    made.streamfold("run", "--source", "kafka", "--once")
    live = joined(made, plan.of(p).enriched_table)
    assert live == [
        ("at", "express", "FR", "gold", "Hamburg", "north"),
        ("before", "express", "DE", "gold", "Hamburg", "north"),
    ]

    made.streamfold("reprocess", "--version", "v2")
    v2 = v.versioned(p, "v2")
    sp.wait_until(
        lambda: len(joined(made, plan.of(v2).enriched_table)) == len(live), 600, "v2 rebuilt every scan"
    )
    assert joined(made, plan.of(v2).enriched_table) == live
    sp.wait_until(lambda: made.versions()["v2"]["caught_up"], 300, "v2 caught up")

    assert "now read v2" in " ".join(made.streamfold("swap", "v2").stderr.split())
    assert joined(made, plan.of(p).enriched_table) == live, "the users' name reads v2"
    sender, v2_sender = plan.histories(p)[1], plan.histories(v2)[1]
    with made.connect() as conn:  # a further table's history view and function read v2's table too
        definition = conn.execute("SELECT pg_get_viewdef(%s::regclass)", (sender.view,)).fetchone()
        now = conn.execute(f"SELECT country FROM {sender.function}(1, now())").fetchall()
    assert definition and v2_sender.table.split(".")[1] in definition[0] and now == [("FR",)]
    made.streamfold("swap", "live")
    assert joined(made, plan.of(p).enriched_table) == live
