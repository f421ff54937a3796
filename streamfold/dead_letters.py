"""`streamfold dead-letters replay`: chosen dead letters sent through the pipeline again, each exactly once.

A letter goes back to the events source it came from (its Kafka topic or Kinesis stream), its payload byte
for byte, keyed by its own id (the original key is not kept; the job reads only the value). Each batch of
letters goes through three steps, each committed before the next:

1. claim: `replay_started_at` is set;
2. send: the records are acknowledged by Kafka (idempotent producer) or Kinesis (no blind retries);
3. mark: `replayed_at`, and `replayed_as` = the new record's position, which is the event_id the job gives
   it, so the enriched row, or the dead letter it becomes, names it.

A crash between 1 and 3 leaves letters claimed and not marked. The next replay looks for their records in
the source (a record whose key is the letter's id: in Kafka from the claim's time, in Kinesis in the shards
that hold the key), marks the ones it finds and sends only the others: a crash at any moment loses and
doubles nothing. One replay runs at a time (an advisory lock).

CDC dead letters are never replayed: Debezium's topic is the table's change log, in WAL order, and a record
re-sent into it would be a change the table never made (docs/operations.md, "Replaying dead letters").
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from common import config, names, topics
from common import pipeline_file as pf

TABLE = names.DEAD_LETTERS_TABLE
# One replay at a time per database: a second one would claim and send the same letters.
LOCK_KEY = "streamfold dead-letters replay"
# A batch: claimed, sent and marked together.
BATCH_RECORDS = 500
BATCH_BYTES = 4 * 1024 * 1024
# The search for an interrupted replay's records starts this long before its claim: clocks of this host,
# the broker and Kinesis may differ.
CLOCK_MARGIN_MS = 5 * 60_000
KAFKA_TIMEOUT_S = 60.0
# Kinesis: records PutRecords reports as failed were not written, so they are sent again, this many times;
# a request that fails as a whole may have been written, so it is never retried blindly.
KINESIS_ATTEMPTS = 5
# `streamfold status`: the most common reasons shown.
TOP_REASONS = 5
# What makes reasons of one kind differ (the offending value, a size), masked so that letters group by what
# is wrong: (PostgreSQL regular expression, replacement), applied in order.
REASON_VALUES = (
    (r"(, got |: ).*$", r"\1…"),
    (r"^(\S+) .* (is outside )", r"\1 … \2"),
    (r"[0-9]+( bytes exceeds )", r"…\1"),
)


class ReplayError(RuntimeError):
    """A replay that cannot start or did not finish; the message says what to do."""


@dataclass(frozen=True)
class Selection:
    """Which dead letters to replay: a substring of the reason, recorded at or after `since`, from one
    source; None: any."""

    reason: str | None = None
    since: dt.datetime | None = None
    source: str | None = None


@dataclass(frozen=True)
class Letter:
    dead_letter_id: str
    source: str
    size: int
    claimed_ms: int | None  # an earlier replay's claim, not marked: it may have sent the record


@dataclass
class Report:
    replayed: int = 0  # sent now
    found: int = 0  # sent by an interrupted replay, found in the source and marked now
    already: int = 0  # matching letters replayed before
    not_replayable: dict[str, int] = field(default_factory=dict)  # source -> matching letters left alone


def parse_since(text: str, now: dt.datetime) -> dt.datetime:
    """--since: an ISO-8601 time (UTC unless it names its zone) or a duration back from now (30m, 2h, 7d)."""
    try:
        return now - dt.timedelta(milliseconds=pf.parse_duration_ms(text))
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ReplayError(
            f"--since takes an ISO-8601 time or a duration back from now (30m, 2h, 7d), got {text!r}"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def event_sources(settings: config.Settings) -> tuple[str, ...]:
    """The sources a letter may be replayed to: the pipeline's events topic and stream (pipeline/sources.py
    names them so)."""
    return (f"kafka:{settings.clicks_topic}", f"kinesis:{settings.clicks_stream}")


def check_source(source: str | None, replayable: tuple[str, ...]) -> None:
    if source is not None and source not in replayable:
        raise ReplayError(
            f"--source {source}: only events are replayed, from {' or '.join(replayable)} (CDC dead letters: "
            'fix the row in PostgreSQL, docs/operations.md "Replaying dead letters")'
        )


def matching(selection: Selection) -> tuple[str, dict[str, Any]]:
    """The SQL condition on dead_letters for a selection, and its parameters."""
    conditions: list[str] = ["TRUE"]
    params: dict[str, Any] = {}
    if selection.reason is not None:
        conditions.append("strpos(reason, %(reason)s) > 0")
        params["reason"] = selection.reason
    if selection.since is not None:
        conditions.append("recorded_at >= %(since)s")
        params["since"] = selection.since
    if selection.source is not None:
        conditions.append("source = %(source)s")
        params["source"] = selection.source
    return " AND ".join(conditions), params


def reason_kind_sql() -> str:
    """The SQL expression of a letter's reason with its values masked (REASON_VALUES), inlined as literals
    so that GROUP BY can name it."""
    expression = "reason"
    for pattern, replacement in REASON_VALUES:
        expression = f"regexp_replace({expression}, {quote(pattern)}, {quote(replacement)})"
    return expression


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# --- choosing and claiming --------------------------------------------------------------------------------


def waiting(conn: psycopg.Connection, selection: Selection, replayable: tuple[str, ...]) -> list[Letter]:
    """The letters to replay, by source, oldest first, without their payloads."""
    condition, params = matching(selection)
    rows = conn.execute(
        f"SELECT dead_letter_id, source, coalesce(octet_length(payload), 0), "
        f"(extract(epoch FROM replay_started_at) * 1000)::bigint FROM {TABLE} "
        f"WHERE {condition} AND replayed_at IS NULL AND source = ANY(%(replayable)s) "
        "ORDER BY source, recorded_at, dead_letter_id",
        {**params, "replayable": list(replayable)},
    ).fetchall()
    return [Letter(*row) for row in rows]


def count_others(
    conn: psycopg.Connection, selection: Selection, replayable: tuple[str, ...], report: Report
) -> None:
    """What the selection matches and is not replayed now: letters replayed before, letters of other
    sources."""
    condition, params = matching(selection)
    rows = conn.execute(
        f"SELECT source, replayed_at IS NOT NULL, count(*) FROM {TABLE} WHERE {condition} "
        "AND (replayed_at IS NOT NULL OR NOT source = ANY(%(replayable)s)) GROUP BY 1, 2",
        {**params, "replayable": list(replayable)},
    ).fetchall()
    for source, replayed, count in rows:
        if replayed:
            report.already += count
        else:
            report.not_replayable[source] = count


def batches(letters: list[Letter]) -> Iterator[list[Letter]]:
    """Letters of one source in batches of at most BATCH_RECORDS and BATCH_BYTES (at least one letter)."""
    batch: list[Letter] = []
    size = 0
    for letter in letters:
        if batch and (
            letter.source != batch[0].source
            or len(batch) == BATCH_RECORDS
            or size + letter.size > BATCH_BYTES
        ):
            yield batch
            batch, size = [], 0
        batch.append(letter)
        size += letter.size
    if batch:
        yield batch


def claim(conn: psycopg.Connection, batch: list[Letter], now_ms: int) -> None:
    """Step 1: claimed at now_ms (this host's clock, as the Kafka records' timestamps). An earlier claim
    whose record was not found is replaced: that replay sent nothing, so only this one's records count."""
    with conn.transaction():
        conn.execute(
            f"UPDATE {TABLE} SET replay_started_at = to_timestamp(%s / 1000.0) "
            "WHERE dead_letter_id = ANY(%s)",
            (now_ms, [letter.dead_letter_id for letter in batch]),
        )


