"""Aggregates grouped by columns of any table: `TABLE.COLUMN` beside an event field and a profile column
(common/pipeline_file.py resolves and validates it), the aggregate's Postgres table typed by the column
(db/pipeline_tables.py), the sink spec reading the column under its table's prefix (pipeline/sink_spec.py)
and the fold limiting a text key's values as it does the profile's (pipeline/cdc_fold.py)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from pyspark.sql import SparkSession

from common import pipeline_file as pf
from common import plan
from common.limits import MAX_KEY_BYTES
from db import pipeline_tables
from pipeline import cdc_fold, records, sink_spec
from tests.unit.test_cdc_fold_tables import envelope, folded
from tests.unit.test_several_tables import SCANS

AGGREGATE = """\
aggregates:
  - name: per_place
    group_by: {country: sender.country, plan: account.plan, status: status}
"""


def with_aggregate(group_by: str, tables: str = SCANS) -> str:
    return f"{tables}aggregates:\n  - name: per_place\n    group_by: {{{group_by}}}\n"


def per_place() -> pf.Pipeline:
    text = SCANS.replace(
        "  fields: {depot: {type: text, required: false}}\n", "  fields: {depot: text, status: text}\n"
    )
    return pf.parse(text + AGGREGATE, "scans.yaml")


def test_a_reference_resolves_to_its_table_beside_events_and_the_profile() -> None:
    pipeline = per_place()
    where = "aggregates.0.group_by.x"
    assert pipeline.resolve("sender.country", where) == ("sender", "country")
    assert pipeline.resolve("account.plan", where) == ("account", "plan")
    assert pipeline.resolve("status", where) == ("event", "status")
    assert pipeline.resolve("profile.weight", where) == ("profile", "weight")
    assert pipeline.reference_type("sender", "country") == "text"


def test_the_aggregate_table_types_a_tables_column_and_keys_it_as_the_profiles() -> None:
    pipeline = per_place()
    columns, key = pipeline_tables.aggregate_columns(plan.of(pipeline).aggregates[0])
    types = {c.name: type(c.type) for c in columns}
    assert types == {
        "country": sa.Text,
        "plan": sa.Text,
        "status": sa.Text,
        "count": sa.BigInteger,
        "status_md5": sa.Uuid,
    }
    # Bounded by the fold (below): the values themselves key the table; an event's text by its md5.
    assert key == ["country", "plan", "status_md5"]
    assert all(not c.nullable for c in columns if c.name in ("country", "plan"))


def test_the_sink_reads_each_key_from_its_tables_prefixed_output_column() -> None:
    pipeline = per_place()
    output = records.join_output(pipeline)
    [spec] = sink_spec.aggregate_specs(plan.of(pipeline), output)
    keys = [(k["column"], output.fieldNames()[k["ordinal"]], k["type"], k["md5"]) for k in spec["keys"]]
    assert keys == [
        ("country", "sender_country", "text", False),
        ("plan", "account_plan", "text", False),
        ("status", "status", "text", True),
    ]


def test_the_fold_limits_a_tables_text_key_as_the_profiles() -> None:
    folded = {t["table"]: t["spec"]["columns"] for t in cdc_fold.tables_spec(per_place())["tables"]}
    assert folded["public.senders"] == [
        {"name": "country", "type": "text", "max_bytes": MAX_KEY_BYTES},
        {"name": "account", "type": "text"},  # grouped by no aggregate: any length
    ]
    assert folded["public.accounts"] == [{"name": "plan", "type": "text", "max_bytes": MAX_KEY_BYTES}]
    assert folded["public.depots"] == [{"name": "city", "type": "text"}]


def test_a_too_long_value_of_a_tables_text_key_is_a_dead_letter(spark: SparkSession) -> None:
    """As a profile's: the aggregate's table keys by the value, and a B-tree row holds ~2.7 KB."""
    long = "x" * (MAX_KEY_BYTES + 1)
    rows = folded(
        spark,
        [
            envelope("senders", "u", {"id": 7, "country": long, "account": "a1"}),
            envelope("senders", "u", {"id": 8, "country": "NL", "account": long}),  # not a key: any length
        ],
        per_place(),
    )
    assert [(r["kind"], r["key"]) for r in rows] == [("error", None), ("change", "8")]
    assert rows[0]["error"].endswith(
        f"after.country of {MAX_KEY_BYTES + 1} bytes exceeds the 1024-byte limit"
    )
    assert rows[1]["t1_account"] == long


def test_a_one_table_files_fold_spec_is_the_profiles_alone() -> None:
    pipeline = pf.load(pf.DEFAULT_PATH)
    assert cdc_fold.tables_spec(pipeline) == {
        "tables": [{"table": pipeline.profile.table, "spec": plan.of(pipeline).profile_spec}]
    }


@pytest.mark.parametrize(
    ("group_by", "message"),
    [
        (
            "c: sendr.country",
            "'sendr' is not the events, the profile or a table of the file (did you mean 'sender'?): "
            "write event.FIELD, profile.COLUMN or TABLE.COLUMN",
        ),
        ("c: sender.vat", "'vat' is not a column sender carries: add it to tables.sender.columns"),
        ("c: sender.countyr", "'countyr' is not a column sender carries (did you mean 'country'?)"),
        (
            "c: sender.id",
            "'id' is sender's key, which the outputs do not carry: group by what it joins on, "
            "profile.sender_id",
        ),
        (
            "c: sender.account",
            "sender's column 'account' is an aggregate key, so it needs a value for events without a sender "
            "row: add `if_missing: UNKNOWN` to tables.sender.columns.account",
        ),
        ("c: country", "'country' is neither an event field nor a profile column (write sender.country)"),
        ("c: depot.city", "depot's column 'city' is an aggregate key"),
    ],
)
def test_a_bad_table_reference_names_its_place_and_the_fix(group_by: str, message: str) -> None:
    text = with_aggregate(group_by)
    with pytest.raises(pf.PipelineFileError) as error:
        pf.parse(text, "scans.yaml")
    line = text.splitlines().index(f"    group_by: {{{group_by}}}") + 1
    assert str(error.value).startswith(f"scans.yaml:{line}: aggregates.0.group_by.c: {message}")


def test_a_tables_column_of_a_type_the_sink_cannot_key_is_refused() -> None:
    text = SCANS.replace("    columns: {city: text}\n", "    columns: {city: text, hours: jsonb}\n")
    with pytest.raises(pf.PipelineFileError, match="group_by.h: the sink cannot group by a jsonb column"):
        pf.parse(with_aggregate("h: depot.hours", text), "scans.yaml")
