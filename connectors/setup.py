"""`streamfold setup`: schema and roles, topics, the Kinesis stream, and the Debezium connector.

Every step is idempotent, so the compose `setup` service and developers can run it any time.
"""

from __future__ import annotations

import json
import re
import string
import time
import uuid
from collections.abc import Callable
from importlib import resources
from typing import Any

import psycopg
import requests
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from psycopg.conninfo import conninfo_to_dict

from common import config, names, plan, registry
from common import pipeline_file as pf
from db import capture, schema

CLICK_PARTITIONS = 3
# The keyed topics streamfold writes have as many partitions as clicks, and every producer places keys by
# murmur2 as Java clients do (common.topics.producer): a Kafka Streams or ksqlDB application can join
# them with each other and with clicks (co-partitioned: same key, same count, same partitioner).
OUTPUT_PARTITIONS = CLICK_PARTITIONS
# One partition: change events stay in commit order, and CDC progress never runs ahead of a change
# still unread in another partition (the temporal join's completeness relies on it).
CDC_PARTITIONS = 1
# A large profile row must not stop Debezium (a record over the broker's default 1 MB fails its task):
# the CDC topic and Connect's producer (producer.max.request.size) take up to this; the job then
# dead-letters change events over pipeline.cdc_fold.MAX_CHANGE_BYTES.
CDC_MAX_BYTES = 16 * 1024 * 1024


def record_limits(resolved: plan.Plan) -> dict[str, int]:
    """Topics whose records may pass the broker's default 1 MB: the CDC topic, and the job's outputs that
    carry a whole profile (names.OUTPUT_RECORD_MAX_BYTES)."""
    return {
        resolved.cdc_topic: CDC_MAX_BYTES,
        resolved.enriched_topic: names.OUTPUT_RECORD_MAX_BYTES,
        resolved.changelog_topic: names.OUTPUT_RECORD_MAX_BYTES,
    }


def _record_limit(limits: dict[str, int], topic: str) -> dict[str, str]:
    return {"max.message.bytes": str(limits[topic])} if topic in limits else {}


# What reprocessing needs retained (docs/reprocess.md, "Retention"). The CDC topic: every change forever,
# since a version's fold must see every profile version however old (compaction would keep only the last).
# The events topics setup creates: EVENTS_RETENTION_MS, how far back `streamfold reprocess --from` can go.
CDC_RETENTION_MS = -1
EVENTS_RETENTION_MS = 30 * 86_400_000
# The Kinesis stream setup creates: 7 days, the longest of AWS's extended retention (billed per shard-hour;
# beyond it long-term retention is billed per GB-month). A stream that exists keeps its own.
STREAM_RETENTION_HOURS = 168


def retention(resolved: plan.Plan, events: set[str | None]) -> dict[str, int]:
    """retention.ms of the topics setup creates: the CDC topic's, and the events topics'. The CDC topic's is
    raised on a topic an older setup created too; an events topic that exists keeps its own."""
    return {resolved.cdc_topic: CDC_RETENTION_MS, **{t: EVENTS_RETENTION_MS for t in events if t}}


class SetupError(RuntimeError):
    """A set-up step failed; the message says which and why (no stack trace for users)."""


