"""`python -m bench.naive BOOTSTRAP OFFSETS`: the seed's naive design, a database lookup per click.

A confluent-kafka consumer reads the clicks, validates each with streamfold's own parser, looks the user
up in public.users with a prepared statement (one round trip per click: the current profile, i.e.
processing-time semantics), and writes the same outputs as streamfold with streamfold's own sink code:
per poll batch, COPY + the aggregate upsert in one Postgres transaction claiming the batch id, then
user_clicks and the aggregate topics in Kafka, then the consumer offsets.
"""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from confluent_kafka import Consumer, Message, TopicPartition

from bench.measured import emit, parse_offsets
from bench.stack import Offsets
from common import config, names, plan
from common import pipeline_file as pf
from pipeline import records
from pipeline.sinks import Sink
from spec.events import Rejected, parse_event

# The default pipeline file's event spec (the demo's clicks).
DEFAULT_EVENT_SPEC = plan.of(pf.load()).event_spec

BATCH = 2000
LOOKUP = "SELECT regionid, gender, interests, registertime FROM public.users WHERE userid = %s"
QUERY = "naive"

# A poll batch is staged in a temporary table, then inserted and folded into the totals by one statement.
STAGING_COLUMNS = records.names(
    records.enriched(pf.load(Path(pf.__file__).resolve().parents[1] / pf.DEFAULT_FILE))
)
STAGING_DDL = """
CREATE TEMP TABLE IF NOT EXISTS batch_clicks (
    event_id text, uid text, click_time_ms bigint, click_url text, device_type text, click_location text,
    clicks integer, user_regionid text, user_gender text, user_interests text, user_registertime bigint,
    profile_valid_from_ms bigint, profile_complete boolean
) ON COMMIT DELETE ROWS
"""
# The deduplicating insert of streamfold's sink (jvm/.../sink/PgWriter.java), over pg_temp.batch_clicks.
INSERT_AND_AGGREGATE = f"""
WITH inserted AS (
    INSERT INTO {names.ENRICHED_CLICKS_TABLE} (
        event_id, uid, click_time, click_url, device_type, click_location, clicks,
        user_regionid, user_gender, user_interests, user_registertime, profile_valid_from, profile_complete)
    SELECT event_id, uid, to_timestamp(click_time_ms / 1000.0), click_url, device_type, click_location,
           clicks, user_regionid, user_gender, user_interests::text[], user_registertime,
           CASE WHEN profile_valid_from_ms IS NULL THEN NULL
                WHEN profile_valid_from_ms < 0 THEN '-infinity'::timestamptz
                ELSE to_timestamp(profile_valid_from_ms / 1000.0) END,
           profile_complete
    FROM pg_temp.batch_clicks
    ON CONFLICT (event_id) DO NOTHING
    RETURNING click_url, user_regionid, clicks
), per_region AS (
    INSERT INTO {names.CLICKS_PER_REGION_TABLE} AS t (region, clicks)
    SELECT user_regionid, sum(clicks) FROM inserted GROUP BY user_regionid ORDER BY 1
    ON CONFLICT (region) DO UPDATE SET clicks = t.clicks + excluded.clicks
), per_url_region AS (
    INSERT INTO {names.URL_REGION_TABLE} AS t (url, region, click_count)
    SELECT click_url, user_regionid, sum(clicks) FROM inserted
    GROUP BY click_url, user_regionid ORDER BY 1, 2
    ON CONFLICT (url_md5, region) DO UPDATE SET click_count = t.click_count + excluded.click_count
)
SELECT count(*) FROM inserted
"""
CLAIM = (
    "INSERT INTO streamfold.sink_batches (query, batch_id, partition_id, rows) "
    "VALUES (%s, %s, 0, %s) ON CONFLICT DO NOTHING RETURNING 1"
)


def pg_array(values: list[str] | None) -> str | None:
    """The text[] literal streamfold's sink stages (it travels through COPY as CSV)."""
    if values is None:
        return None
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


