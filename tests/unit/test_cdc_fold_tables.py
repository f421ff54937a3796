"""The CDC fold of several tables from one topic (pipeline/cdc_fold.py fold_tables, TablesFold in the JVM):
each table's changes typed as the file declares its columns, in one row shape, tagged with their table;
progress of no table; a change of a table the file does not join, a dead letter."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql import SparkSession

from common import names
from common import pipeline_file as pf
from pipeline import cdc_fold
from tests.unit.test_several_tables import scans

TOPIC = "cdc.public.parcels"


def envelope(table: str, op: str, row: dict[str, Any], ts_ms: int = 1_000, schema: str = "public") -> bytes:
    rows = {"before": row, "after": None} if op == "d" else {"before": None, "after": row}
    source = {"ts_ms": ts_ms, "lsn": 7, "schema": schema, "table": table, "snapshot": "false"}
    return json.dumps({**rows, "op": op, "source": source}).encode()


def folded(
    spark: SparkSession, values: list[bytes], pipeline: pf.Pipeline | None = None
) -> list[dict[str, Any]]:
    rows = [(TOPIC, None, v, f"r{i}", 5_000) for i, v in enumerate(values)]
    raw = spark.createDataFrame(
        rows, "topic string, key binary, value binary, event_id string, written_ms long"
    )
    spec = cdc_fold.tables_spec(pipeline or scans())
    return [r.asDict() for r in cdc_fold.fold_tables(raw, spec).collect()]


def test_the_spec_names_each_table_once_in_join_order_with_its_columns_types() -> None:
    spec = cdc_fold.tables_spec(scans())
    got = [
        (t["table"], t["spec"]["key"]["type"], [c["type"] for c in t["spec"]["columns"]])
        for t in spec["tables"]
    ]
    assert got == [
        ("public.parcels", "bigint", ["bigint", "numeric"]),
        ("public.senders", "bigint", ["text", "text"]),
        ("public.accounts", "text", ["text"]),
        ("public.depots", "text", ["text"]),
    ]
    fields = cdc_fold.tables_fold_type(spec).fieldNames()
    assert fields[:8] == ["kind", "table", "key", "op", "valid_from_ms", "lsn", "t0_sender_id", "t0_weight"]
    assert fields[-4:] == ["unavailable", "drifted", "progress_ms", "error"]


def test_a_table_joined_twice_is_folded_once_with_the_columns_of_both_joins() -> None:
    text = scans().model_dump(mode="json", exclude_defaults=True)
    text["tables"]["sender"]["columns"]["parent"] = "bigint"
    text["tables"] = {
        **text["tables"],
        "parent": {
            "table": "public.senders",
            "key": "id",
            "key_type": "bigint",
            "columns": {"vat": "text"},
            "join_on": "sender.parent",
        },
    }
    spec = cdc_fold.tables_spec(pf.Pipeline.model_validate(text))
    senders = [t["spec"] for t in spec["tables"] if t["table"] == "public.senders"]
    assert [[c["name"] for c in s["columns"]] for s in senders] == [["country", "account", "parent", "vat"]]


def test_a_table_joined_twice_on_two_keys_is_refused() -> None:
    text = scans().model_dump(mode="json", exclude_defaults=True)
    text["tables"]["depot"]["table"] = "public.senders"
    twice = pf.Pipeline.model_validate(text)
    with pytest.raises(ValueError, match="public.senders is joined on two keys"):
        cdc_fold.tables_spec(twice)


def test_each_tables_changes_fold_typed_into_its_own_columns(spark: SparkSession) -> None:
    rows = folded(
        spark,
        [
            envelope("parcels", "c", {"id": 42, "sender_id": 7, "weight": "1.50"}),
            envelope("senders", "u", {"id": 7, "country": "NL", "account": "a1"}, ts_ms=2_000),
            envelope("depots", "d", {"code": "AMS", "city": None}, ts_ms=3_000),
            envelope(cdc_fold.HEARTBEAT_TABLE, "u", {"id": 1}, ts_ms=4_000, schema=cdc_fold.HEARTBEAT_SCHEMA),
            envelope("elsewhere", "c", {"id": 1}),
            b"{oops",
            envelope("senders", "c", {"id": "x", "country": "NL"}),
        ],
    )
    rows = [r | {"t0_weight": r["t0_weight"] and str(r["t0_weight"])} for r in rows]
    assert [(r["kind"], r["table"], r["key"], r["op"], r["progress_ms"]) for r in rows] == [
        ("change", "public.parcels", "42", "c", 999),
        ("change", "public.senders", "7", "u", 1_999),
        ("change", "public.depots", "AMS", "d", 2_999),
        ("progress", None, None, None, 3_999),
        ("error", None, None, None, None),
        ("error", None, None, None, None),
        ("error", None, None, None, None),
    ]
    parcel, sender = rows[0], rows[1]
    assert (parcel["t0_sender_id"], parcel["t0_weight"], parcel["t1_country"]) == (7, "1.50", None)
    assert (sender["t0_sender_id"], sender["t1_country"], sender["t1_account"]) == (None, "NL", "a1")
    assert rows[4]["error"] == "a change of public.elsewhere, a table the pipeline file does not join"
    assert rows[4]["event_id"] == "r4" and rows[4]["payload"] is not None
    assert rows[5]["error"].startswith("change event is not JSON")
    assert rows[6]["error"] == "public.senders: change event without a id", "whose change it was"


def test_a_heartbeat_topic_record_is_dropped(spark: SparkSession) -> None:
    raw = spark.createDataFrame(
        [(f"{names.HEARTBEAT_TOPIC_PREFIX}.cdc", None, b'{"ts_ms": 5}', "r0", 5_000)],
        "topic string, key binary, value binary, event_id string, written_ms long",
    )
    assert cdc_fold.fold_tables(raw, cdc_fold.tables_spec(scans())).count() == 0