def connector_config(settings: config.Settings, captured: plan.Captured | None = None) -> dict[str, str]:
    """connectors/debezium-postgres.json with endpoints and the pipeline file's names filled in. The
    password stays a reference (`${env:STREAMFOLD_DEBEZIUM_PASSWORD}`) that the Connect worker resolves
    from its own environment, so neither the REST API nor the config topic ever holds it. `captured`: the
    tables and columns it carries (default: the file's; setup passes those of every version reading them).
    Every table's change events and the heartbeats go to the one CDC topic: one partition in commit order,
    so one CDC progress covers every table."""
    template = resources.files("connectors").joinpath("debezium-postgres.json").read_text()
    dsn = conninfo_to_dict(settings.pg_dsn)
    pipeline = settings.pipeline
    resolved = plan.of(pipeline)
    captured = captured or resolved.captured
    heartbeat = f"{pf.HEARTBEAT_SCHEMA}.{pf.HEARTBEAT_TABLE}"
    prefix = pipeline.outputs.cdc_topic_prefix
    routed = [heartbeat, *(t for t in captured if t != pipeline.profile.table)]
    values = {
        # Where Kafka Connect reaches Postgres; differs from the DSN when setup runs outside the containers.
        "PG_HOST": config.lookup("STREAMFOLD_CONNECT_PG_HOST", str(dsn.get("host", "localhost"))),
        "PG_PORT": config.lookup("STREAMFOLD_CONNECT_PG_PORT", str(dsn.get("port", "5432"))),
        "PG_DATABASE": str(dsn.get("dbname", "postgres")),
        "DEBEZIUM_ROLE": config.DEBEZIUM_ROLE,
        "CDC_TOPIC_PREFIX": prefix,
        "CDC_TOPIC": resolved.cdc_topic,
        "CAPTURED_TABLES": ",".join(captured),
        "HEARTBEAT_TABLE": heartbeat,
        "SIGNAL_TABLE": capture.SIGNAL_TABLE,
        "HEARTBEAT_ID": str(capture.heartbeat_id(resolved)),
        # The heartbeat commits only while the publication captures every table and carried column: once
        # it does not (db/capture.py), CDC progress stops where the capture did.
        "CAPTURED_CONDITION": " AND ".join(
            _published_condition(resolved.publication, table, columns) for table, columns in captured.items()
        ),
        # The heartbeat table's and the other tables' events go to the profile topic: CDC progress in
        # commit order with them.
        "ROUTED_TOPIC_REGEX": "|".join(re.escape(f"{prefix}.{table}") for table in routed),
        "INCLUDED_COLUMNS": ",".join(f"{table}.{c}" for table, columns in captured.items() for c in columns),
        "PUBLICATION_NAME": resolved.publication,
        "SLOT_NAME": resolved.slot,
    }
    rendered: dict[str, str] = json.loads(template)
    fill = string.Template
    filled = {fill(key).substitute(values): fill(value).substitute(values) for key, value in rendered.items()}
    # The initial snapshot reads the carried columns only: the Debezium role may read no other.
    filled["snapshot.select.statement.overrides"] = ",".join(captured)
    for table, columns in captured.items():
        filled[f"snapshot.select.statement.overrides.{table}"] = f"SELECT {', '.join(columns)} FROM {table}"
    if pipeline.cdc.format != "avro":
        return filled
    json_only = {k for k in filled if k.endswith(".converter.schemas.enable")}
    return {**{k: v for k, v in filled.items() if k not in json_only}, **avro_converters()}


# Apicurio's Kafka Connect converter (pom.xml's apicurio-converter profile, on Connect's plugin path).
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
# The registry's own v2 API, which Apicurio 2's converter speaks (Apicurio 3 still serves it).
REGISTRY_V2_PATH = "/apis/registry/v2"


def avro_converters() -> dict[str, str]:
    """cdc.format avro: key and value in the Confluent wire format (a zero byte, the 4-byte id the
    registry's ccompat API serves, the Avro payload; no id in headers), schemas registered by the
    converter, the stack's registry login with the password left to Connect's environment (as the
    Debezium role's), and names Avro accepts."""
    url = config.registry_url()
    if not url:
        raise SetupError(f"cdc.format avro needs a schema registry: set {config.REGISTRY_URL_VAR}")
    base = url.removesuffix(registry.CCOMPAT_PATH) + REGISTRY_V2_PATH
    settings = {
        "apicurio.registry.url": base,
        "apicurio.registry.auto-register": "true",
        "apicurio.registry.find-latest": "true",
        "apicurio.registry.as-confluent": "true",
        # ccompat's /schemas/ids/{id} are content ids (Apicurio's default, legacy-id-mode off).
        "apicurio.registry.use-id": "contentId",
        "apicurio.registry.headers.enabled": "false",
    }
    login = config.registry_auth()
    if login:
        settings["apicurio.auth.username"] = login[0]
        settings["apicurio.auth.password"] = f"${{env:{config.REGISTRY_PASSWORD_VAR}}}"
    converters = {
        f"{side}.converter{suffix}": value
        for side in ("key", "value")
        for suffix, value in (("", AVRO_CONVERTER), *((f".{k}", v) for k, v in settings.items()))
    }
    return {**converters, "schema.name.adjustment.mode": "avro", "field.name.adjustment.mode": "avro"}