def enrich(msg: Message, lookup: psycopg.Cursor, now_ms: int) -> dict[str, Any] | None:
    """One click -> one enriched row (None for a record the parser rejects)."""
    try:
        click = parse_event(msg.value(), now_ms, DEFAULT_EVENT_SPEC)
    except Rejected:
        return None
    profile = lookup.execute(LOOKUP, (click.key,), prepare=True).fetchone()
    region, gender, interests, registertime = profile or (None, None, None, None)
    return {
        "event_id": f"kafka:{msg.topic()}:{msg.partition()}:{msg.offset()}",
        "uid": click.key,
        "click_time_ms": click.time_ms,
        "click_url": click.fields["url"],
        "device_type": click.fields["device_id"],
        "click_location": click.fields["ip"],
        "clicks": click.count,
        "user_regionid": region or names.UNKNOWN_REGION,
        "user_gender": gender,
        "user_interests": interests,
        "user_registertime": registertime,
        "profile_valid_from_ms": None,  # a lookup cannot tell since when the profile is valid
        "profile_complete": True,
    }


def staged(rows: list[dict[str, Any]]) -> pa.Table:
    table = pa.Table.from_pylist([{**r, "user_interests": pg_array(r["user_interests"])} for r in rows])
    return table.select(list(STAGING_COLUMNS))


def user_click(row: dict[str, Any]) -> bytes:
    return json.dumps({name.removesuffix("_ms"): row[name] for name in STAGING_COLUMNS}).encode()


def write(sink: Sink, batch_id: int, rows: list[dict[str, Any]]) -> None:
    table = staged(rows)

    csv = io.BytesIO()
    pacsv.write_csv(table, csv, pacsv.WriteOptions(include_header=False))

    def insert(conn: psycopg.Connection) -> None:
        """Claim the batch id in the ledger, then stage, insert and fold it; a claimed batch is skipped."""
        if not conn.execute(CLAIM, (QUERY, batch_id, table.num_rows)).fetchone():
            return
        conn.execute(STAGING_DDL)
        with conn.cursor().copy(
            f"COPY pg_temp.batch_clicks ({', '.join(STAGING_COLUMNS)}) FROM STDIN (FORMAT csv)"
        ) as copy:
            copy.write(csv.getvalue())
        conn.execute(INSERT_AND_AGGREGATE)

    sink.pg.transaction(insert)
    for row in rows:
        sink.producer.produce(names.USER_CLICKS_TOPIC, key=row["uid"], value=user_click(row))
        sink.producer.poll(0)
    pairs = sorted({(r["click_url"], r["user_regionid"]) for r in rows})
    keys = {"clicks_per_region": sorted({(region,) for _, region in pairs}), "url_region_click_count": pairs}
    sink.publish_totals(keys)  # flushes the producer: user_clicks are acknowledged too


def run(bootstrap: str, offsets: Offsets) -> dict[str, Any]:
    settings = config.load()
    consumer = Consumer(
        {**config.kafka_client_settings(bootstrap), "group.id": "bench-naive", "enable.auto.commit": False}
    )
    limits = {p: end for p, (start, end) in offsets.items() if end > start}
    ends = dict(limits)  # partitions not read to the end yet
    consumer.assign([TopicPartition(names.CLICKS_TOPIC, p, offsets[p][0]) for p in ends])
    output = records.join_output(settings.pipeline)
    sink = Sink(QUERY, settings.writer_dsn, bootstrap, settings.pipeline, output)
    lookups = psycopg.connect(settings.pg_dsn, autocommit=True)
    cursor = lookups.cursor()
    clicks = batches = 0
    first = 0.0
    while ends:
        # Records past the range (appended by later measurements) are not part of this input.
        polled = consumer.consume(BATCH, timeout=1.0)
        msgs = [m for m in polled if not m.error() and m.offset() < limits[m.partition()]]
        if not msgs:
            continue
        first = first or time.monotonic()
        now_ms = int(time.time() * 1000)
        rows = [row for m in msgs if (row := enrich(m, cursor, now_ms))]
        write(sink, batches, rows)
        consumer.commit(asynchronous=True)
        clicks += len(rows)
        batches += 1
        for m in msgs:
            if m.offset() + 1 >= ends.get(m.partition(), 0):
                ends.pop(m.partition(), None)
    seconds = time.monotonic() - first
    consumer.close()
    return {
        "clicks": clicks,
        "seconds": round(seconds, 2),
        "clicks_per_s": round(clicks / seconds),
        "batches": batches,
    }


if __name__ == "__main__":
    emit(run(sys.argv[1], parse_offsets(sys.argv[2])))
