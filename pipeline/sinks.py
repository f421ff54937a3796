"""Sinks: Postgres exactly once, Kafka at least once.

The executors write each micro-batch (foreachBatch) to Postgres, partition by partition (`Landing`,
through mapInArrow): a partition lands in ONE transaction that first claims
(query, batch_id, partition_id) in streamfold.sink_batches, so a partition Spark replays after a crash
finds its claim taken and writes nothing. A replayed partition holds the same rows: it is a partition
of the join's output, whose state partitions the checkpoint fixes. Inside that transaction the
partition's clicks are COPYed straight into streamfold.enriched_clicks and its totals (aggregated once,
from the same rows) are upserted; if any event_id is already there (a topic reprocessed under a new
checkpoint), the transaction goes back to a savepoint and takes the slow, deduplicating path (staging
table, `ON CONFLICT DO NOTHING`, totals folded from the rows actually inserted). Either way the totals
equal the sum over enriched_clicks, in every committed state. The driver never holds the batch's rows:
it gets one summary row per partition and the (url, region) keys the batch touched.

The join's output also carries the CDC records (pipeline.temporal_join): a profile change (change_op set)
becomes a users_changelog record, an unfoldable record a dead letter like a rejected click. A user's
changes arrive in one partition, in the join's version order, so a user's changelog records keep it.

The sink writes its Kafka outputs after the Postgres commits, on every attempt (at least once;
consumers drop duplicates by event_id): each partition produces its user_clicks, users_changelog and
clicks_dlq records (bounded) right after its commit, from the same task, so the batch is computed once and
never cached; then the driver publishes the aggregate topics with the current totals of the keys the batch
touched (read after every partition committed, so the last value per key is the newest).

Robustness (also in README):
- Postgres text cannot hold U+0000 and COPY needs valid UTF-8: in the rows written to Postgres every
  text field is made valid UTF-8 (invalid bytes -> U+FFFD) and NUL becomes U+FFFD (`postgres_text`,
  vectorised on each partition's Arrow table). user_clicks keeps the click as parsed (JSON escapes NUL as
  \\u0000). The original bytes of a rejected record are kept in dead_letters.payload (bytea).
- clicks_dlq records carry at most DLQ_PAYLOAD_BYTES of the payload (as text and base64) plus its full
  length and sha256; the full bytes stay in streamfold.dead_letters.
- A Postgres or Kafka outage does not end the query: the batch's transaction (safe to retry, the ledger
  claims it once) and the aggregate flush are retried with backoff for up to STREAMFOLD_SINK_RETRY_S
  seconds (default 900), logging one line per attempt.
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from confluent_kafka import KafkaException
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline import aggregates
from pipeline.cdc_fold import PROFILE_FIELDS
from pipeline.retry import one_line, retry_budget_s, retrying
from streamfold import names, topics

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
    "profile_complete",
)
STAGING_DDL = """
CREATE TEMP TABLE IF NOT EXISTS batch_clicks (
    event_id text, uid text, click_time_ms bigint, click_url text, device_type text, click_location text,
    clicks integer, user_regionid text, user_gender text, user_interests text, user_registertime bigint,
    profile_valid_from_ms bigint, profile_complete boolean
) ON COMMIT DELETE ROWS
"""
# The columns COPYed straight into streamfold.enriched_clicks (times already as timestamptz text).
TABLE_COLUMNS = tuple(name.removesuffix("_ms") for name in STAGING_COLUMNS)
DEAD_LETTER_COLUMNS = ("dead_letter_id", "source", "reason", "payload")

# clicks_dlq: at most this many payload bytes per record (as text and as base64, ~2.4x), so a record
# stays far below the producer's and the broker's 1 MB limit; the full bytes stay in Postgres.
DLQ_PAYLOAD_BYTES = 16 * 1024
DLQ_REASON_CHARS = 2048
# The producers' request limit (the broker's default message.max.bytes is ~1 MB).
KAFKA_MAX_REQUEST_BYTES = 1024 * 1024
REPLACEMENT = "\ufffd"
# Java UDFs (jvm/src/main/java/io/streamfold/sink/), registered by register_udfs.
USER_CLICKS_VALUE_UDF = "streamfold_user_clicks_value"
PG_TEXT_ARRAY_UDF = "streamfold_pg_text_array"

R = TypeVar("R")


# --- text that Postgres and JSON can hold -------------------------------------------------------------


def clean_text(col: Column) -> Column:
    """Valid UTF-8 (invalid bytes -> U+FFFD) without NUL (-> U+FFFD): what a Postgres text can hold."""
    return F.replace(F.make_valid_utf8(col), F.lit("\u0000"), F.lit(REPLACEMENT))


PG_TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg.InterfaceError)


def register_udfs(spark: SparkSession) -> None:
    spark.udf.registerJavaFunction(USER_CLICKS_VALUE_UDF, "io.streamfold.sink.UserClicksValue", "binary")
    spark.udf.registerJavaFunction(PG_TEXT_ARRAY_UDF, "io.streamfold.sink.PgTextArray", "string")


# --- Postgres -----------------------------------------------------------------------------------------


def pg_array_literal(col: Column) -> Column:
    """text[] literal ({"a","b"}) so the batch can travel as CSV through COPY (a Java UDF: Spark's
    transform + array_join run outside code generation, ~2 µs a row)."""
    return F.call_function(PG_TEXT_ARRAY_UDF, col)


def timestamptz_text(ms: Column) -> Column:
    """Epoch ms as timestamptz text with its offset (correct whatever the session time zone)."""
    return F.date_format(F.timestamp_millis(ms), "yyyy-MM-dd HH:mm:ss.SSSXXX")


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

    def __init__(self, dsn: str, retry_s: float | None = None) -> None:
        self.dsn = dsn
        self.retry_s = retry_budget_s() if retry_s is None else retry_s
        self._conn: psycopg.Connection | None = None

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, connect_timeout=10)
            self._conn.execute(STAGING_DDL)
            self._conn.commit()
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def commit(
        self,
        query: str,
        batch_id: int,
        rows: int,
        write: Callable[[psycopg.Connection], None],
        partition: int = 0,
    ) -> bool:
        """Claim (query, batch_id, partition) and run `write` in one transaction; False if already claimed.
        Retried through a Postgres outage (the ledger makes a retry safe)."""

        def attempt() -> bool:
            try:
                conn = self.conn
                with conn.transaction():
                    claimed = conn.execute(
                        "INSERT INTO streamfold.sink_batches (query, batch_id, partition_id, rows) "
                        "VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING 1",
                        (query, batch_id, partition, rows),
                    ).fetchone()
                    if claimed:
                        write(conn)
                return bool(claimed)
            except PG_TRANSIENT:
                self.close()  # reconnect on the next attempt
                raise

        return retrying("Postgres", attempt, PG_TRANSIENT, self.retry_s)

    def read(self, fetch: Callable[[psycopg.Connection], R]) -> R:
        def once() -> R:
            try:
                conn = self.conn
                with conn.transaction():
                    return fetch(conn)
            except PG_TRANSIENT:
                self.close()
                raise

        return retrying("Postgres", once, PG_TRANSIENT, self.retry_s)


# --- dead letters -------------------------------------------------------------------------------------


def dlq_value(dead_letter_id: Column, source: Column, reason: Column, payload: Column) -> Column:
    """A clicks_dlq record: the reason, the payload's first DLQ_PAYLOAD_BYTES as text (lossy: invalid
    UTF-8 and NUL become U+FFFD) and exactly (base64), its full length and sha256, and whether it was
    truncated."""
    head = F.substring(payload, 1, DLQ_PAYLOAD_BYTES)
    return F.to_json(
        F.struct(
            dead_letter_id.alias("dead_letter_id"),
            source.alias("source"),
            F.substring(reason, 1, DLQ_REASON_CHARS).alias("reason"),
            clean_text(head.cast("string")).alias("payload"),
            F.base64(head).alias("payload_base64"),
            F.length(payload).alias("payload_bytes"),
            F.sha2(payload, 256).alias("payload_sha256"),
            (F.length(payload) > DLQ_PAYLOAD_BYTES).alias("payload_truncated"),
        )
    )


def through_kafka_outages(what: str, action: Callable[[], R], budget_s: float) -> R:
    """A Spark action that reads or writes Kafka, retried through a Kafka outage. A micro-batch's offsets
    are fixed in the checkpoint, so a retry reads the same records (and a write is at least once anyway)."""

    def once() -> R:
        try:
            return action()
        except Exception as error:  # Py4J/Spark wrap the Kafka client's TimeoutException
            if is_kafka_outage(str(error)):
                raise KafkaUnavailable(one_line(error)) from error
            raise

    return retrying(f"Kafka ({what})", once, (KafkaUnavailable,), budget_s)


class KafkaUnavailable(RuntimeError):
    pass


KAFKA_OUTAGE_MARKERS = (
    "TimeoutException",
    "NetworkException",
    "DisconnectException",
    "NotLeaderOrFollowerException",
    "not present in metadata",
    "_TRANSPORT",
    "_ALL_BROKERS_DOWN",
    "_MSG_TIMED_OUT",
    "did not acknowledge",
)


def is_kafka_outage(message: str) -> bool:
    return any(marker in message for marker in KAFKA_OUTAGE_MARKERS)


class Stopwatch:
    """Seconds per step of a batch, for the log line."""

    def __init__(self) -> None:
        self.last = time.monotonic()
        self.laps: list[tuple[str, float]] = []

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps.append((name, now - self.last))
        self.last = now

    def __str__(self) -> str:
        return " ".join(f"{name} {seconds:.2f}s" for name, seconds in self.laps)


# --- the clicks sink ----------------------------------------------------------------------------------


def enriched_value() -> Column:
    """A user_clicks record: the row as JSON bytes, times in epoch ms (profile_valid_from left out for a
    snapshot version), null fields left out. A Java UDF (jvm/.../sink/UserClicksValue.java) writes what
    `to_json` of the row wrote, at about a quarter of its cost."""
    return F.call_function(USER_CLICKS_VALUE_UDF, *[F.col(name) for name in STAGING_COLUMNS])


def changelog_value() -> Column:
    """A users_changelog record's value (its key is the userid): the non-PII profile as JSON, valid_from
    null for a snapshot row, null (a tombstone) on delete."""
    op = F.col("change_op")
    profile = F.struct(
        F.col("uid").alias("userid"),
        *[F.col(f"user_{field}").alias(field) for field in PROFILE_FIELDS],
        F.when(op == "r", F.lit(None)).otherwise(F.col("profile_valid_from_ms")).alias("valid_from"),
    )
    return F.when(op == "d", F.lit(None).cast("binary")).otherwise(F.to_json(profile).cast("binary"))


def kafka_record() -> tuple[Column, Column]:
    """(kafka_key, kafka_value) of a batch row as bytes: user_clicks for a click, users_changelog for a
    profile change (change_op set; a null value is its tombstone), clicks_dlq for a reject."""
    is_reject = F.col("error").isNotNull()
    dead_letter_id = clean_text(F.col("event_id"))
    key = F.when(is_reject, dead_letter_id).otherwise(F.col("uid"))
    dlq = dlq_value(dead_letter_id, clean_text(F.col("source")), clean_text(F.col("error")), F.col("payload"))
    is_change = F.col("change_op").isNotNull()
    value = (
        F.when(is_reject, dlq.cast("binary")).when(is_change, changelog_value()).otherwise(enriched_value())
    )
    return key.cast("binary").alias("kafka_key"), value.alias("kafka_value")


def landing_columns() -> list[Column]:
    """What Landing reads of a batch row: STAGING_COLUMNS (user_interests as a text[] literal, for
    `to_table`), the reject's error, source and payload (the payload only for rejects: dead_letters keeps
    their bytes), is_change (a profile change), and the row's Kafka record."""
    payload = F.when(F.col("error").isNotNull(), F.col("payload")).alias("payload")
    return [
        *[
            pg_array_literal(F.col(c)).alias(c) if c == "user_interests" else F.col(c)
            for c in STAGING_COLUMNS
        ],
        F.col("error"),
        F.col("source"),
        payload,
        F.col("change_op").isNotNull().alias("is_change"),
        *kafka_record(),
    ]


