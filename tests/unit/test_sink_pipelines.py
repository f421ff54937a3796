"""The sink is generic: a second pipeline file (customers and page views: a bigint key, numeric, boolean,
timestamptz, jsonb and text[] profile columns, integer, bigint and double event fields, no count field,
three aggregates) lands a hand-built join output on the executors (jvm/.../sink/) into its own tables and
topics, on a real PostgreSQL and Kafka broker: every row and record as its types say, totals equal to the
sums over the enriched table, replays no-ops, columns found by name whatever their order."""

from __future__ import annotations

import json

import psycopg
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from common import names, plan
from common import pipeline_file as pf
from db import pipeline_tables, schema
from pipeline import sink_spec, sinks
from tests.unit.test_sinks import bootstrap, dsn, fresh_topics, land, pg_home, topic_records

__all__ = ["bootstrap", "dsn", "pg_home"]  # the Postgres and Kafka fixtures of test_sinks

PIPELINE = pf.parse(
    """\
name: views
profile:
  table: crm.customers
  key: id
  key_type: bigint
  columns:
    tier: {type: text, if_missing: none}
    balance: numeric
    vip: {type: boolean, if_missing: false}
    since: timestamptz
    attrs: jsonb
    tags: text[]
events:
  kafka_topic: page_views
  key: customer_id
  time: {field: ts, format: iso8601}
  fields:
    path: text
    ms_on_page: bigint
    score: integer
    ratio: {type: double, required: false}
    referrer: {type: text, required: false}
aggregates:
  - name: views_per_tier
    group_by: {tier: tier}
    sums: {ms_total: ms_on_page}
  - name: views_per_path_vip
    group_by: {path: path, vip: vip}
    count_column: views
    sums: {ms_total: ms_on_page, score_total: score}
  - name: views_per_score
    group_by: {score: score}
""",
    "views.yaml",
)
TOPICS = (
    "enriched_views",
    "customers_changelog",
    "views_dlq",
    "views_per_tier",
    "views_per_path_vip",
    "views_per_score",
)
_S, _L = StringType(), LongType()
# The join's output for this file, by the contract's names (kind first, the count always there).
COLUMNS: list[tuple[str, DataType]] = [
    ("kind", _S),
    ("event_id", _S),
    ("customer_id", _S),
    ("ts_ms", _L),
    ("path", _S),
    ("ms_on_page", _L),
    ("score", IntegerType()),
    ("ratio", DoubleType()),
    ("referrer", _S),
    ("count", IntegerType()),
    ("profile_tier", _S),
    ("profile_balance", _S),
    ("profile_vip", BooleanType()),
    ("profile_since", _L),
    ("profile_attrs", _S),
    ("profile_tags", ArrayType(_S)),
    ("profile_valid_from_ms", _L),
    ("profile_complete", BooleanType()),
    ("error", _S),
    ("source", _S),
    ("payload", BinaryType()),
    ("change_op", _S),
    ("change_lsn", _L),
    ("cdc_progress_ms", _L),
    ("released_by_max_wait", BooleanType()),
]
OUTPUT = StructType([StructField(n, t) for n, t in COLUMNS])

# Two paths Postgres stores alike ("/a\x00" becomes "/a\ufffd"): one key of views_per_path_vip.
PATHS = ["/", "/a\x00", "/a\ufffd", "/" + "x" * 3000, "/ünï"]
BALANCES = ["12.50", "-0.001", "123456789012345678901234567890.123456789", None]
RATIOS = [0.5, 123.25, None, 1e20]
# Epoch microseconds: just before 1970, the epoch, the last microsecond of 9999.
SINCE = [-1, 0, 253_402_300_799_999_999]
SINCE_TEXT = ["1969-12-31T23:59:59.999999Z", "1970-01-01T00:00:00.000000Z", "9999-12-31T23:59:59.999999Z"]
ATTRS = ['{"a": [1, 2.5, "x\\"y"], "b": null}', None, "[]"]
TAGS: list[list[str] | None] = [["a", 'q"uote', "c,d"], [], None]
VALID = [-(2**62), None, 1_767_225_599_000]
TIERS = ["gold", "none", "sïlver"]


