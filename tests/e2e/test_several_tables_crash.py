"""kill -9 while the three-table example (examples/parcels/) lands scans that stream in with changes of
every table (a parcel's sender, a sender's country, a depot's region): after a restart, every scan is in
Postgres once and each aggregate equals a GROUP BY over the enriched rows, nothing lost or doubled."""

from __future__ import annotations

import random
import time

import psycopg
import pytest

from common import config, plan
from tests.e2e.test_several_tables_join import assert_totals_group_the_enriched_rows, parcels, scan
from tests.support import own_pipeline as own
from tests.support import pipeline as sp
from tests.support.traffic import Send, Traffic, kafka_sender, kinesis_sender

pytestmark = pytest.mark.e2e

__all__ = ["parcels"]  # the fixture, shared with the join's tests

KILLS = 2
# Sent until the kills are done: the job lags them by at least a batch, so each kill leaves scans to land.
SCANS, SCANS_PER_BATCH = 100_000, 20
PARCELS, SENDERS = range(1, 41), range(1, 9)
DEPOTS = ("HAM", "MUC", "BER", "CGN")
REGIONS = ("north", "south", "east", "west")
COUNTRIES = ("DE", "FR", "NL", "PL")
STATUSES = ("received", "sorted", "loaded", "delivered")


class Scans(Traffic):
    """~200 scans/s of the example's parcels (a few minutes' worth at most), and between batches now and
    then a change of one of its tables."""

    def __init__(self, send: Send, pg: psycopg.Connection, made: own.OwnPipeline) -> None:
        super().__init__(send, pg, [str(n) for n in PARCELS], limit=SCANS)
        self.made = made

    def batch(self, rng: random.Random) -> list[tuple[str, bytes]]:
        now = int(time.time() * 1000)
        return [
            scan(rng.choice(PARCELS), now, rng.choice(DEPOTS), rng.choice(STATUSES))
            for _ in range(SCANS_PER_BATCH)
        ]

    def change(self, rng: random.Random) -> None:
        parcel_t, sender_t, depot_t = tables(self.made)
        which = rng.randrange(3)
        if which == 0:
            self.pg.execute(
                f"UPDATE {sender_t} SET country = %s WHERE id = %s",
                (rng.choice(COUNTRIES), rng.choice(SENDERS)),
            )
        elif which == 1:
            self.pg.execute(
                f"UPDATE {depot_t} SET region = %s WHERE code = %s", (rng.choice(REGIONS), rng.choice(DEPOTS))
            )
        else:
            self.pg.execute(
                f"UPDATE {parcel_t} SET sender_id = %s WHERE id = %s",
                (rng.choice(SENDERS), rng.choice(PARCELS)),
            )


def tables(made: own.OwnPipeline) -> tuple[str, str, str]:
    """The example's parcels, senders and depots tables (tagged)."""
    p = made.pipeline
    return p.profile.table, p.tables["sender"].table, p.tables["depot"].table


def seed(made: own.OwnPipeline) -> None:
    parcel_t, sender_t, depot_t = tables(made)
    with made.connect() as pg:
        cursor = pg.cursor()
        depots = [(code, code.lower(), REGIONS[i]) for i, code in enumerate(DEPOTS)]
        cursor.executemany(f"INSERT INTO {depot_t} VALUES (%s, %s, %s, NULL)", depots)
        senders = [(s, COUNTRIES[s % len(COUNTRIES)]) for s in SENDERS]
        cursor.executemany(f"INSERT INTO {sender_t} VALUES (%s, %s, 'gold', NULL)", senders)
        parcels = [(n, SENDERS[n % len(SENDERS)]) for n in PARCELS]
        cursor.executemany(f"INSERT INTO {parcel_t} VALUES (%s, %s, 'express', 1, NULL)", parcels)


def enriched_rows(made: own.OwnPipeline) -> int:
    with made.connect() as conn:
        return conn.execute(f"SELECT count(*) FROM {plan.of(made.pipeline).enriched_table}").fetchone()[0]


@pytest.mark.parametrize("source", ["kafka", "kinesis"])
def test_kill_9_while_three_tables_land_loses_and_doubles_nothing(
    source: str, parcels: own.OwnPipeline, streamfold_setup: config.Settings
) -> None:
    p, bootstrap = parcels.pipeline, streamfold_setup.kafka_bootstrap
    assert p.events.kafka_topic and p.events.kinesis_stream
    seed(parcels)
    stream, topic = p.events.kinesis_stream, p.events.kafka_topic
    send = kinesis_sender(stream) if source == "kinesis" else kafka_sender(bootstrap, topic)
    log = parcels.home / "job.log"
    kills = []  # (rows before the start, rows at the kill, scans sent before it)
    with parcels.connect() as pg, Scans(send, pg, parcels) as traffic:  # until the kills are done
        for delay in [random.uniform(0, 6) for _ in range(KILLS)]:
            before = enriched_rows(parcels)
            # Killed once the restarted job has landed scans again, at a random moment after.
            with sp.killed_after_a_batch(lambda: parcels.start(source, log), lambda: enriched_rows(parcels)):
                time.sleep(delay)
                sent = traffic.sent  # at most what was sent when the kill comes
            kills.append((before, enriched_rows(parcels), sent))
    parcels.streamfold("run", "--source", source, "--once")

    # Mid-stream: each run landed scans before its kill, and not every scan sent by then.
    assert all(before < at_kill < sent for before, at_kill, sent in kills), kills
    inputs = parcels.inputs(source, bootstrap)
    with parcels.connect() as conn:
        landed = [r[0] for r in conn.execute(f"SELECT event_id FROM {plan.of(p).enriched_table}")]
        assert len(landed) == len(inputs) and set(landed) == {i.event_id for i in inputs}, "every scan, once"
        assert_totals_group_the_enriched_rows(conn, p)
    print(f"{source}: (rows before the start, at the kill, scans sent) {kills}; {len(inputs)} scans in all")
