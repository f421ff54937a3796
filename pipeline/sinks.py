"""Sinks: Postgres exactly once, Kafka at least once.

The executors land each micro-batch (foreachBatch), partition by partition, in the JVM
(jvm/src/main/java/io/streamfold/sink/Landing.java, reached through `land`), as the sink spec
(pipeline/sink_spec.py, from the pipeline file) lays it out: a partition lands in ONE transaction that first
claims (query, batch_id, partition_id) in streamfold.sink_batches, so a partition Spark replays after a crash
finds its claim taken and writes nothing. A replayed partition holds the same rows: it is a partition of the
join's output, whose state partitions the checkpoint fixes. Inside that transaction the partition's events
are COPYed straight into the enriched table and each aggregate's totals (summed once, from the same rows)
are upserted; if any event_id is already there (a topic reprocessed under a new checkpoint), the transaction
goes back to a savepoint and takes the deduplicating path (staging table, `ON CONFLICT DO NOTHING`, totals
folded from the rows actually inserted). Either way the totals equal the sums over the enriched table, in
every committed state. The driver never holds the batch's rows: it gets one report per partition and the
keys of each aggregate the batch touched.

The join's output also carries the CDC records (pipeline.temporal_join): a profile change becomes a
changelog record, an unfoldable record a dead letter like a rejected event. A key's changes arrive in one
partition, in the join's version order, so a key's changelog records keep it.

Kafka outputs follow the Postgres commits, on every attempt (at least once; consumers drop duplicates by
event_id): each partition produces its enriched, changelog and dead letter records right after its commit,
from the same task; then the driver publishes the aggregate topics with the current totals of the keys the
batch touched (read after every partition committed, so the last value per key is the newest).

Robustness (docs/guarantees.md "Failure modes"):
- Postgres text cannot hold U+0000 and COPY needs valid UTF-8: every text written to Postgres is made valid
  UTF-8 (invalid bytes -> U+FFFD) and NUL becomes U+FFFD. The enriched topic keeps the event as parsed (JSON
  escapes NUL as \\u0000). The original bytes of a rejected record are kept in dead_letters.payload.
- dead letter records carry at most 16 KiB of the payload (as text and base64) plus its full length and
  sha256; the full bytes stay in streamfold.dead_letters.
- A Postgres or Kafka outage does not end the query: a partition's transaction (safe to retry, the ledger
  claims it once), its Kafka records and the aggregate flush are retried with backoff for up to
  STREAMFOLD_SINK_RETRY_S seconds (default 900), logging one line per attempt.

Why the executors land the rows, and in Java: docs/decisions/executors-land-the-rows.md.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from confluent_kafka import KafkaException
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQueryManager
from pyspark.sql.types import StructType

from common import config, names, plan, topics
from common.pipeline_file import Pipeline
from pipeline import aggregates, avro_outputs
from pipeline.avro_outputs import AggregateEncoder
from pipeline.cdc_stall import CdcStall
from pipeline.retry import one_line, retry_budget_s, retrying
from pipeline.sink_spec import sink_spec
from pipeline.status_files import now_ms
from pipeline.temporal_join import CDC_PROGRESS_METRIC

log = logging.getLogger(__name__)

# The executors' producer request limit: an enriched record holds a profile and an event, over 1 MB at most
# (the topics take it: names.OUTPUT_RECORD_MAX_BYTES). With a 1 MB limit, a 1 MB profile and its event make a
# record Kafka refuses at every retry, and the batch would never land.
KAFKA_MAX_REQUEST_BYTES = names.OUTPUT_RECORD_MAX_BYTES
# How long one attempt of the executors' producer waits for the broker before it is retried.
KAFKA_ATTEMPT_MS = 60_000

R = TypeVar("R")

PG_TRANSIENT: tuple[type[BaseException], ...] = (psycopg.OperationalError, psycopg.InterfaceError)


# --- Postgres from the driver: the current totals it publishes ------------------------------------


class PostgresConnection:
    """One connection of the driver; `transaction` runs some work in one transaction, through outages."""

    def __init__(self, dsn: str, retry_s: float | None = None) -> None:
        self.dsn = dsn
        self.retry_s = retry_budget_s() if retry_s is None else retry_s
        self._conn: psycopg.Connection | None = None

    @property
    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(self.dsn, connect_timeout=10)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def transaction(self, work: Callable[[psycopg.Connection], R]) -> R:
        """`work` in one transaction, retried through a Postgres outage (it must be safe to run again)."""

        def once() -> R:
            try:
                conn = self.conn
                with conn.transaction():
                    return work(conn)
            except PG_TRANSIENT:
                self.close()
                raise

        return retrying("Postgres", once, PG_TRANSIENT, self.retry_s)


@dataclass(frozen=True)
class JdbcTarget:
    """A libpq DSN as the JVM landing connects: a JDBC URL and the role's credentials."""

    url: str
    user: str
    password: str

    @staticmethod
    def of(dsn: str) -> JdbcTarget:
        info = conninfo_to_dict(dsn)
        host, port, db = info.get("host", "127.0.0.1"), info.get("port", "5432"), info.get("dbname", "")
        return JdbcTarget(
            f"jdbc:postgresql://{host}:{port}/{db}", str(info.get("user", "")), str(info.get("password", ""))
        )


