"""The CDC fold at run time: Debezium change envelopes of the profile table into the join's CDC input.

The fold itself (which record is a change, progress, a tombstone or a dead letter, and each column's
typing) is specified by spec/envelopes.py (parse_envelope) for the profile table a profile spec describes
(the profile section as a plain dict: common.plan's Plan.profile_spec).
Here it runs in the JVM with no Python per record: jvm/.../cdc/EnvelopeFold.java, made with the spec's
JSON, with a streaming fast path for plain change events (PlainEnvelope.java), held to parse_envelope by
the differential tests in tests/unit/test_parsers_spark.py.

CDC progress moves the join's watermark for good, so `fold` counts it at most MAX_PROGRESS_LEAD_MS past the
record's Kafka timestamp: one commit time far ahead (a forged record, a database clock running ahead)
would otherwise release every waiting click as complete and expire versions later clicks still need. The
record itself folds as recorded (a change keeps its valid_from). Why the record's timestamp and not the
batch's time: a Spark batch time is a literal in the generated code, so every batch compiled the fold
again (2 compilations, ~40 ms). Kafka brokers (4.0+) refuse a timestamp more than an hour ahead of their
clock (`message.timestamp.after.max.ms`), so a forged one moves progress at most that far.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from common import config, names, plan
from common import pipeline_file as pf
from common.limits import MAX_FUTURE_MS, MAX_KEY_BYTES
from pipeline import events, field_types, records

# The heartbeat table and the change-event size limit are the pipeline file's (common/pipeline_file.py).
HEARTBEAT_SCHEMA, HEARTBEAT_TABLE, MAX_CHANGE_BYTES = (
    pf.HEARTBEAT_SCHEMA,
    pf.HEARTBEAT_TABLE,
    pf.MAX_CHANGE_BYTES,
)
# How far past its record's Kafka timestamp CDC progress counts: the clock drift a click may have
# (pipeline/events.py).
MAX_PROGRESS_LEAD_MS = MAX_FUTURE_MS
# The fold in the JVM (jvm/src/main/java/io/streamfold/cdc/EnvelopeFold.java).
FOLD_UDF = "streamfold_fold_envelope"
# The fold of several tables from one topic (jvm/src/main/java/io/streamfold/cdc/TablesFold.java).
TABLES_FOLD_UDF = "streamfold_fold_tables"
_KIND = StructField("kind", StringType())  # change | truncate | progress | skip | error
_TABLE = StructField("table", StringType())  # schema.name of a change or truncate, else null
_PROGRESS = StructField("progress_ms", LongType())


def avro_registry(pipeline: pf.Pipeline) -> events.Registry | None:
    """Where the fold of Avro change events (cdc.format avro: jvm/.../cdc/AvroChangeFold.java) reads writer
    schemas, as the Avro events' parser does (events.Registry); None for JSON change events."""
    if pipeline.cdc.format != "avro":
        return None
    if not config.registry_url():
        raise config.ConfigError(
            f"{config.REGISTRY_URL_VAR} is not set: Avro change events (cdc.format: avro) need the schema "
            "registry; export it, or start the local stack with `streamfold stack up`"
        )
    return events.Registry.configured()


def fold_type(spec: dict[str, Any]) -> StructType:
    """The row EnvelopeFold returns, by position: kind, the key (as text), op, valid_from_ms, lsn, each
    column in spec order (its Spark type), unavailable (the indexes of the columns Debezium did not send),
    drifted (records.DRIFTED), progress_ms, error."""
    columns = [StructField(c["name"], field_types.spark_type(c["type"])) for c in spec["columns"]]
    fields = [
        _KIND,
        StructField(spec["key"]["column"], StringType()),
        StructField("op", StringType()),  # c | u | d | r
        StructField("valid_from_ms", LongType()),  # source.ts_ms; BEGINNING_OF_TIME_MS for op=r
        StructField("lsn", LongType()),
        *columns,
        records.UNAVAILABLE,
        records.DRIFTED,
        _PROGRESS,
        records.REJECT["error"],
    ]
    taken = [f.name for f in fields]
    if len(set(taken)) != len(taken):
        raise ValueError(f"a profile column takes the name of another field of the fold's row: {taken}")
    return StructType(fields)


def tables_spec(pipeline: pf.Pipeline) -> dict[str, Any]:
    """What TablesFold needs: each Postgres table the file joins, in join order, with its fold spec (as
    profile_spec's): its key and the columns any join of it carries. A table joined twice is folded once,
    so its joins must agree on its key and its columns' types."""
    resolved = plan.of(pipeline)
    # A copy: a join of the profile's table again adds its columns to this spec; the plan's stays as compiled.
    specs: dict[str, dict[str, Any]] = {pipeline.profile.table: copy.deepcopy(resolved.profile_spec)}
    for join in resolved.joins[1:]:
        table = join.table
        key = {"column": table.key, "type": table.key_type}
        spec = specs.setdefault(table.table, {**resolved.profile_spec, "key": key, "columns": []})
        if spec["key"] != key:
            raise ValueError(f"{table.table} is joined on two keys: {spec['key']} and {key}")
        have = {c["name"]: c for c in spec["columns"]}
        keys = resolved.grouped(join.name)
        for name, column in table.columns.items():
            folded = have.get(name)
            if folded is None:
                folded = {"name": name, "type": column.type}
                spec["columns"].append(folded)
            if folded["type"] != column.type:
                raise ValueError(f"{table.table}.{name} is joined as {folded['type']} and as {column.type}")
            if name in keys and column.type == "text":  # an aggregate key: as profile_spec limits it
                folded["max_bytes"] = MAX_KEY_BYTES
    return {"tables": [{"table": name, "spec": spec} for name, spec in specs.items()]}