def payloads(conn: psycopg.Connection, batch: list[Letter]) -> dict[str, bytes | None]:
    rows = conn.execute(
        f"SELECT dead_letter_id, payload FROM {TABLE} WHERE dead_letter_id = ANY(%s)",
        ([letter.dead_letter_id for letter in batch],),
    ).fetchall()
    return {letter_id: payload for letter_id, payload in rows}


def mark(conn: psycopg.Connection, positions: dict[str, str]) -> None:
    """Step 3: replayed, as the record at each position."""
    with conn.transaction(), conn.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {TABLE} SET replayed_at = now(), replayed_as = %s WHERE dead_letter_id = %s",
            [(position, letter_id) for letter_id, position in positions.items()],
        )


# --- the sources -------------------------------------------------------------------------------------------


@dataclass
class Sent:
    """{letter id: the new record's position} of the records the source acknowledged; `problem`: why the
    others are not confirmed (they may or may not have been written)."""

    positions: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


class Target:
    """Where letters of one source go back to, and where an interrupted replay's records are found."""

    def send(self, records: list[tuple[str, bytes | None]]) -> Sent:
        """(letter id, payload) of each record, each keyed by its letter's id."""
        raise NotImplementedError

    def find(self, letter_ids: set[str], since_ms: int) -> dict[str, str]:
        """{letter id: position} of records keyed by those ids; since_ms: none was written before it."""
        raise NotImplementedError