def views(n: int, start: int = 0) -> list[dict]:
    return [
        {
            "kind": "event",
            "event_id": f"kafka:page_views:0:{i}",
            "customer_id": str(10**12 + i % 5),
            "ts_ms": 1_767_225_600_000 + i,
            "path": PATHS[i % 5],
            "ms_on_page": 2**40 + (i * 7919) % 100_000,
            "score": i % 4 - 1,
            "ratio": RATIOS[i % 4],
            "referrer": None if i % 3 == 0 else f"https://r.example/{i % 2}",
            "count": 1,
            "profile_tier": TIERS[i % 3],
            "profile_balance": BALANCES[i % 4],
            "profile_vip": i % 2 == 0,
            "profile_since": SINCE[i % 3],
            "profile_attrs": ATTRS[i % 3],
            "profile_tags": TAGS[i % 3],
            "profile_valid_from_ms": VALID[i % 3],
            "profile_complete": i % 5 != 0,
            "cdc_progress_ms": None if i % 7 == 0 else 1_767_225_600_000 + i + 1_000 * (i % 5 != 0),
            "released_by_max_wait": i % 5 == 0,
        }
        for i in range(start, start + n)
    ]


def rejects(n: int) -> list[dict]:
    return [
        {
            "kind": "reject",
            "event_id": f"kafka:page_views:1:{i}",
            "error": "not JSON",
            "source": "kafka:page_views",
            "payload": bytearray(b"{%d" % i),
        }
        for i in range(n)
    ]


CHANGES = [
    {
        "kind": "change",
        "customer_id": "1000000000001",
        "change_op": "c",
        "profile_tier": "gold",
        "profile_balance": "12.50",
        "profile_vip": True,
        "profile_since": 0,
        "profile_attrs": '{"k": [1]}',
        "profile_tags": ["t"],
        "profile_valid_from_ms": 5,
        "change_lsn": 11,
    },
    {
        "kind": "change",
        "customer_id": "1000000000002",
        "change_op": "r",
        "profile_valid_from_ms": -(2**62),
        "change_lsn": 12,
    },
    {
        "kind": "change",
        "customer_id": "1000000000001",
        "change_op": "d",
        "profile_valid_from_ms": 9,
        "change_lsn": 13,
    },
]


def frame(spark: SparkSession, rows: list[dict], order: list[str], partitions: int = 2) -> DataFrame:
    """A batch of the join's output with its columns in `order`."""
    fields = {f.name: f for f in OUTPUT.fields}
    schema_ = StructType([fields[name] for name in order])
    data = [tuple(row.get(name) for name in order) for row in rows]
    return spark.createDataFrame(data, schema_).repartition(partitions, "customer_id")


def spec(batch: DataFrame) -> str:
    return sink_spec.sink_spec_json(plan.of(PIPELINE), batch.schema)


@pytest.fixture()
def tables(dsn: str) -> str:
    """The file's enriched and aggregate tables, created in the fresh streamfold schema."""
    pipeline_tables.metadata(PIPELINE).create_all(schema.engine(dsn))
    return dsn


