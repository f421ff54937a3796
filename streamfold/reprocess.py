"""`streamfold reprocess`, `versions`, `drop-version` and `run --version` (docs/reprocess.md).

reprocess: checks the name, the file and the start against what the events' source retains (the Kafka
topic, or the Kinesis stream), registers the version with its source (db/versions.py: the registry refuses
a second one of a name), sets up its outputs as `streamfold setup` does for a file (its tables, history,
topics; the connector and publication carry the file's columns), and starts its job as a process of its own
(`streamfold run --version NAME`, its log and pid under $STREAMFOLD_HOME/versions/NAME/). The job has its
own checkpoint (checkpoints/<pipeline>__<version>-<source>), reads the events from the chosen start and the
CDC topic from its beginning, and keeps up with the live input after catching up.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from common import config, kinesis, plan
from common import pipeline_file as pf
from common import versions as v
from connectors.setup import pipeline_topics, run_setup
from db import pipeline_schema, schema
from db import versions as registry
from pipeline import job
from pipeline.join_config import JoinConfig
from pipeline.status_files import now_ms
from streamfold import status

STOP_WAIT_S = 60.0
SWAP_ATTEMPTS = 5


def state_dir(home: Path, name: str) -> Path:
    """A version's job: its lock, pid file, log and status file."""
    return home / "versions" / name


def _pid_file(home: Path, name: str) -> Path:
    return state_dir(home, name) / "job.pid"


# --- Kafka ------------------------------------------------------------------------------------------------


def retained(bootstrap: str, topic: str) -> list[v.Retained]:
    """Per partition of `topic`: its low offset and the timestamp of the record there."""
    client = status.consumer(bootstrap)
    try:
        partitions = client.list_topics(topic, timeout=status.TIMEOUT_S).topics[topic].partitions
        found = []
        for partition in sorted(partitions):
            low, high = client.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=status.TIMEOUT_S
            )
            found.append(v.Retained(partition, low, _timestamp_at(client, topic, partition, low, high)))
        return found
    finally:
        client.close()


def _timestamp_at(client: Any, topic: str, partition: int, offset: int, end: int) -> int | None:
    if offset >= end:
        return None
    client.assign([TopicPartition(topic, partition, offset)])
    deadline = time.monotonic() + status.TIMEOUT_S * 2
    while time.monotonic() < deadline:
        message = client.poll(1.0)
        if message is not None and message.error() is None:
            return int(message.timestamp()[1])
    return None


def lag(settings: config.Settings, pipeline: pf.Pipeline, source: str = "kafka") -> v.Lag:
    """The version's job's position on every input partition it reads, from its checkpoint: the Kafka
    partitions (the events' for a Kafka source, the CDC and heartbeat topics') and the Kinesis shards."""
    query = v.query_name(pipeline, source)
    committed = status.committed_offsets(settings.home / "checkpoints").get(query)
    if committed is None or committed.batch_id is None:
        return v.Lag(())
    rows = status.kafka_lag(settings.kafka_bootstrap, {query: committed})
    partitions = [v.PartitionLag.kafka(r["topic"], r["partition"], r["processed"], r["end"]) for r in rows]
    if source == "kinesis":
        stream = settings.clicks_stream
        shards = status.kinesis_lag(stream, {query: committed})
        partitions += [
            v.PartitionLag.kinesis(stream, r["shard"], r["processed"], r["records_behind"]) for r in shards
        ]
    return v.Lag(tuple(partitions))


def default_source(pipeline: pf.Pipeline) -> str:
    """Where a version's events come from unless `--source` says: Kafka when the file names a topic."""
    return "kafka" if pipeline.events.kafka_topic else "kinesis"


def live_source(settings: config.Settings, pipeline: pf.Pipeline) -> str:
    """The source of the live job: the last one started in this home, else the file's default."""
    started = status.job(settings.home)
    return str(started["source"]) if started else default_source(pipeline)


def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AdminClient(config.kafka_client_settings(bootstrap))
    existing = set(admin.list_topics(timeout=30).topics)
    doomed = [t for t in topics if t in existing]
    for future in (admin.delete_topics(doomed, operation_timeout=30) if doomed else {}).values():
        with contextlib.suppress(KafkaException):  # deleted meanwhile
            future.result()


def output_topics(pipeline: pf.Pipeline) -> list[str]:
    """The topics a version writes: setup's pipeline topics but the events, an input it shares."""
    return [name for name, _ in pipeline_topics(pipeline) if name != pipeline.events.kafka_topic]


# --- commands ---------------------------------------------------------------------------------------------


def _connect(settings: config.Settings) -> psycopg.Connection:
    return psycopg.connect(settings.pg_dsn, autocommit=True)