def _published_condition(publication: str, table: str, columns: tuple[str, ...]) -> str:
    schema, name = table.split(".")
    return (
        f"EXISTS (SELECT 1 FROM pg_publication_tables WHERE pubname = {_literal(publication)} AND "
        f"schemaname = {_literal(schema)} AND tablename = {_literal(name)} AND "
        f"attnames @> ARRAY[{', '.join(map(_literal, columns))}]::name[])"
    )


def _literal(text: str) -> str:
    """A SQL string literal (standard_conforming_strings, PostgreSQL's default since 9.1)."""
    return "'" + text.replace("'", "''") + "'"


def pipeline_topics(pipeline: pf.Pipeline, events_topic: str | None = None) -> list[tuple[str, bool]]:
    """The topics streamfold reads and writes besides the CDC ones, (name, compacted): the events (the
    file's topic, and `events_topic` if another), the enriched events, the changelog, the aggregates, the
    dead letters."""
    events, resolved = (
        dict.fromkeys(t for t in (pipeline.events.kafka_topic, events_topic) if t),
        plan.of(pipeline),
    )
    return [
        *((topic, False) for topic in events),
        (resolved.changelog_topic, True),
        (resolved.enriched_topic, False),
        *((a.topic, True) for a in resolved.aggregates),
        (resolved.dead_letters_topic, False),
    ]


def ensure_topics(bootstrap: str, pipeline: pf.Pipeline, events_topic: str | None = None) -> list[str]:
    """Create the pipeline and CDC topics that are missing (and `events_topic`, if another events topic);
    returns the ones created."""
    admin = AdminClient(config.kafka_client_settings(bootstrap))
    resolved = plan.of(pipeline)
    limits = record_limits(resolved)
    events = {pipeline.events.kafka_topic, events_topic}

    retained = retention(resolved, events)

    def topic(name: str, partitions: int, compacted: bool = False) -> NewTopic:
        settings = {**({"cleanup.policy": "compact"} if compacted else {}), **_record_limit(limits, name)}
        if name in retained:
            settings["retention.ms"] = str(retained[name])
        return NewTopic(name, partitions, 1, config=settings)

    wanted = [
        topic(resolved.cdc_topic, CDC_PARTITIONS),
        topic(resolved.heartbeat_topic, 1),
        *(
            topic(name, CLICK_PARTITIONS if name in events else OUTPUT_PARTITIONS, compacted)
            for name, compacted in pipeline_topics(pipeline, events_topic)
        ),
    ]
    existing = set(admin.list_topics(timeout=30).topics)
    # Topics created by an older setup: raise their record size limits, and the CDC topic's retention.
    raised: dict[str, dict[str, str]] = {t: {"max.message.bytes": str(n)} for t, n in limits.items()}
    raised[resolved.cdc_topic]["retention.ms"] = str(CDC_RETENTION_MS)
    resources = [
        ConfigResource(
            ResourceType.TOPIC,
            topic,
            incremental_configs=[
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in settings.items()
            ],
        )
        for topic, settings in raised.items()
        if topic in existing
    ]
    if resources:
        for future in admin.incremental_alter_configs(resources).values():
            future.result()
    missing = [t for t in wanted if t.topic not in existing]
    if not missing:
        return []
    created = []
    for name, future in admin.create_topics(missing, operation_timeout=30).items():
        try:
            future.result()
            created.append(name)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise SetupError(f"could not create topic {name}: {exc.args[0].str()}") from exc
    return created


def register_connector(connect_url: str, name: str, cfg: dict[str, str]) -> bool:
    """PUT the config (create or update). Returns True when Connect reports a change."""
    try:
        current = requests.get(
            f"{connect_url}/connectors/{name}/config", timeout=30, auth=config.connect_auth()
        )
        if current.status_code == 200 and _same_config(current.json(), cfg):
            return False
        response = requests.put(
            f"{connect_url}/connectors/{name}/config", json=cfg, timeout=120, auth=config.connect_auth()
        )
    except requests.ConnectionError as exc:
        raise SetupError(f"Kafka Connect is not reachable at {connect_url}: {exc}") from exc
    if response.status_code >= 400:
        raise SetupError(f"Kafka Connect rejected connector {name}: {_error_text(response)}")
    return True


