"""The CDC fold: Debezium change envelopes into a typed, keyed changelog of user profiles.

Debezium (JSON converter, schemas off) writes to `cdc.public.users` (one partition, WAL commit order):
    key   {"userid": ...}
    value {"before": {...}|null, "after": {...}|null, "op": c|u|d|r, "source": {"ts_ms", "lsn", ...}, ...}
then a tombstone (null value) after each delete. A snapshot read (op=r) is valid from the beginning of time.

CDC progress (the largest source.ts_ms seen) drives the temporal join's completeness. It comes from:
- every change event: its source.ts_ms (the commit time) is exact, the topic being in commit order;
- heartbeat-table events: Debezium's `heartbeat.action.query` upserts streamfold.cdc_heartbeat every
  200 ms and a RegexRouter SMT sends that table's change events into `cdc.public.users` too (key
  {"id": 1}: no userid, never a user). They arrive in the same partition in WAL commit order, so their
  source.ts_ms is exact progress with no margin; they are progress only, never a user change, whatever
  their op (a delete of the row included) - recognised by source.schema/source.table, before anything else;
- Debezium's own heartbeat topic ({"ts_ms": ...}, stamped when sent, not in commit order with the
  changes): kept as a fallback, counted HEARTBEAT_SAFETY_MS earlier. With table heartbeats flowing it
  is always behind them, so it no longer sets the pace.

Profile fields are typed leniently where a source column type changes: regionid and gender accept a
JSON string or an integer (a number becomes its decimal text: the column was changed to a number type);
interests must be an array of strings (or nulls); registertime an integer. JSON null or a missing field
is NULL. Anything else (a float, a boolean, an object...) sends the record to the dead letters with a
reason naming the field, instead of failing the batch. An integer is a JSON integer that fits in 64 bits.

`parse_envelope` is the executable reference; `fold` is the same logic in the JVM (no Python per record):
a Java fast path for plain change events (jvm/.../cdc/PlainEnvelope.java) and Spark's native functions for
everything else, held to it by the differential tests in tests/unit/test_parsers_spark.py. JSON is
strict as in pipeline/clicks.py (no duplicate keys, NaN, trailing data, lone surrogates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.strict_json import (
    INT64_MIN,
    barrier,
    container_type,
    is_int,
    json_type,
    loads_strict,
    shown,
    with_json,
)
from pipeline.temporal_state import BEGINNING_OF_TIME_MS
from streamfold import names

PROFILE_FIELDS = ("regionid", "gender", "interests", "registertime")
# The heartbeat table (db/tables.py) whose change events Debezium routes into the CDC users topic.
HEARTBEAT_SCHEMA = "streamfold"
HEARTBEAT_TABLE = "cdc_heartbeat"
# A Debezium heartbeat-topic record is stamped when Debezium sends it, and a change committed just before
# may still be on its way from the WAL: count it as progress up to a second earlier.
HEARTBEAT_SAFETY_MS = 1000
# A change event larger than this is dead-lettered, not folded: the profile it carries would ride on
# every one of the user's enriched clicks (user_clicks records have the producer's 1 MB limit). The
# CDC topic and Connect's producer accept up to 16 MiB (connectors/setup.py), so Debezium keeps going.
MAX_CHANGE_BYTES = 1024 * 1024
# The fast path (jvm/src/main/java/io/streamfold/cdc/PlainEnvelope.java) and the row it returns.
PLAIN_ENVELOPE_UDF = "streamfold_plain_envelope"
PLAIN_ENVELOPE_TYPE = (
    "struct<kind:string,userid:string,op:string,valid_from_ms:bigint,lsn:bigint,regionid:string,"
    "gender:string,interests:array<string>,registertime:bigint,progress_ms:bigint>"
)
FOLDED_COLUMNS = (
    "kind",  # change | progress | skip | error
    "userid",
    "op",
    "valid_from_ms",
    "lsn",
    "regionid",
    "gender",
    "interests",
    "registertime",
    "progress_ms",
    "error",
    "record_id",
    "payload",
)


@dataclass(frozen=True)
class Change:
    userid: str
    op: str
    valid_from_ms: int
    lsn: int
    progress_ms: int
    regionid: str | None = None
    gender: str | None = None
    interests: list[str | None] | None = None
    registertime: int | None = None


@dataclass(frozen=True)
class Progress:
    progress_ms: int


class BadEnvelope(ValueError):
    """A CDC record that cannot be folded; goes to the dead letters with this reason."""


def parse_envelope(topic: str, key: bytes | None, value: bytes | None) -> Change | Progress | None:
    """One Debezium record -> a Change, a Progress report, or None for a tombstone."""
    if topic == names.HEARTBEAT_TOPIC:
        beat = _json(value, "heartbeat")
        return Progress(max(_int(beat, "ts_ms", "heartbeat") - HEARTBEAT_SAFETY_MS, INT64_MIN))
    if value is None:
        return None  # the tombstone after a delete: the delete event itself carries the change
    if len(value) > MAX_CHANGE_BYTES:
        raise BadEnvelope(f"change event of {len(value)} bytes exceeds the {MAX_CHANGE_BYTES}-byte limit")
    envelope = _json(value, "change event")
    source = envelope.get("source")
    if (
        isinstance(source, dict)
        and source.get("schema") == HEARTBEAT_SCHEMA
        and source.get("table") == HEARTBEAT_TABLE
    ):
        return Progress(_int(source, "ts_ms", "source"))
    op = envelope.get("op")
    if op not in ("c", "u", "d", "r") or not isinstance(source, dict):
        raise BadEnvelope(f"not a Debezium row change (op={op!r})")
    ts_ms = _int(source, "ts_ms", "source")
    lsn = source.get("lsn")
    if lsn is not None and not is_int(lsn):
        raise BadEnvelope(f"source.lsn must be an integer, got {lsn!r}")
    row = envelope.get("before" if op == "d" else "after")
    if op != "d" and not isinstance(row, dict):
        raise BadEnvelope(f"op={op} event without an 'after' row")
    if row is not None and not isinstance(row, dict):
        raise BadEnvelope("op=d event whose 'before' is not an object")
    profile: dict[str, Any] = row or {}
    userid = profile.get("userid")
    if userid is None or userid == "":
        userid = _key_userid(key)
    if not isinstance(userid, str) or not userid:
        raise BadEnvelope("change event without a userid")
    valid_from = BEGINNING_OF_TIME_MS if op == "r" else ts_ms
    if op == "d":
        return Change(userid, op, valid_from, lsn or 0, ts_ms)
    return Change(
        userid,
        op,
        valid_from,
        lsn or 0,
        ts_ms,
        regionid=_profile_text(profile, "regionid"),
        gender=_profile_text(profile, "gender"),
        interests=_profile_interests(profile),
        registertime=_profile_int(profile, "registertime"),
    )


def _json(raw: bytes | None, what: str) -> dict[str, Any]:
    if raw is None:
        raise BadEnvelope(f"{what} with a null value")
    try:
        obj = loads_strict(raw)
    except ValueError as exc:
        raise BadEnvelope(f"{what} is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadEnvelope(f"{what} is not a JSON object")
    return obj


def _int(obj: dict[str, Any], field: str, where: str) -> int:
    value = obj.get(field)
    if not is_int(value):
        raise BadEnvelope(f"{where}.{field} must be an integer, got {value!r}")
    return value


def _key_userid(key: bytes | None) -> str | None:
    try:
        obj = loads_strict(key) if key is not None else None
    except ValueError:
        return None
    userid = obj.get("userid") if isinstance(obj, dict) else None
    return userid if isinstance(userid, str) and userid else None


def _profile_text(row: dict[str, Any], field: str) -> str | None:
    value = row.get(field)
    if value is None or isinstance(value, str):
        return value
    if is_int(value):
        return str(value)
    raise BadEnvelope(f"after.{field} must be a string (or an integer), got {value!r}")


def _profile_interests(row: dict[str, Any]) -> list[str | None] | None:
    value = row.get("interests")
    if value is None or (isinstance(value, list) and all(v is None or isinstance(v, str) for v in value)):
        return value
    raise BadEnvelope(f"after.interests must be an array of strings, got {value!r}")


def _profile_int(row: dict[str, Any], field: str) -> int | None:
    value = row.get(field)
    if value is None or is_int(value):
        return value
    raise BadEnvelope(f"after.{field} must be an integer, got {value!r}")


def fold(cdc_raw: DataFrame) -> DataFrame:
    """Raw CDC records (topic, key, value, record_id) -> the join's CDC input, FOLDED_COLUMNS: every change,
    progress and unfoldable record ("error", a dead letter the join passes through); skipped ones dropped."""
    return fold_records(cdc_raw).where("kind IN ('change', 'progress', 'error')")


def fold_records(cdc_raw: DataFrame) -> DataFrame:
    """parse_envelope in Spark: every record -> FOLDED_COLUMNS, tagged by kind.

    Two paths in one projection, as in pipeline.clicks.parse: the JVM fast path (`PlainEnvelope`) folds a
    plain, valid change event of the users topic; only the records it gives up on (heartbeat-topic records,
    tombstones, anything unusual) go through the full fold below in Spark's native functions (parse_json,
    schema_of_variant, regexes), which finds the reason or folds the unusual but valid ones.
    """
    cdc_raw.sparkSession.udf.registerJavaFunction(
        PLAIN_ENVELOPE_UDF, "io.streamfold.cdc.PlainEnvelope", PLAIN_ENVELOPE_TYPE
    )
    plain = cdc_raw.select(
        "topic",
        "key",
        "value",
        "record_id",
        F.when(
            F.col("topic") == names.CDC_USERS_TOPIC, F.call_function(PLAIN_ENVELOPE_UDF, "key", "value")
        ).alias("_plain"),
    )
    # A folded record reaches the full fold as a tombstone (no key, no value): parsed in no time.
    unusual = plain.select(
        "topic",
        *(F.when(F.col("_plain").isNull(), F.col(c)).alias(c) for c in ("key", "value")),
        "record_id",
        "_plain",
    )
    parsed = with_json(with_json(unusual, "value", "_v"), "key", "_k")
    stage = parsed.select(
        "topic",
        "value",
        "record_id",
        "_v",
        "_v_error",
        "_k",
        "_plain",
    )

    def get(column: str, path: str) -> Column:
        return F.try_variant_get(column, path, "variant")

    heartbeat_topic = F.col("topic") == names.HEARTBEAT_TOPIC
    stage = stage.select(
        "*",
        container_type(F.col("_v")).alias("_v_type"),
        get("_v", "$.source").alias("_source"),
        F.try_variant_get("_v", "$.op", "variant").alias("_op_v"),
        get("_v", "$.ts_ms").alias("_beat_ts"),
        F.try_variant_get("_k", "$.userid", "variant").alias("_k_userid"),
    )
    stage = stage.select(
        "*",
        container_type(F.col("_source")).alias("_source_type"),
        F.when(json_type(F.col("_op_v")) == "string", F.try_variant_get("_op_v", "$", "string")).alias("_op"),
        get("_source", "$.ts_ms").alias("_ts"),
        get("_source", "$.lsn").alias("_lsn"),
        (
            (json_type(get("_source", "$.schema")) == "string")
            & (F.try_variant_get("_source", "$.schema", "string") == HEARTBEAT_SCHEMA)
            & (json_type(get("_source", "$.table")) == "string")
            & (F.try_variant_get("_source", "$.table", "string") == HEARTBEAT_TABLE)
        ).alias("_beat_table"),
    )
    stage = stage.select(
        "*",
        F.when(F.col("_op") == "d", get("_v", "$.before")).otherwise(get("_v", "$.after")).alias("_row"),
    )
    stage = stage.select(
        "*",
        container_type(F.col("_row")).alias("_row_type"),
        get("_row", "$.userid").alias("_row_userid"),
        *(get("_row", f"$.{f}").alias(f"_p_{f}") for f in PROFILE_FIELDS),
    )
    stage = stage.select(
        "*",
        json_type(F.col("_row_userid")).alias("_row_userid_type"),
        json_type(F.col("_k_userid")).alias("_k_userid_type"),
        json_type(F.col("_ts")).alias("_ts_type"),
        json_type(F.col("_lsn")).alias("_lsn_type"),
        json_type(F.col("_beat_ts")).alias("_beat_ts_type"),
        *(json_type(F.col(f"_p_{f}")).alias(f"_t_{f}") for f in PROFILE_FIELDS),
        F.schema_of_variant("_p_interests").alias("_interests_schema"),
    )

    row_userid = F.try_variant_get("_row_userid", "$", "string")
    key_userid = F.when(
        (F.col("_k_userid_type") == "string") & (F.try_variant_get("_k_userid", "$", "string") != ""),
        F.try_variant_get("_k_userid", "$", "string"),
    )
    row_userid_empty = (
        F.col("_row_userid").isNull()
        | (F.col("_row_userid_type") == "null")
        | ((F.col("_row_userid_type") == "string") & (row_userid == ""))
    )
    userid = F.when(row_userid_empty, key_userid).when(F.col("_row_userid_type") == "string", row_userid)
    stage = stage.select("*", userid.alias("_userid"))

    def absent(field: str) -> Column:
        return F.col(f"_p_{field}").isNull() | (F.col(f"_t_{field}") == "null")

    def text_ok(field: str) -> Column:
        return absent(field) | F.col(f"_t_{field}").isin("string", "integer")

    is_change = F.col("_op").isin("c", "u", "d", "r") & F.coalesce(
        F.col("_source_type") == "object", F.lit(False)
    )
    op_shown = F.coalesce(F.to_json("_op_v"), F.lit("missing"))
    error = (
        F.when(heartbeat_topic & F.col("value").isNull(), "heartbeat with a null value")
        .when(
            heartbeat_topic & F.col("_v_error").isNotNull(),
            F.concat(F.lit("heartbeat is "), F.col("_v_error")),
        )
        .when(heartbeat_topic & (F.col("_v_type") != "object"), "heartbeat is not a JSON object")
        .when(
            heartbeat_topic & (F.col("_beat_ts_type") != "integer")
            | heartbeat_topic & F.col("_beat_ts").isNull(),
            F.concat(F.lit("heartbeat.ts_ms must be an integer, got "), shown(F.col("_beat_ts"))),
        )
        .when(heartbeat_topic | F.col("value").isNull(), F.lit(None))
        .when(
            F.octet_length("value") > MAX_CHANGE_BYTES,
            F.format_string(
                f"change event of %d bytes exceeds the {MAX_CHANGE_BYTES}-byte limit", F.octet_length("value")
            ),
        )
        .when(F.col("_v_error").isNotNull(), F.concat(F.lit("change event is "), F.col("_v_error")))
        .when(F.col("_v_type") != "object", "change event is not a JSON object")
        .when(
            F.col("_beat_table") & ((F.col("_ts_type") != "integer") | F.col("_ts").isNull()),
            F.concat(F.lit("source.ts_ms must be an integer, got "), shown(F.col("_ts"))),
        )
        .when(F.col("_beat_table"), F.lit(None))
        .when(
            ~is_change | F.col("_op").isNull(),
            F.concat(F.lit("not a Debezium row change (op="), op_shown, F.lit(")")),
        )
        .when(
            (F.col("_ts_type") != "integer") | F.col("_ts").isNull(),
            F.concat(F.lit("source.ts_ms must be an integer, got "), shown(F.col("_ts"))),
        )
        .when(
            F.col("_lsn").isNotNull() & ~F.col("_lsn_type").isin("integer", "null"),
            F.concat(F.lit("source.lsn must be an integer, got "), shown(F.col("_lsn"))),
        )
        .when(
            (F.col("_op") != "d") & ((F.col("_row_type") != "object") | F.col("_row").isNull()),
            F.concat(F.lit("op="), F.col("_op"), F.lit(" event without an 'after' row")),
        )
        .when(
            F.col("_row").isNotNull() & ~F.col("_row_type").isin("object", "null"),
            "op=d event whose 'before' is not an object",
        )
        .when(F.col("_userid").isNull(), "change event without a userid")
    )
    for field in ("regionid", "gender"):
        error = error.when(
            (F.col("_op") != "d") & ~text_ok(field),
            F.concat(
                F.lit(f"after.{field} must be a string (or an integer), got "), shown(F.col(f"_p_{field}"))
            ),
        )
    error = error.when(
        (F.col("_op") != "d")
        & ~absent("interests")
        & ~F.col("_interests_schema").isin("ARRAY<STRING>", "ARRAY<VOID>"),
        F.concat(F.lit("after.interests must be an array of strings, got "), shown(F.col("_p_interests"))),
    ).when(
        (F.col("_op") != "d") & ~absent("registertime") & (F.col("_t_registertime") != "integer"),
        F.concat(F.lit("after.registertime must be an integer, got "), shown(F.col("_p_registertime"))),
    )
    stage = stage.select("*", error.alias("error"))

    kind = (
        F.when(F.col("_plain").isNotNull(), F.col("_plain.kind"))
        .when(F.col("error").isNotNull(), "error")
        .when(heartbeat_topic, "progress")
        .when(F.col("value").isNull(), "skip")
        .when(F.col("_beat_table"), "progress")
        .otherwise("change")
    )
    stage = stage.select("*", kind.alias("kind"))
    change = F.col("kind") == "change"
    profile = change & (F.col("_op") != "d")
    ts = F.try_variant_get("_ts", "$", "bigint")

    def text(field: str) -> Column:
        return F.when(profile & ~absent(field), F.try_variant_get(f"_p_{field}", "$", "string"))

    progress_ms = (
        F.when(F.col("kind") != "progress", ts)
        .when(
            heartbeat_topic,
            F.coalesce(
                F.try_subtract(F.try_variant_get("_beat_ts", "$", "bigint"), F.lit(HEARTBEAT_SAFETY_MS)),
                F.lit(INT64_MIN),
            ),
        )
        .otherwise(ts)
    )

    def either(name: str, full: Column) -> Column:
        """The fast path's field where it folded the record, else the full fold's."""
        return F.when(F.col("_plain").isNotNull(), F.col(f"_plain.{name}")).otherwise(full).alias(name)

    return barrier(
        stage.select(
            "kind",
            either("userid", F.when(change, F.col("_userid"))),
            either("op", F.when(change, F.col("_op"))),
            either(
                "valid_from_ms",
                F.when(change, F.when(F.col("_op") == "r", F.lit(BEGINNING_OF_TIME_MS)).otherwise(ts)),
            ),
            either("lsn", F.when(change, F.coalesce(F.try_variant_get("_lsn", "$", "bigint"), F.lit(0)))),
            either("regionid", text("regionid")),
            either("gender", text("gender")),
            either(
                "interests",
                F.when(
                    profile & ~absent("interests"), F.try_variant_get("_p_interests", "$", "array<string>")
                ),
            ),
            either(
                "registertime",
                F.when(
                    profile & ~absent("registertime"), F.try_variant_get("_p_registertime", "$", "bigint")
                ),
            ),
            either("progress_ms", F.when(F.col("kind").isin("change", "progress"), progress_ms)),
            "error",
            F.when(F.col("kind") == "error", F.col("record_id")).alias("record_id"),
            F.when(F.col("kind") == "error", F.col("value")).alias("payload"),
        ),
        "kind",
    )
