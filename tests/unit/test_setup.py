"""connectors/setup.py: the Debezium connector's config as `streamfold setup` registers it (the registration
and the topics run against a real Connect and broker in tests/e2e/test_cdc.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from common import config, names, plan
from common import pipeline_file as pf
from connectors import setup
from db import capture

PII = {"name", "email", "contactinfo"}
# The default pipeline file's carried columns of public.users.
PUBLIC_USER_COLUMNS = ("userid", "regionid", "gender", "interests", "registertime")
CUSTOMERS = """\
profile:
  table: crm.customers
  key: id
  key_type: bigint
  columns: {tier: text, balance: numeric}
events: {kafka_topic: page_views, key: customer_id, time: ts}
outputs: {cdc_topic_prefix: shop}
"""


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> config.Settings:
    for name in ("STREAMFOLD_CONNECT_PG_HOST", "STREAMFOLD_CONNECT_PG_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("STREAMFOLD_HOME", str(tmp_path))  # no stack.env to fall back on
    monkeypatch.setenv("STREAMFOLD_DEBEZIUM_PASSWORD", "the-secret")
    dsn = "host=db.internal port=6432 dbname=shop user=admin password=x"
    return config.Settings(dsn, "k:9092", "http://c:8083", "", tmp_path)


def test_the_connector_reaches_the_dsns_database_as_the_debezium_role(settings: config.Settings) -> None:
    cfg = setup.connector_config(settings)
    assert (cfg["database.hostname"], cfg["database.port"], cfg["database.dbname"]) == (
        "db.internal",
        "6432",
        "shop",
    )
    assert cfg["database.user"] == config.DEBEZIUM_ROLE
    # A reference the Connect worker resolves from its own environment, never the password itself.
    assert cfg["database.password"] == "${env:STREAMFOLD_DEBEZIUM_PASSWORD}"
    assert "the-secret" not in str(cfg)


def test_connect_may_reach_postgres_by_another_address(
    settings: config.Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMFOLD_CONNECT_PG_HOST", "postgres")
    monkeypatch.setenv("STREAMFOLD_CONNECT_PG_PORT", "5432")
    cfg = setup.connector_config(settings)
    assert (cfg["database.hostname"], cfg["database.port"]) == ("postgres", "5432")


def test_only_the_profile_columns_leave_postgres(settings: config.Settings) -> None:
    cfg = setup.connector_config(settings)
    included = cfg["column.include.list"].split(",")
    users = {c.removeprefix("public.users.") for c in included if c.startswith("public.users.")}
    assert users == set(PUBLIC_USER_COLUMNS) and not users & PII
    assert set(included) - {f"public.users.{c}" for c in users} == {
        "streamfold.cdc_heartbeat.id",
        "streamfold.cdc_heartbeat.ts",
        "streamfold.debezium_signal.id",
        "streamfold.debezium_signal.type",
        "streamfold.debezium_signal.data",
    }
    selected = cfg["snapshot.select.statement.overrides.public.users"]
    assert selected == f"SELECT {', '.join(PUBLIC_USER_COLUMNS)} FROM public.users"


def test_heartbeats_land_in_the_users_topic_in_commit_order(settings: config.Settings) -> None:
    cfg = setup.connector_config(settings)
    assert cfg["transforms.heartbeatToProfiles.replacement"] == names.CDC_USERS_TOPIC
    assert cfg["topic.prefix"] == names.CDC_TOPIC_PREFIX
    assert "streamfold.cdc_heartbeat" in cfg["heartbeat.action.query"]
    assert (cfg["slot.name"], cfg["publication.name"]) == (names.SLOT_NAME, names.PUBLICATION_NAME)
    assert cfg["publication.autocreate.mode"] == "disabled"  # setup creates it, with a column list


def test_the_heartbeat_commits_only_while_the_table_and_its_columns_are_published(
    settings: config.Settings,
) -> None:
    """A capture that was lost (db/capture.py) stops the heartbeat, so CDC progress stops where it did."""
    captured = {"public.users": ("userid", "regionid", "it's")}
    query = setup.connector_config(settings, captured)["heartbeat.action.query"]
    beat = capture.heartbeat_id(plan.of(settings.pipeline))
    assert query == (
        f"INSERT INTO streamfold.cdc_heartbeat (id, ts) SELECT {beat}, "
        "now() WHERE EXISTS (SELECT 1 FROM "
        "pg_publication_tables WHERE pubname = 'streamfold_users' AND schemaname = 'public' AND "
        "tablename = 'users' AND attnames @> ARRAY['userid', 'regionid', 'it''s']::name[]) "
        "ON CONFLICT (id) DO UPDATE SET ts = now()"
    )


def test_the_connector_reads_signals_from_the_signal_table(settings: config.Settings) -> None:
    cfg = setup.connector_config(settings)
    assert cfg["signal.data.collection"] == "streamfold.debezium_signal"
    assert cfg["signal.enabled.channels"] == "source"
    assert "streamfold.debezium_signal" in cfg["table.include.list"].split(",")
    signal = {f"streamfold.debezium_signal.{c}" for c in ("id", "type", "data")}
    assert signal <= set(cfg["column.include.list"].split(","))


def test_a_users_own_table_is_captured_with_its_columns_only(settings: config.Settings) -> None:
    cfg = setup.connector_config(dataclasses.replace(settings, pipeline=pf.parse(CUSTOMERS)))
    assert cfg["table.include.list"] == "crm.customers,streamfold.cdc_heartbeat,streamfold.debezium_signal"
    assert cfg["column.include.list"].split(",")[:3] == [
        "crm.customers.id",
        "crm.customers.tier",
        "crm.customers.balance",
    ]
    assert (
        cfg["snapshot.select.statement.overrides.crm.customers"]
        == "SELECT id, tier, balance FROM crm.customers"
    )
    assert cfg["transforms.heartbeatToProfiles.replacement"] == "shop.crm.customers"
    assert cfg["transforms.heartbeatToProfiles.regex"] == r"shop\.streamfold\.cdc_heartbeat"
    assert (cfg["slot.name"], cfg["publication.name"]) == ("streamfold_customers", "streamfold_customers")
    assert cfg["decimal.handling.mode"] == "string"  # numeric columns arrive as their decimal text
    assert cfg["skipped.operations"] == "none"  # truncates too (Debezium skips them by default)


def test_every_placeholder_is_filled(settings: config.Settings) -> None:
    values = setup.connector_config(settings).values()
    assert [v for v in values if "${" in v and not v.startswith("${env:")] == []


SCANS = CUSTOMERS.replace(
    "events:",
    "tables:\n"
    "  plan: {table: crm.plans, key: code, columns: {price: numeric}, join_on: profile.tier}\n"
    "  depot: {table: ops.depots, key: code, columns: {city: text}, join_on: event.depot}\n"
    "events:",
).replace("time: ts}", "time: ts, fields: {depot: text}}")


def test_every_table_of_the_file_is_captured_into_the_one_cdc_topic(settings: config.Settings) -> None:
    """One connector, one slot, one topic in commit order: one CDC progress covers every table."""
    pipeline = pf.parse(SCANS)
    cfg = setup.connector_config(dataclasses.replace(settings, pipeline=pipeline))
    assert cfg["table.include.list"] == (
        "crm.customers,crm.plans,ops.depots,streamfold.cdc_heartbeat,streamfold.debezium_signal"
    )
    assert cfg["column.include.list"].split(",")[:7] == [
        "crm.customers.id", "crm.customers.tier", "crm.customers.balance",
        "crm.plans.code", "crm.plans.price", "ops.depots.code", "ops.depots.city",
    ]  # fmt: skip
    assert cfg["snapshot.select.statement.overrides"] == "crm.customers,crm.plans,ops.depots"
    assert cfg["snapshot.select.statement.overrides.ops.depots"] == "SELECT code, city FROM ops.depots"
    routed = r"shop\.streamfold\.cdc_heartbeat|shop\.crm\.plans|shop\.ops\.depots"
    assert cfg["transforms.heartbeatToProfiles.regex"] == routed
    assert cfg["transforms.heartbeatToProfiles.replacement"] == plan.of(pipeline).cdc_topic
    query = cfg["heartbeat.action.query"]
    assert query.count("EXISTS (SELECT 1 FROM pg_publication_tables") == 3
    assert "tablename = 'depots' AND attnames @> ARRAY['code', 'city']::name[]" in query


AVRO_CUSTOMERS = CUSTOMERS + "cdc: {format: avro}\n"


def test_a_json_file_keeps_the_json_converters_and_no_registry(settings: config.Settings) -> None:
    cfg = setup.connector_config(settings)
    assert cfg["value.converter"] == cfg["key.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert cfg["value.converter.schemas.enable"] == cfg["key.converter.schemas.enable"] == "false"
    assert not [k for k in cfg if "apicurio" in k or "adjustment" in k]


def test_cdc_avro_writes_confluent_wire_avro_with_the_stacks_registry_login(
    settings: config.Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.REGISTRY_URL_VAR, "http://registry:8080/apis/ccompat/v7")
    monkeypatch.setenv(config.REGISTRY_USER_VAR, "streamfold")
    monkeypatch.setenv(config.REGISTRY_PASSWORD_VAR, "registry-secret")
    avro = setup.connector_config(dataclasses.replace(settings, pipeline=pf.parse(AVRO_CUSTOMERS)))
    plain = setup.connector_config(dataclasses.replace(settings, pipeline=pf.parse(CUSTOMERS)))
    for side in ("key", "value"):
        assert avro[f"{side}.converter"] == "io.apicurio.registry.utils.converter.AvroConverter"
        assert f"{side}.converter.schemas.enable" not in avro
        registry = {k.removeprefix(f"{side}.converter."): v for k, v in avro.items() if k.startswith(side)}
        assert registry == {
            "apicurio.registry.url": "http://registry:8080/apis/registry/v2",
            "apicurio.registry.auto-register": "true",
            "apicurio.registry.find-latest": "true",
            "apicurio.registry.as-confluent": "true",
            "apicurio.registry.use-id": "contentId",
            "apicurio.registry.headers.enabled": "false",
            "apicurio.auth.username": "streamfold",
            # Connect resolves it from its own environment, as the Debezium role's password.
            "apicurio.auth.password": "${env:STREAMFOLD_REGISTRY_PASSWORD}",
            f"{side}.converter": "io.apicurio.registry.utils.converter.AvroConverter",
        }
    assert (avro["schema.name.adjustment.mode"], avro["field.name.adjustment.mode"]) == ("avro", "avro")
    assert "registry-secret" not in str(avro)
    # Everything else, the capture included, is the JSON file's.
    same = {k: v for k, v in avro.items() if "converter" not in k and "adjustment" not in k}
    assert same == {k: v for k, v in plain.items() if "converter" not in k}


def test_cdc_avro_without_a_registry_is_refused(
    settings: config.Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(config.REGISTRY_URL_VAR, raising=False)
    with pytest.raises(
        setup.SetupError, match="cdc.format avro needs a schema registry: set STREAMFOLD_REGISTRY_URL"
    ):
        setup.connector_config(dataclasses.replace(settings, pipeline=pf.parse(AVRO_CUSTOMERS)))
