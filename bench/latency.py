"""Latency at a steady offered load, measured from outside the job: Postgres' own commit timestamps.

click latency:   a click's Kafka record timestamp (CreateTime, stamped when the producer appends it)
                 -> the commit of the transaction that made its row in streamfold.enriched_clicks visible
                 (pg_xact_commit_timestamp of the row's xmin; the stack runs with track_commit_timestamp).
                 About SAMPLES_PER_S clicks per second are followed (their event ids come from the
                 delivery reports: kafka:clicks:<partition>:<offset>).
profile latency: a profile UPDATE's commit time (Debezium's source.ts_ms, which a joined row carries as
                 profile_valid_from) -> the commit of the first click row joined with that version. Right
                 after each update one click by that user is sent, so such a click exists at once.
A poller finds the rows every POLL_S; when it runs does not change the figures (a poller that reads
a row late would otherwise add its own delay: 0.13 s p50 and 0.3-0.4 s p99 at 20,000 clicks/s).
breakdown:       where a sampled click's latency goes, from the job's own records: append -> start of the
                 batch that read it (the clicks source's end offsets in each query progress) -> start of
                 the batch that emitted it (the last Postgres commit before the row was seen, from
                 streamfold.sink_batches) -> that batch's first commit -> the commit of the click's own
                 partition (the sink commits each partition's rows in a transaction of its own).
Rows still invisible GRACE_S after the load ends are reported as censored (the job could not keep up),
and percentiles that fall on them as "> GRACE_S".
"""

from __future__ import annotations

import json
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import psycopg
from confluent_kafka import Message, Producer

from bench.load import ProfileUpdater
from common import names, plan, topics
from common import pipeline_file as pf
from streamfold import generate

SAMPLES_PER_S = 100
# Serve the producer's delivery reports every this many clicks (5 ms at 20,000/s): often enough to register
# samples at once, rarely enough to cost the generator little CPU.
POLL_EVERY = 100
POLL_S = 0.1
GRACE_S = 60.0
PERCENTILES = (50, 95, 99)


@dataclass
class Observations:
    """Sampled items: when each was sent (epoch s) and when it became visible (epoch s)."""

    sent: dict[str, float] = field(default_factory=dict)
    seen: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, key: str, sent_s: float) -> None:
        with self.lock:
            self.sent[key] = sent_s

    def outstanding(self) -> list[str]:
        with self.lock:
            return [k for k in self.sent if k not in self.seen]

    def mark(self, seen: dict[str, float]) -> None:
        """Each key became visible at its time (epoch s)."""
        with self.lock:
            self.seen.update(seen)

    def resolve(self, key: str, origin_s: float, at_s: float) -> None:
        """Seen at `at_s`, and the true origin is now known (a profile's commit time)."""
        with self.lock:
            self.sent[key], self.seen[key] = origin_s, at_s

    def latencies(self) -> list[float]:
        """Seconds per item; inf for items never seen."""
        with self.lock:
            return [self.seen.get(k, math.inf) - sent for k, sent in self.sent.items()]


def percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile; None if it falls on an unseen (censored) item or there are no values."""
    return _nearest_rank(sorted(values), pct) if values else None


def quantiles(values: list[float]) -> list[float | None]:
    """The distribution at 1% steps for the CDF chart: nearest-rank percentiles 0 (the minimum) to 100
    (the maximum), None where they fall on censored items; [] without values."""
    ordered = sorted(values)
    return [_nearest_rank(ordered, pct) for pct in range(101)] if ordered else []


def _nearest_rank(ordered: list[float], pct: float) -> float | None:
    rank = math.ceil(round(pct * len(ordered) / 100, 9))  # 7 / 100 * 100 is 7.000000000000001
    value = ordered[max(0, rank - 1)]
    return None if math.isinf(value) else round(value, 3)


def summary(observed: Observations) -> dict[str, Any]:
    values = observed.latencies()
    seen = [v for v in values if not math.isinf(v)]
    return {
        "samples": len(values),
        "censored": len(values) - len(seen),
        "censored_examples": observed.outstanding()[:5],
        **{f"p{p}_s": percentile(values, p) for p in PERCENTILES},
        "max_s": round(max(seen), 3) if seen else None,
        "quantiles_s": quantiles(values),
    }


# When a row's transaction committed, epoch seconds.
COMMITTED_S = "extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8"


class Poller(threading.Thread):
    """Polls Postgres every POLL_S for sampled clicks and for clicks joined with updated profiles, and
    takes when each became visible from the commit timestamp of its row's transaction."""

    def __init__(
        self, dsn: str, clicks: Observations, profiles: Observations, table: str = names.ENRICHED_CLICKS_TABLE
    ) -> None:
        """`table`: the enriched table (the three-table file's has the default one's columns)."""
        super().__init__(name="latency-poller", daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.clicks, self.profiles, self.table = clicks, profiles, table
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.wait(POLL_S):
            self.poll_once()

    def poll_once(self) -> None:
        ids = self.clicks.outstanding()
        if ids:
            rows = self.conn.execute(
                f"SELECT event_id, {COMMITTED_S} FROM {self.table} WHERE event_id = ANY(%s)",
                (ids,),
            ).fetchall()
            self.clicks.mark(dict(rows))
        for key in self.profiles.outstanding():
            userid, _, before = key.partition("@")
            # The first version valid from `before` on is this update's (users are picked at random), and
            # its first joined click is the first committed. Debezium's ts_ms is in whole milliseconds: a
            # commit in the same millisecond as `before` carries a valid_from just below it, hence the floor.
            row = self.conn.execute(
                f"SELECT extract(epoch FROM profile_valid_from)::float8, {COMMITTED_S} "
                f"FROM {self.table} "
                "WHERE uid = %s AND profile_valid_from >= to_timestamp(%s / 1000.0) "
                "ORDER BY profile_valid_from, 2 LIMIT 1",
                (userid, math.floor(float(before) * 1000)),
            ).fetchone()
            if row:
                self.profiles.resolve(key, row[0], row[1])

    def done(self) -> bool:
        return not self.clicks.outstanding() and not self.profiles.outstanding()

    def close(self) -> None:
        self.stop_event.set()
        self.join()
        self.conn.close()


class Watcher(Protocol):
    """What sees sampled clicks and profile changes land: Poller (streamfold's Postgres rows), or
    bench.kstreams.OutputWatcher (a Kafka Streams application's output records)."""

    def start(self) -> None: ...

    def done(self) -> bool: ...

    def close(self) -> None: ...


@dataclass
class WindowResult:
    target_rate: float
    seconds: float
    sent: int
    sent_rate: float
    committed_rate: float  # click rows committed per second, from the window's start to the end of the wait
    clicks: dict[str, Any]
    profiles: dict[str, Any]
    kept_up: bool  # every sampled click became visible within GRACE_S of the window's end
    updates: int
    observed: Observations  # the sampled clicks, for `breakdown`
    breakdown: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "target_rate": self.target_rate,
            "seconds": round(self.seconds, 1),
            "sent": self.sent,
            "profile_updates": self.updates,
            "sent_rate": round(self.sent_rate),
            "committed_rate": round(self.committed_rate),
            "kept_up": self.kept_up,
            "click_latency": self.clicks,
            "profile_latency": self.profiles,
            "click_latency_breakdown": self.breakdown,
        }


def run_window(
    bootstrap: str,
    dsn: str,
    users: int,
    rate: float,
    seconds: float,
    committed_rows: Callable[[], int],
    echo: Callable[[str], None],
    seed: int = 23,
    watch: Callable[[Observations, Observations], Watcher] | None = None,
    pipeline: pf.Pipeline | None = None,
) -> WindowResult:
    """Offer `rate` clicks/s for `seconds` (plus one profile update a second) and follow samples, in
    streamfold's Postgres rows or through `watch` (made with the observations to mark). `pipeline`: the
    file whose events, profile table and enriched table these are (default: the default file's)."""
    pipeline = pipeline or pf.load()
    clicks, profiles = Observations(), Observations()
    poller = (
        watch(clicks, profiles) if watch else Poller(dsn, clicks, profiles, plan.of(pipeline).enriched_table)
    )
    poller.start()
    committed_before = committed_rows()
    started = time.monotonic()
    offered = _offer(bootstrap, dsn, users, rate, seconds, clicks, profiles, seed, pipeline)
    echo(
        f"  offered {offered.sent:,} clicks in {offered.seconds:.0f}s "
        f"({offered.sent / offered.seconds:,.0f}/s); waiting for the samples"
    )
    deadline = time.monotonic() + GRACE_S
    while not poller.done() and time.monotonic() < deadline:
        time.sleep(POLL_S)
    poller.close()
    committed_rate = (committed_rows() - committed_before) / (time.monotonic() - started)
    return WindowResult(
        target_rate=rate,
        seconds=offered.seconds,
        sent=offered.sent,
        updates=offered.updates,
        sent_rate=offered.sent / offered.seconds,
        committed_rate=committed_rate,
        clicks=summary(clicks),
        profiles=summary(profiles),
        kept_up=not clicks.outstanding(),
        observed=clicks,
    )


@dataclass(frozen=True)
class Offered:
    sent: int  # clicks, including one per profile update
    updates: int
    seconds: float


