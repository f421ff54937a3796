"""Event records in the job: the event parser, one Java UDF per event spec.

An event spec (a dict, sent to the JVM as JSON) says what an event record holds: its key, its fields with
their types (pipeline/field_types.py), the event-time field and format, an optional count field, and the
limits. spec/events.py parse_event is its executable contract, rules and reasons; `parse` runs the same in
the JVM (no Python per record): jvm/.../events/EventParse.java, with a streaming fast path for plain events
(PlainEvent.java), held to parse_event by differential fuzz tests (tests/unit/test_parsers_spark.py).

The parsed frame's columns: event_id, the key (named as its JSON field), each field (by its name, of its
Spark type), click_time_ms and clicks (the job's names for the event time and the count, whatever the
JSON calls them), then error, source and payload (the records.REJECT columns, null on an event).

Avro events (the file's `events.format: avro`, docs/avro.md) take another UDF with the same row and the
same reasons: jvm/.../events/AvroEventParse.java, which reads the writer's schema by id from the registry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from common import config
from common import pipeline_file as pf
from pipeline import records, retry
from pipeline.field_types import spark_type

MAX_RECORD_BYTES = 64 * 1024
# Event times before this are not real clicks (2000-01-01T00:00:00Z).
MIN_EVENT_MS = 946_684_800_000
MAX_CLICKS = 1_000_000
# The job's columns for an event's time and count (records.click), whatever the JSON names them.
TIME_COLUMN = "click_time_ms"
COUNT_COLUMN = "clicks"
PARSE_UDF = "streamfold_parse_event"
_RESERVED = frozenset({"event_id", TIME_COLUMN, COUNT_COLUMN, *records.names(records.REJECT)})


def parse_type(spec: dict[str, Any]) -> StructType:
    """The row EventParse returns, by position: the key, each field, the time, the count (all null on a
    reject), the error. That is records.click(p) without event_id, then the error."""
    key = spec["key"]["field"]
    fields = [StructField(f["name"], spark_type(f["type"])) for f in spec["fields"]]
    names = [key, *(f.name for f in fields)]
    clashing = sorted({n for n in names if n in _RESERVED or names.count(n) > 1})
    if clashing:
        raise ValueError(f"event spec: column names {clashing} clash (reserved: {sorted(_RESERVED)})")
    return StructType(
        [
            StructField(key, StringType()),
            *fields,
            StructField(TIME_COLUMN, LongType()),
            StructField(COUNT_COLUMN, IntegerType()),
            records.REJECT["error"],
        ]
    )


def parsed_columns(spec: dict[str, Any]) -> tuple[str, ...]:
    """What `parse` returns: event_id, an event's columns, and the reject columns (null on an event)."""
    return ("event_id", *parse_type(spec).fieldNames(), "source", "payload")


def register_java_udf(spark: SparkSession, name: str, udf: Any, return_type: StructType) -> None:
    """Register a Java UDF instance (it carries its spec to the executors when Spark serialises it)."""
    session: Any = spark._jsparkSession
    session.udf().register(name, udf, session.parseDataType(return_type.json()))


@dataclass(frozen=True)
class Registry:
    """Where the executors read Avro events' writer schemas: the registry's Confluent-compatible API, its
    login ("" for none), and how long a task waits out the registry's outage before it fails (Spark then
    retries it: nothing is lost, and no good record is dead-lettered for want of its schema)."""

    url: str
    user: str
    password: str = field(repr=False)
    retry_ms: int

    @staticmethod
    def configured() -> Registry:
        """The stack's registry (its URL, user and password settings) and the sinks' retry budget."""
        url = config.registry_url()
        if not url:
            raise config.ConfigError(
                f"{config.REGISTRY_URL_VAR} is not set: Avro events (events.format: avro) need the schema "
                "registry; export it, or start the local stack with `streamfold stack up`"
            )
        user, password = config.registry_auth() or ("", "")
        return Registry(url, user, password, int(retry.retry_budget_s() * 1000))


def registry_for(pipeline: pf.Pipeline) -> Registry | None:
    """The registry the file's events need: None for JSON events."""
    return Registry.configured() if pipeline.events.format == "avro" else None


def _parser(jvm: Any, spec_json: str, registry: Registry | None) -> Any:
    """The JVM parser of the events' format. The registry's login travels inside the UDF, as the sink's
    Postgres login travels in its call (pipeline/sinks.land): never in a Spark setting or a log line."""
    events = jvm.io.streamfold.events
    if registry is None:
        return events.EventParse(spec_json)
    return events.AvroEventParse(spec_json, registry.url, registry.user, registry.password, registry.retry_ms)


def parse(raw: DataFrame, spec: dict[str, Any], registry: Registry | None = None) -> DataFrame:
    """Columns event_id, source, payload (binary), now_ms -> parsed_columns(spec); error NULL for an event,
    else the reason, with the original payload (NULL for an event). registry: the events are Avro, their
    schemas read from it; None: JSON.

    One Java UDF (jvm/src/main/java/io/streamfold/events/EventParse.java) parses a record or says why it is
    rejected: plain events through its streaming fast path (PlainEvent), the rest read into a tree. So the
    plan is two small projections, not a stack of them planned and code-generated again every micro-batch
    (docs/decisions/parsers-as-jvm-udfs.md).
    """
    spark = raw.sparkSession
    text = json.dumps(spec, sort_keys=True)
    # A name per spec and format: frames of different specs may meet in one plan.
    named = text if registry is None else f"avro {registry.url} {text}"
    name = f"{PARSE_UDF}_{hashlib.sha256(named.encode()).hexdigest()[:16]}"
    return_type = parse_type(spec)
    register_java_udf(spark, name, _parser(spark._jvm, text, registry), return_type)
    parsed = raw.select(
        "event_id",
        "source",
        "payload",
        F.call_function(name, "payload", "now_ms").alias("_event"),
    )
    return parsed.select(
        "event_id",
        *(F.col(f"_event.`{column}`").alias(column) for column in return_type.fieldNames()),
        "source",
        F.when(F.col("_event.error").isNotNull(), F.col("payload")).alias("payload"),
    )
