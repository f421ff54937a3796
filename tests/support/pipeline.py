"""Running the real job as a subprocess against its own sink database, and an independent oracle.

Each scenario gets a sandbox: a fresh Postgres database with the sink schema and a fresh
STREAMFOLD_HOME (checkpoints), while sharing the session's Kafka, Connect/Debezium and Kinesis.
The oracle recomputes the expected join from the raw inputs (the CDC topic and the click source)
with a plain sort-and-search, independent of the Spark operator.
"""

from __future__ import annotations

import bisect
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from common import config, kinesis, names, plan
from common import pipeline_file as pf
from connectors import setup
from db import schema
from spec.envelopes import BadEnvelope, parse_envelope
from spec.events import Rejected, parse_event
from tests.support import kinesalite
from tests.support.kafka import Message, read_all

# The default pipeline file's specs (the demo's clicks and public.users).
DEFAULT_EVENT_SPEC = plan.of(pf.load()).event_spec
DEFAULT_PROFILE_SPEC = plan.of(pf.load()).profile_spec

ROOT = Path(__file__).resolve().parents[2]
NEVER = -(2**63)


@dataclass(frozen=True)
class Sandbox:
    """A scenario's own sink database, STREAMFOLD_HOME, and clicks topic and stream (so its input and its
    run time do not depend on which scenarios ran before it). The stream, of the same name as the topic, is
    created when first used."""

    name: str
    admin_dsn: str
    home: Path
    clicks_topic: str

    @property
    def clicks_stream(self) -> str:
        return self.clicks_topic

    def stream(self) -> str:
        """The scenario's Kinesis stream, created if it is not there yet."""
        kinesis.ensure_stream(kinesis.client(), self.clicks_stream, shards=setup.CLICK_PARTITIONS)
        return self.clicks_stream

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "STREAMFOLD_PG_DSN": self.admin_dsn,
            "STREAMFOLD_HOME": str(self.home),
            "STREAMFOLD_CLICKS_TOPIC": self.clicks_topic,
            "STREAMFOLD_CLICKS_STREAM": self.clicks_stream,
            **extra,
        }

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.admin_dsn, autocommit=True)

    def inputs(self, source: str, bootstrap: str) -> list[Input]:
        """Every record of this scenario's clicks topic or stream, as the job would read it."""
        if source == "kinesis":
            return kinesis_inputs(self.stream())
        return kafka_inputs(bootstrap, self.clicks_topic)

    def run_once(
        self, source: str, timeout_s: float = 600, conf: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess:
        if source == "kinesis":
            self.stream()
        result = subprocess.run(
            [sys.executable, "-m", "streamfold", "run", "--source", source, "--once"]
            + [f"--conf={item}" for item in conf],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self.env(),
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr[-4000:]
        return result

    def status(self, **env: str) -> dict[str, Any]:
        """`streamfold status --json` of the sandbox's home."""
        result = subprocess.run(
            [sys.executable, "-m", "streamfold", "status", "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env=self.env(**env),
            cwd=ROOT,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return json.loads(result.stdout)

    def start(
        self, source: str, log: Path, conf: tuple[str, ...] = (), mode: str | None = None, **env: str
    ) -> subprocess.Popen:
        """The continuous job, in its own process group so a kill takes the JVM and workers too; mode: `run
        --mode` (default: the pipeline file's)."""
        if source == "kinesis":
            self.stream()
        return subprocess.Popen(
            [sys.executable, "-m", "streamfold", "run", "--source", source]
            + ([] if mode is None else ["--mode", mode])
            + [f"--conf={item}" for item in conf],
            stdout=log.open("a"),
            stderr=subprocess.STDOUT,
            env=self.env(**env),
            cwd=ROOT,
            start_new_session=True,
        )


def make_sandbox(admin_dsn: str, name: str, home: Path) -> Sandbox:
    """A fresh database `name`, `home`, and a new clicks topic named after the scenario (a uuid keeps it new
    when the session's stack outlives a run)."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    dsn = make_conninfo("", **{**conninfo_to_dict(admin_dsn), "dbname": name})
    schema.apply(dsn)
    home.mkdir(parents=True, exist_ok=True, mode=0o700)  # as a private home would be
    topic = f"{names.CLICKS_TOPIC}-{name.replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    setup.ensure_topics(config.load().kafka_bootstrap, config.load().pipeline, topic)
    return Sandbox(name, dsn, home, topic)


def stop_realtime_job(job: subprocess.Popen, log: Path) -> None:
    """SIGTERM stops a real-time job with exit 0 and no error line: its open batch's abort says nothing."""
    job.send_signal(signal.SIGTERM)
    assert job.wait(timeout=120) == 0, log.read_text(errors="replace")[-4000:]
    output = log.read_text(errors="replace")
    assert "stopping (SIGTERM)" in output
    for noise in ("Traceback", "Py4JError", " ERROR "):
        assert noise not in output, output[-3000:]


def kill9(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


@contextmanager
def killed_after_a_batch(
    start: Callable[[], subprocess.Popen], landed: Callable[[], int], timeout_s: float = 240
) -> Iterator[subprocess.Popen]:
    """Starts the job, waits until it has landed a batch since (`landed` counts them), and kill -9s it when
    the block ends: after a delay the block chooses, mid-batch, mid-commit or idle."""
    committed = landed()
    job = start()
    try:
        wait_until(lambda: landed() > committed, timeout_s, "a committed batch")
        yield job
    finally:  # a job left running would fold the shared CDC topic into later tests' outputs
        kill9(job)


def state_partitions(checkpoint: Path) -> set[int]:
    """The join's state partitions: the folders under a query checkpoint's state/<operator>/."""
    return {int(p.name) for p in checkpoint.glob("state/*/*") if p.name.isdigit()}


def batches(sandbox: Sandbox) -> int:
    """The partitions of micro-batches the sandbox's job has landed (streamfold.sink_batches claims)."""
    with sandbox.connect() as conn:
        return conn.execute("SELECT count(*) FROM streamfold.sink_batches").fetchone()[0]


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 2.0) -> None:
    wait_until_value(lambda: predicate() or None, timeout_s, what, poll_s)


def wait_until_value(produce, timeout_s: float, what: str, poll_s: float = 2.0):
    """The first value produce() returns that is not None."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = produce()
        if value is not None:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


# --- the oracle ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Input:
    event_id: str
    payload: bytes | None


def profile_history(bootstrap: str) -> dict[str, list[tuple[int, int, str | None]]]:
    """Per user, (valid_from, lsn, region or None when deleted) from every Debezium envelope."""
    history: dict[str, list[tuple[int, int, str | None]]] = {}
    for message in read_all(bootstrap, names.CDC_USERS_TOPIC):
        envelope = message.value
        if envelope is None or is_dead_letter(message):
            continue
        op, source = envelope["op"], envelope["source"]
        if source.get("table") == "cdc_heartbeat":
            continue  # CDC progress routed into this topic (spec/envelopes.py), never a user
        valid_from = NEVER if op == "r" else source["ts_ms"]
        row = envelope["before"] if op == "d" else envelope["after"]
        region = None if op == "d" else (row.get("regionid") or names.UNKNOWN_REGION)
        if isinstance(region, int):
            region = str(region)  # regionid turned into an integer column (test_schema_drift.py)
        history.setdefault(row["userid"], []).append((valid_from, source.get("lsn") or 0, region))
    for versions in history.values():
        versions.sort()
    return history


def stored_history(
    conn: psycopg.Connection, users: list[str]
) -> dict[str, list[tuple[int, int, str | None]]]:
    """The default pipeline's profile history of `users`, as profile_history has it."""
    rows = conn.execute(
        "SELECT userid, CASE WHEN valid_from = '-infinity' THEN %s"
        " ELSE (extract(epoch FROM valid_from) * 1000)::bigint END, lsn, op, regionid"
        " FROM streamfold.profile_history_clicks WHERE userid = ANY(%s) ORDER BY valid_from, lsn",
        (NEVER, users),
    )
    stored: dict[str, list[tuple[int, int, str | None]]] = {}
    for user, valid_from, lsn, op, region in rows:
        version = (valid_from, lsn, None if op == "d" else (region or names.UNKNOWN_REGION))
        stored.setdefault(user, []).append(version)
    return stored


def is_dead_letter(message: Message) -> bool:
    """The reference fold rejects it: the job dead-letters it, so it is no version of anyone."""
    try:
        parse_envelope(message.topic, message.raw_key, message.raw_value, DEFAULT_PROFILE_SPEC)
    except BadEnvelope:
        return True
    return False


def cdc_dead_letters(bootstrap: str) -> set[str]:
    """The CDC records the reference fold (spec.envelopes.parse_envelope) rejects, by dead-letter id: change
    events and Debezium's heartbeats alike (the job reads both topics)."""
    dead = set()
    for m in [*read_all(bootstrap, names.CDC_USERS_TOPIC), *read_all(bootstrap, names.HEARTBEAT_TOPIC)]:
        if is_dead_letter(m):
            dead.add(f"kafka:{m.topic}:{m.partition}:{m.offset}")
    return dead


def realtime_cdc_dead_letters(bootstrap: str) -> set[str]:
    """The CDC records a real-time query rejects: the CDC topic's (it reads that topic from its start, with
    the session's other tests' records), not Debezium's heartbeat topic, which it does not read."""
    return {d for d in cdc_dead_letters(bootstrap) if d.startswith(f"kafka:{names.CDC_USERS_TOPIC}:")}


def landed(sandbox: Sandbox, want: Expected) -> bool:
    """Every event of `want` and every dead letter is in PostgreSQL."""
    with sandbox.connect() as conn:
        rows = actual_rows(conn)
        dead = {d for (d,) in conn.execute(f"SELECT dead_letter_id FROM {names.DEAD_LETTERS_TABLE}")}
    return want.rows.keys() <= rows.keys() and want.dead <= dead


def expected_region(history: dict[str, list[tuple[int, int, str | None]]], user: str, t: int) -> str:
    versions = history.get(user, [])
    i = bisect.bisect_right(versions, (t, 2**63, "\uffff")) - 1
    return names.UNKNOWN_REGION if i < 0 or versions[i][2] is None else versions[i][2]


def kafka_inputs(bootstrap: str, topic: str) -> list[Input]:
    messages = read_all(bootstrap, topic)
    return [Input(f"kafka:{m.topic}:{m.partition}:{m.offset}", m.raw_value) for m in messages]


def kinesis_inputs(stream: str) -> list[Input]:
    return [
        Input(f"kinesis:{stream}:{shard}:{record['SequenceNumber']}", record["Data"])
        for shard, record in kinesalite.read_stream(kinesis.client(), stream)
    ]


@dataclass
class Expected:
    rows: dict[str, tuple[str, str, int]]  # event_id -> (uid, region, clicks)
    dead: set[str]

    def per_region(self) -> Counter:
        totals: Counter = Counter()
        for _, region, clicks in self.rows.values():
            totals[region] += clicks
        return totals


def expected(
    inputs: list[Input], history: dict[str, list[tuple[int, int, str | None]]], cdc_dead: set[str]
) -> Expected:
    """What the job must produce: every click joined, and every click or CDC record it rejects."""
    now_ms = int(time.time() * 1000)
    rows, dead = {}, set(cdc_dead)
    for item in inputs:
        try:
            click = parse_event(item.payload, now_ms, DEFAULT_EVENT_SPEC)
        except Rejected:
            dead.add(item.event_id)
            continue
        region = expected_region(history, click.key, click.time_ms)
        rows[item.event_id] = (click.key, region, click.count)
    return Expected(rows, dead)


def actual_rows(conn: psycopg.Connection) -> dict[str, tuple[str, str, int]]:
    cur = conn.execute(f"SELECT event_id, uid, user_regionid, clicks FROM {names.ENRICHED_CLICKS_TABLE}")
    return {event_id: (uid, region, clicks) for event_id, uid, region, clicks in cur}


def actual_per_region(conn: psycopg.Connection) -> Counter:
    return Counter(
        dict(conn.execute(f"SELECT region, clicks FROM {names.CLICKS_PER_REGION_TABLE}").fetchall())
    )


def assert_matches(conn: psycopg.Connection, want: Expected) -> None:
    """Row by row, then every aggregate: nothing lost, nothing doubled, every click joined right."""
    got = actual_rows(conn)
    missing = want.rows.keys() - got.keys()
    extra = got.keys() - want.rows.keys()
    assert not missing and not extra, f"{len(missing)} clicks missing, {len(extra)} unexpected"
    wrong = {e: (got[e], want.rows[e]) for e in want.rows if got[e] != want.rows[e]}
    assert not wrong, f"{len(wrong)} clicks joined wrong, e.g. {list(wrong.items())[:3]}"
    assert actual_per_region(conn) == want.per_region()
    (url_total,) = conn.execute(
        f"SELECT coalesce(sum(click_count), 0) FROM {names.URL_REGION_TABLE}"
    ).fetchone()
    assert url_total == sum(c for _, _, c in want.rows.values())
    assert_totals_of_rows(conn)
    dead = dict(conn.execute(f"SELECT dead_letter_id, reason FROM {names.DEAD_LETTERS_TABLE}").fetchall())
    unexpected = {k: v for k, v in dead.items() if k not in want.dead}
    assert dead.keys() == want.dead, (
        f"missing {want.dead - dead.keys()}, unexpected {list(unexpected.items())[:5]}"
    )


def assert_totals_of_rows(conn: psycopg.Connection) -> None:
    """Both aggregate tables hold what a GROUP BY over the enriched rows gives, group by group."""
    rows_per_region = conn.execute(
        f"SELECT user_regionid, sum(clicks) FROM {names.ENRICHED_CLICKS_TABLE} GROUP BY 1"
    ).fetchall()
    per_region = actual_per_region(conn)
    assert per_region == Counter(dict(rows_per_region)), f"per region {per_region}, rows {rows_per_region}"
    mismatched = conn.execute(
        f"""SELECT count(*) FROM {names.URL_REGION_TABLE} t FULL JOIN (
                SELECT click_url, user_regionid, sum(clicks) AS n
                FROM {names.ENRICHED_CLICKS_TABLE} GROUP BY 1, 2
            ) e ON e.click_url = t.url AND e.user_regionid = t.region
            WHERE t.click_count IS DISTINCT FROM e.n"""
    ).fetchone()[0]
    assert mismatched == 0, f"{mismatched} url and region totals differ from the rows'"


def assert_landed_once(conn: psycopg.Connection, event_ids: set[str]) -> None:
    """Every event of `event_ids` has its enriched row once and no other event has one; the totals are the
    rows'. For events the oracle cannot read (Avro): who joined what, the job's own tests say."""
    rows, distinct = conn.execute(
        f"SELECT count(*), count(DISTINCT event_id) FROM {names.ENRICHED_CLICKS_TABLE}"
    ).fetchone()
    landed = {e for (e,) in conn.execute(f"SELECT event_id FROM {names.ENRICHED_CLICKS_TABLE}")}
    assert (rows, distinct) == (len(event_ids), len(event_ids)), f"{rows} rows of {distinct} events"
    assert landed == event_ids, f"{len(event_ids - landed)} missing, {len(landed - event_ids)} unexpected"
    assert_totals_of_rows(conn)


def summary(conn: psycopg.Connection) -> dict[str, Any]:
    rows, clicks = conn.execute(
        f"SELECT count(*), coalesce(sum(clicks), 0) FROM {names.ENRICHED_CLICKS_TABLE}"
    ).fetchone()
    return {"rows": rows, "clicks": clicks}
