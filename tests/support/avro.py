"""Avro events as a Kafka producer with a Confluent-compatible serializer writes them: the writer's schema
registered under a subject of the stack's registry (its Confluent-compatible API), each event in the
Confluent wire format (a zero byte, the schema id in 4 bytes big-endian, the Avro binary body), encoded by
fastavro."""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import requests
from fastavro import parse_schema, schemaless_writer

from common import config

SCHEMA_TYPE = "application/vnd.schemaregistry.v1+json"
# The highest id the wire format can carry: no test registers that many schemas.
UNKNOWN_ID = 2**31 - 1
TIMESTAMP_MILLIS = {"type": "long", "logicalType": "timestamp-millis"}


def click_schema(name: str = "Click", time_type: Any = "long", extra: bool = False) -> dict[str, Any]:
    """The default pipeline's clicks (streamfold.yaml) as an Avro record: the count optional, as in JSON.
    extra: a later version of the writers' schema, with a field the file does not name, the fields in
    another order and the event time a timestamp-millis (docs/avro.md, "Schema evolution")."""
    fields = [
        {"name": "userid", "type": "string"},
        {"name": "url", "type": "string"},
        {"name": "device_id", "type": "string"},
        {"name": "ip", "type": "string"},
        {"name": "event_time", "type": time_type},
        {"name": "clicks", "type": ["null", "int"], "default": None},
    ]
    if extra:
        fields = [{"name": "referrer", "type": ["null", "string"], "default": None}, *reversed(fields)]
    return {"type": "record", "name": name, "namespace": "io.streamfold.test", "fields": fields}


def register(subject: str, schema: dict[str, Any]) -> int:
    """The id the stack's registry gives the schema under the subject (the same id for a schema it has)."""
    answer = requests.post(
        f"{config.registry_url()}/subjects/{subject}/versions",
        json={"schema": json.dumps(schema)},
        headers={"Content-Type": SCHEMA_TYPE},
        auth=config.registry_auth(),
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return int(answer.json()["id"])


def encode(schema_id: int, schema: dict[str, Any], event: dict[str, Any]) -> bytes:
    """One event in the Confluent wire format."""
    body = io.BytesIO()
    body.write(b"\x00" + struct.pack(">I", schema_id))
    schemaless_writer(body, parse_schema(schema), event)
    return body.getvalue()


def header(schema_id: int) -> bytes:
    """The wire format's header alone: with a body, a record of a schema the test chooses."""
    return b"\x00" + struct.pack(">I", schema_id)
