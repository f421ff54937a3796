"""Avro outputs' schemas (pipeline/avro_outputs.py), for a file of every column type: each topic's record
has the fields of its JSON value, in order, of the mapped types (docs/avro.md, "Avro outputs"), and an
aggregate's current totals read back from their wire format as the values Postgres gave."""

from __future__ import annotations

import datetime as dt
import io
from decimal import Decimal
from typing import Any

from fastavro import parse_schema, schemaless_reader

from common import plan
from pipeline import avro_outputs, sink_spec
from tests.unit.test_sink_pipelines import OUTPUT, PIPELINE

SPEC = sink_spec.sink_spec(plan.of(PIPELINE), OUTPUT)


def fields(schema: dict[str, Any]) -> dict[str, Any]:
    parse_schema(schema)  # fastavro refuses a schema that is not Avro
    return {f["name"]: f["type"] for f in schema["fields"]}


def test_the_enriched_record_is_the_enriched_columns_nullable_as_the_table() -> None:
    got = fields(avro_outputs.enriched_schema(PIPELINE, SPEC))
    assert list(got) == [c["name"] for c in SPEC["enriched"]["columns"]]
    assert got["event_id"] == "string" and got["customer_id"] == "long"  # a bigint key
    assert got["ts"] == {"type": "long", "logicalType": "timestamp-millis"}
    assert got["profile_balance"] == ["null", "string"]  # a numeric is its decimal text
    assert got["profile_vip"] == "boolean"  # if_missing: never null
    assert got["profile_since"] == ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    assert got["profile_tags"] == ["null", {"type": "array", "items": ["null", "string"]}]
    assert got["profile_attrs"] == ["null", "string"]
    assert got["score"] == ["null", "int"] and got["ms_on_page"] == ["null", "long"]


def test_the_changelog_record_names_the_key_and_carried_columns_only() -> None:
    got = fields(avro_outputs.changelog_schema(PIPELINE, SPEC))
    assert list(got) == ["id", *PIPELINE.profile.columns, "valid_from", "incomplete"]
    assert got["id"] == "long" and all(isinstance(t, list) and t[0] == "null" for t in list(got.values())[1:])


def test_an_aggregates_totals_read_back_as_postgres_gave_them() -> None:
    aggregate = {
        "name": "totals",
        "keys": [
            {"column": "at", "type": "timestamptz"},
            {"column": "local", "type": "timestamp"},
            {"column": "amount", "type": "numeric"},
            {"column": "vip", "type": "boolean"},
        ],
        "count_column": "n",
        "sums": [{"column": "total", "type": "numeric"}, {"column": "ms", "type": "integer"}],
    }
    schema = avro_outputs.aggregate_schema(PIPELINE, aggregate)
    assert list(fields(schema)) == ["at", "local", "amount", "vip", "n", "total", "ms"]
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    row = (at, at.replace(tzinfo=None), Decimal("12.50"), True, 7, Decimal("-0.001"), 2**40)
    value = avro_outputs.AggregateEncoder(258, schema)(row)
    assert value[:5] == b"\x00\x00\x00\x01\x02"
    read = schemaless_reader(io.BytesIO(value[5:]), parse_schema(schema), None)
    assert read == {
        "at": at,
        "local": at.replace(tzinfo=None),
        "amount": "12.50",
        "vip": True,
        "n": 7,
        "total": "-0.001",
        "ms": 2**40,
    }