class KafkaTarget(Target):
    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        # Idempotent: the client's own retries never write a record twice.
        self.producer = topics.producer(bootstrap, {"enable.idempotence": True})

    def send(self, records: list[tuple[str, bytes | None]]) -> Sent:
        sent = Sent()

        def delivered(error: KafkaError | None, message: Message) -> None:
            if error is not None:
                sent.problem = str(error)
            else:
                letter_id = (message.key() or b"").decode()
                sent.positions[letter_id] = f"kafka:{self.topic}:{message.partition()}:{message.offset()}"

        for letter_id, payload in records:
            self.producer.produce(self.topic, key=letter_id.encode(), value=payload, on_delivery=delivered)
            self.producer.poll(0)
        if self.producer.flush(KAFKA_TIMEOUT_S) > 0 and sent.problem is None:
            sent.problem = f"no acknowledgement from Kafka within {KAFKA_TIMEOUT_S:.0f} s"
        return sent

    def find(self, letter_ids: set[str], since_ms: int) -> dict[str, str]:
        consumer = Consumer(
            {
                **config.kafka_client_settings(self.bootstrap),
                "group.id": "streamfold-dead-letters",
                "enable.auto.commit": False,
            }
        )
        try:
            return self._scan(consumer, letter_ids, since_ms)
        finally:
            consumer.close()

    def _scan(self, consumer: Consumer, letter_ids: set[str], since_ms: int) -> dict[str, str]:
        metadata = consumer.list_topics(self.topic, timeout=KAFKA_TIMEOUT_S).topics[self.topic]
        wanted = [TopicPartition(self.topic, p, since_ms) for p in sorted(metadata.partitions)]
        starts = consumer.offsets_for_times(wanted, timeout=KAFKA_TIMEOUT_S)
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=KAFKA_TIMEOUT_S)[1] for tp in starts}
        todo = [tp for tp in starts if 0 <= tp.offset < ends[tp.partition]]
        consumer.assign(todo)
        left = {tp.partition for tp in todo}
        found: dict[str, str] = {}
        deadline = time.monotonic() + KAFKA_TIMEOUT_S * 10
        while left and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=1):
                if message.error() is not None:
                    continue
                partition, offset = message.partition() or 0, message.offset() or 0
                letter_id = (message.key() or b"").decode(errors="replace")
                if letter_id in letter_ids and letter_id not in found:
                    found[letter_id] = f"kafka:{self.topic}:{partition}:{offset}"
                if offset + 1 >= ends[partition]:
                    left.discard(partition)
        if left:
            raise ReplayError(f"could not read {self.topic} to its end to find what a replay sent: run again")
        return found


class KinesisTarget(Target):
    def __init__(self, stream: str) -> None:
        from common import kinesis

        self.stream = stream
        # No retry of a whole request: one that timed out may have been written.
        self.client = kinesis.client(kinesis.RETRY_CONFIG.merge(_no_retries()))

    def send(self, records: list[tuple[str, bytes | None]]) -> Sent:
        from common import kinesis

        sent = Sent()
        pending = [(letter_id, payload or b"") for letter_id, payload in records]
        for attempt in range(KINESIS_ATTEMPTS):
            if attempt:
                time.sleep(0.2 * 2**attempt)
            failed: list[tuple[str, bytes]] = []
            for batch in kinesis.batches(pending):
                try:
                    response = self.client.put_records(
                        StreamName=self.stream,
                        Records=[{"PartitionKey": key, "Data": data} for key, data in batch],
                    )
                except Exception as exc:  # written or not: the next replay finds out
                    sent.problem = f"{type(exc).__name__}: {exc}"
                    return sent
                for (key, data), result in zip(batch, response["Records"], strict=True):
                    if "ErrorCode" in result:
                        failed.append((key, data))
                    else:
                        position = f"kinesis:{self.stream}:{result['ShardId']}:{result['SequenceNumber']}"
                        sent.positions[key] = position
            pending = failed
            if not pending:
                return sent
        sent.problem = f"PutRecords still failing for {len(pending)} records"
        return sent

    def find(self, letter_ids: set[str], since_ms: int) -> dict[str, str]:
        """Reads from TRIM_HORIZON, not AT_TIMESTAMP since_ms: kinesalite never answers an AT_TIMESTAMP
        request on a shard with no record at or after the time. Only the shards whose hash key range holds
        a letter's key (its partition key) are read, open or closed."""
        hashes = {int(hashlib.md5(key.encode()).hexdigest(), 16) for key in letter_ids}
        found: dict[str, str] = {}
        pages = self.client.get_paginator("list_shards").paginate(StreamName=self.stream)
        for shard in (shard for page in pages for shard in page["Shards"]):
            low, high = (int(shard["HashKeyRange"][k]) for k in ("StartingHashKey", "EndingHashKey"))
            if any(low <= h <= high for h in hashes):
                found.update(self._scan(shard["ShardId"], letter_ids))
        return found

    def _scan(self, shard_id: str, letter_ids: set[str]) -> dict[str, str]:
        found: dict[str, str] = {}
        iterator = self.client.get_shard_iterator(
            StreamName=self.stream, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            page = self.client.get_records(ShardIterator=iterator, Limit=10_000)
            for record in page["Records"]:
                key = record["PartitionKey"]
                if key in letter_ids and key not in found:
                    found[key] = f"kinesis:{self.stream}:{shard_id}:{record['SequenceNumber']}"
            iterator = page.get("NextShardIterator")
            if not page["Records"] and page.get("MillisBehindLatest") == 0:
                break
        return found


def _no_retries() -> Any:
    from botocore.config import Config

    return Config(retries={"total_max_attempts": 1})


def target(settings: config.Settings, source: str) -> Target:
    kind, name = source.split(":", 1)
    return KafkaTarget(settings.kafka_bootstrap, name) if kind == "kafka" else KinesisTarget(name)


# --- the replay --------------------------------------------------------------------------------------------


def replay(
    settings: config.Settings,
    selection: Selection,
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    echo: Callable[[str], None] = lambda _: None,
) -> Report:
    """Replay the selected letters that are not replayed yet; see the module's docstring."""
    replayable = event_sources(settings)
    check_source(selection.source, replayable)
    report = Report()
    with psycopg.connect(settings.writer_dsn, autocommit=True) as conn:
        if not locked(conn):
            raise ReplayError("another `streamfold dead-letters replay` runs on this database: wait for it")
        count_others(conn, selection, replayable, report)
        targets: dict[str, Target] = {}
        for batch in batches(waiting(conn, selection, replayable)):
            source = batch[0].source
            out = targets.setdefault(source, target(settings, source))
            sent, found = replay_batch(conn, out, batch, now_ms())
            report.replayed += sent
            report.found += found
            echo(f"{source}: {sent + found} of {len(batch)} letters replayed")
    return report


def locked(conn: psycopg.Connection) -> bool:
    """The replay lock, held by this session until it closes."""
    row = conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (LOCK_KEY,)).fetchone()
    return bool(row and row[0])


