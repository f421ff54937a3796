"""Kafka Streams, the seed's system (jvm-kstreams/): what a user would write instead of adopting streamfold.

The application (io.streamfold.kstreams.ClicksApp, exactly-once v2, Kafka to Kafka) joins the clicks with
the users table folded from the same Debezium topic, writes each enriched click to its enriched topic and
a count per region (region -> a long) to its counts topic (App.topics, one pair per application). Its
variant is a GlobalKTable, or a KTable with max.task.idle.ms, both correct on preloaded users
(ClicksTopology); or lean, the GlobalKTable written for speed (LeanTopology: typed records, the users'
carried columns in a compact binary store, only the region and a 1 through the count's repartition). The
bench runs lean and global and compares streamfold with the faster from start.

throughput: a fresh application (its own id and state directory) reads the preloaded clicks from the
            start. end = when a read_committed consumer of the counts topic sees the counts sum to the clicks
            (every output visible); its first output = when that consumer sees the first count. From
            start: clicks / (end - JVM launch). Steady: clicks / (end - the first click the application
            read; its own stdout line). The enriched records are counted after the end, read_committed:
            they must equal the clicks. UNKNOWN: the count of region UNKNOWN
            (every user of the clicks exists, so each is a click joined before its user was read).
latency:    a fresh application whose group starts at the clicks topic's end; once it runs, the same offered
            load as streamfold's windows (bench.latency). A sampled click is seen when a read_committed
            consumer of the enriched topic receives its record (its event_id,
            kafka:clicks:<partition>:<offset>);
            a profile change when a click of that user carries that version's commit time (user_valid_from);
            the window ends when every sampled click was seen (OutputWatcher.done).
memory:     peak RSS of the JVM (bench.procmem). CPU: the JVM's core-seconds from launch to the end.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench import latency, measured
from bench.cpu import CpuClock
from bench.latency import Observations
from bench.procmem import Sampler, Tree
from bench.stack import Bench, topic_offsets
from common import config, names
from stack.home import write_private

ROOT = Path(__file__).resolve().parents[1]
JARS = ROOT / "lib" / "kstreams"
KAFKA_JARS = ROOT / "lib" / "kafka"
MAIN_CLASS = "io.streamfold.kstreams.ClicksApp"
VARIANTS = ("lean", "global", "table")
STOP_TIMEOUT_S = 60

EVENT_ID = re.compile(rb'"event_id":"([^"]+)"')
USERID = re.compile(rb'"userid":"([^"]+)"')
VALID_FROM = re.compile(rb'"user_valid_from":(\d+)')
RECENT_S = 30.0


def transactions_v1(bench: Bench) -> None:
    """Finalize the broker's transaction.version at 1 (the exactly-once protocol of Kafka 3.x).

    With transaction.version 2, Kafka 4.1's broker rejects a transactional batch whose producer has no
    state on the partition unless its sequence is 0 (KAFKA-18202), and Kafka Streams' producers then
    retry OUT_OF_ORDER_SEQUENCE_NUMBER without end (KAFKA-19880): at 20,000 clicks/s the application
    stalled for the whole window. exactly_once_v2 does not need version 2. streamfold writes Kafka
    without transactions, so the setting changes nothing for it.
    """
    properties = bench.home / "features-client.properties"
    settings = config.java_kafka_settings(config.kafka_login())
    write_private(properties, "".join(f"{key}={value}\n" for key, value in settings.items()))
    command = [
        "java", "-cp", f"{KAFKA_JARS}/*", "org.apache.kafka.tools.FeatureCommand",
        "--bootstrap-server", bench.bootstrap, "--command-config", str(properties),
        "downgrade", "--feature", "transaction.version=1",
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"transaction.version=1 refused:\n{result.stdout}{result.stderr}")


def topics(name: str) -> tuple[str, str]:
    """The enriched and counts topics of the application run `name`: its own, so that a run never reads
    an earlier run's counts."""
    return f"kstreams_{name}_enriched_clicks", f"kstreams_{name}_clicks_per_region"