def _live(settings: config.Settings, name: str) -> pf.Pipeline:
    """The file `streamfold setup` last applied for the pipeline `name`: the live version's."""
    with schema.engine(settings.pg_dsn).connect() as sa_conn:
        live = pipeline_schema.applied(sa_conn, name)
    if live is None:
        raise v.VersionError(
            f"pipeline {name!r} is not set up in this database: run `streamfold setup` first"
        )
    return live


# --- Kinesis ----------------------------------------------------------------------------------------------


def stream_earliest_ms(stream: str) -> int | None:
    """The earliest start the stream still holds (common/versions.py stream_earliest_ms); None: any."""
    client = kinesis.client(status.KINESIS_CONFIG)
    try:
        summary = client.describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]
    except client.exceptions.ResourceNotFoundException:
        raise v.VersionError(
            f"Kinesis stream {stream} does not exist: run `streamfold setup` first"
        ) from None
    created_ms = int(summary["StreamCreationTimestamp"].timestamp() * 1000)
    return v.stream_earliest_ms(created_ms, summary["RetentionPeriodHours"], now_ms())


def check_inputs(settings: config.Settings, pipeline: pf.Pipeline, from_ms: int | None, source: str) -> None:
    """The events' topic or stream still holds the start; the CDC topic still holds every change (the fold
    needs the whole profile history: `setup` creates it with unlimited retention)."""
    if source == "kafka":
        if pipeline.events.kafka_topic is None:
            raise v.VersionError(
                "reprocess --source kafka reads events.kafka_topic: the pipeline file names none"
            )
        partitions = retained(settings.kafka_bootstrap, settings.clicks_topic)
        v.check_start(from_ms, v.earliest_start_ms(partitions), settings.clicks_topic)
    elif source == "kinesis":
        if pipeline.events.kinesis_stream is None:
            raise v.VersionError(
                "reprocess --source kinesis reads events.kinesis_stream: the pipeline file names none"
            )
        if from_ms is not None and from_ms > now_ms():
            raise v.VersionError(
                f"--from {v.pf_time(from_ms)} is in the future: Kinesis starts at a past time"
            )
        v.check_start(from_ms, stream_earliest_ms(settings.clicks_stream), settings.clicks_stream)
    else:
        raise v.VersionError(f"--source is kafka or kinesis, not {source!r}")
    cdc_topic = plan.of(pipeline).cdc_topic
    lost = [p for p in retained(settings.kafka_bootstrap, cdc_topic) if p.low > 0]
    if lost:
        raise v.VersionError(
            f"{cdc_topic} no longer holds every profile change (partition {lost[0].partition} "
            f"starts at offset {lost[0].low}): a version cannot rebuild the profile history"
        )


def reprocess(
    settings: config.Settings,
    name: str,
    from_text: str,
    conf: dict[str, str],
    echo: Callable[[str], None] = print,
    source: str | None = None,
) -> Path:
    """Sets the version up and starts its job; returns the job's log file. settings.pipeline: the file to
    reprocess with (a changed one, or the live one to rescale); source: the events' (default_source)."""
    v.check_name(name)
    job.check_conf(conf)
    new = settings.pipeline
    versioned = v.versioned(new, name)
    from_ms = v.parse_from(from_text)
    pipeline_schema.check_change(_live(settings, new.name), new)
    with _connect(settings) as conn:
        if registry.get(conn, new.name, name) is not None:
            raise v.VersionError(
                f"version {name!r} of {new.name} exists already: drop it first, or pick a new name"
            )
        source = source or default_source(new)
        check_inputs(settings, new, from_ms, source)
        version = registry.Version(name, new.name, versioned, source, from_ms, conf)
        if not registry.add(conn, version):
            raise v.VersionError(f"version {name!r} of {new.name} exists already (another reprocess made it)")
    run_setup(dataclasses.replace(settings, pipeline=versioned), echo=echo)
    return start_job(settings, name)


