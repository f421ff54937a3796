"""Sample load for any pipeline file: profiles in its table, and event streams into Kafka or Kinesis.

Values come from the file's `sample` section (a list to draw from, or a template) or, for a field or
column it does not name, from the field's type.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from common import pipeline_file as pf
from common import plan, topics

BATCH = 10_000


def key(i: int, pipeline: pf.Pipeline) -> Any:
    """The i-th sample key: the sample's key template for a text key, i itself for an integer key."""
    return pipeline.sample.key.replace("{n}", str(i)) if pipeline.key_type == "text" else i


def sample_value(name: str, kind: str, i: int, rng: random.Random, pipeline: pf.Pipeline) -> Any:
    """A value for field or column `name` of type `kind` in row i."""
    given = pipeline.sample.values.get(name)
    if isinstance(given, list):
        return rng.sample(given, min(2, len(given))) if kind == "text[]" else rng.choice(given)
    if isinstance(given, str):
        return _template(given, i, rng)
    return _typed(name, kind, rng)


def _template(text: str, i: int, rng: random.Random) -> str:
    out = text.replace("{n}", str(i))
    while "{r}" in out:
        out = out.replace("{r}", str(rng.randrange(256)), 1)
    return out


def _typed(name: str, kind: str, rng: random.Random) -> Any:
    now = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=rng.randrange(86_400))
    return {
        "text": lambda: f"{name}_{rng.randrange(1, 21)}",
        "integer": lambda: rng.randrange(1000),
        "bigint": lambda: rng.randrange(1_000_000),
        "double": lambda: round(rng.random() * 100, 3),
        "numeric": lambda: f"{rng.randrange(100_000) / 100:.2f}",
        "boolean": lambda: rng.random() < 0.5,
        "timestamptz": lambda: now.isoformat().replace("+00:00", "Z"),
        "timestamp": lambda: now.isoformat().replace("+00:00", "Z"),
        "text[]": lambda: [f"{name}_{rng.randrange(1, 9)}" for _ in range(2)],
        "jsonb": lambda: {name: rng.randrange(100)},
    }[kind]()


# --- profiles and tables ------------------------------------------------------------------------------

# Table j of the plan (the profile is 0) holds keys 1..rows // TABLE_SHRINK**j: each further table ten times
# smaller than the one before it (100k profiles, 10k of the first table, 1k of the second), so every foreign
# key drawn for it hits a row.
TABLE_SHRINK = 10