def tables_fold_type(spec: dict[str, Any]) -> StructType:
    """The row TablesFold returns, by position: kind, table, key, op, valid_from_ms, lsn, each table's
    columns in spec order (the i-th table's named t<i>_<column>), unavailable, drifted (both index the
    change's own table's columns), progress_ms, error."""
    one = fold_type({**spec["tables"][0]["spec"], "columns": []})
    columns = [
        StructField(f"t{i}_{c['name']}", field_types.spark_type(c["type"]))
        for i, table in enumerate(spec["tables"])
        for c in table["spec"]["columns"]
    ]
    head, tail = one.fields[:5], one.fields[5:]
    fields = [head[0], _TABLE, StructField("key", StringType()), *head[2:], *columns, *tail]
    return StructType(fields)


def fold_tables(
    cdc_raw: DataFrame, spec: dict[str, Any], registry: events.Registry | None = None
) -> DataFrame:
    """`fold` for several tables in one topic (tables_spec): the same records kept and progress capped, in
    TablesFold's row (tables_fold_type)."""
    returns = tables_fold_type(spec)
    register_java_udf(cdc_raw.sparkSession, TABLES_FOLD_UDF, "TablesFold", spec, returns, registry)
    return _capped(_folded(cdc_raw, TABLES_FOLD_UDF, records.names(returns), ("written_ms",)))


def folded_columns(spec: dict[str, Any]) -> tuple[str, ...]:
    """What `fold_records` returns: the UDF's row, and the record's id and bytes when it is an error."""
    return (*records.names(fold_type(spec)), "event_id", "payload")


def fold(cdc_raw: DataFrame, spec: dict[str, Any], registry: events.Registry | None = None) -> DataFrame:
    """Raw CDC records (topic, key, value, event_id, written_ms) -> the join's CDC input,
    folded_columns(spec): every change, truncate, progress and unfoldable record ("error", a dead letter the
    join passes through); skipped ones dropped. progress_ms counts at most MAX_PROGRESS_LEAD_MS past
    written_ms, the record's Kafka timestamp. With a registry, the records are Avro change events."""
    return _capped(fold_records(cdc_raw, spec, "written_ms", registry=registry))


def _capped(folded: DataFrame) -> DataFrame:
    """The records the join takes, progress_ms capped at MAX_PROGRESS_LEAD_MS past written_ms (dropped).
    progress_ms is the last millisecond whose every commit has been read: one before the record's
    source.ts_ms, since another transaction may still commit in that same millisecond, and an event at it
    must wait for that one's versions too."""
    kept = "kind IN ('change', 'truncate', 'progress', 'error')"
    folded = folded.where(kept)
    limit = F.col("written_ms") + F.lit(MAX_PROGRESS_LEAD_MS)
    progress = F.col("progress_ms")
    capped = F.when(progress > limit, limit).otherwise(progress)  # null stays null
    return folded.withColumn("progress_ms", capped - F.lit(1)).drop("written_ms")


def fold_records(
    cdc_raw: DataFrame, spec: dict[str, Any], *keep: str, registry: events.Registry | None = None
) -> DataFrame:
    """parse_envelope in the JVM: every record -> folded_columns(spec), tagged by kind.

    One Java UDF (jvm/src/main/java/io/streamfold/cdc/EnvelopeFold.java) folds a record or says why it
    cannot, so the plan is two small projections (a fold in Spark's native functions was a 16-deep chain
    of them, planned and code-generated again every micro-batch). `keep` names input columns to carry along.
    """
    register_java_udf(cdc_raw.sparkSession, FOLD_UDF, "EnvelopeFold", spec, registry=registry)
    return _folded(cdc_raw, FOLD_UDF, folded_columns(spec)[:-2], keep)


def _folded(cdc_raw: DataFrame, udf: str, fields: Sequence[str], keep: Sequence[str]) -> DataFrame:
    """The fold `udf` of every record: its row's `fields`, the record's id and bytes when it is an error,
    and the input columns `keep`."""
    folded = cdc_raw.select(
        "event_id",
        "value",
        *keep,
        F.call_function(udf, _heartbeat_topic(), "key", "value").alias("_fold"),
    )
    error = F.col("_fold.kind") == "error"
    return folded.select(
        *(F.col(f"_fold.{name}").alias(name) for name in fields),
        F.when(error, F.col("event_id")).alias("event_id"),
        F.when(error, F.col("value")).alias("payload"),
        *keep,
    )


def _heartbeat_topic() -> Column:
    """Whether a record comes from a Debezium heartbeat topic (the job reads its pipeline's only)."""
    return F.col("topic").startswith(f"{names.HEARTBEAT_TOPIC_PREFIX}.")


def register_java_udf(
    spark: SparkSession,
    name: str,
    java_class: str,
    spec: dict[str, Any],
    returns: StructType | None = None,
    registry: events.Registry | None = None,
) -> None:
    """Registers `name` as an instance of io.streamfold.cdc.<java_class> made with the spec's JSON (it
    travels to the executors inside the serialised UDF), of return type `returns` (fold_type(spec) by
    default); with a registry, wrapped in AvroChangeFold, which reads Avro records into the JSON the fold
    takes. The UDF is bound when a DataFrame calling it is made: register right before."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    udf = getattr(jvm.io.streamfold.cdc, java_class)(json.dumps(spec))
    if registry is not None:
        login = (registry.url, registry.user, registry.password, registry.retry_ms)
        udf = jvm.io.streamfold.cdc.AvroChangeFold(udf, *login)
    return_type = spark._jsparkSession.parseDataType((returns or fold_type(spec)).json())
    spark._jsparkSession.udf().register(name, udf, return_type)
