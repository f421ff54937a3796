"""Several tables joined end to end (docs/join-semantics.md, "Several tables"): the example users copy,
examples/parcels/ (a chain parcels -> senders through profile.sender_id and an independent lookup of depots
on the scan's depot), its names tagged, through `streamfold setup` and `streamfold run --once` on Kafka and
on Kinesis. Each scan lands in Postgres's enriched table with every table's version valid at its time, exact
to the millisecond around the commit times Debezium recorded (an event a millisecond before a commit joins
the old version, one at it the new); a dangling and a null foreign key join the columns' if_missing and are
complete; a deleted row joins nothing from its commit on. The profile's history, profile_at and changelog
hold each parcel version the join stored, as for a one-table file; each further table has its own history,
view and function. Then the same file in real-time mode (`run --mode realtime`) lands the Kafka scans again,
joined alike."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from common import config, plan
from common import pipeline_file as pf
from tests.e2e.test_own_pipeline_story import produce
from tests.support import own_pipeline as own
from tests.support import pipeline as sp
from tests.support.kafka import read_all

pytestmark = pytest.mark.e2e

EXAMPLE = own.ROOT / "examples" / "parcels"
TABLES = ("parcels", "senders", "depots")


def tagged(text: str, tag: str) -> str:
    """The example's text with every name the shared stack would clash on made unique by `tag`."""
    for table in TABLES:
        text = text.replace(f"public.{table}", f"public.{table}_{tag}")
    return re.sub(r"scans", f"scans_{tag}", text)


@pytest.fixture
def parcels(streamfold_setup: config.Settings, tmp_path: Path) -> Iterator[own.OwnPipeline]:
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as conn:
        conn.execute(tagged((EXAMPLE / "schema.sql").read_text(), tag))
    file = tmp_path / "pipeline.yaml"
    file.write_text(tagged((EXAMPLE / "pipeline.yaml").read_text(), tag))
    made = own.OwnPipeline(streamfold_setup.pg_dsn, file, tmp_path / "home", pf.load(file))
    made.home.mkdir()
    try:
        made.streamfold("setup")
        yield made
    finally:
        p = made.pipeline
        tables = (*plan.of(p).captured, *(a.table for a in plan.of(p).aggregates))
        own.drop_installation(made.dsn, streamfold_setup.connect_url, p, tables)


# The enriched column each reference of the example's aggregates groups (every scan counts 1: no count field).
GROUPED = {"status": "status", "sender.country": "sender_country", "depot.region": "depot_region"}


def totals(conn: psycopg.Connection, aggregate: plan.AggregatePlan) -> list[tuple]:
    keys = ", ".join(key.column for key in aggregate.keys)
    return sorted(conn.execute(f"SELECT {keys}, count FROM {aggregate.table}").fetchall())


def assert_totals_group_the_enriched_rows(conn: psycopg.Connection, p: pf.Pipeline) -> None:
    """Every aggregate of the example holds exactly what a GROUP BY over the enriched table gives, every
    row: no event counted twice or missed."""
    for aggregate, resolved in zip(p.aggregates, plan.of(p).aggregates, strict=True):
        columns = ", ".join(GROUPED[ref] for ref in aggregate.group_by.values())
        grouped = conn.execute(
            f"SELECT {columns}, count(*) FROM {plan.of(p).enriched_table} GROUP BY {columns}"
        ).fetchall()
        assert grouped, aggregate.name
        assert totals(conn, resolved) == sorted(grouped), aggregate.name


