"""The whole topology's transformation (pipeline.topology.enrich: parse, CDC fold, temporal join) on a real
local Spark, fed raw records as the sources deliver them, from file streams instead of Kafka or Kinesis.

Event times are in 2033: the wall-clock floor of the watermark (now - max_wait) never reaches them, so
only the CDC progress written here releases clicks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from common import names
from common import pipeline_file as pf
from pipeline import records
from pipeline.join_config import JoinConfig
from pipeline.topology import enrich
from tests.support.pipelines import DEFAULT
from tests.unit.test_several_tables import scans

pytestmark = pytest.mark.spark

T = 2_000_000_000_000
ARRIVED = T + 100_000  # when the clicks reached their source
RAW_CLICK = "event_id string, source string, payload string, now_ms long"
RAW_CDC = "topic string, key string, value string, event_id string, written_ms long"


def click(event_id: str, user: str, t: int, url: str = "/home") -> dict[str, Any]:
    body = {"userid": user, "url": url, "device_id": "ios", "ip": "10.0.0.1", "event_time": t}
    return raw_click(event_id, json.dumps(body))


def raw_click(event_id: str, payload: str) -> dict[str, Any]:
    return {"event_id": event_id, "source": "kafka:clicks", "payload": payload, "now_ms": ARRIVED}


def change(op: str, user: str, ts: int, region: str | None = None) -> dict[str, Any]:
    """A Debezium envelope as the JSON converter writes it (schemas off)."""
    columns = {"regionid": region, "gender": "OTHER", "interests": None, "registertime": None}
    row = None if region is None else {"userid": user, **columns}  # every carried column, as Debezium sends
    source = {"connector": "postgresql", "ts_ms": ts, "lsn": ts, "snapshot": "true" if op == "r" else "false"}
    envelope = {
        "before": {"userid": user} if op == "d" else None,
        "after": row,
        "op": op,
        "source": source,
        "ts_ms": ts + 5,
    }
    return {
        "topic": names.CDC_USERS_TOPIC,
        "key": json.dumps({"userid": user}),
        "value": json.dumps(envelope),
        "event_id": f"cdc:{user}:{op}:{ts}",
        "written_ms": ts,
    }


def heartbeat(ts: int) -> dict[str, Any]:
    """A heartbeat-table event, routed into the CDC topic: CDC progress."""
    source = {"ts_ms": ts, "lsn": 1, "schema": pf.HEARTBEAT_SCHEMA, "table": pf.HEARTBEAT_TABLE}
    value = json.dumps({"before": None, "after": {"id": 1}, "op": "u", "source": source})
    return {
        "topic": names.CDC_USERS_TOPIC,
        "key": '{"id": 1}',
        "value": value,
        "event_id": f"hb:{ts}",
        "written_ms": ts,
    }


def write(folder: Path, rows: list[dict[str, Any]]) -> None:
    folder.mkdir()
    (folder / "0.json").write_text("".join(json.dumps(r) + "\n" for r in rows))


def run(
    spark: SparkSession, root: Path, raw_clicks: list[dict], cdc: list[dict], pipeline: pf.Pipeline = DEFAULT
) -> list[Row]:
    """One Trigger.AvailableNow run of enrich over the two inputs; every row it emitted."""
    write(root / "clicks", raw_clicks)
    write(root / "cdc", cdc)
    read = spark.readStream.format("json")
    clicks = read.schema(RAW_CLICK).load(str(root / "clicks"))
    changes = read.schema(RAW_CDC).load(str(root / "cdc"))
    joined = enrich(
        clicks.withColumn("payload", F.col("payload").cast("binary")),
        changes.withColumn("key", F.col("key").cast("binary")).withColumn(
            "value", F.col("value").cast("binary")
        ),
        JoinConfig(max_wait_ms=86_400_000),
        pipeline,
    )
    out: list[Row] = []

    def collect(batch: DataFrame, _batch_id: int) -> None:
        out.extend(batch.collect())

    query = (
        joined.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(root / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return out


def test_raw_records_come_out_enriched_rejected_or_as_changelog(spark: SparkSession, tmp_path: Path) -> None:
    cdc = [
        change("r", "alice", T - 50_000, "asia"),  # snapshot: valid from the beginning of time
        change("c", "bob", T + 5_000, "americas"),
        change("u", "alice", T + 10_000, "europe"),
        change("d", "bob", T + 20_000),
        heartbeat(T + 60_000),  # CDC progress past every click
    ]
    raw_clicks = [
        click("c1", "alice", T + 15_000),
        click("c2", "alice", T + 5_000),  # out of order: before alice moved
        click("c3", "bob", T + 10_000),
        click("c4", "bob", T + 25_000),  # after bob's delete
        click("c5", "carol", T + 1_000),  # no such user
        raw_click("c6", "{not json"),
        click("c7", "alice", T + 90_000),  # past the CDC progress: waits in the join
    ]
    rows = run(spark, tmp_path, raw_clicks, cdc)

    assert all(tuple(r.asDict()) == records.names(records.join_output(DEFAULT)) for r in rows)
    joined = {r.event_id: r for r in rows if r.kind == "event"}
    assert {k: (r.uid, r.user_regionid, r.click_time_ms) for k, r in joined.items()} == {
        "c1": ("alice", "europe", T + 15_000),
        "c2": ("alice", "asia", T + 5_000),
        "c3": ("bob", "americas", T + 10_000),
        "c4": ("bob", names.UNKNOWN_REGION, T + 25_000),
        "c5": ("carol", names.UNKNOWN_REGION, T + 1_000),
    }
    assert all(r.profile_complete for r in joined.values())  # released by CDC progress, not max_wait
    assert joined["c2"].profile_valid_from_ms == names.BEGINNING_OF_TIME_MS
    assert joined["c1"].profile_valid_from_ms == T + 10_000
    assert (joined["c1"].click_url, joined["c1"].device_type, joined["c1"].click_location) == (
        "/home",
        "ios",
        "10.0.0.1",
    )

    rejects = [r for r in rows if r.kind == "reject"]
    assert [(r.event_id, r.source, r.payload) for r in rejects] == [("c6", "kafka:clicks", b"{not json")]
    assert rejects[0].error.startswith("not JSON")

    changes = sorted((r.uid, r.change_op, r.user_regionid) for r in rows if r.kind == "change")
    assert changes == [
        ("alice", "r", "asia"),
        ("alice", "u", "europe"),
        ("bob", "c", "americas"),
        ("bob", "d", None),
    ]


def envelope(table: str, op: str, key: dict[str, Any], ts: int, row: dict[str, Any] | None) -> dict[str, Any]:
    """A Debezium change of schema.table as the JSON converter writes it (the one CDC topic of the file)."""
    schema, name = table.split(".")
    source = {"connector": "postgresql", "ts_ms": ts, "lsn": ts, "schema": schema, "table": name}
    before = key if op == "d" else None
    value = {"before": before, "after": row, "op": op, "source": source, "ts_ms": ts + 5}
    return {
        "topic": "scans.cdc",
        "key": json.dumps(key),
        "value": json.dumps(value),
        "event_id": f"cdc:{table}:{op}:{ts}",
        "written_ms": ts + 10,
    }


def scan(event_id: str, parcel: int, t: int, depot: str | None) -> dict[str, Any]:
    return raw_click(event_id, json.dumps({"parcel_id": parcel, "ts": t, "depot": depot}))


def test_a_file_with_tables_runs_the_stages_exact_per_table_around_a_commit(
    spark: SparkSession, tmp_path: Path
) -> None:
    pipeline = scans()
    parcel = {"id": 1, "sender_id": 7, "weight": "1.5"}
    cdc = [
        envelope("public.parcels", "r", {"id": 1}, T - 50_000, parcel),
        envelope("public.senders", "r", {"id": 7}, T - 50_000, {"id": 7, "country": "DE", "account": "a"}),
        envelope("public.accounts", "r", {"code": "a"}, T - 50_000, {"code": "a", "plan": "gold"}),
        envelope("public.depots", "r", {"code": "x"}, T - 50_000, {"code": "x", "city": "Hamburg"}),
        envelope("public.senders", "u", {"id": 7}, T + 10_000, {"id": 7, "country": "FR", "account": "a"}),
        heartbeat(T + 60_000),
    ]
    raw = [
        scan("s1", 1, T + 9_999, "x"),  # a millisecond before the sender moved
        scan("s2", 1, T + 10_000, "x"),  # at its commit
        scan("s3", 1, T + 11_000, "nowhere"),  # a depot no row has
        scan("s4", 2, T + 11_000, None),  # no such parcel, no depot
    ]
    joined = {r.event_id: r for r in run(spark, tmp_path, raw, cdc, pipeline) if r.kind == "event"}
    assert set(joined) == {"s1", "s2", "s3", "s4"}
    assert (joined["s1"].sender_country, joined["s2"].sender_country) == ("DE", "FR")
    assert (joined["s1"].account_plan, joined["s1"].depot_city, joined["s1"].profile_complete) == (
        "gold",
        "Hamburg",
        True,
    )
    assert (joined["s3"].sender_country, joined["s3"].depot_city, joined["s3"].profile_complete) == (
        "FR",
        None,
        True,
    )
    # No parcel: no sender key either, so every table down the chain joins its if_missing.
    s4 = joined["s4"]
    assert (s4.profile_sender_id, s4.sender_country, s4.account_plan, s4.depot_city) == (
        None,
        "XX",
        "none",
        None,
    )
    assert s4.profile_complete is True