def dead_letter_arrow(rejects: pa.Table) -> pa.Table:
    """A batch's rejected rows (event_id, error, source, payload) as rows for COPY into dead_letters:
    text cleaned, the full payload as bytea hex."""
    payload = [None if p is None else "\\x" + p.hex() for p in rejects.column("payload").to_pylist()]
    return pa.table(
        {
            "dead_letter_id": postgres_text(rejects.column("event_id")),
            "source": postgres_text(rejects.column("source")),
            "reason": postgres_text(rejects.column("error")),
            "payload": pa.array(payload, pa.string()),
        }
    )


def postgres_text(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """What a Postgres text can hold: valid UTF-8 (invalid bytes -> U+FFFD), NUL -> U+FFFD."""
    try:
        column.validate(full=True)
    except pa.ArrowInvalid:  # invalid UTF-8 (Spark strings are unchecked bytes): rare, so per value
        fixed = [
            None if v is None else v.decode("utf-8", "replace")
            for v in pc.cast(column, pa.binary()).to_pylist()
        ]
        column = pa.chunked_array([pa.array(fixed, pa.string())])
    return pc.replace_substring(column, "\u0000", REPLACEMENT)


def to_table(staged: pa.Table) -> pa.Table:
    """The staged batch as enriched_clicks' own columns (TABLE_COLUMNS) for CSV COPY: text cleaned,
    epoch ms as timestamptz text ('-infinity' for a snapshot version)."""

    def timestamptz(ms: pa.ChunkedArray) -> pa.ChunkedArray:
        utc = pc.cast(pc.max_element_wise(ms, 0), pa.timestamp("ms", tz="UTC"))
        return pc.strftime(utc, format="%Y-%m-%dT%H:%M:%SZ")  # %S carries the milliseconds

    valid_from = staged.column("profile_valid_from_ms")
    columns = {}
    for name in TABLE_COLUMNS:
        if name == "click_time":
            columns[name] = timestamptz(staged.column("click_time_ms"))
        elif name == "profile_valid_from":
            columns[name] = pc.if_else(pc.less(valid_from, 0), "-infinity", timestamptz(valid_from))
        elif pa.types.is_string(staged.schema.field(name).type):
            columns[name] = postgres_text(staged.column(name))
        else:
            columns[name] = staged.column(name)
    return pa.table(columns)


def clean_staged(staged: pa.Table) -> pa.Table:
    """The staged batch with postgres_text on its text columns (the deduplicating path's COPY)."""
    return pa.table(
        {
            name: postgres_text(staged.column(name))
            if pa.types.is_string(staged.schema.field(name).type)
            else staged.column(name)
            for name in staged.column_names
        }
    )


# What each partition reports to the driver: one summary row (url and region null), then one row per
# (url, region) it holds, whose totals the driver publishes once every partition has landed.
LANDED_SCHEMA = (
    "partition_id int, landed boolean, path string, clicks long, released long, dead long, changes long, "
    "url string, region string"
)
_WORKER_PG: dict[tuple[str, float], PostgresBatches] = {}


def worker_pg(dsn: str, retry_s: float) -> PostgresBatches:
    """One writer connection per Python worker process (Spark reuses workers across tasks and batches)."""
    return _WORKER_PG.setdefault((dsn, retry_s), PostgresBatches(dsn, retry_s))


class RecordProducer:
    """A worker's producer for user_clicks, users_changelog and clicks_dlq. librdkafka reports only failed
    deliveries (`delivery.report.only.error`), to one callback set in the config: a callback object per
    record and a report per delivered record doubled the cost of producing a batch."""

    def __init__(self, bootstrap: str, settings: dict[str, Any] | None = None) -> None:
        self.failures: list[object] = []
        self.producer = topics.producer(
            bootstrap,
            {
                "linger.ms": 20,
                "enable.idempotence": True,
                "compression.type": "lz4",
                "message.max.bytes": KAFKA_MAX_REQUEST_BYTES,
                "queue.buffering.max.messages": 1_000_000,
                "delivery.report.only.error": True,
                "on_delivery": lambda error, _message: self.failures.append(error),
                "log_level": 2,  # the retry line says it once per attempt (see EnrichedClicksSink)
                **(settings or {}),
            },
        )

    def produce_all(self, records: Iterable[tuple[str, bytes | None, bytes | None]]) -> None:
        """Produce (topic, key, value) records and wait until Kafka acknowledged every one of them;
        KafkaUnavailable otherwise (the caller produces them all again: at least once)."""
        self.failures.clear()
        produce = self.producer.produce
        for topic, key, value in records:
            while True:
                try:
                    produce(topic, value, key)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self.producer.poll(0.1)
        left = self.producer.flush(60)
        if left or self.failures:
            cause = self.failures[0] if self.failures else f"{left} records unacknowledged after 60 s"
            raise KafkaUnavailable(f"Kafka did not acknowledge every record ({cause})")


_WORKER_PRODUCERS: dict[str, RecordProducer] = {}


def worker_producer(bootstrap: str) -> RecordProducer:
    """One producer per Python worker process (a worker runs one task at a time)."""
    if bootstrap not in _WORKER_PRODUCERS:
        _WORKER_PRODUCERS[bootstrap] = RecordProducer(bootstrap)
    return _WORKER_PRODUCERS[bootstrap]


def objects(column: pa.ChunkedArray) -> Iterable[Any]:
    """A column's values as Python objects (bytes, str, None): through numpy, ~15x faster than
    to_pylist for binary columns."""
    return column.to_numpy(zero_copy_only=False)  # type: ignore[no-any-return]


def write_rows(conn: psycopg.Connection, table: pa.Table, arrow: pa.Table, totals: aggregates.Totals) -> str:
    """COPY straight into enriched_clicks and upsert the rows' totals; if an event_id is already there,
    back to the savepoint and insert only the new rows (totals from the rows inserted). Returns the path."""
    if table.num_rows == 0:
        return "empty"
    try:
        with conn.transaction():  # a savepoint inside the partition's transaction
            copy_rows(conn, names.ENRICHED_CLICKS_TABLE, TABLE_COLUMNS, table)
            aggregates.upsert_totals(conn, totals)
            return "COPY"
    except psycopg.errors.UniqueViolation:
        log.warning("batch holds clicks already in %s: deduplicating", names.ENRICHED_CLICKS_TABLE)
    copy_rows(conn, "pg_temp.batch_clicks", STAGING_COLUMNS, clean_staged(arrow))
    aggregates.insert_and_aggregate(conn)
    return "deduplicated"


@dataclass(frozen=True)
class Landing:
    """mapInArrow on the executors: a partition of a batch lands in Postgres in one transaction that
    claims (ledger, batch_id, partition_id), then goes to Kafka. A partition is the same set of rows
    when Spark replays the batch (the join's state partitions are fixed by the checkpoint), so a
    replayed partition is a no-op in Postgres, and a batch that failed half-way lands only the
    partitions still missing. Its Kafka records are produced on every attempt (at least once)."""

    dsn: str
    bootstrap: str
    ledger: str
    batch_id: int
    retry_s: float

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        partition = TaskContext.get().partitionId()  # type: ignore[union-attr]  # always set in a task
        received = list(batches)
        if not received:
            yield self.report(partition, False, "empty", pa.table({}), 0, 0, [])
            return
        both = pa.Table.from_batches(received)
        is_reject = pc.is_valid(both.column("error"))
        changed = pc.fill_null(both.column("is_change"), False)
        arrow = both.filter(pc.invert(pc.or_(is_reject, changed))).select(list(STAGING_COLUMNS))
        dead = dead_letter_arrow(both.filter(is_reject))
        table = to_table(arrow)
        totals = aggregates.batch_totals(table)
        path = ["replay"]

        def write(conn: psycopg.Connection) -> None:
            path[0] = write_rows(conn, table, arrow, totals)
            copy_dead_letters(conn, dead)

        pg = worker_pg(self.dsn, self.retry_s)
        landed = pg.commit(self.ledger, self.batch_id, table.num_rows + dead.num_rows, write, partition)
        topic = pc.if_else(
            is_reject,
            names.DLQ_TOPIC,
            pc.if_else(changed, names.USERS_CHANGELOG_TOPIC, names.USER_CLICKS_TOPIC),
        )
        records = (objects(topic), objects(both.column("kafka_key")), objects(both.column("kafka_value")))
        retrying(
            "Kafka (user_clicks, users_changelog, clicks_dlq)",
            lambda: worker_producer(self.bootstrap).produce_all(zip(*records, strict=True)),
            (KafkaUnavailable, KafkaException),
            self.retry_s,
        )
        changes = pc.sum(changed).as_py() or 0
        yield self.report(partition, landed, path[0], table, dead.num_rows, changes, totals.url_regions)

    @staticmethod
    def report(
        partition: int,
        landed: bool,
        path: str,
        table: pa.Table,
        dead: int,
        changes: int,
        keys: list[tuple[str, str, int]],
    ) -> pa.RecordBatch:
        released = pc.sum(pc.invert(table.column("profile_complete"))).as_py() if table.num_rows else 0
        n = 1 + len(keys)
        return pa.RecordBatch.from_pydict(
            {
                "partition_id": pa.array([partition] * n, pa.int32()),
                "landed": [landed] + [None] * len(keys),
                "path": [path] + [None] * len(keys),
                "clicks": pa.array([table.num_rows] + [None] * len(keys), pa.int64()),
                "released": pa.array([released or 0] + [None] * len(keys), pa.int64()),
                "dead": pa.array([dead] + [None] * len(keys), pa.int64()),
                "changes": pa.array([changes] + [None] * len(keys), pa.int64()),
                "url": [None] + [url for url, _, _ in keys],
                "region": [None] + [region for _, region, _ in keys],
            }
        )


class EnrichedClicksSink:
    """foreachBatch for the join query: enriched clicks, aggregates and click dead letters.

    The executors land the batch's partitions in Postgres and produce their user_clicks and clicks_dlq
    records (`Landing`); the driver only sees a summary per partition and the (url, region) keys, and
    publishes the totals of those keys."""

    def __init__(self, query: str, writer_dsn: str, bootstrap: str, retry_s: float | None = None) -> None:
        self.query = query
        self.retry_s = retry_budget_s() if retry_s is None else retry_s
        self.dsn = writer_dsn
        self.pg = PostgresBatches(writer_dsn, self.retry_s)
        self.bootstrap = bootstrap
        self.columns: list[Column] | None = None
        self.producer = topics.producer(
            bootstrap,
            {
                "linger.ms": 20,
                "enable.idempotence": True,
                "queue.buffering.max.messages": 1_000_000,
                # While the broker is down librdkafka logs every reconnect attempt (one line a second);
                # the batch's retry says it once per attempt with the cause. Critical lines still show.
                "log_level": 2,
            },
        )

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        clock = Stopwatch()
        landing = Landing(self.dsn, self.bootstrap, f"{self.query}:{query_id(batch)}", batch_id, self.retry_s)
        register_udfs(
            batch.sparkSession
        )  # each run of the query (a restart, a pass of --once) is a new session
        if self.columns is None:  # built once: each column is a few py4j calls, ~0.2 s a batch in all
            self.columns = landing_columns()
        rows = batch.select(*self.columns)
        clock.lap("plan")
        # One pass over the batch, so it need not be cached. Computing it reads its records from Kafka,
        # so a broker outage here is waited out too (partitions that landed are not written again).
        report = through_kafka_outages(
            "reading the batch", lambda: rows.mapInArrow(landing, LANDED_SCHEMA).toArrow(), self.retry_s
        )
        clock.lap("land")
        summary = report.filter(pc.is_null(report.column("url"))).to_pylist()
        keys = report.filter(pc.is_valid(report.column("url")))
        retrying(
            "Kafka (aggregate topics)",
            lambda: self.publish_totals(keys),
            (KafkaUnavailable, KafkaException, BufferError),
            self.retry_s,
        )
        clock.lap("totals")
        log.info(
            "batch %s: %s clicks (%s released by join.max_wait), %s profile changes, %s dead letters "
            "(%s); %s",
            batch_id,
            sum(s["clicks"] for s in summary),
            sum(s["released"] for s in summary),
            sum(s["changes"] for s in summary),
            sum(s["dead"] for s in summary),
            landed_paths(summary),
            clock,
        )

    def publish_totals(self, keys: pa.Table) -> None:
        """Send the current totals of the (url, region) keys a batch touched (and of their regions) to the
        compacted aggregate topics. Read after every partition landed, so the last value per key is the
        newest total even though partitions commit in any order."""
        if keys.num_rows == 0:
            return
        urls, regions = keys.column("url").to_pylist(), keys.column("region").to_pylist()
        wanted = aggregates.Totals(
            [(region, 0) for region in set(regions)], [(u, r, 0) for u, r in zip(urls, regions, strict=True)]
        )
        totals = self.pg.read(lambda conn: aggregates.current_totals(conn, wanted))
        produce = self.producer.produce
        for region, total in totals.regions:
            produce(
                names.CLICKS_PER_REGION_TOPIC,
                key=region,
                value=json.dumps({"region": region, "clicks": total}),
            )
        for i, (url, region, total) in enumerate(totals.url_regions):
            produce(
                names.URL_REGION_TOPIC,
                key=f"{url}|{region}",
                value=json.dumps({"url": url, "region": region, "click_count": total}),
            )
            if i % 10_000 == 0:
                self.producer.poll(0)
        if self.producer.flush(60) > 0:
            raise KafkaUnavailable("Kafka did not acknowledge every aggregate update within 60 s")


def landed_paths(summary: list[dict]) -> str:
    """e.g. 'COPY x3, replay x1': how each partition of the batch was written."""
    paths = sorted(s["path"] for s in summary if s["path"] != "empty")
    return ", ".join(f"{p} x{paths.count(p)}" for p in dict.fromkeys(paths)) or "nothing to write"


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
    """The streaming query's id: stable across restarts from the same checkpoint, new for a new one.
    Without one there is no safe ledger key (two checkpoints sharing a fallback would skip each other's
    batches), so that is an error."""
    found = batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    if not found:
        raise RuntimeError("a sink batch outside a streaming query: no query id to key the batch ledger")
    return found
