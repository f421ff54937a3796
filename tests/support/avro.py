"""Avro events for the tests: the default pipeline's clicks as Avro records in two schema versions, written
as streamfold/avro_events.py writes them (registered under a subject, the Confluent wire format)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from common import config
from streamfold.avro_events import TIMESTAMP_MILLIS, encode, header, register
from tests.support import pipeline as sp
from tests.support.kafka import read_all
from tests.support.traffic import Send

__all__ = [
    "TIMESTAMP_MILLIS",
    "UNKNOWN_ID",
    "as_avro_sender",
    "click_schema",
    "decoded",
    "encode",
    "header",
    "register",
    "registry_client",
    "registry_down",
    "through_registry_outage",
]

REQUEST_TIMEOUT_S = 30

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


def as_avro_sender(send: Send, schema_id: int, writer: dict[str, Any]) -> Send:
    """`send`, Traffic's JSON events written as Avro records of `writer` (registered as `schema_id`)."""
    return lambda records: send(
        [(key, encode(schema_id, writer, json.loads(value))) for key, value in records]
    )


def registry_client() -> SchemaRegistryClient:
    """confluent-kafka's client of the registry the settings name (STREAMFOLD_REGISTRY_*), with its login."""
    login = config.registry_auth()
    assert login is not None, "the stack's registry asks for a login"
    # A bounded request: without a timeout a registry that never answers holds a test until pytest's.
    return SchemaRegistryClient(
        {"url": config.registry_url(), "basic.auth.user.info": ":".join(login), "timeout": REQUEST_TIMEOUT_S}
    )


def decoded(registry: SchemaRegistryClient, bootstrap: str, topic: str) -> list[tuple[str, Any]]:
    """Every record of a topic, its key as text and its value read by AvroDeserializer (None: a tombstone)."""
    # The subject from the topic, as streamfold registers it: the default strategy would first ask the
    # registry for the topic's associations, an API Apicurio does not have (404), one request per topic.
    read = AvroDeserializer(registry, conf={"subject.name.strategy.type": "TOPIC"})
    context = SerializationContext(topic, MessageField.VALUE)
    return [
        (m.raw_key.decode() if m.raw_key else "", read(m.raw_value, context) if m.raw_value else None)
        for m in read_all(bootstrap, topic)
    ]


@contextmanager
def registry_down(services: Any) -> Iterator[None]:
    """The session's registry stopped, and started again on leaving, whatever happened."""
    services.stop("registry")
    try:
        yield
    finally:
        services.start("registry")


def through_registry_outage(
    services: Any,
    sandbox: sp.Sandbox,
    pipeline_path: Path,
    retry_line: str,
    done: Callable[[], bool],
    while_down: Callable[[], None] = lambda: None,
) -> str:
    """The continuous job started with the registry stopped: once its log shows `retry_line`,
    `while_down()`, then the registry back, until `done()`; the job must not have stopped. Its log."""
    log = sandbox.home / "job.log"
    job = None
    try:
        with registry_down(services):
            job = sandbox.start(
                "kafka", log, STREAMFOLD_PIPELINE=str(pipeline_path), STREAMFOLD_SINK_RETRY_S="600"
            )
            sp.wait_until(lambda: retry_line in log.read_text(), 240, "the retry line")
            while_down()
            assert job.poll() is None, log.read_text()[-3000:]
        sp.wait_until(done, 300, "the outputs, once the registry is back")
        assert job.poll() is None, log.read_text()[-3000:]
    finally:
        if job is not None:
            sp.kill9(job)
    return log.read_text()
