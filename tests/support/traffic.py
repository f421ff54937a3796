"""Clicks and profile changes streaming in while a test kills things: the crash tests' load."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable

import psycopg

from common import kinesis, topics
from streamfold.generate import ClickSpec, clicks

Send = Callable[[list[tuple[str, bytes]]], None]


def kafka_sender(bootstrap: str, topic: str) -> Send:
    producer = topics.producer(bootstrap, {"linger.ms": 5})

    def send(records: list[tuple[str, bytes]]) -> None:
        for key, value in records:
            producer.produce(topic, key=key, value=value)
        assert producer.flush(30) == 0

    return send


def kinesis_sender(stream: str) -> Send:
    client = kinesis.client()
    return lambda records: kinesis.put_records(client, stream, records)


def add_users(pg: psycopg.Connection, users: list[str]) -> None:
    pg.cursor().executemany(
        "INSERT INTO public.users (userid, regionid) VALUES (%s, %s) ON CONFLICT DO NOTHING",
        [(u, f"R{i % 4}") for i, u in enumerate(users)],
    )


class Traffic:
    """~1,000 clicks/s of `users`, and one profile change every few batches, from a thread until stopped
    (or `limit` clicks). The users must exist (add_users). Another pipeline's load overrides batch and
    change."""

    def __init__(self, send: Send, pg: psycopg.Connection, users: list[str], limit: int = 60_000) -> None:
        self.send, self.pg, self.users, self.limit = send, pg, users, limit
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Traffic:
        self.start()
        return self

    def start(self) -> None:
        self._thread.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        rng = random.Random(5)
        while not self._stop.is_set() and self.sent < self.limit:
            batch = self.batch(rng)
            self.send(batch)
            self.sent += len(batch)
            if rng.random() < 0.2:
                self.change(rng)
            time.sleep(0.1)

    def batch(self, rng: random.Random) -> list[tuple[str, bytes]]:
        """The next 100 events (key, value) to send."""
        users = self.users
        batch = [
            (users[int(c["userid"].split("_")[1]) - 1], c)
            for c in clicks(ClickSpec(count=100, users=len(users), seed=self.sent))
        ]
        return [(user, json.dumps({**c, "userid": user}).encode()) for user, c in batch]

    def change(self, rng: random.Random) -> None:
        """A profile change between two batches."""
        self.pg.execute(
            "UPDATE public.users SET regionid = %s WHERE userid = %s",
            (f"R{rng.randrange(4)}", rng.choice(self.users)),
        )