def start_job(settings: config.Settings, name: str) -> Path:
    """`streamfold run --version NAME` in its own session (it outlives this command, as `stack` services
    do), with this command's environment: the same endpoints and pipeline file."""
    folder = state_dir(settings.home, name)
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "job.log"
    with log.open("ab") as out:
        subprocess.Popen(
            [sys.executable, "-m", "streamfold", "run", "--version", name],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return log


def run_version(settings: config.Settings, name: str, echo: Callable[[str], None] = print) -> None:
    """The version's job, in the foreground: what `reprocess` starts, and how to restart it."""
    with _connect(settings) as conn:
        version = registry.get(conn, settings.pipeline.name, name)
    v.check_known(name, version is not None and name != v.LIVE, settings.pipeline.name)
    assert version is not None
    folder = state_dir(settings.home, name)
    folder.mkdir(parents=True, exist_ok=True)
    _pid_file(settings.home, name).write_text(f"{os.getpid()}\n")
    job.run(
        dataclasses.replace(settings, pipeline=version.pipeline),
        version.source,
        once=False,
        conf=version.conf,
        echo=echo,
        start_ms=version.from_ms,
        state_dir=folder,
        mode=pf.MICRO_BATCH,  # a version rebuilds from --from with the batch ledger's sink
    )


def job_pid(home: Path, name: str) -> int | None:
    """The version's job's pid while it runs."""
    try:
        pid = int(_pid_file(home, name).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return pid if status.alive(pid) and f"--version {name}" in _cmdline(pid) else None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def stop_job(home: Path, name: str) -> bool:
    """SIGTERM (the job stops between writes), SIGKILL if it outlives STOP_WAIT_S. False: none ran."""
    pid = job_pid(home, name)
    if pid is None:
        return False
    _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while job_pid(home, name) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    if job_pid(home, name) is not None:
        _signal(pid, signal.SIGKILL)
    return True


def _signal(pid: int, signum: int) -> None:
    """SIGTERM to the job alone: it stops its query between writes, then Spark's JVM (which, in the same
    process group, would stop its SparkContext under the query at once). SIGKILL to the group it leads
    (started by `reprocess`), JVM included."""
    with contextlib.suppress(ProcessLookupError):
        if signum == signal.SIGKILL and os.getpgid(pid) == pid:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)


def drop_version(settings: config.Settings, name: str, echo: Callable[[str], None] = print) -> None:
    with _connect(settings) as conn:
        v.check_drop(name, registry.current(conn, settings.pipeline.name, v.LIVE).version)
        version = registry.get(conn, settings.pipeline.name, name)
        v.check_known(name, version is not None, settings.pipeline.name)
        assert version is not None
        if stop_job(settings.home, name):
            echo(f"stopped the job of {name}")
        tables = registry.drop_outputs(conn, version)
    topics = output_topics(version.pipeline)
    delete_topics(settings.kafka_bootstrap, topics)
    shutil.rmtree(
        settings.home / "checkpoints" / v.query_name(version.pipeline, version.source), ignore_errors=True
    )
    shutil.rmtree(state_dir(settings.home, name), ignore_errors=True)
    echo(f"dropped {name}: tables {', '.join(tables)}; topics {', '.join(topics)}; its checkpoint")


@dataclass(frozen=True)
class Row:
    """A line of `streamfold versions`."""

    name: str
    current: bool
    created: str
    start: str
    running: bool
    lag: v.Lag
    conf: dict[str, str]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "current": self.current,
            "created": self.created,
            "from": self.start,
            "running": self.running,
            "conf": self.conf,
            "behind": self.lag.behind,
            "caught_up": self.lag.caught_up(),
            "lag": self.lag.describe(),
        }


def rows(settings: config.Settings) -> list[Row]:
    """The live version, then each reprocessed one with its lag."""
    with _connect(settings) as conn:
        found = registry.all_of(conn, settings.pipeline.name)
    started = status.job(settings.home)
    with _connect(settings) as conn:
        current = registry.current(conn, settings.pipeline.name, v.LIVE).version
    live_pipeline = _live(settings, settings.pipeline.name)
    live = Row(
        v.LIVE,
        current == v.LIVE,
        "-",
        "earliest",
        bool(started and started["running"]),
        lag(settings, live_pipeline, live_source(settings, live_pipeline)),
        {},
    )
    return [
        live,
        *(
            Row(
                version.name,
                current == version.name,
                version.created_at.isoformat(timespec="seconds") if version.created_at else "-",
                "earliest" if version.from_ms is None else v.pf_time(version.from_ms),
                job_pid(settings.home, version.name) is not None,
                lag(settings, version.pipeline, version.source),
                version.conf,
            )
            for version in found
        ),
    ]


def version_figures(settings: config.Settings) -> list[dict[str, Any]]:
    """`streamfold status`'s versions section: each reprocessed version, its job and its lag."""
    return [row.as_json() for row in rows(settings)[1:]]


# --- swap -------------------------------------------------------------------------------------------------