def test_the_spec_reads_columns_by_name_and_types_them() -> None:
    built = sink_spec.sink_spec(plan.of(PIPELINE), OUTPUT)
    at = OUTPUT.fieldNames()
    assert built["kind_ordinal"] == 0
    assert [(c["name"], at[c["ordinal"]], c["type"]) for c in built["enriched"]["columns"]] == [
        ("event_id", "event_id", "text"),
        ("customer_id", "customer_id", "bigint"),
        ("ts", "ts_ms", "epoch_ms"),
        ("path", "path", "text"),
        ("ms_on_page", "ms_on_page", "bigint"),
        ("score", "score", "integer"),
        ("ratio", "ratio", "double"),
        ("referrer", "referrer", "text"),
        ("profile_tier", "profile_tier", "text"),
        ("profile_balance", "profile_balance", "numeric"),
        ("profile_vip", "profile_vip", "boolean"),
        ("profile_since", "profile_since", "timestamptz"),
        ("profile_attrs", "profile_attrs", "jsonb"),
        ("profile_tags", "profile_tags", "text[]"),
        ("profile_valid_from", "profile_valid_from_ms", "valid_from_ms"),
        ("profile_complete", "profile_complete", "boolean"),
        ("cdc_progress", "cdc_progress_ms", "epoch_ms"),
        ("released_by_max_wait", "released_by_max_wait", "boolean"),
    ]
    assert built["histories"][0]["table"] == "streamfold.profile_history_views"
    assert [(c["name"], at[c["ordinal"]], c["type"]) for c in built["histories"][0]["columns"]] == [
        ("id", "customer_id", "bigint"),
        ("valid_from", "profile_valid_from_ms", "valid_from_ms"),
        ("lsn", "change_lsn", "bigint"),
        ("op", "change_op", "text"),
        ("incomplete", "error", "text"),
        ("tier", "profile_tier", "text"),
        ("balance", "profile_balance", "numeric"),
        ("vip", "profile_vip", "boolean"),
        ("since", "profile_since", "timestamptz"),
        ("attrs", "profile_attrs", "jsonb"),
        ("tags", "profile_tags", "text[]"),
    ]
    path_vip = built["aggregates"][1]
    assert [(k["column"], at[k["ordinal"]], k["type"], k["md5"]) for k in path_vip["keys"]] == [
        ("path", "path", "text", True),
        ("vip", "profile_vip", "boolean", False),
    ]
    assert path_vip["count_ordinal"] is None  # no count field: every event counts 1
    assert [(s["column"], at[s["ordinal"]]) for s in path_vip["sums"]] == [
        ("ms_total", "ms_on_page"),
        ("score_total", "score"),
    ]
    with pytest.raises(ValueError, match="the join's output has no column 'profile_tags'"):
        sink_spec.sink_spec(
            plan.of(PIPELINE), StructType([f for f in OUTPUT.fields if f.name != "profile_tags"])
        )


@pytest.mark.parametrize("key", ["tags", "attrs"])
def test_a_group_by_the_sink_cannot_key_is_a_pipeline_file_error(key: str) -> None:
    """Refused when the file is read, so `check` and `setup` refuse it before `run` would."""
    spec = PIPELINE.model_dump(mode="json")
    spec["aggregates"] = [{"name": "by_it", "group_by": {key: key}}]
    with pytest.raises(ValueError, match="cannot group by a (text\\[\\]|jsonb) column"):
        pf.Pipeline.model_validate(spec)


def stored_views(dsn: str) -> dict[str, tuple]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            """SELECT event_id, customer_id, (extract(epoch FROM ts) * 1000)::bigint, path, ms_on_page, score,
                      ratio, referrer, profile_tier, profile_balance::text, profile_vip,
                      (extract(epoch FROM profile_since) * 1000000)::bigint, profile_attrs, profile_tags,
                      profile_valid_from = '-infinity', CASE WHEN isfinite(profile_valid_from)
                      THEN (extract(epoch FROM profile_valid_from) * 1000)::bigint END, profile_complete,
                      (extract(epoch FROM cdc_progress) * 1000)::bigint, released_by_max_wait
               FROM streamfold.enriched_views"""
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def expected_row(row: dict) -> tuple:
    valid = row["profile_valid_from_ms"]
    return (
        int(row["customer_id"]),
        row["ts_ms"],
        row["path"].replace("\x00", "\ufffd"),
        row["ms_on_page"],
        row["score"],
        row["ratio"],
        row["referrer"],
        row["profile_tier"],
        row["profile_balance"],
        row["profile_vip"],
        row["profile_since"],
        None if row["profile_attrs"] is None else json.loads(row["profile_attrs"]),
        row["profile_tags"],
        None if valid is None else valid < 0,
        None if valid is None or valid < 0 else valid,
        row["profile_complete"],
        row["cdc_progress_ms"],
        row["released_by_max_wait"],
    )


