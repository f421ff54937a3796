"""The outputs of a file with further tables: each table's columns under its prefix, after the profile's,
in the join's output (records.join_output), the enriched table (db/pipeline_tables.py) and the sink spec
(pipeline/sink_spec.py), which lands each enriched column from the output column of its name. A one-table
file's outputs have none of them (its tests hold them as they were)."""

from __future__ import annotations

from common import plan
from db import pipeline_tables
from pipeline import records, sink_spec
from tests.unit.test_several_tables import scans

PREFIXED = ["sender_country", "sender_account", "account_plan", "depot_city"]


def test_each_tables_columns_come_out_under_its_prefix_after_the_profiles() -> None:
    pipeline = scans()
    output = records.join_output(pipeline).fieldNames()
    profile = output.index("profile_weight")
    assert output[profile + 1 : profile + 1 + len(PREFIXED)] == PREFIXED
    table = [c.name for c in pipeline_tables.enriched_columns(pipeline)]
    assert table[table.index("profile_weight") + 1 :][: len(PREFIXED)] == PREFIXED


def test_a_column_with_if_missing_is_never_null_in_the_enriched_table() -> None:
    nullable = {c.name: c.nullable for c in pipeline_tables.enriched_columns(scans())}
    assert {name: nullable[name] for name in PREFIXED} == {
        "sender_country": False,  # if_missing XX
        "sender_account": True,
        "account_plan": False,  # if_missing none
        "depot_city": True,
    }


def test_the_sink_lands_each_tables_column_from_its_output_column() -> None:
    pipeline = scans()
    output = records.join_output(pipeline)
    spec = sink_spec.sink_spec(plan.of(pipeline), output)
    landed = {c["name"]: (output.fieldNames()[c["ordinal"]], c["type"]) for c in spec["enriched"]["columns"]}
    types = {
        join.output(name): column.type
        for join in plan.joins(pipeline)[1:]
        for name, column in join.table.columns.items()
    }
    assert {name: landed[name] for name in PREFIXED} == {name: (name, types[name]) for name in PREFIXED}
