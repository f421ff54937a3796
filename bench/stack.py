"""The benchmark's own local stack: a fresh STREAMFOLD_HOME every run, stopped at the end."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import requests
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from common import config, names, plan
from common import pipeline_file as pf
from connectors.setup import run_setup, wait_until_running
from stack import lifecycle

SINK_TABLES = (
    names.ENRICHED_CLICKS_TABLE,
    names.CLICKS_PER_REGION_TABLE,
    names.URL_REGION_TABLE,
    names.DEAD_LETTERS_TABLE,
    f"{names.SINK_SCHEMA}.sink_batches",
)

# partition -> (first offset, end offset): the records a measurement reads.
Offsets = dict[int, tuple[int, int]]


@dataclass(frozen=True)
class Bench:
    """Endpoints of the running bench stack."""

    home: Path
    env: dict[str, str]
    settings: config.Settings

    @property
    def bootstrap(self) -> str:
        return self.settings.kafka_bootstrap

    @property
    def admin_dsn(self) -> str:
        return self.settings.pg_dsn

    def job_env(self, job_home: Path) -> dict[str, str]:
        """The stack's variables with another STREAMFOLD_HOME: each job run gets fresh checkpoints. The
        master is the bench stack's (a cluster only while the comparison runs one), never the shell's."""
        shell = {k: v for k, v in os.environ.items() if k != "STREAMFOLD_SPARK_MASTER"}
        return {**shell, **self.env, "STREAMFOLD_HOME": str(job_home)}


@contextmanager
def running(home: Path, echo: Callable[[str], None], keep: bool = False) -> Iterator[Bench]:
    """Wipe `home`, start the stack there, run `streamfold setup`; stop the stack afterwards."""
    home = home.resolve()
    lifecycle.down(home)
    shutil.rmtree(home, ignore_errors=True)
    try:
        env = lifecycle.up(home)
        os.environ.update(env)  # config.load() and every helper now point at the bench stack
        settings = config.load()
        run_setup(settings, echo=lambda msg: echo(f"setup: {msg}"))
        yield Bench(home, env, settings)
    finally:
        if not keep:
            lifecycle.down(home)


def truncate_sinks(bench: Bench) -> None:
    """Every job run and the naive baseline start from empty sink tables (the same insert work)."""
    with psycopg.connect(bench.admin_dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(SINK_TABLES)}")


def topic_offsets(bootstrap: str, topic: str = names.CLICKS_TOPIC) -> Offsets:
    """A topic's (log start, end) offsets per partition. Asked of the admin client: a consumer with a group
    looks for its coordinator at once, and closing it during that handshake logs a false SASL error."""
    admin = AdminClient(config.kafka_client_settings(bootstrap))
    partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions

    def offsets(spec: OffsetSpec) -> dict[int, int]:
        asked = {TopicPartition(topic, p): spec for p in partitions}
        found = admin.list_offsets(asked, request_timeout=30)
        return {tp.partition: future.result().offset for tp, future in found.items()}

    start, end = offsets(OffsetSpec.earliest()), offsets(OffsetSpec.latest())
    return {p: (start[p], end[p]) for p in partitions}


def empty_clicks_topic(bootstrap: str) -> None:
    """Move the clicks topic's log start to its end: a new job checkpoint (earliest) reads only new clicks."""
    ends = topic_offsets(bootstrap)
    admin = AdminClient(config.kafka_client_settings(bootstrap))
    wanted = [TopicPartition(names.CLICKS_TOPIC, p, end) for p, (_, end) in ends.items()]
    for future in admin.delete_records(wanted, operation_timeout=60).values():
        future.result()


def cdc_records(bootstrap: str, topic: str = names.CDC_USERS_TOPIC) -> int:
    """Change events in a CDC topic (one partition)."""
    return sum(end - start for start, end in topic_offsets(bootstrap, topic).values())


def wait_for_cdc(
    bootstrap: str,
    admin_dsn: str,
    expected: int,
    on_progress: Callable[[int], None],
    timeout_s: float,
    pipeline: pf.Pipeline | None = None,
) -> float:
    """Wait until Debezium has published `expected` records and every change committed so far into the CDC
    topic of `pipeline` (default: the default file's); returns the seconds it took. The count alone is not
    enough: table heartbeats share the topic. Debezium confirms a WAL position to its replication slot
    only once what precedes it is in Kafka."""
    resolved = plan.of(pipeline or pf.load())
    start = time.monotonic()
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        (target,) = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone() or ("0/0",)
        while True:
            seen = cdc_records(bootstrap, resolved.cdc_topic)
            on_progress(seen)
            row = conn.execute(
                "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots WHERE slot_name = %s",
                (target, resolved.slot),
            ).fetchone()
            if seen >= expected and row and row[0]:
                break
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(
                    f"Debezium published {seen} of {expected} change events in {timeout_s:.0f}s"
                )
            time.sleep(1)
    return time.monotonic() - start


@contextmanager
def connector_stopped(bench: Bench, name: str, timeout_s: float = 120) -> Iterator[None]:
    """Connector `name` stopped (its tasks shut down, its slot keeping the WAL) while the block runs, then
    resumed. Its walsender would otherwise decode every change the block's job writes, on the same two
    cores: a cost the main run, with one connector, does not pay."""
    url = f"{bench.settings.connect_url}/connectors/{name}"

    def put(action: str) -> None:
        requests.put(f"{url}/{action}", timeout=30, auth=config.connect_auth()).raise_for_status()

    put("stop")
    deadline = time.monotonic() + timeout_s
    while _connector_state(url) != "STOPPED":
        if time.monotonic() > deadline:
            raise TimeoutError(f"connector {name} did not stop within {timeout_s:.0f}s")
        time.sleep(0.5)
    try:
        yield
    finally:
        put("resume")
        wait_until_running(bench.settings.connect_url, name, timeout_s)


def _connector_state(url: str) -> str:
    response = requests.get(f"{url}/status", timeout=30, auth=config.connect_auth())
    response.raise_for_status()
    return str(response.json()["connector"]["state"])
