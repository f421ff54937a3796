"""`python -m bench.sink_alone [--rows N] [--batch B] [--urls U]`: the Postgres + Kafka sink alone, no join.

Starts Postgres and Kafka of a local stack (in /tmp/streamfold-bench-sink unless --home), builds
synthetic enriched batches in Spark (spark.range: N rows in batches of B, 100,000 users, ~100k distinct
URLs (--urls) x 5 regions, constant profile columns per user), caches each batch, and calls a sink's __call__
per batch the way foreachBatch does (the `sql.streaming.queryId` local property set). Measures, in the
same run and on the same batches:
  before  the sink as committed in git HEAD (staging table + INSERT..SELECT, driver-side totals loop)
  after   pipeline.sinks.Sink
both on the schema of the current migrations (db/migrations), each on emptied tables.
After each, checks that enriched_clicks holds N rows and that both aggregate tables equal the sums over
it. Prints one JSON line per sink: rows, seconds, rows/s, per-batch seconds.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from common import config, names
from common import pipeline_file as pf
from db import schema
from pipeline import records
from stack import lifecycle
from stack.home import open_stack

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_700_000_000_000
USERS = 100_000
URLS = 100_000
REGIONS = 5
TOPICS = (names.USER_CLICKS_TOPIC, names.CLICKS_PER_REGION_TOPIC, names.URL_REGION_TOPIC, names.DLQ_TOPIC)


def head_module(name: str, path: str, extra: dict[str, Any]) -> types.ModuleType:
    """A module as committed in git HEAD (the sink before this change), under another name."""
    source = subprocess.run(
        ["git", "show", f"HEAD:{path}"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for line, replacement in extra.pop("_replace", {}).items():
        source = source.replace(line, replacement)
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(extra)
    sys.modules[name] = module
    exec(compile(source, f"HEAD:{path}", "exec"), module.__dict__)  # noqa: S102 (our own committed code)
    return module


def head_sink_class() -> type:
    aggregates = head_module("bench_head_aggregates", "pipeline/aggregates.py", {})
    sinks = head_module(
        "bench_head_sinks",
        "pipeline/sinks.py",
        {"aggregates": aggregates, "_replace": {"from pipeline import aggregates\n": "\n"}},
    )
    return getattr(sinks, "Sink", None) or sinks.EnrichedClicksSink


def new_sink(cls: Any, dsn: str, bootstrap: str) -> Any:
    """A sink of either generation: the generic one takes the pipeline file and the join's output."""
    try:
        return cls("bench", dsn, bootstrap, pf.load(), records.JOIN_OUTPUT)
    except TypeError:
        return cls("bench", dsn, bootstrap)


def batch_frame(spark: SparkSession, start: int, rows: int, urls: int = URLS) -> DataFrame:
    i = F.col("id")
    user = i % USERS
    return spark.range(start, start + rows).select(
        F.concat(F.lit("kafka:clicks:0:"), i.cast("string")).alias("event_id"),
        F.concat(F.lit("User_"), user.cast("string")).alias("uid"),
        (F.lit(T0) + i).alias("click_time_ms"),
        F.concat(F.lit("https://example.com/page/"), ((i * 7919) % urls).cast("string")).alias("click_url"),
        F.lit("mobile").alias("device_type"),
        F.concat(F.lit("10.0.0."), (i % 250).cast("string")).alias("click_location"),
        (F.lit(1) + (i % 3)).cast("int").alias("clicks"),
        F.concat(F.lit("Region_"), (user % REGIONS).cast("string")).alias("user_regionid"),
        F.lit("FEMALE").alias("user_gender"),
        F.array(F.lit("News"), F.lit("Movies")).alias("user_interests"),
        F.lit(1_500_000_000_000).cast("long").alias("user_registertime"),
        F.lit(-1).cast("long").alias("profile_valid_from_ms"),
        F.lit(True).alias("profile_complete"),
        F.lit(None).cast("string").alias("error"),
        F.lit(None).cast("string").alias("source"),
        F.lit(None).cast("binary").alias("payload"),
        F.lit(None).cast("string").alias("change_op"),
    )


def reset_schema(admin_dsn: str) -> None:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS streamfold CASCADE")
    schema.upgrade(admin_dsn)