def reconfigure_stopped(connect_url: str, name: str, cfg: dict[str, str], timeout_s: float) -> bool:
    """Stop the connector (its tasks shut down, its offsets kept), PUT the config, resume it: its tasks then
    start with the new config. A config PUT alone restarts the tasks some time later, and a signal the old
    task reads first is executed against the old table list, so it is lost."""
    if _state(connect_url, name)[1] < 0:  # no such connector (yet): it starts with this config
        return register_connector(connect_url, name, cfg)
    _connect_call("put", f"{connect_url}/connectors/{name}/stop", name)
    deadline = time.monotonic() + timeout_s
    while (state := _state(connect_url, name)) != ("STOPPED", 0):
        if time.monotonic() > deadline:
            raise SetupError(f"connector {name} did not stop within {timeout_s:.0f}s (it is {state})")
        time.sleep(0.5)
    changed = register_connector(connect_url, name, cfg)
    _connect_call("put", f"{connect_url}/connectors/{name}/resume", name)
    return changed


def _connect_call(method: str, url: str, name: str) -> None:
    try:
        response = requests.request(method, url, timeout=30, auth=config.connect_auth())
    except requests.ConnectionError as exc:
        raise SetupError(f"Kafka Connect is not reachable at {url}: {exc}") from exc
    if response.status_code >= 400:
        action = url.rsplit("/", 1)[1]
        raise SetupError(f"Kafka Connect refused to {action} connector {name}: {_error_text(response)}")


def _state(connect_url: str, name: str) -> tuple[str, int]:
    """The connector's state and how many tasks it has."""
    response = requests.get(f"{connect_url}/connectors/{name}/status", timeout=30, auth=config.connect_auth())
    if response.status_code != 200:
        return (f"unknown (HTTP {response.status_code})", -1)
    status = response.json()
    return (status["connector"]["state"], len(status.get("tasks", [])))


