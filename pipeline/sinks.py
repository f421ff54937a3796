"""Sinks: Postgres exactly once, Kafka at least once.

Each micro-batch (foreachBatch) is written to Postgres in ONE transaction that first claims
(query, batch_id) in streamfold.sink_batches: a batch Spark replays after a crash finds its id taken
and writes nothing. Enriched clicks are also keyed by a deterministic event_id and the aggregates are
folded from the rows actually inserted, so even a reprocessed topic cannot double count.
Kafka outputs are written after the Postgres commit, on every attempt (at least once; consumers
drop duplicates by event_id).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Callable

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from confluent_kafka import Producer
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline import aggregates
from pipeline.cdc_fold import changelog_records
from streamfold import names

log = logging.getLogger(__name__)

STAGING_COLUMNS = (
    "event_id",
    "uid",
    "click_time_ms",
    "click_url",
    "device_type",
    "click_location",
    "clicks",
    "user_regionid",
    "user_gender",
    "user_interests",
    "user_registertime",
    "profile_valid_from_ms",
)
STAGING_DDL = """
CREATE TEMP TABLE IF NOT EXISTS batch_clicks (
    event_id text, uid text, click_time_ms bigint, click_url text, device_type text, click_location text,
    clicks integer, user_regionid text, user_gender text, user_interests text, user_registertime bigint,
    profile_valid_from_ms bigint
) ON COMMIT DELETE ROWS
"""
DEAD_LETTER_COLUMNS = ("dead_letter_id", "source", "reason", "payload")


def pg_array_literal(col: Column) -> Column:
    """text[] literal ({"a","b"}) so the batch can travel as CSV through COPY."""
    quoted = F.transform(
        col,
        lambda x: F.concat(
            F.lit('"'), F.regexp_replace(F.regexp_replace(x, r"\\", r"\\\\"), '"', r'\\"'), F.lit('"')
        ),
    )
    return F.when(col.isNull(), F.lit(None)).otherwise(
        F.concat(F.lit("{"), F.array_join(quoted, ","), F.lit("}"))
    )


def to_csv(table: pa.Table) -> bytes:
    buffer = io.BytesIO()
    pacsv.write_csv(table, buffer, pacsv.WriteOptions(include_header=False))
    return buffer.getvalue()


def copy_rows(conn: psycopg.Connection, table: str, columns: tuple[str, ...], rows: pa.Table) -> None:
    if rows.num_rows == 0:
        return
    with conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT csv)") as copy:
        copy.write(to_csv(rows))


class PostgresBatches:
    """One writer connection; `commit` runs a batch's writes under its claimed batch id."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._conn: psycopg.Connection | None = None

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn)
            self._conn.execute(STAGING_DDL)
            self._conn.commit()
        return self._conn

    def commit(
        self, query: str, batch_id: int, rows: int, write: Callable[[psycopg.Connection], None]
    ) -> bool:
        """Run `write` and record (query, batch_id) atomically. False when the batch was already committed."""
        conn = self.conn
        try:
            with conn.transaction():
                claimed = conn.execute(
                    "INSERT INTO streamfold.sink_batches (query, batch_id, rows) VALUES (%s, %s, %s) "
                    "ON CONFLICT DO NOTHING RETURNING 1",
                    (query, batch_id, rows),
                ).fetchone()
                if claimed:
                    write(conn)
            return bool(claimed)
        except psycopg.OperationalError:
            conn.close()  # reconnect next time; Spark retries the batch
            raise


def dead_letter_rows(rejects: DataFrame, id_col: str, source: Column, reason_col: str) -> DataFrame:
    return rejects.select(
        F.col(id_col).alias("dead_letter_id"),
        source.alias("source"),
        F.col(reason_col).alias("reason"),
        "payload",
    )


def dead_letter_table(dead_letters: DataFrame) -> pa.Table:
    """Rows for COPY into streamfold.dead_letters: bytea travels as hex text."""
    payload = F.when(F.col("payload").isNull(), F.lit(None)).otherwise(
        F.concat(F.lit("\\x"), F.hex("payload"))
    )
    return dead_letters.select(*DEAD_LETTER_COLUMNS[:-1], payload.alias("payload")).toArrow()


def dlq_records(dead_letters: DataFrame) -> DataFrame:
    """clicks_dlq: the reason, the payload as text (lossy for non-UTF-8) and exactly, in base64."""
    value = F.to_json(
        F.struct(
            "dead_letter_id",
            "source",
            "reason",
            F.col("payload").cast("string").alias("payload"),
            F.base64("payload").alias("payload_base64"),
        )
    )
    return dead_letters.select(F.col("dead_letter_id").alias("key"), value.alias("value"))


def write_kafka(records: DataFrame, bootstrap: str, topic: str) -> None:
    records.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()


