"""`streamfold run`: start the topology, report progress, and stop cleanly (or after one pass with --once)."""

from __future__ import annotations

import fcntl
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from rich.markup import escape

from common import pipeline_file as pf
from common import plan
from common.config import Settings
from common.versions import moved_live
from db import pipeline_schema, schema, versions
from pipeline import avro_outputs, events, preflight, sinks, status_files, topology
from pipeline import spark as spark_session
from pipeline.join_config import JoinConfig, parse_duration_ms
from pipeline.temporal_join import run_until_drained


class JobError(RuntimeError):
    """The job cannot run or its query failed; the message says why."""


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """One job per checkpoint: two writers on one checkpoint would corrupt it."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise JobError(f"another `streamfold run` holds {lock_file}; stop it first") from None
        yield


class JobLogFormatter(logging.Formatter):
    """The time and the message; a warning or an error names its level too, so it stands out among the
    batch lines (and can be searched for)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(message)s", "%H:%M:%S")

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        level = f"{record.levelname} " if record.levelno >= logging.WARNING else ""
        return f"{record.asctime} {level}{record.message}"


def _log_sink_batches() -> None:
    """The sinks say per batch what they wrote to Postgres, and when a replay found it already there; the
    sink says when CDC progress stalls (pipeline/cdc_stall.py)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JobLogFormatter())
    logger = logging.getLogger("pipeline")
    logger.setLevel(logging.INFO)
    if not logger.handlers:
        logger.addHandler(handler)


class StopRequest:
    """Set by SIGTERM or SIGINT. The main thread polls it between short waits instead of being interrupted
    inside a Py4J call (which leaves Py4J and Spark logging stack traces on the way out)."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum: int, frame: object) -> None:
        self.signal = signum

    def wait(self, spark: SparkSession, on_poll: Callable[[], None], poll_s: int = 1) -> None:
        """Until the query ends (its exception is raised) or a stop is requested; on_poll() every poll_s."""
        while self.signal is None:
            if spark.streams.awaitAnyTermination(poll_s):
                spark.streams.awaitAnyTermination()  # raises the query's exception, if any
                return
            on_poll()


class StallReporter:
    """Says when the query has spent a while in one phase of a micro-batch. Spark waits for an unreachable
    Kafka without a word (fetching offsets, or inside a batch's read), for minutes; a long first batch
    is silent too. One line per long phase tells the user what the job is doing."""

    def __init__(self, echo: Callable[[str], None], after_s: float = 20.0) -> None:
        self.echo = echo
        self.after_s = after_s
        self.phase: dict[str, tuple[str, float, bool]] = {}  # query id -> (message, since, reported)

    def check(self, queries: list[StreamingQuery]) -> None:
        """queries: spark.streams.active, the job's one query while it runs."""
        now = time.monotonic()
        for query in queries:
            status = query.status
            message = status["message"] if status["isTriggerActive"] else ""
            seen, since, reported = self.phase.get(query.id, ("", now, False))
            if message != seen:
                seen, since, reported = message, now, False
            if message and not reported and now - since >= self.after_s:
                self.echo(f"[yellow]{query.name}[/]: {escape(message)} for {now - since:.0f} s")
                reported = True
            self.phase[query.id] = (seen, since, reported)


# Lines that only say an error crossed Py4J or a Spark job boundary; the cause is further down.
WRAPPERS = (
    "An error occurred while calling",
    "An exception was raised by the Python Proxy",
    "Exception thrown in awaitResult",
    "Job aborted due to stage failure",
)


def root_cause(message: str) -> str:
    """The innermost error line of a (Python-in-JVM-in-Python) streaming failure, not its first line."""
    causes = re.findall(
        r"^\s*(?:Caused by: )?((?:[\w.]+\.)?\w*(?:Error|Exception|Violation)\w*: .+)$", message, re.MULTILINE
    )
    causes = [c for c in causes if not any(w in c for w in WRAPPERS)] or causes
    return causes[-1].strip() if causes else message.splitlines()[0]


# `--conf` keys besides spark.*: a typo must fail loudly rather than silently keep a default.
JOB_KEYS = (
    "join.mode",
    "join.max_wait",
    "join.version_retention",
    "trigger.interval",
    "trigger.batch_duration",
)
DEFAULT_TRIGGER = "500ms"
# Real-time mode's batch: how often offsets and state commit (rows move as they arrive), and how much a
# restart after a failure replays. Spark's own default: each batch's end stalls the stream for a second or
# two, and the events arriving meanwhile are the latency's tail (docs/decisions/realtime-mode.md).
DEFAULT_BATCH_DURATION = "5m"
# Spark refuses a shorter real-time batch (at the query's start, in a stack trace) unless this setting of
# its own is lowered.
MIN_BATCH_DURATION_CONF = "spark.sql.streaming.realTimeMode.minBatchDuration"
MIN_BATCH_DURATION_MS = 5_000