# --- Kafka outages ------------------------------------------------------------------------------------


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


# --- the enriched events sink -------------------------------------------------------------------------


@dataclass(frozen=True)
class StallWatch:
    """What the sink needs to say when CDC progress stalls: the watch, and the session's streaming queries,
    whose last progress holds the CDC progress measured (the batch's own session is a clone of the session,
    whose query manager does not know the query)."""

    watch: CdcStall
    queries: StreamingQueryManager

    def observed_progress(self, query_id: str) -> int | None:
        """The CDC progress the query measured in its batch before this one: None before the first, or when
        that batch read no CDC row."""
        query = self.queries.get(query_id)
        return None if query is None else last_cdc_progress(query._jsq)


@dataclass(frozen=True)
class Report:
    """What one partition of a batch did (Landing.java's report): whether it landed (False: empty, or a
    replay the ledger already had), how (COPY, deduplicated, replay, empty), its counts, and per aggregate
    the keys whose totals it changed (each key's values as Postgres text input)."""

    partition_id: int
    landed: bool
    path: str
    events: int
    released: int
    dead: int
    changes: int
    keys: dict[str, list[tuple[str, ...]]]


def land(
    batch: DataFrame,
    spec: str,
    pg: JdbcTarget,
    bootstrap: str,
    ledger: str,
    batch_id: int,
    retry_s: float,
    kafka_attempt_ms: int = KAFKA_ATTEMPT_MS,
) -> list[Report]:
    """Land every partition of a batch of the join's output as the sink spec (JSON) lays it out, on the
    executors (Landing.java); one report per partition."""
    jvm: Any = batch.sparkSession._jvm
    reports = jvm.io.streamfold.sink.Landing.land(
        batch._jdf, spec, *targets(pg, bootstrap, kafka_attempt_ms), ledger, batch_id, int(retry_s * 1000)
    )
    return [
        Report(**{**r, "keys": {name: [tuple(k) for k in keys] for name, keys in r["keys"].items()}})
        for r in json.loads(reports)
    ]


def targets(pg: JdbcTarget, bootstrap: str, kafka_attempt_ms: int) -> tuple[Any, ...]:
    """The arguments Landing.land and RealtimeWriter.of share after the spec: PostgreSQL's JDBC URL and
    login, then Kafka's bootstrap servers, SASL/SCRAM login (empty: none), request limit and attempt time."""
    login = config.kafka_login()
    jaas = config.scram_jaas(login) if login else ""
    return (pg.url, pg.user, pg.password, bootstrap, jaas, KAFKA_MAX_REQUEST_BYTES, kafka_attempt_ms)


def realtime_writer(
    spark: SparkSession,
    writer_dsn: str,
    bootstrap: str,
    pipeline: Pipeline,
    output: StructType,
) -> Any:
    """The sink of Spark's real-time mode, which refuses foreachBatch: a JVM ForeachWriter for the join's
    output `output` (io.streamfold.sink.RealtimeWriter) that lands `land`'s rows as the same sink spec lays
    them out, idempotent by the rows' own keys, and publishes the aggregate topics itself
    (docs/guarantees.md, "Exactly once in real-time mode")."""
    jvm: Any = spark._jvm
    pg = JdbcTarget.of(writer_dsn)
    spec = json.dumps(sink_spec(plan.of(pipeline), output))
    return jvm.io.streamfold.sink.RealtimeWriter.of(
        spec, *targets(pg, bootstrap, KAFKA_ATTEMPT_MS), int(retry_budget_s() * 1000)
    )