def table_rows(rows: int, position: int) -> int:
    """Keys 1..N of the plan's `position`-th join when the profile has keys 1..rows."""
    return max(1, rows // TABLE_SHRINK**position)


def table_key(i: int, join: plan.TableJoin, pipeline: pf.Pipeline) -> Any:
    """The i-th sample key of a join's table: the profile's as key() says; a further table's text key is
    `<name>_<i>`."""
    if join.name == plan.PROFILE:
        return key(i, pipeline)
    return f"{join.name}_{i}" if join.table.key_type == "text" else i


@dataclass(frozen=True)
class KeyDraw:
    """Which values must be keys of a table: a column (or event field) some join joins on, with the table
    joined on it and its position in the plan."""

    target: plan.TableJoin
    position: int


def key_draws(pipeline: pf.Pipeline, source: str) -> dict[str, KeyDraw]:
    """The columns of `source` (a join's name, or plan.EVENT for the events' fields) that a join reads
    its key from."""
    return {
        join.on[1]: KeyDraw(join, position)
        for position, join in enumerate(plan.joins(pipeline))
        if position > 0 and join.on[0] == source
    }


def _drawn(draw: KeyDraw, spread: int, rng: random.Random, pipeline: pf.Pipeline) -> Any:
    return table_key(rng.randrange(table_rows(spread, draw.position)) + 1, draw.target, pipeline)


def _row(
    i: int, rng: random.Random, pipeline: pf.Pipeline, join: plan.TableJoin, rows: int, extra: list[str]
) -> list[Any]:
    """Row i of a join's table: its key, each carried column (a foreign key drawn among the keys of the
    table it points at, as if the profile had `rows` keys), then the sample's other columns."""
    columns = join.table.columns
    draws = key_draws(pipeline, join.name)
    values = [
        _drawn(draws[name], rows, rng, pipeline)
        if name in draws
        else sample_value(name, c.type, i, rng, pipeline)
        for name, c in columns.items()
    ]
    values = [
        json.dumps(v) if columns[n].type == "jsonb" else v for n, v in zip(columns, values, strict=True)
    ]
    return [
        table_key(i, join, pipeline),
        *values,
        *(sample_value(name, "text", i, rng, pipeline) for name in extra),
    ]


def _uncarried(pipeline: pf.Pipeline) -> list[str]:
    """The sample's values that name no event field and no column any join carries: the profile table's
    other columns (PII the demo fills, say)."""
    carried = {name for join in plan.joins(pipeline) for name in join.carried()}
    return [n for n in pipeline.sample.values if n not in carried and n not in pipeline.events.fields]


def load_profiles(
    admin_dsn: str,
    count: int,
    pipeline: pf.Pipeline | None = None,
    seed: int = 7,
    on_progress: Callable[[int], None] | None = None,
) -> int:
    """Insert profiles 1..count into the pipeline's table (existing keys are left alone). Returns rows
    inserted. The sample's values for columns the file does not carry are inserted too."""
    pipeline = pipeline or pf.load()
    return _load(admin_dsn, plan.joins(pipeline)[0], count, count, pipeline, seed, on_progress)


def load_tables(
    admin_dsn: str,
    count: int,
    pipeline: pf.Pipeline,
    seed: int = 7,
    on_progress: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """load_profiles, then keys 1..table_rows(count, j) into the j-th further table of the file, every
    foreign key pointing at a row. Returns rows inserted per Postgres table (a table joined twice is
    filled once, by its first join)."""
    inserted: dict[str, int] = {}
    for position, join in enumerate(plan.joins(pipeline)):
        if join.table.table in inserted:
            continue
        advance = (lambda n, table=join.table.table: on_progress(table, n)) if on_progress else None
        rows = table_rows(count, position)
        inserted[join.table.table] = _load(admin_dsn, join, rows, count, pipeline, seed + position, advance)
    return inserted


def _load(
    admin_dsn: str,
    join: plan.TableJoin,
    rows: int,
    spread: int,
    pipeline: pf.Pipeline,
    seed: int,
    on_progress: Callable[[int], None] | None,
) -> int:
    """Rows 1..rows of a join's table, COPYed through a staging table in batches; existing keys are left
    alone. The profile also gets the sample's values for columns the file does not carry."""
    rng = random.Random(seed)
    table = join.table
    extra = _uncarried(pipeline) if join.name == plan.PROFILE else []
    columns = sql.SQL(", ").join(map(sql.Identifier, [table.key, *table.columns, *extra]))
    target = sql.Identifier(table.schema_name, table.table_name)
    staging = sql.SQL("CREATE TEMP TABLE IF NOT EXISTS new_rows ON COMMIT DROP AS SELECT {} FROM {} LIMIT 0")
    insert = sql.SQL("INSERT INTO {} ({}) SELECT {} FROM new_rows ON CONFLICT ({}) DO NOTHING")
    inserted = 0
    with psycopg.connect(admin_dsn) as conn:
        for start in range(1, rows + 1, BATCH):
            batch = [
                _row(i, rng, pipeline, join, spread, extra)
                for i in range(start, min(start + BATCH, rows + 1))
            ]
            with conn.cursor() as cur:
                cur.execute(staging.format(columns, target))
                with cur.copy(sql.SQL("COPY new_rows ({}) FROM STDIN").format(columns)) as copy:
                    for row in batch:
                        copy.write_row(row)
                cur.execute(insert.format(target, columns, columns, sql.Identifier(table.key)))
                inserted += cur.rowcount
            conn.commit()
            if on_progress:
                on_progress(len(batch))
    return inserted


# --- events -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClickSpec:
    """How many events, over how many keys (1..keys, or key_offset+1..), how fast, which seed."""

    count: int
    users: int
    seed: int = 11
    rate: float | None = None  # events per second; None = as fast as possible
    user_offset: int = 0  # keys that do not exist yet, say
    pipeline: pf.Pipeline = field(default_factory=pf.load)


def _event_time(fmt: str) -> Any:
    now_ms = int(time.time() * 1000)
    if fmt == "epoch_ms":
        return now_ms
    if fmt == "epoch_s":
        return now_ms / 1000
    return (
        dt.datetime.fromtimestamp(now_ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def clicks(spec: ClickSpec) -> Iterator[dict[str, Any]]:
    """Events with a skewed key popularity (a few keys send a lot), like real traffic, stamped now."""
    rng = random.Random(spec.seed)
    events = spec.pipeline.events
    draws = key_draws(spec.pipeline, plan.EVENT)  # fields a table joins on: its keys
    for _ in range(spec.count):
        # P(rank) ~ 1/rank (Zipf-like), then a bijective scramble so popular keys are spread out.
        rank = int((spec.users + 1) ** rng.random())
        i = (rank * 2_654_435_761) % spec.users + 1
        event = {events.key: key(i + spec.user_offset, spec.pipeline)}
        event.update(
            (name, _drawn(draws[name], spec.users, rng, spec.pipeline))
            if name in draws
            else (name, _event_value(f.type, sample_value(name, f.type, i, rng, spec.pipeline)))
            for name, f in events.fields.items()
        )
        event[events.time.field] = _event_time(events.time.format)
        if events.count:
            event[events.count] = 1 if rng.random() < 0.9 else rng.randint(2, 5)
        yield event


def _event_value(kind: str, value: Any) -> Any:
    """A sample value as an event carries it: a numeric as a JSON number (a table row takes its text)."""
    return float(value) if kind == "numeric" and isinstance(value, str) else value


class Pacer:
    """Sleeps so that `sent` events take `sent / rate` seconds, in bursts of at least MIN_SLEEP_S.

    Why bursts: a sleep per event (50 us apart at 20,000/s) costs tens of thousands of context switches a
    second, CPU taken from the job a benchmark measures (docs/decisions/spark-settings.md, "The load
    generator"). The producer's linger.ms batches the records for 20 ms anyway.
    """

    MIN_SLEEP_S = 0.002

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.start = time.monotonic()

    def wait(self, sent: int) -> None:
        if self.rate:
            ahead = sent / self.rate - (time.monotonic() - self.start)
            if ahead >= self.MIN_SLEEP_S:
                time.sleep(ahead)


def send_kafka(
    bootstrap: str, records: Iterator[tuple[str, bytes]], on_sent: Callable[[int], None], topic: str
) -> int:
    producer = topics.producer(
        bootstrap, {"linger.ms": 20, "batch.size": 1 << 20, "enable.idempotence": True}
    )
    sent = 0
    for record_key, value in records:
        while True:
            try:
                producer.produce(topic, key=record_key, value=value)
                break
            except BufferError:  # local queue full: let the client drain it
                producer.poll(0.1)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
            on_sent(1000)
    if producer.flush(120) > 0:
        raise RuntimeError("Kafka did not acknowledge every event within 120 s")
    on_sent(sent % 1000)
    return sent


# Concurrent PutRecords requests: one request waits on the endpoint's round trip (kinesalite serves one
# stream's puts one at a time, AWS a shard's), so a single sequential client leaves both sides idle between
# requests. Measured on kinesalite: docs/decisions/kinesis-endpoint.md.
KINESIS_SENDERS = 4


def _put_batches(
    records: Iterator[tuple[str, bytes]],
    put: Callable[[list[tuple[str, bytes]]], int],
    senders: int,
    size: int,
) -> Iterator[int]:
    """Run `put` on batches of `size` records, `senders` at a time; yields each finished batch's size."""
    with ThreadPoolExecutor(senders) as pool:
        running: set[Future[int]] = set()
        batch: list[tuple[str, bytes]] = []
        for record in records:
            batch.append(record)
            if len(batch) == size:
                running.add(pool.submit(put, batch))
                batch = []
                if len(running) >= 2 * senders:
                    done, running = wait(running, return_when=FIRST_COMPLETED)
                    yield from (future.result() for future in done)
        if batch:
            running.add(pool.submit(put, batch))
        for future in as_completed(running):
            yield future.result()


def send_kinesis(
    records: Iterator[tuple[str, bytes]],
    on_sent: Callable[[int], None],
    stream: str,
    senders: int = KINESIS_SENDERS,
) -> int:
    """PutRecords in 500-record batches, `senders` requests in flight; every record is acknowledged (or an
    error raised) before it returns. Batches may land out of order: consumers order by event time."""
    from common import kinesis  # boto3 is slow to import: only the Kinesis commands pay for it

    client = kinesis.client(kinesis.PUT_CONFIG)
    put = lambda batch: kinesis.put_records(client, stream, batch)  # noqa: E731
    sent = 0
    for n in _put_batches(records, put, senders, kinesis.MAX_BATCH_RECORDS):
        sent += n
        on_sent(n)
    return sent


def as_json(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


def encoded(
    spec: ClickSpec, bad_every: int = 0, encode: Callable[[dict[str, Any]], bytes] = as_json
) -> Iterator[tuple[str, bytes]]:
    """(partition key, the event encoded: JSON by default, streamfold.avro_events.encoder for Avro), paced
    to spec.rate; every `bad_every`-th record malformed on purpose (broken JSON, in either format)."""
    pacer = Pacer(spec.rate)
    key_field = spec.pipeline.events.key
    for n, event in enumerate(clicks(spec), start=1):
        record_key = str(event[key_field])
        if bad_every and n % bad_every == 0:
            yield (
                record_key,
                b'{"' + key_field.encode() + b'": ' + json.dumps(event[key_field]).encode() + b", oops",
            )
        else:
            yield record_key, encode(event)
        pacer.wait(n)