def stored_history(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            """SELECT id, valid_from = '-infinity', lsn, op, tier, balance::text, vip,
                      (extract(epoch FROM since) * 1000000)::bigint, attrs, tags
               FROM streamfold.profile_history_views ORDER BY id, valid_from, lsn"""
        ).fetchall()


TOTALS_EXACT = [
    # (aggregate table, its key columns, its count and sums, the same from the enriched table)
    ("views_per_tier", "tier", "count, ms_total", "profile_tier", "count(*), sum(ms_on_page)"),
    (
        "views_per_path_vip",
        "path, vip",
        "views, ms_total, score_total",
        "path, profile_vip",
        "count(*), sum(ms_on_page), sum(score)",
    ),
    ("views_per_score", "score", "count", "score", "count(*)"),
]


def assert_totals_exact(dsn: str) -> int:
    """Each aggregate table equals the sums over the enriched table; returns the enriched rows."""
    with psycopg.connect(dsn) as conn:
        for table, keys, totals, source_keys, sums in TOTALS_EXACT:
            diff = conn.execute(
                f"""(SELECT {source_keys}, {sums} FROM streamfold.enriched_views GROUP BY {source_keys}
                     EXCEPT ALL SELECT {keys}, {totals} FROM streamfold.{table})
                    UNION ALL
                    (SELECT {keys}, {totals} FROM streamfold.{table}
                     EXCEPT ALL
                     SELECT {source_keys}, {sums} FROM streamfold.enriched_views GROUP BY {source_keys})"""
            ).fetchall()
            assert diff == [], table
        count = conn.execute("SELECT count(*) FROM streamfold.enriched_views").fetchone()
    assert count is not None
    return count[0]


def test_a_second_pipeline_lands_its_rows_totals_and_replays(
    spark: SparkSession, tables: str, bootstrap: str
) -> None:
    dsn = tables
    fresh_topics(bootstrap, TOPICS)
    rows = views(200)
    batch = frame(spark, rows + rejects(3) + CHANGES, OUTPUT.fieldNames())
    landed = land(batch, dsn, bootstrap, spec=spec(batch))
    assert set(landed.values()) == {(True, "COPY")}
    assert land(batch, dsn, bootstrap, spec=spec(batch)) == {p: (False, "replay") for p in landed}
    stored = stored_views(dsn)
    assert {e: stored.get(e) for e in (r["event_id"] for r in rows)} == {
        r["event_id"]: expected_row(r) for r in rows
    }
    assert assert_totals_exact(dsn) == 200
    with psycopg.connect(dsn) as conn:
        paths = conn.execute(
            "SELECT path FROM streamfold.views_per_path_vip WHERE path LIKE '/a%'"
        ).fetchall()
        dead = conn.execute(f"SELECT count(*) FROM {names.DEAD_LETTERS_TABLE}").fetchone()
    assert sorted(paths) == [("/a\ufffd",), ("/a\ufffd",)]  # one per vip, "/a\x00" counted with "/a\ufffd"
    assert dead == (3,)
    assert stored_history(dsn) == [  # every profile version, each once, its values of every type
        (10**12 + 1, False, 11, "c", "gold", "12.50", True, 0, {"k": [1]}, ["t"]),
        (10**12 + 1, False, 13, "d", None, None, None, None, None, None),
        (10**12 + 2, True, 12, "r", None, None, None, None, None, None),
    ]

    # A topic reprocessed under a new checkpoint, its columns in another order: half the events are there.
    again = frame(spark, views(200, start=100), list(reversed(OUTPUT.fieldNames())))
    assert set(land(again, dsn, bootstrap, batch_id=1, spec=spec(again)).values()) == {(True, "deduplicated")}
    assert assert_totals_exact(dsn) == 300
    stored = stored_views(dsn)
    assert all(stored[r["event_id"]] == expected_row(r) for r in views(200, start=100))

    # A version the join stored again (Debezium re-sending after a Connect restart) replaces the stored one.
    resent = [{**CHANGES[0], "profile_tier": "platinum"}, *CHANGES[1:]]
    land(frame(spark, resent, OUTPUT.fieldNames()), dsn, bootstrap, batch_id=2, spec=spec(batch))
    assert stored_history(dsn) == [
        (10**12 + 1, False, 11, "c", "platinum", "12.50", True, 0, {"k": [1]}, ["t"]),
        (10**12 + 1, False, 13, "d", None, None, None, None, None, None),
        (10**12 + 2, True, 12, "r", None, None, None, None, None, None),
    ]