def check(admin_dsn: str, rows: int) -> dict[str, Any]:
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        count, clicks = conn.execute(
            "SELECT count(*), sum(clicks) FROM streamfold.enriched_clicks"
        ).fetchone() or (0, 0)
        region_diff = conn.execute(
            """SELECT count(*) FROM (SELECT user_regionid AS region, sum(clicks) AS clicks
                 FROM streamfold.enriched_clicks GROUP BY 1) e
               FULL JOIN streamfold.clicks_per_region t USING (region)
               WHERE e.clicks IS DISTINCT FROM t.clicks"""
        ).fetchone()
        url_diff = conn.execute(
            """SELECT count(*) FROM (SELECT click_url AS url, user_regionid AS region, sum(clicks) AS c
                 FROM streamfold.enriched_clicks GROUP BY 1, 2) e
               FULL JOIN streamfold.url_region_click_count t USING (url, region)
               WHERE e.c IS DISTINCT FROM t.click_count"""
        ).fetchone()
    ok = count == rows and region_diff == (0,) and url_diff == (0,)
    return {"exact": ok, "enriched_rows": count, "clicks": clicks}


def measure(
    label: str, sink: Any, spark: SparkSession, rows: int, batch: int, admin_dsn: str, urls: int = URLS
) -> dict[str, Any]:
    spark.sparkContext.setLocalProperty("sql.streaming.queryId", f"bench-{label}")
    seconds: list[float] = []
    for batch_id, start in enumerate(range(0, rows, batch)):
        frame = batch_frame(spark, start, min(batch, rows - start), urls).persist()
        frame.count()  # the batch exists before the clock starts: only the sink is timed
        began = time.monotonic()
        sink(frame, batch_id)
        seconds.append(round(time.monotonic() - began, 3))
        frame.unpersist()
    total = sum(seconds)
    steady = seconds[1:] or seconds
    steady_rows = rows - min(batch, rows) if len(seconds) > 1 else rows
    return {
        "sink": label,
        "rows": rows,
        "batch": batch,
        "urls": urls,
        "seconds": round(total, 2),
        "rows_per_s": round(rows / total),
        "steady_rows_per_s": round(steady_rows / sum(steady)),
        "batch_seconds": seconds,
        **check(admin_dsn, rows),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--batch", type=int, default=200_000)
    parser.add_argument("--home", type=Path, default=Path("/tmp/streamfold-bench-sink"))
    parser.add_argument("--only", choices=("before", "after"), default=None)
    parser.add_argument("--urls", type=int, default=URLS, help="distinct URLs (x regions: the totals' keys)")
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    args = parser.parse_args()
    logging.basicConfig(format="%(asctime)s %(name)s %(message)s", level=logging.WARNING)
    logging.getLogger("pipeline").setLevel(logging.INFO)  # the sink's per-batch line, with its step times

    home = args.home.resolve()
    try:
        for service in ("postgres", "kafka"):
            lifecycle.start_service(home, service)
        env = open_stack(home).env()
        os.environ.update(env)
        settings = config.load()
        schema.apply(settings.pg_dsn)  # roles and passwords
        admin = AdminClient({"bootstrap.servers": settings.kafka_bootstrap})
        existing = set(admin.list_topics(timeout=30).topics)
        new = [NewTopic(t, 4, 1) for t in TOPICS if t not in existing]
        for future in admin.create_topics(new).values() if new else []:
            future.result()

        from pipeline.spark import session  # noqa: PLC0415 (after the env points at the stack)

        spark = session("bench-sink-alone", {"spark.master": "local[2]"})
        spark.sparkContext.setLogLevel("WARN")
        dsn = settings.pg_dsn
        if args.only in (None, "before"):
            reset_schema(dsn)
            before = new_sink(head_sink_class(), dsn, settings.kafka_bootstrap)
            print(
                json.dumps(measure("before", before, spark, args.rows, args.batch, dsn, args.urls)),
                flush=True,
            )
        if args.only in (None, "after"):
            from pipeline.sinks import Sink  # noqa: PLC0415

            reset_schema(dsn)
            after = new_sink(Sink, dsn, settings.kafka_bootstrap)
            print(
                json.dumps(measure("after", after, spark, args.rows, args.batch, dsn, args.urls)), flush=True
            )
        spark.stop()
    finally:
        if not args.keep:
            lifecycle.down(home)


if __name__ == "__main__":
    main()