def check_conf(conf: dict[str, str]) -> None:
    unknown = sorted(k for k in conf if k not in JOB_KEYS and not k.startswith("spark."))
    if unknown:
        raise JobError(f"unknown --conf key(s) {', '.join(unknown)}; known: {', '.join(JOB_KEYS)}, spark.*")


def trigger_ms(conf: dict[str, str]) -> int:
    """How often the continuous job starts a micro-batch (a batch still running delays the next)."""
    try:
        return parse_duration_ms(conf.get("trigger.interval", DEFAULT_TRIGGER))
    except ValueError as exc:
        raise JobError(f"trigger.interval: {exc}") from None


def batch_duration_ms(conf: dict[str, str]) -> int:
    """Real-time mode's batch duration (trigger.batch_duration)."""
    try:
        duration = parse_duration_ms(conf.get("trigger.batch_duration", DEFAULT_BATCH_DURATION))
    except ValueError as exc:
        raise JobError(f"trigger.batch_duration: {exc}") from None
    if duration <= 0:
        raise JobError("trigger.batch_duration: must be > 0")
    if duration < MIN_BATCH_DURATION_MS and MIN_BATCH_DURATION_CONF not in conf:
        raise JobError(
            f"trigger.batch_duration: at least {MIN_BATCH_DURATION_MS // 1000}s in real-time mode "
            f"(Spark's {MIN_BATCH_DURATION_CONF} sets the minimum)"
        )
    return duration


def check_realtime(pipeline: pf.Pipeline, source: str, once: bool, conf: dict[str, str]) -> None:
    """What real-time mode cannot run, refused before any service is asked anything, one line each."""
    if source != "kafka":
        raise JobError(
            f"--mode realtime reads Kafka events only: the {source} source is a Python data source, which "
            "Spark's real-time mode cannot run; run it with --mode micro_batch"
        )
    if once:
        raise JobError(
            "--once runs micro-batches (a real-time batch has no planned end): drop --mode realtime"
        )
    if pipeline.outputs.format == "avro" and pipeline.aggregates:
        raise JobError(
            "--mode realtime publishes JSON aggregate topics only: with outputs.format avro and aggregates, "
            "run with --mode micro_batch"
        )
    batch_duration_ms(conf)


def check_jars() -> None:
    """The jars `make setup` builds, checked before any service is asked anything."""
    try:
        spark_session.jars()
    except spark_session.MissingJars as exc:
        raise JobError(str(exc)) from None


def check_applied(settings: Settings) -> None:
    """The job runs the file `streamfold setup` applied: its tables, topics and connector exist."""
    with schema.engine(settings.writer_dsn).connect() as conn:
        pipeline_schema.check_applied(conn, settings.pipeline)


def physical(settings: Settings) -> Settings:
    """The settings whose pipeline names the tables the job writes: once a `streamfold swap` has made the
    users' names views (db/versions.py), the live pipeline's tables are <table>__live."""
    with psycopg.connect(settings.pg_dsn, connect_timeout=10) as conn:
        moved = versions.live_moved(conn, settings.pipeline.name)
    return replace(settings, pipeline=moved_live(settings.pipeline)) if moved else settings


def file_join_conf(pipeline: pf.Pipeline) -> dict[str, str]:
    """The pipeline file's join settings as --conf keys (a --conf given to `run` overrides them)."""
    join = pipeline.join
    return {
        "join.mode": join.mode,
        "join.max_wait": f"{join.max_wait}ms",
        "join.version_retention": f"{join.version_retention}ms",
    }


