"""Events in Avro as a producer with a Confluent-compatible serializer writes them (docs/avro.md): the
writer's schema registered under a subject of the schema registry (its Confluent-compatible API), each
event in the Confluent wire format (a zero byte, the schema id in 4 bytes big-endian, the Avro binary
body), encoded by fastavro. `streamfold generate events` sends such events for a file with `format: avro`.
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Callable
from typing import Any

from fastavro import parse_schema, schemaless_writer

from common import pipeline_file as pf
from common.registry import header, register

TIMESTAMP_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}
TIMESTAMP_MICROS = {"type": "long", "logicalType": "timestamp-micros"}  # a time column's precision
# Each file type as an Avro type it reads (docs/avro.md, "Type mapping").
AVRO_TYPES: dict[str, Any] = {
    "text": "string",
    "integer": "int",
    "bigint": "long",
    "double": "double",
    "numeric": "double",  # as generate's JSON events carry it: a number (a decimal's scale would show)
    "boolean": "boolean",
    "timestamptz": TIMESTAMP_MICROS,
    "timestamp": TIMESTAMP_MICROS,
    "text[]": {"type": "array", "items": "string"},
    "jsonb": {"type": "map", "values": "long"},
}
TIME_TYPES = {"epoch_ms": "long", "epoch_s": "double", "iso8601": "string"}


def subject(pipeline: pf.Pipeline) -> str:
    """The subject the file's events are registered under: the file's, else `<kafka_topic>-value`."""
    events = pipeline.events
    return events.value_subject or events.subject or f"{events.kafka_topic}-value"


def schema(pipeline: pf.Pipeline) -> dict[str, Any]:
    """The file's events as an Avro record: the key, each field (a field the file does not require may be
    null), the event time in the file's format, the count (optional, as in JSON)."""
    events = pipeline.events
    fields: list[dict[str, Any]] = [{"name": events.key, "type": AVRO_TYPES[pipeline.key_type]}]
    for name, field in events.fields.items():
        kind = AVRO_TYPES[field.type]
        fields.append({"name": name, "type": kind} if field.required else _optional(name, kind))
    fields.append({"name": events.time.field, "type": TIME_TYPES[events.time.format]})
    if events.count:
        fields.append(_optional(events.count, "int"))
    return {
        "type": "record",
        "name": "Event",
        "namespace": f"io.streamfold.{pipeline.name}",
        "fields": fields,
    }


def _optional(name: str, kind: Any) -> dict[str, Any]:
    return {"name": name, "type": ["null", kind], "default": None}


def encode(schema_id: int, writer_schema: dict[str, Any], event: dict[str, Any]) -> bytes:
    """One event in the Confluent wire format."""
    body = io.BytesIO()
    body.write(header(schema_id))
    schemaless_writer(body, parse_schema(writer_schema), event)
    return body.getvalue()


def encoder(pipeline: pf.Pipeline) -> Callable[[dict[str, Any]], bytes]:
    """Registers the file's schema, then encodes generated events (generate's values: text times) as
    their Avro types take them."""
    writer = schema(pipeline)
    schema_id = register(subject(pipeline), writer)
    parsed = parse_schema(writer)
    typed = {name: f.type for name, f in pipeline.events.fields.items()}
    prefix = header(schema_id)

    def encoded(event: dict[str, Any]) -> bytes:
        body = io.BytesIO()
        body.write(prefix)
        schemaless_writer(body, parsed, {k: _typed(typed.get(k), v) for k, v in event.items()})
        return body.getvalue()

    return encoded


def _typed(kind: str | None, value: Any) -> Any:
    if value is None:
        return None
    if kind == "numeric":
        return float(value)
    if kind in ("timestamptz", "timestamp"):
        return dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    return value