def _offer(
    bootstrap: str,
    dsn: str,
    users: int,
    rate: float,
    seconds: float,
    clicks: Observations,
    profiles: Observations,
    seed: int,
    pipeline: pf.Pipeline,
) -> Offered:
    """The paced producer: samples every k-th click through its delivery report."""
    producer = topics.producer(bootstrap, {"linger.ms": 20, "enable.idempotence": True})
    updater = ProfileUpdater(dsn, users, seed=seed, pipeline=pipeline)
    every = max(1, round(rate / SAMPLES_PER_S))
    spec = generate.ClickSpec(count=int(rate * seconds), users=users, seed=seed, pipeline=pipeline)
    pacer = generate.Pacer(rate)
    next_update = time.monotonic() + 1.0
    sent = 0

    def sampled(err: Any, msg: Message) -> None:
        if err is None:
            event_id = f"kafka:{msg.topic()}:{msg.partition()}:{msg.offset()}"
            clicks.add(event_id, msg.timestamp()[1] / 1000)

    for n, click in enumerate(generate.clicks(spec)):
        _produce(producer, click, sampled if n % every == 0 else None)
        sent += 1
        if time.monotonic() >= next_update:
            next_update += 1.0
            _update_and_click(producer, updater, profiles)
            sent += 1
        if n % POLL_EVERY == 0:  # delivery reports register the samples: late ones would inflate latencies
            producer.poll(0)
        pacer.wait(n + 1)
    elapsed = time.monotonic() - pacer.start
    producer.flush(60)
    updater.close()
    return Offered(sent, updater.updated, elapsed)


def _produce(producer: Producer, click: dict[str, Any], on_delivery: Any) -> None:
    while True:
        try:
            producer.produce(
                names.CLICKS_TOPIC, key=click["userid"], value=json.dumps(click), on_delivery=on_delivery
            )
            return
        except BufferError:
            producer.poll(0.05)


def _update_and_click(producer: Producer, updater: ProfileUpdater, profiles: Observations) -> None:
    """Commit one profile update, then send a click by that user right away."""
    before = time.time()
    (userid,) = updater.update(1)
    profiles.add(f"{userid}@{before}", before)  # the origin becomes the commit time once seen
    spec = generate.ClickSpec(count=1, users=1, seed=random.randrange(1 << 30), pipeline=updater.pipeline)
    click = next(generate.clicks(spec))
    _produce(producer, {**click, "userid": userid}, None)


SEGMENTS = ("append_to_read", "read_to_emit", "emit_to_commit", "commit_to_seen")


def breakdown(
    observed: Observations, progress: list[dict[str, Any]], commits: list[tuple[int, int, Any]]
) -> dict[str, Any]:
    """p50/p99 of each segment of the sampled clicks' latency (see the module docstring).

    progress: the clicks query's progress events; commits: (batch_id, rows, committed_at) of its sink.
    """
    starts = {e["batchId"]: _epoch_s(e["timestamp"]) for e in progress}
    read_to = sorted((e["batchId"], _click_end_offsets(e)) for e in progress)
    committed = sorted((at.timestamp(), batch_id) for batch_id, _, at in commits)
    segments: dict[str, list[float]] = {name: [] for name in SEGMENTS}
    later: Counter[int] = Counter()  # batches between the one that read a click and the one that emitted it
    reads: set[int] = set()
    with observed.lock:
        samples = [(k, sent, observed.seen[k]) for k, sent in observed.sent.items() if k in observed.seen]
    for key, sent, seen in samples:
        _, _, partition, offset = key.split(":")
        read = next((b for b, ends in read_to if ends.get(partition, -1) > int(offset)), None)
        emit = [(at, b) for at, b in committed if at <= seen]
        if read is None or not emit or read not in starts or emit[-1][1] not in starts:
            continue
        commit_at, emit_batch = emit[-1]
        points = (sent, starts[read], starts[emit_batch], commit_at, seen)
        for name, a, b in zip(SEGMENTS, points, points[1:], strict=False):
            segments[name].append(b - a)
        later[emit_batch - read] += 1
        reads.add(read)
    return {
        "samples": len(segments[SEGMENTS[0]]),
        **{name: {f"p{q}_s": percentile(v, q) for q in (50, 99)} for name, v in segments.items()},
        "emitted_batches_later": {str(n): later[n] for n in sorted(later)},
        "batch_s": batch_seconds(progress, reads),
    }


def batch_seconds(progress: list[dict[str, Any]], batches: set[int]) -> dict[str, float | None]:
    """p50/p99 of the triggerExecution of these batches (those that read the window's sampled clicks):
    how long a batch takes at the window's load."""
    took = [e["durationMs"]["triggerExecution"] / 1000 for e in progress if e["batchId"] in batches]
    return {f"p{q}_s": percentile(took, q) for q in (50, 99)}


def _epoch_s(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _click_end_offsets(event: dict[str, Any]) -> dict[str, int]:
    for source in event["sources"]:
        ends = (source.get("endOffset") or {}) if isinstance(source.get("endOffset"), dict) else {}
        if names.CLICKS_TOPIC in ends:
            return {p: int(o) for p, o in ends[names.CLICKS_TOPIC].items()}
    return {}
