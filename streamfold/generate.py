"""Realistic load: sample users in public.users, and click streams into Kafka or Kinesis."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import psycopg

from common import names, topics

REGIONS = tuple(f"Region_{i}" for i in range(1, 10))
GENDERS = ("FEMALE", "MALE", "OTHER")
INTERESTS = ("News", "Movies", "Game", "Sport", "Travel", "Music", "Food", "Tech")
URLS = tuple(
    f"/{section}/{page}" for section in ("home", "news", "shop", "video", "help") for page in range(8)
)
DEVICES = ("mobile", "desktop", "tablet")
FIRST = ("Edna", "Shaan", "Alice", "Bob", "Chen", "Dara", "Eli", "Femi", "Gita", "Hugo")
LAST = ("Hook", "Gough", "Smith", "Ng", "Okafor", "Silva", "Tanaka", "Weber")


def userid(i: int) -> str:
    return f"User_{i}"


def user_row(i: int, rng: random.Random) -> tuple:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    contact = {
        "phone": f"650{rng.randrange(10**7):07d}",
        "city": "San Mateo",
        "state": "CA",
        "zipcode": "94403",
    }
    return (
        userid(i),
        f"{first} {last}",
        f"{first.lower()}.{last.lower()}{i}@example.com",
        rng.choice(REGIONS),
        rng.choice(GENDERS),
        rng.sample(INTERESTS, 2),
        json.dumps(contact),
        1_665_780_360_000 + i * 1000,
    )


def load_users(
    admin_dsn: str, count: int, seed: int = 7, on_progress: Callable[[int], None] | None = None
) -> int:
    """Insert User_1..User_count (existing ids are left alone). Returns rows inserted."""
    rng = random.Random(seed)
    inserted = 0
    with psycopg.connect(admin_dsn) as conn:
        for start in range(1, count + 1, 10_000):
            rows = [user_row(i, rng) for i in range(start, min(start + 10_000, count + 1))]
            with conn.cursor() as cur:
                cur.execute("CREATE TEMP TABLE IF NOT EXISTS new_users (LIKE public.users) ON COMMIT DROP")
                with cur.copy("COPY new_users FROM STDIN") as copy:
                    for row in rows:
                        copy.write_row(row)
                cur.execute(
                    "INSERT INTO public.users SELECT * FROM new_users ON CONFLICT (userid) DO NOTHING"
                )
                inserted += cur.rowcount
            conn.commit()
            if on_progress:
                on_progress(len(rows))
    return inserted


@dataclass(frozen=True)
class ClickSpec:
    count: int
    users: int
    seed: int = 11
    rate: float | None = None  # clicks per second; None = as fast as possible
    user_offset: int = 0  # User_{offset+1}..: users that do not exist yet, say


def clicks(spec: ClickSpec) -> Iterator[dict]:
    """Clicks with a skewed user popularity (a few users click a lot), like real traffic."""
    rng = random.Random(spec.seed)
    for _ in range(spec.count):
        # P(rank) ~ 1/rank (Zipf-like), then a bijective scramble so popular users are spread out.
        rank = int((spec.users + 1) ** rng.random())
        i = (rank * 2_654_435_761) % spec.users + 1
        yield {
            "userid": userid(i + spec.user_offset),
            "url": rng.choice(URLS),
            "device_id": rng.choice(DEVICES),
            "ip": f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}",
            "event_time": int(time.time() * 1000),
            "clicks": 1 if rng.random() < 0.9 else rng.randint(2, 5),
        }


class Pacer:
    """Sleeps so that `sent` clicks take `sent / rate` seconds, in bursts of at least MIN_SLEEP_S.

    Why bursts: a sleep per click (50 us apart at 20,000/s) costs tens of thousands of context switches a
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
    bootstrap: str,
    records: Iterator[tuple[str, bytes]],
    on_sent: Callable[[int], None],
    topic: str = names.CLICKS_TOPIC,
) -> int:
    producer = topics.producer(
        bootstrap, {"linger.ms": 20, "batch.size": 1 << 20, "enable.idempotence": True}
    )
    sent = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                break
            except BufferError:  # local queue full: let the client drain it
                producer.poll(0.1)
        sent += 1
        if sent % 1000 == 0:
            producer.poll(0)
            on_sent(1000)
    if producer.flush(120) > 0:
        raise RuntimeError("Kafka did not acknowledge every click within 120 s")
    on_sent(sent % 1000)
    return sent


def send_kinesis(
    records: Iterator[tuple[str, bytes]], on_sent: Callable[[int], None], stream: str = names.CLICKS_STREAM
) -> int:
    from common import kinesis

    client = kinesis.client()
    sent = 0
    batch: list[tuple[str, bytes]] = []
    for record in records:
        batch.append(record)
        if len(batch) == 500:
            kinesis.put_records(client, stream, batch)
            sent += len(batch)
            on_sent(len(batch))
            batch = []
    if batch:
        kinesis.put_records(client, stream, batch)
        sent += len(batch)
        on_sent(len(batch))
    return sent


def encoded(spec: ClickSpec, bad_every: int = 0) -> Iterator[tuple[str, bytes]]:
    """(partition key, JSON bytes), paced to spec.rate; every `bad_every`-th record malformed on purpose."""
    pacer = Pacer(spec.rate)
    for n, click in enumerate(clicks(spec), start=1):
        if bad_every and n % bad_every == 0:
            yield click["userid"], b'{"userid": "' + click["userid"].encode() + b'", "url": oops'
        else:
            yield click["userid"], json.dumps(click).encode()
        pacer.wait(n)
