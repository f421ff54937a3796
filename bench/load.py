"""A measurement's input: users in public.users, clicks in Kafka with profile updates interleaved.

The updates are real UPDATEs of public.users committed while the clicks are produced, so the job
folds them from Debezium's change events exactly as in production.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from bench.stack import Bench, Offsets, topic_offsets
from common import names
from common import pipeline_file as pf
from streamfold import generate

# The regions profile updates move users between: the default pipeline file's sample regions.
REGIONS = pf.load().sample.values["regionid"]

# Rows per UPDATE transaction: small transactions, like a profile service's.
UPDATE_BATCH = 10


class ProfileUpdater:
    """Moves random users to a random region, UPDATE_BATCH rows per transaction: in the profile table of
    `pipeline` (default: the default pipeline's, public.users), whose users have the default file's keys and
    regions."""

    def __init__(self, dsn: str, users: int, seed: int = 5, pipeline: pf.Pipeline | None = None) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.users = users
        self.rng = random.Random(seed)
        self.updated = 0
        self.pipeline = pipeline or pf.load()  # the sample keys (User_<n>)
        self.statement = sql.SQL(
            "UPDATE {} u SET regionid = v.region "
            "FROM unnest(%s::text[], %s::text[]) AS v(userid, region) WHERE u.{} = v.userid"
        ).format(
            sql.Identifier(*self.pipeline.profile.table.split(".")), sql.Identifier(self.pipeline.profile.key)
        )

    def update(self, count: int = UPDATE_BATCH) -> list[str]:
        """Commit one transaction updating `count` distinct users; returns their ids."""
        ids = [str(generate.key(i, self.pipeline)) for i in self.rng.sample(range(1, self.users + 1), count)]
        regions = [self.rng.choice(REGIONS) for _ in ids]
        cur = self.conn.execute(self.statement, (ids, regions))
        self.updated += cur.rowcount
        return ids

    def close(self) -> None:
        self.conn.close()


@dataclass(frozen=True)
class Load:
    clicks: int
    updates: int
    seconds: float
    offsets: Offsets  # the clicks this load appended, per partition

    @property
    def rate(self) -> float:
        return self.clicks / self.seconds if self.seconds else 0.0


def interleaved(
    records: Iterator[tuple[str, bytes]], updater: ProfileUpdater, every: int
) -> Iterator[tuple[str, bytes]]:
    """The click records, with one update transaction committed after every `every` clicks."""
    for n, record in enumerate(records, start=1):
        yield record
        if every and n % every == 0:
            updater.update()


def preload(
    bench: Bench,
    clicks: int,
    users: int,
    updates: int,
    on_sent: Callable[[int], None],
    encode: Callable[[dict[str, Any]], bytes] = generate.as_json,
    pipeline: pf.Pipeline | None = None,
) -> Load:
    """Produce `clicks` clicks over User_1..User_users (event time = now) and `updates` profile updates;
    each click JSON, or as `encode` writes it (Avro: bench/avro_path.py). `pipeline`: the file whose events
    and profile table these are (default: the default file's; the three-table file: bench/tables_path.py)."""
    pipeline = pipeline or pf.load()
    before = topic_offsets(bench.bootstrap)
    every = clicks * UPDATE_BATCH // updates if updates else 0
    updater = ProfileUpdater(bench.admin_dsn, users, pipeline=pipeline)
    start = time.monotonic()
    try:
        spec = generate.ClickSpec(count=clicks, users=users, pipeline=pipeline)
        records = interleaved(generate.encoded(spec, encode=encode), updater, every)
        sent = generate.send_kafka(bench.bootstrap, records, on_sent, names.CLICKS_TOPIC)
    finally:
        updater.close()
    seconds = time.monotonic() - start
    after = topic_offsets(bench.bootstrap)
    offsets = {p: (before[p][1], end) for p, (_, end) in after.items()}
    return Load(sent, updater.updated, seconds, offsets)