def enriched_records(clicks: DataFrame) -> DataFrame:
    """user_clicks: the row as JSON, times in epoch ms (profile_valid_from null for snapshot versions)."""

    def field(name: str) -> Column:
        col = F.col(name)
        if name == "profile_valid_from_ms":
            col = F.when(col < 0, F.lit(None)).otherwise(col)
        return col.alias(name.removesuffix("_ms"))

    value = F.to_json(F.struct(*[field(name) for name in STAGING_COLUMNS]))
    return clicks.select(F.col("uid").alias("key"), value.alias("value"))


class EnrichedClicksSink:
    """foreachBatch for the join query: enriched clicks, aggregates and click dead letters."""

    def __init__(self, query: str, writer_dsn: str, bootstrap: str) -> None:
        self.query = query
        self.pg = PostgresBatches(writer_dsn)
        self.bootstrap = bootstrap
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True}
        )

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            clicks = batch.where("error IS NULL")
            rejects = dead_letter_rows(batch.where("error IS NOT NULL"), "event_id", F.col("source"), "error")
            staged = clicks.select(
                *[
                    pg_array_literal(F.col(c)).alias(c) if c == "user_interests" else c
                    for c in STAGING_COLUMNS
                ]
            ).toArrow()
            dead = dead_letter_table(rejects)

            def write(conn: psycopg.Connection) -> None:
                copy_rows(conn, "pg_temp.batch_clicks", STAGING_COLUMNS, staged)
                conn.execute(aggregates.INSERT_AND_AGGREGATE)
                copy_dead_letters(conn, dead)

            committed = self.pg.commit(
                f"{self.query}:{query_id(batch)}", batch_id, staged.num_rows + dead.num_rows, write
            )
            log.info(
                "batch %s: %s clicks, %s dead letters%s",
                batch_id,
                staged.num_rows,
                dead.num_rows,
                "" if committed else " (replay: already in Postgres)",
            )
            write_kafka(enriched_records(clicks), self.bootstrap, names.USER_CLICKS_TOPIC)
            if dead.num_rows:
                write_kafka(dlq_records(rejects), self.bootstrap, names.DLQ_TOPIC)
            self.publish_totals(staged)
        finally:
            batch.unpersist()

    def publish_totals(self, staged: pa.Table) -> None:
        """Send the new totals of every key the batch touched to the compacted aggregate topics."""
        if staged.num_rows == 0:
            return
        regions = staged.column("user_regionid").to_pylist()
        urls = staged.column("click_url").to_pylist()
        conn = self.pg.conn
        with conn.transaction():
            for region, total in aggregates.region_totals(conn, regions):
                self.producer.produce(
                    names.CLICKS_PER_REGION_TOPIC,
                    key=region,
                    value=json.dumps({"region": region, "clicks": total}),
                )
            for url, region, total in aggregates.url_region_totals(conn, zip(urls, regions, strict=True)):
                self.producer.produce(
                    names.URL_REGION_TOPIC,
                    key=f"{url}|{region}",
                    value=json.dumps({"url": url, "region": region, "click_count": total}),
                )
                self.producer.poll(0)
        if self.producer.flush(60) > 0:
            raise RuntimeError("Kafka did not acknowledge every aggregate update within 60 s")


class ChangelogSink:
    """foreachBatch for the fold query: users_changelog, plus CDC records that could not be folded."""

    def __init__(self, writer_dsn: str, bootstrap: str) -> None:
        self.pg = PostgresBatches(writer_dsn)
        self.bootstrap = bootstrap

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            write_kafka(
                changelog_records(batch.where("kind = 'change'")), self.bootstrap, names.USERS_CHANGELOG_TOPIC
            )
            rejects = dead_letter_rows(
                batch.where("kind = 'error'"), "record_id", F.lit(f"kafka:{names.CDC_USERS_TOPIC}"), "error"
            )
            dead = dead_letter_table(rejects)
            if dead.num_rows:
                self.pg.commit(
                    f"cdc:{query_id(batch)}",
                    batch_id,
                    dead.num_rows,
                    lambda conn: copy_dead_letters(conn, dead),
                )
                write_kafka(dlq_records(rejects), self.bootstrap, names.DLQ_TOPIC)
        finally:
            batch.unpersist()


def copy_dead_letters(conn: psycopg.Connection, dead: pa.Table) -> None:
    if dead.num_rows == 0:
        return
    conn.execute(
        "CREATE TEMP TABLE IF NOT EXISTS batch_dead_letters "
        "(LIKE streamfold.dead_letters INCLUDING DEFAULTS) ON COMMIT DROP"
    )
    copy_rows(conn, "pg_temp.batch_dead_letters", DEAD_LETTER_COLUMNS, dead)
    conn.execute(
        f"INSERT INTO {names.DEAD_LETTERS_TABLE} ({', '.join(DEAD_LETTER_COLUMNS)}) "
        f"SELECT {', '.join(DEAD_LETTER_COLUMNS)} FROM pg_temp.batch_dead_letters ON CONFLICT DO NOTHING"
    )


def query_id(batch: DataFrame) -> str:
    """The streaming query's id: stable across restarts from the same checkpoint, new for a new one."""
    return batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId") or "unknown"