def scan(parcel: int, t_ms: int, depot: str, status: str) -> tuple[str, bytes]:
    """A scan at t_ms (ISO-8601, in ms); status names it in the enriched table."""
    at = dt.datetime.fromtimestamp(t_ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
    body = {"parcel_id": parcel, "scanned_at": at.replace("+00:00", "Z"), "depot": depot, "status": status}
    return str(parcel), json.dumps(body).encode()


def commit_ms(bootstrap: str, p: pf.Pipeline, table: str, op: str) -> int:
    """The commit time Debezium recorded for the one `op` change of `table` (schema.name) in the CDC topic."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        for m in read_all(bootstrap, plan.of(p).cdc_topic):
            source = m.value.get("source", {}) if isinstance(m.value, dict) else {}
            if f"{source.get('schema')}.{source.get('table')}" == table and m.value["op"] == op:
                return int(source["ts_ms"])
        time.sleep(1)
    raise AssertionError(f"no {op} of {table} in {plan.of(p).cdc_topic}")


def test_three_tables_join_each_at_the_events_time(parcels: own.OwnPipeline, streamfold_setup) -> None:
    p, bootstrap = parcels.pipeline, streamfold_setup.kafka_bootstrap
    parcel_t, sender_t, depot_t = (p.profile.table, *(t.table for t in p.tables.values()))
    with parcels.connect() as pg:
        pg.execute(f"INSERT INTO {depot_t} VALUES ('HAM', 'Hamburg', 'north', '+49 1'), "
                   "('BER', 'Berlin', 'east', '+49 2')")  # fmt: skip
        pg.execute(f"INSERT INTO {sender_t} VALUES (1, 'DE', 'gold', 'a@example.com')")
        pg.execute(f"INSERT INTO {parcel_t} VALUES (7, 1, 'express', 2.5, 'Edna Hook'), "
                   "(8, 999, 'standard', 1, 'Bob Ng'), (9, NULL, 'economy', 1, 'Alice Smith')")  # fmt: skip
        time.sleep(0.2)
        pg.execute(f"UPDATE {sender_t} SET country = 'FR' WHERE id = 1")
        time.sleep(0.2)
        pg.execute(f"DELETE FROM {depot_t} WHERE code = 'BER'")
    moved = commit_ms(bootstrap, p, sender_t, "u")
    closed = commit_ms(bootstrap, p, depot_t, "d")
    scans = [
        (7, moved - 1, "HAM", "before_move"),
        (7, moved, "HAM", "at_move"),
        (8, moved, "HAM", "dangling"),
        (9, moved, "HAM", "no_sender"),
        (7, closed - 1, "BER", "before_close"),
        (7, closed, "BER", "at_close"),
    ]
    assert p.events.kafka_topic and p.events.kinesis_stream
    produce(bootstrap, p.events.kafka_topic, [scan(*s) for s in scans])
    # The same scans from Kinesis, their status marked: the job reads either source through one path.
    own.send_kinesis(p.events.kinesis_stream, [scan(n, t, d, f"k_{s}") for n, t, d, s in scans])
    parcels.streamfold("run", "--source", "kafka", "--once")
    parcels.streamfold("run", "--source", "kinesis", "--once")

    complete = plan.of(p).names.complete
    with parcels.connect() as conn:
        rows = conn.execute(
            f"SELECT status, parcel_service, sender_country, sender_tier, depot_city, depot_region, "
            f"{complete} FROM {plan.of(p).enriched_table}"
        ).fetchall()
    got: dict[str, Any] = {r[0]: r[1:] for r in rows}
    want = {
        "before_move": ("express", "DE", "gold", "Hamburg", "north", True),
        "at_move": ("express", "FR", "gold", "Hamburg", "north", True),
        "dangling": ("standard", "unknown", None, "Hamburg", "north", True),
        "no_sender": ("economy", "unknown", None, "Hamburg", "north", True),
        "before_close": ("express", "FR", "gold", "Berlin", "east", True),
        "at_close": ("express", "FR", "gold", None, "unknown", True),
    }
    assert len(rows) == len(got) == 12, rows
    assert got == {**want, **{f"k_{status}": joined for status, joined in want.items()}}
    # The profile's history and changelog, as a one-table file's: each parcel version the join stored.
    with parcels.connect() as conn:
        history = conn.execute(
            f"SELECT id, op, sender_id, service, valid_to FROM {plan.of(p).histories[0].view} ORDER BY id"
        ).fetchall()
        at_move = conn.execute(
            f"SELECT service FROM {plan.of(p).histories[0].function}(7, to_timestamp({moved} / 1000.0))"
        ).fetchall()
    assert history == [(7, "c", 1, "express", None), (8, "c", 999, "standard", None),
                       (9, "c", None, "economy", None)]  # fmt: skip
    assert at_move == [("express",)]
    # Each further table's own history, its view and its function (common/plan.py History).
    sender, depot = plan.histories(p)[1:]
    with parcels.connect() as conn:
        senders = conn.execute(
            f"SELECT id, op, country, tier FROM {sender.view} ORDER BY valid_from"
        ).fetchall()
        depots = conn.execute(f"SELECT code, op, city FROM {depot.view} ORDER BY code, valid_from").fetchall()
        before_move = conn.execute(
            f"SELECT country FROM {sender.function}(1, to_timestamp({moved - 1} / 1000.0))"
        ).fetchall()
    assert senders == [(1, "c", "DE", "gold"), (1, "u", "FR", "gold")]
    assert depots == [("BER", "c", "Berlin"), ("BER", "d", None), ("HAM", "c", "Hamburg")]
    assert before_move == [("DE",)]
    # `explain` names each further table's key and its version at the event's time.
    with parcels.connect() as conn:
        ids = dict(conn.execute(f"SELECT status, event_id FROM {plan.of(p).enriched_table}").fetchall())
    said = {status: parcels.streamfold("explain", ids[status]).stdout for status in ("at_move", "at_close")}
    assert re.search(
        r"sender \(profile\.sender_id = 1\): at its time valid .* op u, .*country=FR", said["at_move"]
    )
    assert re.search(r"depot \(event\.depot = HAM\): at its time .*city=Hamburg", said["at_move"])
    assert re.search(r"depot \(event\.depot = BER\): at its time .* op d, .*deleted", said["at_close"])
    changelog = read_all(bootstrap, plan.of(p).changelog_topic)
    assert sorted({(m.key, m.value["service"]) for m in changelog}) == [  # once per source's query
        (7, "express"), (8, "standard"), (9, "economy")]  # fmt: skip
    # Totals by columns of two further tables (sender.country x depot.region), if_missing for no row.
    [per_place] = [
        r
        for a, r in zip(p.aggregates, plan.of(p).aggregates, strict=True)
        if "sender.country" in a.group_by.values()
    ]
    with parcels.connect() as conn:
        assert_totals_group_the_enriched_rows(conn, p)
        stored = totals(conn, per_place)
    assert stored == [
        ("DE", "north", 2), ("FR", "east", 2), ("FR", "north", 2), ("FR", "unknown", 2),
        ("unknown", "north", 4),
    ]  # fmt: skip
    # Its compacted topic: the latest totals per key (`country|region`), as the table holds them.
    latest = {m.raw_key: m.value for m in read_all(bootstrap, per_place.topic)}
    assert latest == {f"{c}|{r}".encode(): {"country": c, "region": r, "count": n} for c, r, n in stored}
    # PII never left the database: not in the CDC topic nor the enriched records.
    for topic in (plan.of(p).cdc_topic, plan.of(p).enriched_topic):
        raw = b"".join(m.raw_value or b"" for m in read_all(bootstrap, topic))
        assert raw and b"example.com" not in raw and b"Edna" not in raw and b"+49" not in raw, topic
    in_real_time_mode_the_kafka_scans_land_joined_alike(parcels, want)


def in_real_time_mode_the_kafka_scans_land_joined_alike(
    parcels: own.OwnPipeline, want: dict[str, tuple[Any, ...]]
) -> None:
    """The same file and scans through `run --mode realtime` (a query and checkpoint of its own, from the
    topics' first records): the enriched and aggregate tables emptied first, each Kafka scan lands again
    once, joined as in micro-batches, and the totals equal a GROUP BY."""
    p = parcels.pipeline
    resolved = plan.of(p)
    with parcels.connect() as conn:
        for table in (resolved.enriched_table, *(a.table for a in resolved.aggregates)):
            conn.execute(f"DELETE FROM {table}")
    log = parcels.home / "realtime.log"
    job = parcels.start("kafka", log, "--mode", "realtime", "--conf=trigger.batch_duration=30m")
    complete = resolved.names.complete
    query = (
        f"SELECT status, parcel_service, sender_country, sender_tier, depot_city, depot_region, {complete} "
        f"FROM {resolved.enriched_table}"
    )

    def landed() -> list[tuple[Any, ...]] | None:
        assert job.poll() is None, log.read_text(errors="replace")[-4000:]
        with parcels.connect() as conn:
            rows = conn.execute(query).fetchall()
        return rows if len(rows) >= len(want) else None

    try:
        rows = sp.wait_until_value(landed, 300, "the Kafka scans in real-time mode")
        with parcels.connect() as conn:  # a row's totals land in its own transaction
            assert_totals_group_the_enriched_rows(conn, p)
        assert len(rows) == len(want), rows
        assert {r[0]: r[1:] for r in rows} == want
        sp.stop_realtime_job(job, log)
    finally:
        if job.poll() is None:
            sp.kill9(job)