def enriched_value(row: dict) -> bytes:
    """The enriched topic's value, field by field in the table's order: null and a snapshot's valid-from
    left out, the bigint key and numeric as JSON numbers, jsonb embedded, times from micros as ISO-8601."""
    tags, valid = row["profile_tags"], row["profile_valid_from_ms"]
    fields = [
        ("event_id", json.dumps(row["event_id"], ensure_ascii=False)),
        ("customer_id", row["customer_id"]),
        ("ts", str(row["ts_ms"])),
        ("path", json.dumps(row["path"], ensure_ascii=False)),
        ("ms_on_page", str(row["ms_on_page"])),
        ("score", str(row["score"])),
        ("ratio", {None: None, 1e20: "1.0E20"}.get(row["ratio"], str(row["ratio"]))),
        ("referrer", None if row["referrer"] is None else json.dumps(row["referrer"])),
        ("profile_tier", json.dumps(row["profile_tier"], ensure_ascii=False)),
        ("profile_balance", row["profile_balance"]),
        ("profile_vip", json.dumps(row["profile_vip"])),
        ("profile_since", json.dumps(SINCE_TEXT[SINCE.index(row["profile_since"])])),
        ("profile_attrs", row["profile_attrs"]),
        ("profile_tags", None if tags is None else json.dumps(tags, separators=(",", ":"))),
        ("profile_valid_from", None if valid is None or valid < 0 else str(valid)),
        ("profile_complete", json.dumps(row["profile_complete"])),
        ("cdc_progress", None if row["cdc_progress_ms"] is None else str(row["cdc_progress_ms"])),
        ("released_by_max_wait", json.dumps(row["released_by_max_wait"])),
    ]
    return ("{" + ",".join(f'"{n}":{v}' for n, v in fields if v is not None) + "}").encode()


def test_a_second_pipelines_records_and_aggregate_topics(
    spark: SparkSession, tables: str, bootstrap: str
) -> None:
    dsn = tables
    fresh_topics(bootstrap, TOPICS)
    rows = views(40)
    sink = sinks.Sink("q", dsn, bootstrap, PIPELINE, OUTPUT, retry_s=30)
    spark.sparkContext.setLocalProperty("sql.streaming.queryId", "unit")
    try:
        sink(frame(spark, rows + rejects(2) + CHANGES, OUTPUT.fieldNames()), 0)
    finally:
        spark.sparkContext.setLocalProperty("sql.streaming.queryId", None)  # type: ignore[arg-type]

    got = topic_records(bootstrap, "enriched_views", len(rows))
    assert sorted(got) == sorted((r["customer_id"].encode(), enriched_value(r)) for r in rows)
    changelog = [(k.decode(), v) for k, v in topic_records(bootstrap, "customers_changelog", 3) if k]
    assert [v for k, v in changelog if k == "1000000000001"] == [
        b'{"id":1000000000001,"tier":"gold","balance":12.50,"vip":true,"since":"1970-01-01T00:00:00.000000Z",'
        b'"attrs":{"k": [1]},"tags":["t"],"valid_from":5}',
        None,  # the delete: a tombstone
    ]
    assert [v for k, v in changelog if k == "1000000000002"] == [b'{"id":1000000000002}']
    assert len(topic_records(bootstrap, "views_dlq", 2)) == 2

    with psycopg.connect(dsn) as conn:
        tiers = conn.execute("SELECT tier, count, ms_total FROM streamfold.views_per_tier").fetchall()
        path_vip = conn.execute(
            "SELECT path, vip, views, ms_total, score_total FROM streamfold.views_per_path_vip"
        ).fetchall()
        scores = conn.execute("SELECT score, count FROM streamfold.views_per_score").fetchall()
    assert {k.decode(): v.decode() for k, v in topic_records(bootstrap, "views_per_tier", 3)} == {
        tier: json.dumps({"tier": tier, "count": count, "ms_total": total}) for tier, count, total in tiers
    }
    assert {k.decode(): v.decode() for k, v in topic_records(bootstrap, "views_per_path_vip", 8)} == {
        f"{path}|{str(vip).lower()}": json.dumps(
            {"path": path, "vip": vip, "views": n, "ms_total": total, "score_total": score}
        )
        for path, vip, n, total, score in path_vip
    }
    assert {k.decode(): v.decode() for k, v in topic_records(bootstrap, "views_per_score", 4)} == {
        str(score): json.dumps({"score": score, "count": count}) for score, count in scores
    }
    assert (len(tiers), len(path_vip), len(scores)) == (3, 8, 4)


