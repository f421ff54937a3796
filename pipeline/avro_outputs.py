"""Avro outputs (`outputs.format: avro`, docs/avro.md "Avro outputs"): the enriched, changelog and aggregate
topics' values in the Confluent wire format, their schemas registered under `<topic>-value`.

Each topic's writer schema is a record of exactly the columns its JSON objects have (so only carried
columns: the PII boundary holds), each column's type mapped by AVRO_TYPES, a union with null where the value
may be null. The sink registers the schemas once, when it starts (`registered`): a registry outage is
waited out as Postgres's and Kafka's are, never skipped. The executors encode the enriched and changelog
records (jvm/.../sink/AvroValues.java, from the schemas and ids in the sink spec); the driver encodes the
aggregate records, which it builds (`AggregateEncoder`).
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from fastavro import parse_schema, schemaless_writer

from common import config, plan
from common.pipeline_file import Pipeline
from common.registry import RegistryUnavailable, header, register
from pipeline.retry import retrying

TIMESTAMP_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
# A column's type (the sink spec's) as its Avro type. A numeric is its decimal text: a file says no
# precision or scale, which an Avro decimal needs.
AVRO_TYPES: dict[str, Any] = {
    "text": "string",
    "integer": "int",
    "bigint": "long",
    "double": "double",
    "numeric": "string",
    "boolean": "boolean",
    "timestamptz": {"type": "long", "logicalType": "timestamp-micros"},
    "timestamp": {"type": "long", "logicalType": "local-timestamp-micros"},
    "text[]": {"type": "array", "items": ["null", "string"]},
    "jsonb": "string",
    "epoch_ms": TIMESTAMP_MILLIS,  # the event time, the CDC progress at release
    "valid_from_ms": TIMESTAMP_MILLIS,  # null for a version the snapshot read, as JSON leaves it out
}
# What an aggregate's sum of a field of each type is (db.pipeline_tables.SUM_TYPES).
SUM_TYPES = {"integer": "long", "bigint": "long", "double": "double", "numeric": "string"}


def subject(topic: str) -> str:
    """TopicNameStrategy's subject for a topic's values."""
    return f"{topic}-value"


def field(name: str, avro_type: Any, nullable: bool) -> dict[str, Any]:
    if nullable:
        return {"name": name, "type": ["null", avro_type], "default": None}
    return {"name": name, "type": avro_type}


def record(pipeline: Pipeline, name: str, fields: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "record", "name": name, "namespace": f"io.streamfold.{pipeline.name}", "fields": fields}


def enriched_schema(pipeline: Pipeline, spec: dict[str, Any]) -> dict[str, Any]:
    """The enriched topic's record: the enriched table's columns, null where the table allows it."""
    nullable = {c.name: c.nullable for c in plan.of(pipeline).enriched}
    columns = spec["enriched"]["columns"]
    return record(
        pipeline, "enriched", [field(c["name"], AVRO_TYPES[c["type"]], nullable[c["name"]]) for c in columns]
    )


def changelog_schema(pipeline: Pipeline, spec: dict[str, Any]) -> dict[str, Any]:
    """A profile change's record: the key, then the carried columns, valid_from and incomplete, each of
    which may be null."""
    key, *rest = spec["changelog"]["fields"]
    return record(
        pipeline,
        "change",
        [field(key["name"], AVRO_TYPES[key["type"]], False)]
        + [field(f["name"], AVRO_TYPES[f["type"]], True) for f in rest],
    )


def aggregate_schema(pipeline: Pipeline, aggregate: dict[str, Any]) -> dict[str, Any]:
    """An aggregate's totals: its keys, the count and the sums, none null (as in its table)."""
    return record(
        pipeline,
        aggregate["name"],
        [
            *(field(k["column"], AVRO_TYPES[k["type"]], False) for k in aggregate["keys"]),
            field(aggregate["count_column"], "long", False),
            *(field(s["column"], SUM_TYPES[s["type"]], False) for s in aggregate["sums"]),
        ],
    )


class AggregateEncoder:
    """An aggregate topic's values: a current row of aggregates.current_totals in the wire format."""

    def __init__(self, schema_id: int, schema: dict[str, Any]) -> None:
        self.prefix = header(schema_id)
        self.parsed = parse_schema(schema)
        self.names = [f["name"] for f in schema["fields"]]

    def __call__(self, row: tuple) -> bytes:
        out = io.BytesIO()
        out.write(self.prefix)
        schemaless_writer(out, self.parsed, {n: _avro_value(v) for n, v in zip(self.names, row, strict=True)})
        return out.getvalue()


def _avro_value(value: Any) -> Any:
    """A numeric (Decimal) as its text, as the enriched topic carries it; anything else as it is."""
    return str(value) if isinstance(value, Decimal) else value


@dataclass(frozen=True)
class Registered:
    """The sink spec's `avro` section (the JVM's schemas and ids) and the aggregates' encoders by name."""

    spec: dict[str, Any]
    aggregates: dict[str, AggregateEncoder]


def require_registry(pipeline: Pipeline) -> None:
    """A file with Avro outputs needs STREAMFOLD_REGISTRY_URL: say so before any service is asked."""
    if pipeline.outputs.format == "avro" and not config.registry_url():
        raise config.ConfigError(
            f"{config.REGISTRY_URL_VAR} is not set: Avro outputs (outputs.format: avro) need the schema "
            "registry; export it, or start the local stack with `streamfold stack up`"
        )


def registered(pipeline: Pipeline, spec: dict[str, Any], budget_s: float) -> Registered:
    """Registers every output topic's schema (each under `<topic>-value`), through a registry outage of up
    to budget_s seconds."""
    require_registry(pipeline)

    def one(topic: str, schema: dict[str, Any]) -> int:
        return retrying(
            f"the schema registry ({subject(topic)})",
            lambda: register(subject(topic), schema),
            (RegistryUnavailable,),
            budget_s,
        )

    topics = {
        "enriched": (spec["enriched"]["topic"], enriched_schema(pipeline, spec)),
        "changelog": (spec["changelog"]["topic"], changelog_schema(pipeline, spec)),
    }
    jvm = {
        name: {"id": one(topic, schema), "schema": json.dumps(schema)}
        for name, (topic, schema) in topics.items()
    }
    aggregates = {}
    for aggregate in spec["aggregates"]:
        schema = aggregate_schema(pipeline, aggregate)
        aggregates[aggregate["name"]] = AggregateEncoder(one(aggregate["topic"], schema), schema)
    return Registered(jvm, aggregates)
