"""The pipeline file: the default file reproduces the demo pipeline's contract exactly, and bad files get
one clear error with the file, the line and the fix (property-based: any typo of any key is caught)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from common import names, plan
from common import pipeline_file as pf
from db import pipeline_tables, tables

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = pf.load(ROOT / pf.DEFAULT_FILE)
MINIMAL = """\
profile:
  table: public.customers
  key: id
  key_type: bigint
  columns: {tier: text, country: {type: text, if_missing: UNKNOWN}}
events:
  kafka_topic: page_views
  key: customer_id
  time: {field: ts, format: iso8601}
  fields: {path: text, ms_on_page: bigint}
aggregates:
  - name: views_per_country
    group_by: {country: country}
    sums: {ms_total: ms_on_page}
"""


def test_the_default_file_names_the_demo_pipeline():
    assert DEFAULT.profile.table == "public.users"
    assert plan.of(DEFAULT).cdc_topic == names.CDC_USERS_TOPIC
    assert (plan.of(DEFAULT).connector, plan.of(DEFAULT).slot, plan.of(DEFAULT).publication) == (
        names.CONNECTOR_NAME,
        names.SLOT_NAME,
        names.PUBLICATION_NAME,
    )
    assert (DEFAULT.events.kafka_topic, DEFAULT.events.kinesis_stream) == (
        names.CLICKS_TOPIC,
        names.CLICKS_STREAM,
    )
    assert (plan.of(DEFAULT).enriched_table, plan.of(DEFAULT).enriched_topic) == (
        names.ENRICHED_CLICKS_TABLE,
        names.USER_CLICKS_TOPIC,
    )
    assert (plan.of(DEFAULT).changelog_topic, plan.of(DEFAULT).dead_letters_topic) == (
        names.USERS_CHANGELOG_TOPIC,
        names.DLQ_TOPIC,
    )
    assert [(a.table, a.topic) for a in plan.of(DEFAULT).aggregates] == [
        (names.CLICKS_PER_REGION_TABLE, names.CLICKS_PER_REGION_TOPIC),
        (names.URL_REGION_TABLE, names.URL_REGION_TOPIC),
    ]
    assert tuple(DEFAULT.profile.columns) == ("regionid", "gender", "interests", "registertime")
    assert DEFAULT.profile.columns["regionid"].if_missing == names.UNKNOWN_REGION


def _shape(table: sa.Table) -> tuple:
    columns = [
        (
            c.name,
            str(c.type),
            c.nullable,
            c.primary_key,
            str(c.computed.sqltext) if c.computed is not None else None,
            str(getattr(c.server_default, "arg", None)),
        )
        for c in table.columns
    ]
    indexes = sorted((i.name, tuple(c.name for c in i.columns)) for i in table.indexes)
    return columns, indexes, list(table.primary_key.columns.keys())


def test_the_default_files_sink_tables_are_the_migrated_ones():
    derived = pipeline_tables.metadata(DEFAULT)
    assert set(derived.tables) == {
        names.ENRICHED_CLICKS_TABLE,
        names.CLICKS_PER_REGION_TABLE,
        names.URL_REGION_TABLE,
        plan.of(DEFAULT).histories[0].table,
    }
    for name, table in derived.tables.items():
        assert _shape(table) == _shape(tables.metadata.tables[name]), name


def test_the_default_specs_are_todays_contract():
    assert plan.of(DEFAULT).event_spec == {
        "key": {"field": "userid", "type": "text"},
        "fields": [{"name": n, "type": "text", "required": True} for n in ("url", "device_id", "ip")],
        "time": {"field": "event_time", "format": "epoch_ms"},
        "count": {"field": "clicks", "max": 1_000_000},
        "max_record_bytes": 65536,
        "min_time_ms": 946_684_800_000,
        "max_future_ms": 60_000,
        "max_key_bytes": 1024,
    }
    profile = plan.of(DEFAULT).profile_spec
    assert profile["key"] == {"column": "userid", "type": "text"}
    assert [c["name"] for c in profile["columns"]] == ["regionid", "gender", "interests", "registertime"]
    assert [c.get("max_bytes") for c in profile["columns"]] == [1024, None, None, None]
    json.dumps(profile)


def test_a_users_own_pipeline_gets_names_and_tables_from_its_file():
    pipeline = pf.parse(MINIMAL)
    assert plan.of(pipeline).cdc_topic == "cdc.public.customers"
    assert (plan.of(pipeline).connector, plan.of(pipeline).slot) == (
        "streamfold-customers",
        "streamfold_customers",
    )
    assert (plan.of(pipeline).enriched_table, plan.of(pipeline).changelog_topic) == (
        "streamfold.enriched_events",
        "customers_changelog",
    )
    meta = pipeline_tables.metadata(pipeline)
    enriched = meta.tables["streamfold.enriched_events"]
    assert [c.name for c in enriched.columns] == [
        "event_id", "customer_id", "ts", "path", "ms_on_page", "profile_tier", "profile_country",
        "profile_valid_from", "profile_complete", "cdc_progress", "released_by_max_wait",
    ]  # fmt: skip
    assert str(enriched.columns["customer_id"].type) == "BIGINT"
    history = meta.tables["streamfold.profile_history_events"]
    assert [c.name for c in history.columns] == [
        "id", "valid_from", "lsn", "op", "incomplete", "tier", "country",
    ]  # fmt: skip
    assert list(history.primary_key.columns.keys()) == ["id", "valid_from", "lsn"]
    views = meta.tables["streamfold.views_per_country"]
    assert [c.name for c in views.columns] == ["country", "count", "ms_total"]
    assert list(views.primary_key.columns.keys()) == ["country"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("profile", "colums"), "profile.colums: unknown key 'colums' (did you mean 'columns'?)"),
        (
            ("profile", "columns", "tier"),
            "profile.columns.tier.type: unknown type 'txt' (did you mean 'text'?)",
        ),
        (("events", "time", "format"), "events.time.format: Input should be"),
        (("profile", "columns", "lsn"), "profile.columns: 'lsn' names a column of the profile history"),
    ],
)
def test_bad_files_name_the_line_and_the_fix(change: tuple[str, ...], expected: str):
    text = {
        ("profile", "colums"): MINIMAL.replace("  columns:", "  colums:"),
        ("profile", "columns", "tier"): MINIMAL.replace("tier: text", "tier: txt"),
        ("events", "time", "format"): MINIMAL.replace("iso8601", "iso"),
        ("profile", "columns", "lsn"): MINIMAL.replace("tier: text", "lsn: text"),
    }[change]
    with pytest.raises(pf.PipelineFileError) as error:
        pf.parse(text, "mine.yaml")
    marks = (change[-1], "txt", "iso}")
    line = next(i for i, text_line in enumerate(text.splitlines(), 1) if any(m in text_line for m in marks))
    assert str(error.value).startswith(f"mine.yaml:{line}: {expected}"), str(error.value)


def test_a_key_given_twice_is_an_error_not_the_last_one():
    text = MINIMAL.replace("  key: id\n", "  key: id\n  key: tier\n")
    with pytest.raises(
        pf.PipelineFileError, match=r"mine.yaml:4: profile.key is given twice \(also on line 3\)"
    ):
        pf.parse(text, "mine.yaml")


def test_cross_field_mistakes():
    cases = {
        MINIMAL.replace(
            "sums: {ms_total: ms_on_page}", "sums: {ms_total: path}"
        ): "is not a numeric event field",
        MINIMAL.replace(
            "group_by: {country: country}", "group_by: {tier: tier}"
        ): "add `if_missing: UNKNOWN`",
        MINIMAL.replace("group_by: {country: country}", "group_by: {c: contry}"): "did you mean 'country'",
        MINIMAL.replace("fields: {path: text", "fields: {ts: text, path: text"): "'ts' is the time field",
        MINIMAL.replace(
            "columns: {tier: text", "columns: {id: text, tier: text"
        ): "the key 'id' is carried anyway",
    }
    for text, expected in cases.items():
        with pytest.raises(pf.PipelineFileError, match=expected):
            pf.parse(text)


def _keys(node: object, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every key path of a parsed YAML document whose key is a name the schema defines (not a column's or
    field's own name)."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _SCHEMA_KEYS and (not path or path[-1] not in _NAMED_BY_USER):
                found.append((*path, key))
            found += _keys(value, (*path, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found += _keys(item, (*path, str(i)))
    return found


_SCHEMA_KEYS = {
    name
    for model in (pf.Pipeline, pf.Profile, pf.ProfileColumn, pf.Events, pf.EventField, pf.EventTime)
    + (pf.Limits, pf.Join, pf.Outputs, pf.Enriched, pf.Aggregate)
    for name in model.model_fields
}
# Mappings whose keys the user names (columns, fields, ...): any name is allowed there.
_NAMED_BY_USER = {"columns", "fields", "values", "group_by", "sums", "event_columns"}
_DEFAULT_DOC = yaml.safe_load((ROOT / pf.DEFAULT_FILE).read_text())


def _rename(doc: object, path: tuple[str, ...], new: str) -> object:
    if not path:
        return doc
    if isinstance(doc, list):
        return [_rename(item, path[1:], new) if str(i) == path[0] else item for i, item in enumerate(doc)]
    assert isinstance(doc, dict)
    out = {}
    for key, value in doc.items():
        if key == path[0]:
            out[new if len(path) == 1 else key] = value if len(path) == 1 else _rename(value, path[1:], new)
        else:
            out[key] = value
    return out


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_misspelt_key_is_an_error_at_its_line(data: st.DataObject):
    path = data.draw(st.sampled_from(_keys(_DEFAULT_DOC)))
    typo = data.draw(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(
            lambda t: t not in _SCHEMA_KEYS
        )
    )
    text = yaml.safe_dump(_rename(_DEFAULT_DOC, path, typo), sort_keys=False)
    with pytest.raises(pf.PipelineFileError) as error:
        pf.parse(text, "p.yaml")
    message = str(error.value)
    line = int(message.split(":")[1])
    assert typo in text.splitlines()[line - 1] or "missing" in message, message


def test_query_has_a_short_name_per_aggregate_and_the_enriched_table():
    from db import queries

    named = queries.named(DEFAULT)
    assert {
        "clicks_per_region",
        "url_region_click_count",
        "enriched_clicks",
        "dead_letters",
        "totals",
    } <= set(named)
    assert named["url_region_click_count"].startswith(
        "SELECT url, region, click_count FROM streamfold.url_region"
    )
    mine = queries.named(pf.parse(MINIMAL))
    assert mine["views_per_country"].startswith(
        "SELECT country, count, ms_total FROM streamfold.views_per_country"
    )
    assert "count(*)" in mine["totals"]  # no count field: every event counts one


def _with_events(text: str, lines: str) -> str:
    """The default file with lines added under `events:` (after its kafka_topic)."""
    return text.replace("  kafka_topic: clicks\n", "  kafka_topic: clicks\n" + lines, 1)


def test_events_are_json_by_default_and_avro_takes_a_subject():
    default = (ROOT / pf.DEFAULT_FILE).read_text()
    assert (DEFAULT.events.format, DEFAULT.events.value_subject) == ("json", None)
    avro = pf.parse(_with_events(default, "  format: avro\n"))
    assert (avro.events.format, avro.events.value_subject) == ("avro", "clicks-value")
    named = pf.parse(_with_events(default, "  format: avro\n  subject: com.example.Click\n"))
    assert named.events.value_subject == "com.example.Click"
    kinesis = default.replace("  kafka_topic: clicks\n", "  format: avro\n  subject: clicks-value\n", 1)
    assert pf.parse(kinesis).events.value_subject == "clicks-value"


@pytest.mark.parametrize(
    ("lines", "line", "expected"),
    [
        ("  format: protobuf\n", 21, "events.format: Input should be 'json' or 'avro', got 'protobuf'"),
        (
            "  subject: clicks-value\n",
            21,
            "events.subject: a subject names Avro events' schemas: add `format: avro`",
        ),
        ("  format: avro\n  subject: a/b\n", 22, "events.subject: 'a/b' is not a registry subject"),
        ("  format: avro\n  subject: ''\n", 22, "events.subject: '' is not a registry subject"),
    ],
)
def test_bad_event_formats_and_subjects_name_the_line(lines: str, line: int, expected: str):
    with pytest.raises(pf.PipelineFileError) as error:
        pf.parse(_with_events((ROOT / pf.DEFAULT_FILE).read_text(), lines), "mine.yaml")
    assert str(error.value).startswith(f"mine.yaml:{line}: {expected}"), str(error.value)


def test_avro_events_from_kinesis_alone_name_their_subject():
    text = (ROOT / pf.DEFAULT_FILE).read_text().replace("  kafka_topic: clicks\n", "  format: avro\n", 1)
    with pytest.raises(pf.PipelineFileError, match=r"events.subject: Avro events from Kinesis alone need"):
        pf.parse(text, "mine.yaml")


def test_change_events_are_json_by_default_and_may_be_avro():
    default = (ROOT / pf.DEFAULT_FILE).read_text()
    assert DEFAULT.cdc.format == "json"
    assert pf.parse(default + "cdc: {format: avro}\n").cdc.format == "avro"
    with pytest.raises(pf.PipelineFileError, match=r"cdc.format: Input should be 'json' or 'avro'"):
        pf.parse(default + "cdc: {format: protobuf}\n")


def test_change_events_may_turn_avro_but_not_back():
    """The Avro fold reads the JSON envelopes the CDC topic holds from before; the JSON fold cannot read
    Avro ones, and the topic keeps every change."""
    from db import pipeline_schema

    avro = pf.parse((ROOT / pf.DEFAULT_FILE).read_text() + "cdc: {format: avro}\n")
    pipeline_schema.check_change(DEFAULT, avro)
    with pytest.raises(pf.PipelineFileError, match="cdc.format: changed from 'avro' to 'json'"):
        pipeline_schema.check_change(avro, DEFAULT)


def test_the_run_mode_is_micro_batch_by_default_and_may_be_realtime():
    assert DEFAULT.run.mode == pf.MICRO_BATCH
    assert pf.parse(MINIMAL + "run: {mode: realtime}\n", "mine.yaml").run.mode == pf.REALTIME


def test_a_bad_run_mode_names_its_line_and_the_modes():
    with pytest.raises(pf.PipelineFileError) as refused:
        pf.parse(MINIMAL + "run:\n  mode: fast\n", "mine.yaml")
    line = len(MINIMAL.splitlines()) + 2
    assert str(refused.value) == (
        f"mine.yaml:{line}: run.mode: Input should be 'micro_batch' or 'realtime', got 'fast'"
    )