# The types the pipeline above leaves out, and the values at the edges of each binary form the sink COPYs.
EDGES = pf.parse(
    """\
name: edges
profile:
  table: public.sensors
  key: id
  key_type: integer
  columns:
    level: numeric
    seen: timestamp
events:
  kafka_topic: readings
  key: sensor
  time: {field: ts, format: epoch_ms}
  fields:
    value: {type: double, required: false}
""",
    "edges.yaml",
)
EDGE_COLUMNS: list[tuple[str, DataType]] = [
    ("kind", _S),
    ("event_id", _S),
    ("sensor", _S),
    ("ts_ms", _L),
    ("value", DoubleType()),
    ("count", IntegerType()),
    ("profile_level", _S),
    ("profile_seen", _L),
    *COLUMNS[COLUMNS.index(("profile_valid_from_ms", _L)) :],  # the join's columns after the profile's
]
# (sensor, value, level, seen in epoch microseconds) and how Postgres reads each back.
EDGE_VALUES = [
    ("-2147483648", float("nan"), "NaN", -1),
    ("2147483647", float("-inf"), "Infinity", 0),
    ("0", -0.0, "-Infinity", 253_402_300_799_999_999),
    ("7", 1e-300, "0.00", None),
]


def test_integer_keys_timestamps_and_special_numbers_land_as_their_types(
    spark: SparkSession, dsn: str, bootstrap: str
) -> None:
    pipeline_tables.metadata(EDGES).create_all(schema.engine(dsn))
    fresh_topics(
        bootstrap,
        (plan.of(EDGES).enriched_topic, plan.of(EDGES).changelog_topic, plan.of(EDGES).dead_letters_topic),
    )
    rows = [
        ("event", f"kafka:readings:0:{i}", sensor, 1_767_225_600_000 + i, value, 1, level, seen, -1, True)
        + (None,) * 6
        + (False,)
        for i, (sensor, value, level, seen) in enumerate(EDGE_VALUES)
    ]
    batch = spark.createDataFrame(rows, StructType([StructField(n, t) for n, t in EDGE_COLUMNS]))
    assert set(
        land(batch, dsn, bootstrap, spec=sink_spec.sink_spec_json(plan.of(EDGES), batch.schema)).values()
    ) == {(True, "COPY")}
    with psycopg.connect(dsn) as conn:
        stored = conn.execute(
            """SELECT sensor, value::text, profile_level::text, profile_seen::text, profile_valid_from::text
                 FROM streamfold.enriched_edges ORDER BY event_id"""
        ).fetchall()
    assert stored == [
        (-(2**31), "NaN", "NaN", "1969-12-31 23:59:59.999999", "-infinity"),
        (2**31 - 1, "-Infinity", "Infinity", "1970-01-01 00:00:00", "-infinity"),
        (0, "-0", "-Infinity", "9999-12-31 23:59:59.999999", "-infinity"),
        (7, "1e-300", "0.00", None, "-infinity"),
    ]