def run(
    settings: Settings,
    source: str,
    once: bool,
    conf: dict[str, str],
    echo: Callable[[str], None] = print,
    start_ms: int | None = None,
    state_dir: Path | None = None,
    mode: str | None = None,
) -> None:
    """start_ms: where a new checkpoint starts on the events (default: the earliest retained).
    state_dir: the job's lock and job status file, the home unless a version's job runs beside the live
    one (streamfold/reprocess.py); every job's checkpoint is under the home's checkpoints/, by query name.
    mode: micro_batch or realtime (`run --mode`); None: the pipeline file's run.mode."""
    checkpoints = settings.home / "checkpoints"
    state = state_dir or settings.home
    check_conf(conf)
    realtime = (mode or settings.pipeline.run.mode) == pf.REALTIME
    if realtime:
        check_realtime(settings.pipeline, source, once, conf)
    check_jars()
    preflight.check_plan(settings.pipeline)
    registry = events.registry_for(settings.pipeline)  # before any service: a missing setting says so first
    avro_outputs.require_registry(settings.pipeline)
    check_applied(settings)
    settings = physical(settings)
    try:
        join = JoinConfig.from_conf({**file_join_conf(settings.pipeline), **conf})
    except ValueError as exc:
        raise JobError(str(exc)) from None
    interval_ms = trigger_ms(conf)
    _log_sink_batches()
    stop = StopRequest()
    gate = BatchGate()
    with exclusive(state / "run.lock"):
        # The JVM listener (pipeline/spark.py) prints a line per batch and writes status/<query>.json.
        status = {spark_session.STATUS_DIR_CONF: str(status_files.status_dir(settings.home))}
        session_conf = {**conf, **status}
        if realtime:
            session_conf = spark_session.realtime_conf(session_conf, len(plan.of(settings.pipeline).joins))
        spark = spark_session.session(f"streamfold-{source}", session_conf)
        if not once:
            # `docker compose stop` and process managers send SIGTERM, people Ctrl-C: stop the query
            # cleanly. After the session: SparkContext installs its own SIGINT handler, which calls the JVM
            # from inside the signal handler; when the main thread is itself in a Py4J call (it mostly
            # is, waiting on the query), that would break the Py4J connection and end Ctrl-C in a traceback.
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
        status_files.write_job(state, source, pf.REALTIME if realtime else pf.MICRO_BATCH, spark)
        if realtime:
            name, start = realtime_query(spark, settings, join, registry, checkpoints, conf)
        else:
            clicks = topology.flow(spark, settings, source, join, registry, once, start_ms)
            name, start = clicks.name, partial(topology.start, gate.guarded(clicks), checkpoints, interval_ms)
        partition_new_checkpoint(spark, checkpoints / name, conf, echo, realtime)
        try:
            if once:
                run_once(spark, clicks, checkpoints, echo)
            else:
                query = start()
                echo(f"[green]started[/] {query.name} ({query.id})")
                echo(f"running {query.name}; Ctrl-C stops")
                echo(f"Spark UI {spark.sparkContext.uiWebUrl}, Prometheus metrics under /metrics/prometheus")
                stalls = StallReporter(echo)
                waiting = status_files.WaitingClicks(state, checkpoints / name, echo, realtime)

                def on_poll() -> None:
                    # A real-time batch is one long phase by design: no stall to report there. The waiting
                    # count reads the state its last batch committed, in either mode.
                    if not realtime:
                        stalls.check(spark.streams.active)
                    waiting.refresh(spark)

                stop.wait(spark, on_poll)
                if stop.signal is not None:
                    echo(f"stopping ({signal.Signals(stop.signal).name})")
        except StreamingQueryException as exc:
            raise JobError(f"a streaming query failed: {root_cause(str(exc))}") from exc
        except TimeoutError as exc:
            raise JobError(str(exc)) from exc
        except KeyboardInterrupt:
            echo("stopping")
        finally:
            if realtime:
                quiet_aborted_batch(spark)
            gate.stop(spark.streams.active, echo)
            spark.stop()


def realtime_query(
    spark: SparkSession,
    settings: Settings,
    join: JoinConfig,
    registry: events.Registry | None,
    checkpoints: Path,
    conf: dict[str, str],
) -> tuple[str, Callable[[], StreamingQuery]]:
    """The query in Spark's real-time mode (topology.realtime_frame), its name and how to start it, into
    the real-time sink (sinks.realtime_writer)."""
    name, frame = topology.realtime_frame(spark, settings, join, registry)
    writer = sinks.realtime_writer(
        spark, settings.writer_dsn, settings.kafka_bootstrap, settings.pipeline, frame.schema
    )
    return name, partial(topology.start_realtime, frame, name, checkpoints, batch_duration_ms(conf), writer)


def partition_new_checkpoint(
    spark: SparkSession,
    checkpoint: Path,
    conf: dict[str, str],
    echo: Callable[[str], None],
    realtime: bool = False,
) -> None:
    """A new checkpoint gets as many state partitions as Spark has cores (at least 4), unless --conf names
    them; in real-time mode 4, since each of its tasks holds a task slot for a whole batch, the sources'
    beside the join's (pipeline/spark.py realtime_local_master). An existing one keeps its own: Spark
    restores the number from the checkpoint's offset log (a checkpoint whose first batch never wrote its
    offsets is new to Spark too)."""
    logged = any(f.name.isdigit() for f in (checkpoint / "offsets").glob("*"))  # offsets/<batch id>
    if spark_session.SHUFFLE_PARTITIONS in conf or logged:
        return
    least = spark_session.MIN_STATE_PARTITIONS
    partitions = least if realtime else spark_session.state_partitions(spark)
    spark.conf.set(spark_session.SHUFFLE_PARTITIONS, str(partitions))
    why = "real-time mode's" if realtime else f"the cores Spark has, at least {least}"
    echo(
        f"a new checkpoint with {partitions} state partitions, fixed from now on ({why}; --conf "
        f"{spark_session.SHUFFLE_PARTITIONS}=N on a new checkpoint chooses)"
    )