def swap(
    settings: config.Settings,
    name: str,
    echo: Callable[[str], None] = print,
    threshold: int = v.CAUGHT_UP_RECORDS,
) -> None:
    """Makes `name` the version users' names read (db/versions.py swap), once it has caught up. The first
    swap moves the live tables to <table>__live, so it needs the live job stopped (it writes by name)."""
    base = settings.pipeline.name
    live = _live(settings, base)
    with _connect(settings) as conn:
        before = registry.current(conn, base, v.LIVE)
        found = None if name == v.LIVE else registry.get(conn, base, name)
        v.check_known(name, found is not None, base)
        target = v.physical(live, name, found.pipeline if found else None)
        behind = lag(settings, target, found.source if found else live_source(settings, live))
        v.check_swap(name, before.version, behind, threshold)
        if not before.live_moved:
            started = status.job(settings.home)
            if started and started["running"]:
                raise v.VersionError(
                    "the first swap moves the live tables to <table>__live, and the live job writes them "
                    "by name: stop `streamfold run` first, and start it again after the swap"
                )
        old = None if before.version == v.LIVE else registry.get(conn, base, before.version)
        previous = v.physical(live, before.version, old.pipeline if old else None)
        offsets = {f"{p.topic}:{p.partition}": p.processed for p in behind.partitions}
        switch = registry.Switch.of(
            live, before, name, (previous, target), offsets, consumers_from(settings, previous, old)
        )
        for attempt in range(SWAP_ATTEMPTS):  # a reader crossing the swap may deadlock with it
            try:
                registry.swap(conn, base, before, switch, config.READER_ROLE)
                break
            except psycopg.errors.DeadlockDetected:
                if attempt == SWAP_ATTEMPTS - 1:
                    raise v.VersionError(
                        "the swap deadlocked with readers every time: nothing changed"
                    ) from None
    echo(f"swapped: {', '.join(switch.views)} now read {name} (was {before.version})")


def consumers_from(
    settings: config.Settings, old: pf.Pipeline, registered: registry.Version | None
) -> datetime | None:
    """Where consumers of the new version's topics start (common/versions.py consumers_from_ms), from the
    old version's position on its inputs and its join.max_wait (its file's, and a version's --conf)."""
    behind = lag(settings, old, registered.source if registered else live_source(settings, old))
    conf = registered.conf if registered else {}
    max_wait = JoinConfig.from_conf({**job.file_join_conf(old), **conf}).max_wait_ms
    pending = [p for p in behind.partitions if p.behind > 0]
    unread = {
        **_kafka_unread(settings, [p for p in pending if p.source == "kafka"]),
        **_kinesis_unread([p for p in pending if p.source == "kinesis"]),
    }
    found = v.consumers_from_ms(behind, unread, now_ms(), max_wait)
    return None if found is None else datetime.fromtimestamp(found / 1000, UTC)


Unread = dict[tuple[str, int | str], int | None]


def _kafka_unread(settings: config.Settings, partitions: list[v.PartitionLag]) -> Unread:
    """The Kafka timestamp of the next record to process on each partition."""
    client = status.consumer(settings.kafka_bootstrap)
    try:
        found: Unread = {}
        for p in partitions:
            offset = int(p.processed or 0)  # a Kafka position is the next offset
            found[(p.topic, p.partition)] = _timestamp_at(
                client, p.topic, int(p.partition), offset, offset + p.behind
            )
        return found
    finally:
        client.close()


def _kinesis_unread(shards: list[v.PartitionLag]) -> Unread:
    """The ApproximateArrivalTimestamp of the next record to process on each shard. A shard not read yet
    gives its first retained record's (its committed start time is not in the lag): earlier, never later,
    than the next one to process, so consumers start no later than they must."""
    from pipeline.kinesis_source import ShardState

    if not shards:
        return {}
    client = kinesis.client(status.KINESIS_CONFIG)
    return {
        (p.topic, p.partition): status.next_arrival_ms(
            client,
            p.topic,
            str(p.partition),
            ShardState(after=None if p.processed is None else str(p.processed)),
        )
        for p in shards
    }


def current_topics(settings: config.Settings) -> dict[str, Any]:
    """`streamfold topics`: the current version, when it became current and where its topics' consumers
    start (the newest swap's record; none before the first swap), and its output topics by the live
    pipeline's names (`user_clicks` -> `user_clicks.v2`; the live version's are its own)."""
    base = settings.pipeline.name
    live = _live(settings, base)
    with _connect(settings) as conn:
        now = registry.current(conn, base, v.LIVE)
        found = None if now.version == v.LIVE else registry.get(conn, base, now.version)
    suffix = "" if found is None else f".{now.version}"
    topics = output_topics(live if found is None else found.pipeline)
    return {
        "pipeline": base,
        "version": now.version,
        "swapped_at": now.swapped_at.isoformat() if now.swapped_at else None,
        "consumers_from": now.consumers_from.isoformat() if now.consumers_from else None,
        "topics": {topic.removesuffix(suffix): topic for topic in topics},
    }