class Sink:
    """foreachBatch for the join query: enriched events, aggregates, dead letters and the changelog, as the
    pipeline file names them.

    The executors land the batch's partitions in Postgres and produce their Kafka records (`land`); the
    driver only sees a report per partition, and publishes the totals of the aggregates' keys they
    touched."""

    def __init__(
        self,
        query: str,
        writer_dsn: str,
        bootstrap: str,
        pipeline: Pipeline,
        output: StructType,
        aggregates: list[dict[str, Any]] | None = None,
        retry_s: float | None = None,
        stall: StallWatch | None = None,
    ) -> None:
        self.query = query
        self.stall = stall  # event_time mode: says when CDC progress stalls (pipeline/cdc_stall.py)
        self.spec = sink_spec(plan.of(pipeline), output, aggregates)
        self.retry_s = retry_budget_s() if retry_s is None else retry_s
        self.avro: dict[str, AggregateEncoder] | None = None  # the aggregates' values: JSON without
        if pipeline.outputs.format == "avro":
            registered = avro_outputs.registered(pipeline, self.spec, self.retry_s)
            self.spec["avro"], self.avro = registered.spec, registered.aggregates
        self.spec_json = json.dumps(self.spec)
        self.target = JdbcTarget.of(writer_dsn)
        self.pg = PostgresConnection(writer_dsn, self.retry_s)
        self.bootstrap = bootstrap
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
        ledger = f"{self.query}:{query_id(batch)}"
        # One pass over the batch, so it need not be cached. Computing it reads its records from Kafka,
        # so a broker outage here is waited out too (partitions that landed are not written again).
        reports = through_kafka_outages(
            "reading the batch",
            lambda: land(batch, self.spec_json, self.target, self.bootstrap, ledger, batch_id, self.retry_s),
            self.retry_s,
        )
        clock.lap("land")
        keys = {
            a["name"]: sorted({key for r in reports for key in r.keys.get(a["name"], [])})
            for a in self.spec["aggregates"]
        }
        retrying(
            "Kafka (aggregate topics)",
            lambda: self.publish_totals(keys),
            (KafkaUnavailable, KafkaException, BufferError),
            self.retry_s,
        )
        clock.lap("totals")
        released = sum(r.released for r in reports)
        log.info(
            "batch %s: %s events (%s released by join.max_wait), %s profile changes, %s dead letters "
            "(%s); %s",
            batch_id,
            sum(r.events for r in reports),
            released,
            sum(r.changes for r in reports),
            sum(r.dead for r in reports),
            landed_paths(reports),
            clock,
        )
        if self.stall is not None:
            progress_ms = self.stall.observed_progress(query_id(batch))
            notice = self.stall.watch.batch(now_ms(), progress_ms, released)
            if notice is not None:
                log.log(notice.level, "%s", notice.text)

    def publish_totals(self, keys: dict[str, list[tuple[str, ...]]]) -> None:
        """Send the current totals of the keys a batch touched, per aggregate (by name), to the aggregates'
        compacted topics. Read after every partition landed, so the last value per key is the newest total
        even though partitions commit in any order."""
        wanted = [(a, keys.get(a["name"], [])) for a in self.spec["aggregates"]]
        if not any(k for _, k in wanted):
            return
        current = self.pg.transaction(
            lambda conn: [aggregates.current_totals(conn, aggregate, k) for aggregate, k in wanted]
        )
        sent = 0
        for (aggregate, _), rows in zip(wanted, current, strict=True):
            for row in rows:
                key, text = aggregates.record(aggregate, row)
                value = text if self.avro is None else self.avro[aggregate["name"]](row)
                self.producer.produce(aggregate["topic"], key=key, value=value)
                if sent % 10_000 == 0:
                    self.producer.poll(0)
                sent += 1
        if self.producer.flush(60) > 0:
            raise KafkaUnavailable("Kafka did not acknowledge every aggregate update within 60 s")


def landed_paths(reports: list[Report]) -> str:
    """e.g. 'COPY x3, replay x1': how each partition of the batch was written."""
    paths = sorted(r.path for r in reports if r.path != "empty")
    return ", ".join(f"{p} x{paths.count(p)}" for p in dict.fromkeys(paths)) or "nothing to write"


def last_cdc_progress(jvm_query: Any) -> int | None:
    """A (JVM) streaming query's observed CDC progress in its last progress (pipeline/temporal_join.py)."""
    progress = None if jvm_query is None else jvm_query.lastProgress()
    metric = None if progress is None else progress.observedMetrics().get(CDC_PROGRESS_METRIC)
    return None if metric is None or metric.isNullAt(0) else int(metric.getLong(0))


def query_id(batch: DataFrame) -> str:
    """The streaming query's id: stable across restarts from the same checkpoint, new for a new one.
    Without one there is no safe ledger key (two checkpoints sharing a fallback would skip each other's
    batches), so that is an error."""
    found = batch.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
    if not found:
        raise RuntimeError("a sink batch outside a streaming query: no query id to key the batch ledger")
    return found