QUIET_AT_STOP = ("org.apache.spark", "org.apache.kafka")


def quiet_aborted_batch(spark: SparkSession) -> None:
    """Before a real-time query stops: Spark aborts its open batch (uncommitted: a restart replays it, and
    the real-time sink skips the rows it has), and logs every task's abort as an error with its stack
    trace, some twenty of them on the default pipeline, and each source's Kafka consumer one more for its
    interrupted close. Spark's and Kafka's logs end here; the job's own lines go on."""
    jvm: Any = spark._jvm
    log4j = jvm.org.apache.logging.log4j
    for logger in QUIET_AT_STOP:
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.OFF)


STOP_WAIT_S = 120  # for the batch being written, then for Spark to stop the query


class StopRefused(RuntimeError):
    """A micro-batch reached its sink after the stop began: it writes nothing and is redone at next start."""


# Spark treats an error out of foreachBatch as a clean stop (no failure, no stack trace) only when the query
# is already stopped and the message matches StreamExecution.PROXY_ERROR: an interrupted Py4J call.
STOP_REFUSAL = (
    "the job is stopping, this batch is redone at the next start (py4j.protocol.Py4JJavaError: "
    "An error occurred while calling foreachBatch: java.lang.InterruptedException)"
)


class HideStopRefusals(logging.Filter):
    """Py4J logs every exception out of a Python callback; a refusal at the gate is part of a clean stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], StopRefused))


HIDE_STOP_REFUSALS = HideStopRefusals()


class BatchGate:
    """Stops the query between writes rather than in the middle of one.

    Spark has no graceful stop: `query.stop()` interrupts the batch thread wherever it is. Interrupted
    inside foreachBatch, the batch is redone at the next start (nothing is lost), but Py4J and Spark log
    stack traces, and Spark's regex over a long Python traceback overflows the thread stack (a
    StackOverflowError). So the sink passes through this gate: `stop` closes it, waits for the writes in
    flight, stops the query, and only then lets a batch that arrived meanwhile fail with STOP_REFUSAL."""

    def __init__(self) -> None:
        self._writes = threading.Condition()
        self._in_flight = 0
        self._closed = False
        self._stopped = threading.Event()
        self.held = 0  # batches that reached the gate after it closed (each is redone at the next start)
        logging.getLogger("py4j.clientserver").addFilter(HIDE_STOP_REFUSALS)

    def guarded(self, flow: topology.Flow) -> topology.Flow:
        return replace(flow, sink=self.guard(flow.sink))

    def guard(self, sink: Callable[[DataFrame, int], None]) -> Callable[[DataFrame, int], None]:
        def guarded(batch: DataFrame, batch_id: int) -> None:
            with self._writes:
                admitted = not self._closed
                if admitted:
                    self._in_flight += 1
                else:
                    self.held += 1
            if not admitted:
                self._stopped.wait(STOP_WAIT_S)  # until Spark counts the query as stopped
                raise StopRefused(STOP_REFUSAL)
            try:
                sink(batch, batch_id)
            finally:
                with self._writes:
                    self._in_flight -= 1
                    self._writes.notify_all()

        return guarded

    def stop(self, queries: list[StreamingQuery], echo: Callable[[str], None]) -> None:
        """queries: spark.streams.active, the job's one query, or none if it has ended already."""
        with self._writes:
            self._closed = True
            if self._in_flight:
                echo(f"waiting for {self._in_flight} batch(es) to finish writing")
            if not self._writes.wait_for(lambda: self._in_flight == 0, STOP_WAIT_S):
                echo(
                    f"[yellow]interrupting a batch still writing after {STOP_WAIT_S} s[/] (redone at restart)"
                )
        # stop() blocks until the batch thread ends, and a batch held at the gate ends only once released.
        stoppers = [threading.Thread(target=query.stop, daemon=True) for query in queries]
        for stopper in stoppers:
            stopper.start()
        deadline = time.monotonic() + STOP_WAIT_S
        while any(query.isActive for query in queries) and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stopped.set()
        for stopper in stoppers:
            stopper.join(STOP_WAIT_S)


def run_once(
    spark: SparkSession,
    clicks: topology.Flow,
    checkpoints: Path,
    echo: Callable[[str], None],
) -> None:
    """Every click available at start is emitted (the join waits for CDC progress), then return."""
    runs = run_until_drained(
        spark, lambda: topology.start(clicks, checkpoints), str(checkpoints / clicks.name)
    )
    echo(f"[green]done[/]: every event available at start emitted ({runs} passes)")
