"""`python -m bench.naive BOOTSTRAP OFFSETS`: the seed's naive design, a database lookup per click.

A confluent-kafka consumer reads the clicks, validates each with streamfold's own parser, looks the user
up in public.users with a prepared statement (one round trip per click: the current profile, i.e.
processing-time semantics), and writes the same outputs as streamfold with streamfold's own sink code:
per poll batch, COPY + the aggregate upsert in one Postgres transaction claiming the batch id, then
user_clicks and the aggregate topics in Kafka, then the consumer offsets.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import psycopg
import pyarrow as pa
from confluent_kafka import Consumer, Message, TopicPartition

from bench.measured import emit, parse_offsets
from bench.stack import Offsets
from common import config, names
from pipeline import aggregates
from pipeline.clicks import Rejected, parse_click
from pipeline.sinks import STAGING_COLUMNS, EnrichedClicksSink, copy_rows

BATCH = 2000
LOOKUP = "SELECT regionid, gender, interests, registertime FROM public.users WHERE userid = %s"
QUERY = "naive"


def pg_array(values: list[str] | None) -> str | None:
    """The text[] literal streamfold's sink stages (it travels through COPY as CSV)."""
    if values is None:
        return None
    quoted = ('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
    return "{" + ",".join(quoted) + "}"


def enrich(msg: Message, lookup: psycopg.Cursor, now_ms: int) -> dict[str, Any] | None:
    """One click -> one enriched row (None for a record the parser rejects)."""
    try:
        click = parse_click(msg.value(), now_ms)
    except Rejected:
        return None
    profile = lookup.execute(LOOKUP, (click.userid,), prepare=True).fetchone()
    region, gender, interests, registertime = profile or (None, None, None, None)
    return {
        "event_id": f"kafka:{msg.topic()}:{msg.partition()}:{msg.offset()}",
        "uid": click.userid,
        "click_time_ms": click.event_time_ms,
        "click_url": click.url,
        "device_type": click.device_id,
        "click_location": click.ip,
        "clicks": click.clicks,
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


def write(sink: EnrichedClicksSink, batch_id: int, rows: list[dict[str, Any]]) -> None:
    table = staged(rows)

    def insert(conn: psycopg.Connection) -> None:
        copy_rows(conn, "pg_temp.batch_clicks", STAGING_COLUMNS, table)
        conn.execute(aggregates.INSERT_AND_AGGREGATE)

    sink.pg.commit(QUERY, batch_id, table.num_rows, insert)
    for row in rows:
        sink.producer.produce(names.USER_CLICKS_TOPIC, key=row["uid"], value=user_click(row))
        sink.producer.poll(0)
    keys = sorted({(r["click_url"], r["user_regionid"]) for r in rows})
    sink.publish_totals(keys)  # flushes the producer: user_clicks are acknowledged too


def run(bootstrap: str, offsets: Offsets) -> dict[str, Any]:
    settings = config.load()
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-naive", "enable.auto.commit": False}
    )
    limits = {p: end for p, (start, end) in offsets.items() if end > start}
    ends = dict(limits)  # partitions not read to the end yet
    consumer.assign([TopicPartition(names.CLICKS_TOPIC, p, offsets[p][0]) for p in ends])
    sink = EnrichedClicksSink(QUERY, settings.writer_dsn, bootstrap)
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