def replay_batch(conn: psycopg.Connection, out: Target, batch: list[Letter], now_ms: int) -> tuple[int, int]:
    """Claim, send, mark one batch; returns (sent now, found sent by an interrupted replay)."""
    claimed = [letter for letter in batch if letter.claimed_ms is not None]
    found: dict[str, str] = {}
    if claimed:
        since_ms = min(letter.claimed_ms or 0 for letter in claimed) - CLOCK_MARGIN_MS
        found = out.find({letter.dead_letter_id for letter in claimed}, since_ms)
        mark(conn, found)
    to_send = [letter for letter in batch if letter.dead_letter_id not in found]
    claim(conn, to_send, now_ms)
    bodies = payloads(conn, to_send)
    sent = out.send([(letter.dead_letter_id, bodies[letter.dead_letter_id]) for letter in to_send])
    mark(conn, sent.positions)
    if sent.problem is not None:
        raise ReplayError(
            f"{len(to_send) - len(sent.positions)} letters not confirmed sent ({sent.problem}): run the same "
            "replay again; it finds what was sent and sends the rest"
        )
    return len(sent.positions), len(found)


# --- status ------------------------------------------------------------------------------------------------


def by_reason(reader_dsn: str, top: int = TOP_REASONS, timeout_s: int = 5) -> dict[str, Any]:
    """The dead letters not replayed, counted by the kind of their reason (values masked), the most common
    first; and how many were replayed."""
    kind = reason_kind_sql()
    with psycopg.connect(reader_dsn, connect_timeout=timeout_s) as conn:
        rows = conn.execute(
            f"SELECT {kind}, count(*) FROM {TABLE} WHERE replayed_at IS NULL GROUP BY 1 ORDER BY 2 DESC, 1"
        ).fetchall()
        replayed = conn.execute(f"SELECT count(*) FROM {TABLE} WHERE replayed_at IS NOT NULL").fetchone()
    return {
        "waiting": sum(count for _, count in rows),
        "replayed": replayed[0] if replayed else 0,
        "reasons": [{"reason": reason, "count": count} for reason, count in rows[:top]],
    }


def describe(report: Report) -> str:
    """The outcome in a sentence or two, for a person."""
    text = f"replayed {report.replayed + report.found} dead letters"
    if report.found:
        text += f" ({report.found} sent by an interrupted replay, marked now)"
    if report.already:
        text += f"; {report.already} matching letters were replayed before, so not again"
    for source, count in sorted(report.not_replayable.items()):
        text += f"; {count} letters of {source} not replayed (not an events source of this pipeline)"
    return text