def create_topics(bootstrap: str, name: str) -> None:
    """The application's output topics (the broker creates none by itself), partitioned as the clicks."""
    partitions = len(topic_offsets(bootstrap))
    admin = AdminClient(config.kafka_client_settings(bootstrap))
    enriched, counts = topics(name)
    wanted = [
        NewTopic(enriched, partitions, 1),
        NewTopic(counts, partitions, 1, config={"cleanup.policy": "compact"}),
    ]
    for future in admin.create_topics(wanted).values():
        try:
            future.result()
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    wait_for_leaders(bootstrap, [t.topic for t in wanted])


def wait_for_leaders(bootstrap: str, topics: list[str], timeout_s: float = 60) -> None:
    """Until every partition of a new topic has a leader (its offsets can be read)."""
    deadline = time.monotonic() + timeout_s
    for topic in topics:
        while True:
            try:
                topic_offsets(bootstrap, topic)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def start_at_end(bootstrap: str, group: str) -> None:
    """Commit the clicks topic's end offsets for `group`: a new application of that id starts there."""
    consumer = Consumer(
        {**config.kafka_client_settings(bootstrap), "group.id": group, "enable.auto.commit": False}
    )
    try:
        ends = topic_offsets(bootstrap).items()
        consumer.commit(
            offsets=[TopicPartition(names.CLICKS_TOPIC, p, end) for p, (_, end) in ends], asynchronous=False
        )
    finally:
        consumer.close()


def app_id(name: str) -> str:
    return f"streamfold-bench-kstreams-{name}"


