"""What Python hands the JVM join, derived from the pipeline file (no Spark session): the parsers' records,
the tagged input schema, the join spec with its if_missing values, the output names."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pyspark.sql.types import StructType

from common import names
from common import pipeline_file as pf
from pipeline import records
from pipeline.temporal_join import if_missing_value, join_spec, tagged_schema
from tests.support import records as support_records
from tests.support.pipelines import DEFAULT


def test_the_default_files_records_are_the_parsers():
    assert records.click(DEFAULT) == support_records.CLICK
    assert records.change(DEFAULT) == support_records.CHANGE


def test_the_default_join_spec_carries_the_demo_columns_and_the_unknown_region():
    spec = join_spec(DEFAULT)
    assert spec["event_fields"] == ["url", "device_id", "ip"]
    assert spec["profile_columns"] == [
        {"name": "regionid", "type": "text", "if_missing": names.UNKNOWN_REGION},
        {"name": "gender", "type": "text"},
        {"name": "interests", "type": "text[]"},
        {"name": "registertime", "type": "bigint"},
    ]
    assert StructType.fromJson(json.loads(spec["output"])) == records.join_output(DEFAULT)
    json.dumps(spec)  # it travels as JSON


def test_the_tagged_schema_prefixes_event_fields_and_profile_columns():
    assert tagged_schema(DEFAULT).fieldNames() == [
        "kind", "bucket", "key", "ts_ms", "lsn", "event_id", "e_url", "e_device_id", "e_ip", "count",
        "op", "p_regionid", "p_gender", "p_interests", "p_registertime", "unavailable", "drifted", "error",
        "source", "payload", "progress_ms",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "given", "carried"),
    [
        ("text", "UNKNOWN", "UNKNOWN"),
        ("text", "", ""),
        ("integer", -7, -7),
        ("bigint", 2**40, 2**40),
        ("double", 0, 0.0),
        ("double", -0.5, -0.5),
        ("boolean", False, False),
        ("numeric", 0, "0"),
        ("numeric", "12.50", "12.50"),
        ("jsonb", "x", '"x"'),
        ("jsonb", 3, "3"),
    ],
)
def test_if_missing_is_carried_as_a_value_of_the_columns_spark_type(kind: str, given: Any, carried: Any):
    value = if_missing_value("c", pf.ProfileColumn(type=kind, if_missing=given))
    assert value == carried and type(value) is type(carried)


@pytest.mark.parametrize(
    ("kind", "given"),
    [
        ("text", 3),
        ("integer", 2**31),
        ("integer", True),
        ("bigint", "7"),
        ("double", "1.5"),
        ("boolean", 0),
        ("numeric", "ten"),
        ("text[]", "a"),
        ("timestamptz", 0),
    ],
)
def test_an_if_missing_of_another_type_is_refused(kind: str, given: Any):
    # Refused by the file's model, or when the join converts it (a range the model does not know).
    with pytest.raises(ValueError, match=r"if_missing"):
        if_missing_value("c", pf.ProfileColumn(type=kind, if_missing=given))


def test_output_names_that_clash_are_refused():
    clashing = DEFAULT.model_copy(
        update={
            "outputs": DEFAULT.outputs.model_copy(update={"enriched": pf.Enriched(key_column="event_id")})
        }
    )
    with pytest.raises(ValueError, match="event_id"):
        records.join_output(clashing)