def wait_until_running(
    connect_url: str, name: str, timeout_s: float = 120, on_wait: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Poll the status API until connector and every task are RUNNING; a FAILED task is an error."""
    deadline = time.monotonic() + timeout_s
    last = "no status yet"
    while time.monotonic() < deadline:
        response = requests.get(
            f"{connect_url}/connectors/{name}/status", timeout=30, auth=config.connect_auth()
        )
        if response.status_code == 200:
            status = response.json()
            failure = _failure(status)
            if failure:
                raise SetupError(f"connector {name} failed: {failure}")
            tasks = status.get("tasks", [])
            last = f"connector {status['connector']['state']}, tasks {[t['state'] for t in tasks]}"
            if (
                status["connector"]["state"] == "RUNNING"
                and tasks
                and all(t["state"] == "RUNNING" for t in tasks)
            ):
                return status
        if on_wait:
            on_wait(last)
        time.sleep(1)
    raise SetupError(f"connector {name} not running after {timeout_s:.0f}s ({last})")


def _failure(status: dict[str, Any]) -> str | None:
    for part in (status["connector"], *status.get("tasks", [])):
        if part.get("state") == "FAILED":
            trace = part.get("trace", "") or "no trace"
            # The first lines name the cause (e.g. password authentication failed).
            return " | ".join(line.strip() for line in trace.splitlines()[:3])
    return None


def _same_config(current: dict[str, str], wanted: dict[str, str]) -> bool:
    return {k: v for k, v in current.items() if k != "name"} == {
        k: v for k, v in wanted.items() if k != "name"
    }


def _error_text(response: requests.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    message = body.get("message", "")
    # Validation errors list each bad field; keep the ones with messages.
    errors = [
        f"{c['value']['name']}: {'; '.join(c['value']['errors'])}"
        for c in body.get("configs", [])
        if c.get("value", {}).get("errors")
    ]
    return "; ".join([message, *errors]) if errors else message or response.text[:500]


def run_setup(settings: config.Settings, timeout_s: float = 180, echo: Callable[[str], None] = print) -> None:
    """Every step of `streamfold setup`, in order; each is a no-op when already done. A table added to the
    file is snapshotted once the connector captures it. A capture that was lost (db/capture.py) is
    published again, then recaptured by an incremental snapshot of the table; so is a table whose profiles'
    current versions have drifted columns, once the columns are back."""
    lost = schema.capture_lost(settings.pg_dsn, settings.pipeline)
    added = schema.added_tables(settings.pg_dsn, settings.pipeline)
    before, after = schema.apply(
        settings.pg_dsn, settings.pipeline, echo=lambda change: echo(f"tables: {change}")
    )
    moved = "" if before == after else f", upgraded from {before or 'no revision'}"
    echo(f"schema at revision {after} (head{moved}); roles and publication applied")
    created = ensure_topics(settings.kafka_bootstrap, settings.pipeline, settings.clicks_topic)
    echo(f"topics: created {', '.join(created)}" if created else "topics: all present")
    if settings.kinesis_endpoint or config.aws_settings()["region_name"]:
        from common import kinesis

        stream = settings.clicks_stream
        made = kinesis.ensure_stream(
            kinesis.client(), stream, shards=CLICK_PARTITIONS, retention_hours=STREAM_RETENTION_HOURS
        )
        kept = f"created, retention {STREAM_RETENTION_HOURS} h" if made else "exists, keeps its retention"
        echo(f"kinesis stream {stream}: active ({kept})")
    resolved = plan.of(settings.pipeline)
    connector = resolved.connector
    captured = schema.shared_capture(settings.pg_dsn, settings.pipeline)
    cfg = connector_config(settings, captured)
    if added:  # the new table list must be in force before the snapshot's signal is read
        changed = reconfigure_stopped(settings.connect_url, connector, cfg, timeout_s)
    else:
        changed = register_connector(settings.connect_url, connector, cfg)
    echo(f"connector {connector}: {'registered' if changed else 'unchanged'}; waiting until it runs")
    wait_until_running(settings.connect_url, connector, timeout_s)
    echo(f"connector {connector}: RUNNING")
    with psycopg.connect(settings.pg_dsn) as conn:
        drifted = capture.drifted(conn, resolved)
    if added:
        snapshot_added(settings, added, echo)
    if lost or drifted.profiles:
        recapture(settings, lost, drifted, echo)


def snapshot_added(settings: config.Settings, added: tuple[str, ...], echo: Callable[[str], None]) -> None:
    """Tables the file joins that no earlier setup captured: the connector streams their changes from now
    on, and a blocking snapshot reads their rows as the initial snapshot read the others', valid from the
    beginning (docs/join-semantics.md, "Several tables"). The other tables are not read again; their
    streaming pauses while the new tables are read."""
    with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
        signal = f"streamfold-added-{uuid.uuid4().hex}"
        capture.request_snapshot(conn, list(added), signal, capture.BLOCKING)
    connector = plan.of(settings.pipeline).connector
    echo(
        f"{', '.join(added)} added to the pipeline; connector {connector}: snapshot of "
        f"{'it' if len(added) == 1 else 'them'} requested (rows valid from the beginning)"
    )


def recapture(
    settings: config.Settings,
    lost: tuple[capture.CaptureLost, ...],
    drifted: capture.Drifted,
    echo: Callable[[str], None],
) -> None:
    """The publication carries the tables again, or the drifted columns are back: ask the connector to read
    the tables again, so the changes made meanwhile reach the job (as versions valid from when they are
    read) and replace the versions with unknown columns."""
    why = {found.table: "had been lost and is restored" for found in lost}
    if drifted.profiles:
        why.setdefault(drifted.table, f"left {drifted.profiles} profiles with drifted columns")
    with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
        capture.request_snapshot(conn, list(why), f"streamfold-recapture-{uuid.uuid4().hex}")
    for table, reason in why.items():
        echo(
            f"capture of {table} {reason}; connector {plan.of(settings.pipeline).connector}: "
            "incremental snapshot of the table requested (its rows are read again, each a version valid "
            "from when it is read)"
        )