class App:
    """One ClicksApp process with its own application id and state directory; its memory and CPU."""

    def __init__(self, bench: Bench, name: str, variant: str) -> None:
        self.bench = bench
        self.name = name
        self.app_id = app_id(name)
        self.variant = variant
        self.enriched_topic, self.counts_topic = topics(name)
        self.home = bench.home / "runs" / f"kstreams-{name}"
        self.home.mkdir(parents=True, exist_ok=True)
        self.events_file = self.home / "events.jsonl"
        self.log = self.home / "kstreams.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.sampler: Sampler | None = None
        self.clock: CpuClock | None = None
        self.launched = 0.0

    def command(self) -> list[str]:
        conf = {
            "bootstrap": self.bench.bootstrap,
            "variant": self.variant,
            "application.id": self.app_id,
            "state.dir": str(self.home / "state"),
            "client.properties": str(self.client_properties()),
            "clicks": names.CLICKS_TOPIC,
            "cdc": names.CDC_USERS_TOPIC,
            "enriched": self.enriched_topic,
            "counts": self.counts_topic,
        }
        return ["java", "-cp", f"{JARS}/*", MAIN_CLASS, *(f"{k}={v}" for k, v in conf.items())]

    def client_properties(self) -> Path:
        """The Kafka clients' login, in a file only its owner reads (not on the command line)."""
        path = self.home / "client.properties"
        settings = config.java_kafka_settings(config.kafka_login())
        write_private(path, "".join(f"{key}={value}\n" for key, value in settings.items()))
        return path

    def __enter__(self) -> App:
        create_topics(self.bench.bootstrap, self.name)
        with self.events_file.open("ab") as out, self.log.open("ab") as err:
            self.proc = subprocess.Popen(
                self.command(), stdout=out, stderr=err, cwd=ROOT, start_new_session=True
            )
        self.launched = time.time()
        self.sampler = Sampler([Tree(self.proc.pid, root_role="jvm")]).__enter__()
        self.clock = CpuClock({"kstreams": [self.proc.pid]}).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for probe in (self.sampler, self.clock):
            if probe:
                probe.__exit__()
        measured.stop(self.proc, signal.SIGTERM, STOP_TIMEOUT_S)  # its shutdown hook closes Kafka Streams

    def check_alive(self) -> None:
        measured.check_alive(self.proc, self.log, "Kafka Streams")

    def events(self) -> dict[str, float]:
        """event -> epoch s, from the application's stdout ({"event": ..., "at_ms": ...} lines)."""
        lines = self.events_file.read_text().splitlines() if self.events_file.exists() else []
        return {e["event"]: e["at_ms"] / 1000 for e in (json.loads(line) for line in lines if line.strip())}

    def wait_event(self, event: str, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while event not in self.events():
            self.check_alive()
            if "error" in self.events() or time.monotonic() > deadline:
                raise RuntimeError(f"Kafka Streams did not report {event!r} in {timeout_s:.0f}s: {self.log}")
            time.sleep(0.2)
        return self.events()[event]


def read_committed(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            **config.kafka_client_settings(bootstrap),
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )


def wait_counted(
    app: App, clicks: int, timeout_s: float, on_progress: Callable[[int], None]
) -> tuple[float, float, dict[str, int]]:
    """Read the app's counts topic until the latest count per region sums to `clicks`: (when the first
    count was seen, when the last, the counts)."""
    consumer = read_committed(app.bench.bootstrap, "bench-kstreams-counts")
    partitions = len(topic_offsets(app.bench.bootstrap, app.counts_topic))
    consumer.assign([TopicPartition(app.counts_topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    counts: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    last_report = 0.0
    first_seen: float | None = None
    try:
        while sum(counts.values()) < clicks:
            app.check_alive()
            if time.monotonic() > deadline:
                counted = sum(counts.values())
                raise TimeoutError(f"Kafka Streams counted {counted} of {clicks} in {timeout_s:.0f}s")
            for msg in consumer.consume(1000, timeout=0.1):
                key, value = msg.key(), msg.value()
                if msg.error() is None and key is not None and value is not None:
                    counts[key.decode()] = int.from_bytes(value, "big", signed=True)
                    first_seen = first_seen or time.time()
            if time.monotonic() - last_report >= 1:
                last_report = time.monotonic()
                on_progress(sum(counts.values()))
        end = time.time()
        return first_seen or end, end, counts
    finally:
        consumer.close()


def count_enriched(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records, records with region UNKNOWN) in an enriched topic, read_committed to its end."""
    consumer = read_committed(bootstrap, "bench-kstreams-enriched")
    ends = {p: end for p, (_, end) in topic_offsets(bootstrap, topic).items()}
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends]
    consumer.assign(parts)
    records = unknown = 0
    unknown_bytes = f'"user_regionid":"{names.UNKNOWN_REGION}"'.encode()
    try:
        while any(tp.offset < ends[tp.partition] for tp in consumer.position(parts)):
            for msg in consumer.consume(10_000, timeout=1.0):
                if msg.error() is None:
                    records += 1
                    unknown += unknown_bytes in (msg.value() or b"")
        return records, unknown
    finally:
        consumer.close()


def throughput(bench: Bench, clicks: int, variant: str, on_progress: Callable[[int], None]) -> dict[str, Any]:
    """A fresh application over the preloaded clicks, to the last count; its figures (module doc)."""
    transactions_v1(bench)
    with App(bench, f"main-{variant}", variant) as app:
        first_output, end, counts = wait_counted(app, clicks, max(1800, clicks / 100), on_progress)
        first = app.wait_event("first_click", 60)
        assert app.clock is not None
        app.clock.sample()
        cpu = app.clock.between(app.launched, end)
    enriched, unknown = count_enriched(bench.bootstrap, app.enriched_topic)
    core_s = cpu["core_s"]["kstreams"]  # type: ignore[index]
    return {
        "variant": variant,
        "clicks": clicks,
        "seconds": round(end - first, 2),
        "clicks_per_s": round(clicks / (end - first)),
        "seconds_from_start": round(end - app.launched, 2),
        "clicks_per_s_from_start": round(clicks / (end - app.launched)),
        "launch_to_first_read_s": round(first - app.launched, 1),
        "launch_to_first_output_s": round(first_output - app.launched, 1),
        "counted_clicks": sum(counts.values()),
        "enriched_records": enriched,
        "unknown_region_clicks": unknown,
        "unknown_region_count": counts.get(names.UNKNOWN_REGION, 0),
        "cpu_core_s": core_s,
        "cpu_us_per_click": round(core_s / clicks * 1e6, 1),
        "memory": app.sampler.peaks.as_dict() if app.sampler else {},
    }


def observe(
    values: list[bytes],
    clicks: Observations,
    profiles: Observations,
    at: float,
    recent: OrderedDict[str, float],
) -> None:
    """Marks the sampled clicks among these enriched records, and the profile changes they show, seen `at`.

    `recent`: event_id -> when seen, of every record of the last RECENT_S. A click's sample is registered
    by its delivery report, which the generator serves every POLL_EVERY clicks: its record can pass the
    consumer first (a row in Postgres stays for the next poll; a record passes once)."""
    for value in values:
        if m := EVENT_ID.search(value):
            recent[m.group(1).decode()] = at
    # Oldest first. An OrderedDict, not a dict: a dict emptied from its front leaves a run of dead slots
    # that each next(iter()) walks, and at 20,000 records/s the watcher fell minutes behind.
    while recent and next(iter(recent.values())) < at - RECENT_S:
        recent.popitem(last=False)
    for key in clicks.outstanding():
        if key in recent:
            clicks.mark({key: recent[key]})
    changes = profile_changes(profiles)
    for value in values if changes else []:
        user, valid = USERID.search(value), VALID_FROM.search(value)
        if not (user and valid):
            continue
        valid_ms = int(valid.group(1))
        pending = changes.get(user.group(1).decode(), [])
        for change in [c for c in pending if valid_ms >= c[1]]:
            profiles.resolve(change[0], valid_ms / 1000, at)
            pending.remove(change)


def profile_changes(profiles: Observations) -> dict[str, list[tuple[str, int]]]:
    """userid -> (key, the change's earliest commit time in ms) of the changes not seen yet."""
    changes: dict[str, list[tuple[str, int]]] = {}
    for key in profiles.outstanding():
        userid, _, before = key.partition("@")
        # Debezium's ts_ms is whole milliseconds (as bench.latency.Poller reads it).
        changes.setdefault(userid, []).append((key, math.floor(float(before) * 1000)))
    return changes


class OutputWatcher(threading.Thread):
    """Marks sampled clicks (by event_id) and profile changes (userid@time: a click of that user joined
    with a version committed at or after that time) when their records reach a read_committed consumer
    of an enriched topic, from its end when made. bench.latency.Watcher.

    It starts at the end offsets read here, not at OFFSET_END: that is resolved at the consumer's first
    fetch, after its connection and authentication, and the records written meanwhile (the window's first
    outputs) would be skipped and their samples never seen."""

    def __init__(self, bootstrap: str, topic: str, clicks: Observations, profiles: Observations) -> None:
        super().__init__(name="kstreams-watcher", daemon=True)
        self.clicks, self.profiles = clicks, profiles
        self.consumer = read_committed(bootstrap, "bench-kstreams-latency")
        ends = topic_offsets(bootstrap, topic)
        self.consumer.assign([TopicPartition(topic, p, end) for p, (_, end) in ends.items()])
        self.stop_event = threading.Event()
        self.records = 0
        self.recent: OrderedDict[str, float] = OrderedDict()

    def run(self) -> None:
        while not self.stop_event.is_set():
            msgs = [m for m in self.consumer.consume(1000, timeout=0.05) if m.error() is None]
            # Also without records: a sample registered after its record passed is found in `recent`.
            self.observe([m.value() or b"" for m in msgs], time.time())

    def observe(self, values: list[bytes], at: float) -> None:
        self.records += len(values)
        observe(values, self.clicks, self.profiles, at, self.recent)

    def done(self) -> bool:
        """Every sampled click seen. Not every profile change: Kafka Streams does not wait for the table, so
        the click sent right after a change may take the version before, and the change is seen only at
        that user's next click, if one comes. Changes not seen by then are censored."""
        return not self.clicks.outstanding()

    def close(self) -> None:
        self.stop_event.set()
        self.join()
        self.consumer.close()


def latency_window(
    app: App, users: int, rate: float, seconds: float, echo: Callable[[str], None]
) -> latency.WindowResult:
    """bench.latency.run_window with an OutputWatcher: the running application's outputs, not Postgres."""
    bench = app.bench
    watchers: list[OutputWatcher] = []

    def watch(clicks: Observations, profiles: Observations) -> OutputWatcher:
        watchers.append(OutputWatcher(bench.bootstrap, app.enriched_topic, clicks, profiles))
        return watchers[-1]

    def records() -> int:
        return watchers[-1].records if watchers else 0

    return latency.run_window(
        bench.bootstrap, bench.admin_dsn, users, rate, seconds, records, echo, watch=watch
    )
