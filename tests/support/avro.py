"""Avro events for the tests: the default pipeline's clicks as Avro records in two schema versions, written
as streamfold/avro_events.py writes them (registered under a subject, the Confluent wire format)."""

from __future__ import annotations

from typing import Any

from streamfold.avro_events import TIMESTAMP_MILLIS, encode, header, register

__all__ = ["TIMESTAMP_MILLIS", "UNKNOWN_ID", "click_schema", "encode", "header", "register"]

# The highest id the wire format can carry: no test registers that many schemas.
UNKNOWN_ID = 2**31 - 1


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
