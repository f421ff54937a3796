"""`make bench` (`python -m bench.run`): streamfold end to end, beside a naive baseline and the limit.

On its own local stack (a fresh STREAMFOLD_HOME, stopped at the end), in one run:
  1. throughput: `--clicks` clicks over `--users` users preloaded in Kafka, profile updates committed in
     Postgres meanwhile (through Debezium); the continuous job processes them to Postgres and Kafka
  2. latency at `--rate` clicks/s offered to the running job (first at a rate it can sustain, if
     `--rate` is above what step 1 measured)
  3. the naive baseline: a consumer with one PostgreSQL lookup per click, same input, same outputs
  4. the limit: a raw confluent-kafka consumer, and Spark reading the topic into a noop sink
  5. peak memory of every process tree, and the join's state size per 1,000,000 users
  6. cost growth at `--scaling-users` users: a fresh checkpoint folds every user's change events first
     (the catch-up, timed and reported on its own), then `--scaling-clicks` clicks arrive and their
     throughput is measured against that much state
  7. Kafka Streams, the seed's system (bench/kstreams.py): its throughput on the same preloaded clicks,
     before streamfold's run (the clicks topic holds just them then), and its latency at the same offered
     loads after streamfold's windows; side by side with streamfold, the ratios the headline
  8. the Kinesis source: the same clicks put into the Kinesis stream (the generator's concurrent sender;
     puts/s over the put calls, each 100,000 clicks generated before), then a fresh job with `--source
     kinesis`; its clicks/s beside the Kafka path's, and the CPU a click of its JVM and of its python
     workers (where the Kinesis reader runs)
  9. the Avro events path: the same clicks (count, seed, updates) as Avro events in the Confluent wire
     format, their schema in the stack's registry, and a fresh job with `events.format: avro`
     (bench/avro_path.py): its clicks/s beside the JSON path's (`ratios.avro_over_json`), and the job's
     CPU a click for both
  10. three tables: the same clicks (count, users, updates) with a `page_id` each, joined by a fresh job of
     a pipeline file of its own (bench/tables_path.py) with a profile of `--users` rows, a table of
     `--users`/10 chained through a foreign key of the profile and a lookup of `--users`/100 on the page_id:
     its clicks/s beside the one-table path's (`ratios.tables_over_one_table`), its join's state on disk
     per 1,000,000 rows of all the tables, and its click latency at 5,000 clicks/s; it runs last, with the
     default file's connector stopped meanwhile (one connector decodes the WAL, as in the main run)
  11. local vs cluster: `--cluster-clicks` clicks measured under local[*], then on the same input on a
     Spark standalone cluster of `--cluster-workers` one-core workers started for it (stopped after):
     the cost of distribution as a ratio and in CPU a click, and where a batch's time goes
     (bench/cluster.py); it runs after the naive baseline, before the steps that add users
`--cluster-only` runs step 11 alone (a quick comparison for development).
Results: tables on the console, bench/results/<date>.json (+ .md, and charts: <date>-*.png, bench/plots.py).
"""

from __future__ import annotations

import itertools
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from bench import (
    avro_path,
    cluster,
    job,
    kstreams,
    latency,
    load,
    measured,
    plots,
    profile,
    report,
    stack,
    tables_path,
)
from bench.cpu import CpuClock
from bench.stack import Bench
from common import config, names, plan
from common import pipeline_file as pf
from streamfold import generate

console = Console(stderr=True, highlight=False)
app = typer.Typer(add_completion=False)
ROOT = Path(__file__).resolve().parents[1]
CATCH_UP_S = 300
DEFAULT_HOME = ROOT / ".streamfold-bench"


def command_line(args: list[str]) -> str:
    if os.environ.get("MAKELEVEL"):
        return "make bench" + (f" BENCH_ARGS={shlex.quote(shlex.join(args))}" if args else "")
    return shlex.join([".venv/bin/python", "-m", "bench.run", *args])


def loadavg() -> str:
    """1, 5 and 15 minute load averages: other work on the shared machine shows here."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def echo(message: str) -> None:
    console.print(f"[dim]{datetime.now():%H:%M:%S}[/] {message}")


class Ticker:
    """A progress line at most every `every_s` (works in a terminal and in a log file alike)."""

    def __init__(self, label: str, total: int, every_s: float = 10.0) -> None:
        self.label, self.total, self.every_s = label, total, every_s
        self.start = self.last = time.monotonic()
        self.done = 0

    def advance(self, n: int) -> None:
        self.update(self.done + n)

    def update(self, done: int) -> None:
        finished = done >= self.total > self.done
        self.done = done
        now = time.monotonic()
        if now - self.last >= self.every_s or finished:
            self.last = now
            pct = 100 * done / self.total if self.total else 100
            echo(
                f"  {self.label}: {done:,} / {self.total:,} ({pct:.0f}%, {done / (now - self.start):,.0f}/s)"
            )


@dataclass(frozen=True)
class Params:
    clicks: int
    users: int
    updates: int
    rate: float
    low_rates: tuple[float, ...]
    latency_seconds: float
    scaling_users: tuple[int, ...]
    scaling_clicks: int
    naive: bool
    limits: bool
    kstreams: bool
    kstreams_variants: tuple[str, ...]
    realtime: bool
    kinesis: bool
    avro: bool
    tables: bool
    cluster_workers: int
    cluster_clicks: int
    cluster_only: bool
    profile_seconds: float
    job_conf: dict[str, str]
    home: Path
    keep_stack: bool


class Inputs:
    """What the stack holds so far: users in public.users, and the change events Debezium must publish."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.users = 0
        self.cdc = 0

    def ensure_users(self, users: int) -> None:
        if users > self.users:
            ticker = Ticker("users -> public.users", users)
            self.cdc += generate.load_profiles(self.bench.admin_dsn, users, on_progress=ticker.advance)
            self.users = users

    def users_ready(self, users: int) -> int:
        """`users` in public.users, all their change events in Kafka, an empty clicks topic; the CDC end."""
        self.ensure_users(users)
        stack.empty_clicks_topic(self.bench.bootstrap)
        self.wait_for_cdc()
        return cdc_end(self.bench)

    def clicks(
        self,
        users: int,
        clicks: int,
        updates: int,
        *,
        empty_first: bool = True,
        encode: Callable[[dict[str, Any]], bytes] = generate.as_json,
    ) -> load.Load:
        """`clicks` clicks with `updates` profile updates (on an emptied clicks topic unless told not to),
        JSON or as `encode` writes them; waits for Debezium."""
        self.ensure_users(users)
        if empty_first:
            stack.empty_clicks_topic(self.bench.bootstrap)
        ticker = Ticker("clicks -> Kafka", clicks)
        loaded = load.preload(self.bench, clicks, users, updates, ticker.advance, encode)
        self.cdc += loaded.updates
        echo(f"  {loaded.clicks:,} clicks at {loaded.rate:,.0f}/s, {loaded.updates:,} profile updates")
        self.wait_for_cdc()
        return loaded

    def wait_for_cdc(self) -> None:
        cdc_ticker = Ticker("change events in Kafka (Debezium)", self.cdc)
        stack.wait_for_cdc(
            self.bench.bootstrap, self.bench.admin_dsn, self.cdc, cdc_ticker.update, timeout_s=1800
        )


def cdc_end(bench: Bench, topic: str = names.CDC_USERS_TOPIC) -> int:
    (_, end), *_ = stack.topic_offsets(bench.bootstrap, topic).values()
    return end


def measure_job(
    bench: Bench,
    name: str,
    clicks: int,
    users: int,
    conf: dict[str, str],
    profile_s: float = 0,
    env: dict[str, str] | None = None,
    pipeline: pf.Pipeline | None = None,
) -> tuple[job.JobRun, dict]:
    """Start the job on the preloaded clicks, wait until all are committed; the run is left running.
    `env`: the run's own variables (another pipeline file, which `pipeline` is)."""
    stack.truncate_sinks(bench)
    run = job.JobRun(bench, name, conf, env=env, pipeline=pipeline).__enter__()
    try:
        with CpuClock({"job": [run.pid]}) as clock:
            result = measure_clicks(
                run, name, clicks, users, cdc_end(bench, plan.of(run.pipeline).cdc_topic), profile_s
            )
        from_start = result["launch_to_first_read_s"] + result["seconds"]
        core_s = clock.between(run.launched, run.launched + from_start)["core_s"]["job"]  # type: ignore[index]
        result.update(
            seconds_from_start=round(from_start, 2),
            clicks_per_s_from_start=round(clicks / from_start),
            cpu_core_s=core_s,
            cpu_us_per_click=round(core_s / clicks * 1e6, 1),
        )
        return run, result
    except BaseException:
        run.__exit__()
        raise


def measure_clicks(
    run: job.JobRun, name: str, clicks: int, users: int, cdc_to: int, profile_s: float = 0
) -> dict[str, Any]:
    """Wait until the running job has committed `clicks` and read the CDC topic to `cdc_to`: its result."""
    ticker = Ticker(f"clicks committed by streamfold ({name})", clicks, every_s=15)
    profiler = None
    if profile_s:
        run.wait_first_batch()
        profiler = profile.start(run.pid, run.home / "py-spy.txt", profile_s)
    clicks_batch = run.wait_committed(clicks, timeout_s=max(1800, clicks / 100), on_progress=ticker.update)
    cdc_batch = run.wait_cdc_read(cdc_to, timeout_s=1800)
    result = job.throughput(run, clicks, clicks_batch, cdc_batch)
    sst = result["state"].get("customMetrics", {}).get("rocksdbSstFileSize")
    result.update(
        users=users,
        state_rows=result["state"].get("numRowsTotal"),
        state_sst_bytes=sst,
        state_sst_mib=round(sst / 2**20, 1) if sst is not None else None,
        state_checkpoint_bytes=job.state_dir_bytes(run),
        memory_to_last_commit=run.sampler.peaks.as_dict() if run.sampler else {},
    )
    result["state_checkpoint_mib"] = round(result["state_checkpoint_bytes"] / 2**20, 1)
    if sst is not None:  # one versions entry per user (plus 1,024 small bucket rows)
        result["state_per_million_users_mib"] = round(sst / users * 1e6 / 2**20, 1)
    result["loadavg_after"] = loadavg()
    result["unknown_region_clicks"] = run.unknown_region_clicks()
    if profiler:
        result["profile"] = profile.finish(profiler)
    echo(f"  streamfold ({name}): {result['clicks_per_s']:,} clicks/s over {result['seconds']:.1f} s")
    return result


def scaling_step(bench: Bench, inputs: Inputs, users: int, p: Params) -> dict[str, Any]:
    """A fresh checkpoint folds every user's change events first (the catch-up, timed on its own), then
    the clicks arrive: their throughput is the join's cost at this many users in state."""
    clicks = p.scaling_clicks
    echo(f"[bold]cost growth[/]: {users:,} users, {clicks:,} clicks")
    stack.truncate_sinks(bench)
    cdc_to = inputs.users_ready(users)
    with job.JobRun(bench, f"scale-{users}", p.job_conf) as run:
        catch_up = job.catch_up(run, cdc_to, timeout_s=1800)
        echo(f"  catch-up: {catch_up['records']:,} change events folded in {catch_up['seconds']:.1f} s")
        inputs.clicks(users, clicks, clicks // 100, empty_first=False)
        result = measure_clicks(run, f"scale-{users}", clicks, users, cdc_end(bench))
    keep = (
        "users",
        "clicks",
        "seconds",
        "clicks_per_s",
        "launch_to_first_read_s",
        "batches",
        "state_rows",
        "state_sst_mib",
        "state_checkpoint_mib",
        "state_per_million_users_mib",
        "unknown_region_clicks",
        "cdc_read_batch",
        "clicks_committed_batch",
        "duration_ms_total",
        "loadavg_after",
    )
    return {
        **{k: result.get(k) for k in keep},
        "cdc_records": inputs.cdc,
        "catch_up": catch_up,
        "memory": run.sampler.peaks.as_dict() if run.sampler else {},
    }


def window_rates(p: Params) -> list[float]:
    return sorted({*p.low_rates, p.rate})


def latency_windows(bench: Bench, inputs: Inputs, run: job.JobRun, p: Params, offered: int) -> list[dict]:
    """One window per rate, lowest first; before the next one the job must have caught up (or timed out)."""
    windows = []
    for rate in window_rates(p):
        echo(f"[bold]latency[/]: {rate:,.0f} clicks/s offered for {p.latency_seconds:.0f} s")
        window = latency.run_window(
            bench.bootstrap, bench.admin_dsn, p.users, rate, p.latency_seconds, run.committed_rows, echo
        )
        inputs.cdc += window.updates
        offered += window.sent
        if run.mode == pf.MICRO_BATCH:  # the breakdown reads the batches' ledger, which only it keeps
            window.breakdown = latency.breakdown(window.observed, run.progress(), run.commits())
        windows.append(window.as_dict())
        c = window.clicks
        echo(f"  click latency p50 {c['p50_s']} s, p99 {c['p99_s']} s; kept up: {window.kept_up}")
        if window.breakdown:
            echo_breakdown(window.breakdown)
        if rate != p.rate and not window.kept_up:
            ticker = Ticker("backlog committed before the next window", offered, every_s=30)
            try:
                if run.mode == pf.REALTIME:
                    run.wait_landed(offered, timeout_s=CATCH_UP_S, on_progress=ticker.update)
                else:
                    run.wait_committed(offered, timeout_s=CATCH_UP_S, on_progress=ticker.update)
            except TimeoutError:
                echo(
                    f"  [yellow]the job did not catch up within {CATCH_UP_S} s: later windows start behind[/]"
                )
    return windows


def kstreams_throughput(bench: Bench, clicks: int, p: Params) -> list[dict[str, Any]]:
    """Each variant's application over the same clicks, one after another, fastest from start first: the
    baseline every ratio takes is the best of them."""
    results = []
    for variant in p.kstreams_variants:
        echo(f"[bold]Kafka Streams[/] ({variant}): the same {clicks:,} clicks, exactly-once v2")
        ticker = Ticker("clicks counted by Kafka Streams", clicks, every_s=15)
        result = kstreams.throughput(bench, clicks, variant, ticker.update)
        echo(
            f"  Kafka Streams ({variant}): {result['clicks_per_s']:,} clicks/s steady, "
            f"{result['clicks_per_s_from_start']:,} from JVM start; {result['enriched_records']:,} enriched "
            f"records, {result['unknown_region_clicks']:,} UNKNOWN"
        )
        results.append(result)
    return sorted(results, key=lambda r: -r["clicks_per_s_from_start"])


def kstreams_latency(bench: Bench, inputs: Inputs, p: Params, variant: str) -> list[dict[str, Any]]:
    """A fresh application from the clicks topic's end, once running: one window per rate, lowest first."""
    kstreams.start_at_end(bench.bootstrap, kstreams.app_id("latency"))
    windows = []
    with kstreams.App(bench, "latency", variant) as app:
        app.wait_event("running", 300)
        for rate in window_rates(p):
            echo(f"[bold]Kafka Streams latency[/]: {rate:,.0f} clicks/s offered, {p.latency_seconds:.0f} s")
            window = kstreams.latency_window(app, p.users, rate, p.latency_seconds, echo)
            inputs.cdc += window.updates
            windows.append(window.as_dict())
            c = window.clicks
            echo(f"  click latency p50 {c['p50_s']} s, p99 {c['p99_s']} s; kept up: {window.kept_up}")
            app.check_alive()
    return windows


def main_measurement(bench: Bench, inputs: Inputs, p: Params) -> dict[str, Any]:
    echo(f"[bold]streamfold end to end[/]: {p.clicks:,} clicks over {p.users:,} users, {p.updates:,} updates")
    loaded = inputs.clicks(p.users, p.clicks, p.updates)
    # Kafka Streams first, while the clicks topic holds just these clicks (it reads from the start).
    ks = kstreams_throughput(bench, loaded.clicks, p) if p.kstreams else []
    run, result = measure_job(bench, "main", loaded.clicks, p.users, p.job_conf, p.profile_seconds)
    result["load"] = {"clicks_per_s": round(loaded.rate), "updates": loaded.updates}
    try:
        windows = latency_windows(bench, inputs, run, p, loaded.clicks) if p.latency_seconds else []
    finally:
        run.__exit__()
    result["memory"] = run.sampler.peaks.as_dict() if run.sampler else {}
    measured = {"streamfold": result, "latency": windows, "input_offsets": loaded.offsets}
    if ks:
        # The fastest variant from start is the baseline; its latency is measured too.
        fastest = ks[0]
        fastest["latency"] = (
            kstreams_latency(bench, inputs, p, fastest["variant"]) if p.latency_seconds else []
        )
        measured["kstreams"] = fastest
        measured["kstreams_variants"] = ks
    return measured


def realtime_measurement(bench: Bench, inputs: Inputs, p: Params) -> dict[str, Any]:
    """`streamfold run --mode realtime` from a fresh checkpoint over every click the topic holds (the main
    run's and its latency windows'), then the same latency windows as the micro-batch mode's."""
    offsets = stack.topic_offsets(bench.bootstrap)
    clicks = sum(end - start for start, end in offsets.values())
    echo(f"[bold]streamfold in real-time mode[/]: {clicks:,} clicks, a fresh checkpoint")
    stack.truncate_sinks(bench)
    run = job.JobRun(bench, "realtime", p.job_conf, mode=pf.REALTIME).__enter__()
    try:
        ticker = Ticker("clicks landed by streamfold (real-time mode)", clicks, every_s=15)
        with CpuClock({"job": [run.pid]}) as clock:
            result = job.realtime_throughput(run, clicks, max(1800, clicks / 100), ticker.update)
        core_s = clock.between(run.launched, run.launched + result["seconds_from_start"])["core_s"]["job"]  # type: ignore[index]
        result.update(cpu_core_s=core_s, cpu_us_per_click=round(core_s / clicks * 1e6, 1))
        result["memory_to_last_commit"] = run.sampler.peaks.as_dict() if run.sampler else {}
        echo(
            f"  real-time mode: {result['clicks_per_s_from_start']:,} clicks/s from launch, "
            f"{result['clicks_per_s']:,} steady; first output {result['launch_to_first_output_s']} s in"
        )
        result["latency"] = latency_windows(bench, inputs, run, p, clicks) if p.latency_seconds else []
    finally:
        run.__exit__()
    result["memory"] = run.sampler.peaks.as_dict() if run.sampler else {}
    return result


# Clicks generated ahead of each timed put: the puts/s is the endpoint's and its client's. Generating
# them in the same Python process took about as much of a core as sending them.
PUT_CHUNK = 100_000


def put_kinesis(clicks: int, users: int) -> dict[str, Any]:
    """The throughput run's clicks (the generator's seed) into the Kinesis stream, PUT_CHUNK generated at a
    time: `put_seconds` the put calls alone, `seconds` their generation included."""
    ticker = Ticker(f"clicks -> Kinesis {names.CLICKS_STREAM}", clicks)
    records = generate.encoded(generate.ClickSpec(count=clicks, users=users))
    start = time.monotonic()
    sent, put_seconds = 0, 0.0
    while chunk := list(itertools.islice(records, PUT_CHUNK)):
        put_start = time.monotonic()
        sent += generate.send_kinesis(iter(chunk), ticker.advance, names.CLICKS_STREAM)
        put_seconds += time.monotonic() - put_start
    seconds = time.monotonic() - start
    echo(
        f"  {sent:,} clicks put at {sent / put_seconds:,.0f}/s"
        f" ({generate.KINESIS_SENDERS} requests in flight), {sent / seconds:,.0f}/s with their generation"
    )
    return {
        "clicks": sent,
        "seconds": round(seconds, 1),
        "put_seconds": round(put_seconds, 1),
        "puts_per_s": round(sent / put_seconds),
    }


def kinesis_path(bench: Bench, p: Params) -> dict[str, Any]:
    """The Kafka path's clicks through Kinesis: a fresh job (`--source kinesis`) from TRIM_HORIZON, every
    user's change events folded from Kafka as always. The CPU is split between the JVM and the python
    processes (the driver's and the workers': the Kinesis reader is a Python data source)."""
    echo(f"[bold]Kinesis source[/]: the same {p.clicks:,} clicks through Kinesis")
    put = put_kinesis(p.clicks, p.users)
    stack.truncate_sinks(bench)
    with job.JobRun(bench, "kinesis", p.job_conf, source="kinesis") as run:
        run.wait_first_batch()
        groups = {"jvm": [run.jvm_pid()], "python": [run.pid]}
        with CpuClock(groups, exact=frozenset({"jvm"})) as clock:
            result = measure_clicks(run, "kinesis", put["clicks"], p.users, cdc_end(bench))
    events = run.progress()
    start = job.parse_ts(next(e for e in events if job.clicks_read(e) > 0)["timestamp"])
    cpu = clock.between(start, start + result["seconds"])
    core_s: dict[str, float] = cpu["core_s"]  # type: ignore[assignment]
    keep = ("clicks", "seconds", "clicks_per_s", "launch_to_first_read_s", "batches", "duration_ms_total")
    return {
        "put": put,
        **{k: result[k] for k in keep},
        "unknown_region_clicks": result["unknown_region_clicks"],
        "loadavg_after": result["loadavg_after"],
        "memory": run.sampler.peaks.as_dict() if run.sampler else {},
        "cpu": cpu,
        "jvm_us_per_click": round(core_s["jvm"] / put["clicks"] * 1e6, 1),
        "python_us_per_click": round(core_s["python"] / put["clicks"] * 1e6, 1),
    }


# What the paths beside the main run (Avro events, three tables) keep of measure_job's result.
MEASURED_JOB = (
    "clicks",
    "seconds",
    "clicks_per_s",
    "seconds_from_start",
    "clicks_per_s_from_start",
    "launch_to_first_read_s",
    "batches",
    "cpu_core_s",
    "cpu_us_per_click",
    "unknown_region_clicks",
    "loadavg_after",
)


def avro_events_path(bench: Bench, inputs: Inputs, p: Params) -> dict[str, Any]:
    """The main run's clicks (same count, seed and profile updates) again as Avro events on the emptied
    clicks topic, and a fresh job with `events.format: avro` (bench/avro_path.py), measured as the main
    run is: its clicks/s and the job's CPU a click, beside the JSON path's."""
    echo(f"[bold]Avro events[/]: the same {p.clicks:,} clicks in Avro (the Confluent wire format)")
    path = avro_path.pipeline_file(bench.home)
    loaded = inputs.clicks(p.users, p.clicks, p.updates, encode=avro_path.encoder(path))
    with avro_path.applied(bench.admin_dsn, path):
        env = avro_path.job_env(path)
        run, result = measure_job(bench, "avro", loaded.clicks, p.users, p.job_conf, env=env)
        run.__exit__()
    return {
        **{k: result.get(k) for k in MEASURED_JOB},
        "load": {"clicks_per_s": round(loaded.rate), "updates": loaded.updates},
        "memory": run.sampler.peaks.as_dict() if run.sampler else {},
    }


def three_tables_path(bench: Bench, p: Params) -> dict[str, Any]:
    """The main run's clicks (count, users, profile updates) with a page each, joined with three tables by a
    fresh job of the three-table file (bench/tables_path.py), set up beside the default one and measured as
    the main run is; the join's state on disk per 1,000,000 rows of all the tables (the checkpoint's, when
    the clicks are done, as the main run's state_checkpoint_mib); its click latency at report.TABLES_RATE.
    The default file's connector is stopped meanwhile (bench/stack.py connector_stopped), so that one
    connector decodes the WAL, as in the main run."""
    echo(f"[bold]three tables[/]: the same {p.clicks:,} clicks joined with a profile, a chain and a lookup")
    with stack.connector_stopped(bench, plan.of(bench.settings.pipeline).connector):
        return three_tables_measured(bench, p)


def three_tables_measured(bench: Bench, p: Params) -> dict[str, Any]:
    """three_tables_path, with the default file's connector stopped."""
    path = tables_path.pipeline_file(bench.home)
    pipeline = pf.load(path)
    tables_path.set_up(bench.settings, pipeline, lambda msg: echo(f"  setup: {msg}"))
    expected = sum(generate.table_rows(p.users, n) for n in range(len(tables_path.TABLES) + 1))
    ticker = Ticker("rows -> the three tables", expected)
    rows = generate.load_tables(
        bench.admin_dsn, p.users, pipeline, on_progress=lambda _, n: ticker.advance(n)
    )
    stack.empty_clicks_topic(bench.bootstrap)
    ticker = Ticker("clicks -> Kafka", p.clicks)
    loaded = load.preload(bench, p.clicks, p.users, p.updates, ticker.advance, pipeline=pipeline)
    echo(f"  {loaded.clicks:,} clicks at {loaded.rate:,.0f}/s, {loaded.updates:,} profile updates")
    changes = sum(rows.values()) + loaded.updates
    cdc_ticker = Ticker(f"change events in Kafka (Debezium, {plan.of(pipeline).cdc_topic})", changes)
    stack.wait_for_cdc(bench.bootstrap, bench.admin_dsn, changes, cdc_ticker.update, 1800, pipeline)
    env = tables_path.job_env(path)
    run, result = measure_job(bench, "tables", loaded.clicks, p.users, p.job_conf, env=env, pipeline=pipeline)
    try:
        landed = run.landed()
        windows = tables_latency(bench, run, p) if p.latency_seconds else []
    finally:
        run.__exit__()
    last = run.batch_progress(max(result["clicks_committed_batch"], result["cdc_read_batch"]))
    sst = job.sst_bytes(last)
    table_rows = sum(rows.values())
    return {
        **{k: result.get(k) for k in MEASURED_JOB},
        "state_checkpoint_mib": result["state_checkpoint_mib"],
        "rows": rows,
        "table_rows": table_rows,
        **landed,
        "state_sst_mib": round(sst / 2**20, 1) if sst is not None else None,
        # The join's state: RocksDB's files of every stage (what the target means); the checkpoint's
        # directory besides holds the changelog of each of the last 100 batches (kept for recovery), so it
        # grows with the batches and their changes, not with the tables (docs/benchmark.md, 10.).
        "state_per_million_rows_mb": tables_path.per_million_rows_mb(sst, table_rows) if sst else None,
        "checkpoint_per_million_rows_mb": tables_path.per_million_rows_mb(
            result["state_checkpoint_bytes"], table_rows
        ),
        "load": {"clicks_per_s": round(loaded.rate), "updates": loaded.updates},
        "latency": windows,
        "memory": run.sampler.peaks.as_dict() if run.sampler else {},
    }


def tables_latency(bench: Bench, run: job.JobRun, p: Params) -> list[dict[str, Any]]:
    """One window at report.TABLES_RATE clicks/s offered to the three-table job (its clicks and profile
    updates)."""
    offered = f"{report.TABLES_RATE:,.0f} clicks/s offered for {p.latency_seconds:.0f} s"
    echo(f"[bold]three tables latency[/]: {offered}")
    window = latency.run_window(
        bench.bootstrap,
        bench.admin_dsn,
        p.users,
        report.TABLES_RATE,
        p.latency_seconds,
        run.committed_rows,
        echo,
        pipeline=run.pipeline,
    )
    window.breakdown = latency.breakdown(window.observed, run.progress(), run.commits())
    c = window.clicks
    echo(f"  click latency p50 {c['p50_s']} s, p99 {c['p99_s']} s; kept up: {window.kept_up}")
    echo_breakdown(window.breakdown)
    return [window.as_dict()]


def echo_breakdown(breakdown: dict[str, Any]) -> None:
    """Where a window's click latency goes, its batches' length, and how many batches after the one that
    read it a click was emitted (latency.breakdown)."""
    parts = ", ".join(
        f"{k} {v['p50_s']}/{v['p99_s']}" for k, v in breakdown.items() if isinstance(v, dict) and "p50_s" in v
    )
    echo(f"  where it goes (p50/p99 s): {parts}")
    later = breakdown["emitted_batches_later"]
    echo(f"  clicks emitted n batches after the one that read them (n: clicks): {later}")


def tables_over_one_table(results: dict[str, Any]) -> dict[str, float | None]:
    """The three-table path against the one-table path (the main run) figure by figure, each the target's
    way round: clicks/s (steady and from start), join state on disk per 1,000,000 rows, click p99 at
    report.TABLES_RATE (None where either was not measured)."""
    tables, main = results["tables"], results["streamfold"]

    def over(a: float | None, b: float | None) -> float | None:
        return round(a / b, 3) if a and b else None

    def p99(windows: list[dict[str, Any]]) -> float | None:
        window = report.window_at(windows)
        return None if window is None else window["click_latency"]["p99_s"]

    sst = main.get("state_sst_bytes")
    one_state = tables_path.per_million_rows_mb(sst, main["users"]) if sst else None
    return {
        "clicks_per_s": over(tables["clicks_per_s"], main["clicks_per_s"]),
        "clicks_per_s_from_start": over(tables["clicks_per_s_from_start"], main["clicks_per_s_from_start"]),
        "one_table_state_per_million_rows_mb": one_state,
        "state_per_million_rows": over(tables.get("state_per_million_rows_mb"), one_state),
        "click_p99_at_5000": over(p99(tables["latency"]), p99(results.get("latency") or [])),
    }


def pair_side(bench: Bench, mode: str, clicks: int, p: Params) -> dict[str, Any]:
    """One side of the local-vs-cluster pair: a fresh checkpoint over the preloaded clicks, with its memory
    (the cluster's workers and executors too), the CPU of every process, and its stages' times."""
    name = f"pair-{mode}"
    stack.truncate_sinks(bench)
    with (
        job.JobRun(bench, name, p.job_conf, cluster.cluster_trees(bench.home)) as run,
        cluster.cpu_clock(bench.home, run.pid) as clock,
    ):
        result = measure_clicks(run, name, clicks, p.users, cdc_end(bench))
        stages = [cluster.stage_summary(s) for s in cluster.fetch_stages(cluster.spark_ui(run.home))]
    batches = {b["batch"] for b in result["batch_table"]}
    events = [e for e in run.progress() if e["batchId"] in batches]
    start = job.parse_ts(events[0]["timestamp"])
    keep = ("clicks", "seconds", "clicks_per_s", "launch_to_first_read_s", "batches", "duration_ms_total")
    return {
        "mode": mode,
        "master": bench.env.get("STREAMFOLD_SPARK_MASTER", "local[*]"),
        **{k: result[k] for k in keep},
        "unknown_region_clicks": result["unknown_region_clicks"],
        "loadavg_after": result["loadavg_after"],
        "memory": run.sampler.peaks.as_dict() if run.sampler else {},
        "cpu": clock.between(start, start + result["seconds"]),
        "breakdown": cluster.breakdown(stages, events),
    }


def cluster_comparison(bench: Bench, inputs: Inputs, p: Params) -> dict[str, Any]:
    """The same clicks under local[*], then on a cluster of `cluster_workers` one-core workers."""
    echo(
        f"[bold]local vs cluster[/]: {p.cluster_clicks:,} clicks over {p.users:,} users, local[*], then "
        f"{p.cluster_workers} one-core workers"
    )
    loaded = inputs.clicks(p.users, p.cluster_clicks, p.cluster_clicks // 100)
    local = pair_side(bench, "local", loaded.clicks, p)
    echo(f"  starting a Spark cluster of {p.cluster_workers} workers")
    with cluster.spark_cluster(bench, p.cluster_workers) as on_cluster:
        clustered = pair_side(on_cluster, "cluster", loaded.clicks, p)
    echo("  Spark cluster stopped")
    pair = {
        "workers": p.cluster_workers,
        "clicks": loaded.clicks,
        "users": p.users,
        "updates": loaded.updates,
        "order": "local first, then cluster",
        "local": local,
        "cluster": clustered,
        "cluster_over_local": round(clustered["clicks_per_s"] / local["clicks_per_s"], 3),
        "projection": cluster.projection(clustered["breakdown"], loaded.clicks),
        "how_measured": cluster.__doc__,
    }
    echo(
        f"  local {local['clicks_per_s']:,} clicks/s, cluster {clustered['clicks_per_s']:,} clicks/s: "
        f"cluster / local {pair['cluster_over_local']:.2f}"
    )
    return pair


def limits(bench: Bench, offsets: stack.Offsets) -> dict[str, Any]:
    echo("[bold]limit[/]: raw confluent-kafka consumer")
    env = {**os.environ, **bench.env}
    logs = bench.home / "logs"
    raw = measured.run(
        "bench.raw_consumer", [bench.bootstrap, measured.offsets_arg(offsets)], env, logs / "raw.log", 1800
    )
    echo(f"  raw consumer: {raw['clicks_per_s']:,} clicks/s")
    echo("[bold]limit[/]: Spark Kafka read -> noop, then + click parser")
    spark = measured.run(
        "bench.spark_noop",
        [bench.bootstrap, measured.offsets_arg(offsets)],
        env,
        logs / "spark-noop.log",
        1800,
    )
    memory = spark.pop("memory")
    echo(
        f"  Spark read: {spark['read']['clicks_per_s']:,}/s, "
        f"read + parse: {spark['parse']['clicks_per_s']:,}/s"
    )
    return {"raw": raw, "spark": {**spark, "memory": memory}}


def naive(bench: Bench, offsets: stack.Offsets) -> dict[str, Any]:
    echo("[bold]naive baseline[/]: one PostgreSQL lookup per click, same outputs")
    stack.truncate_sinks(bench)
    env = {**os.environ, **bench.env}
    result = measured.run(
        "bench.naive",
        [bench.bootstrap, measured.offsets_arg(offsets)],
        env,
        bench.home / "logs" / "naive.log",
        7200,
    )
    echo(f"  naive: {result['clicks_per_s']:,} clicks/s")
    return result


def measure(p: Params, results: dict[str, Any]) -> None:
    with stack.running(p.home, echo, keep=p.keep_stack) as bench:
        inputs = Inputs(bench)
        if p.cluster_only:
            results["cluster"] = cluster_comparison(bench, inputs, p)
            return
        results["scaling"] = [scaling_step(bench, inputs, u, p) for u in p.scaling_users if u < p.users]
        results.update(main_measurement(bench, inputs, p))
        offsets = results.pop("input_offsets")
        if p.realtime:  # before the Avro path, which empties the clicks topic
            results["realtime"] = realtime_measurement(bench, inputs, p)
        if p.limits:
            results.update(limits(bench, offsets))
        if p.naive:
            results["naive"] = naive(bench, offsets)
        if p.kinesis:
            results["kinesis"] = kinesis_path(bench, p)
        if p.avro:  # it empties the clicks topic: after every step that reads the main run's clicks
            results["avro"] = avro_events_path(bench, inputs, p)
        if p.cluster_workers:  # before the larger user counts: the pair runs over `--users` users
            results["cluster"] = cluster_comparison(bench, inputs, p)
        results["scaling"] += [scaling_step(bench, inputs, u, p) for u in p.scaling_users if u >= p.users]
        if p.tables:  # last: its connector stays, and its setup stops the default one while it runs
            results["tables"] = three_tables_path(bench, p)
            results["tables"]["over_one_table"] = tables_over_one_table(results)
        main = results["streamfold"]
        results["ratios"] = {
            "streamfold_over_naive": _ratio(main, results.get("naive")),
            "streamfold_over_raw": _ratio(main, results.get("raw")),
            "streamfold_over_spark_read": _ratio(main, results.get("spark", {}).get("read")),
            "streamfold_over_kstreams": _ratio(main, results.get("kstreams")),
            "realtime_over_micro_batch": _ratio(results.get("realtime"), main, "clicks_per_s_from_start"),
            "kinesis_over_kafka": _ratio(results.get("kinesis"), main),
            "avro_over_json": _ratio(results.get("avro"), main),
            "tables_over_one_table": _ratio(results.get("tables"), main),
        }


def draw_charts(results: dict[str, Any], path: Path) -> bool:
    """The charts beside the results, linked from the .md; a failure here leaves the results written."""
    try:
        charts = plots.write_charts(results, path)
    except Exception:  # noqa: BLE001 - reported; `python -m bench.plots <json>` can draw them again
        console.print_exception()
        return False
    report.link_charts(path.with_suffix(".md"), charts)
    for chart in charts:
        echo(f"chart: {chart}")
    return True


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None, key: str = "clicks_per_s") -> float | None:
    if not a or not b:
        return None
    return round(a[key] / b[key], 3)


@app.command()
def main(
    clicks: Annotated[int, typer.Option(help="clicks preloaded for the throughput run")] = 2_000_000,
    users: Annotated[int, typer.Option(help="users the clicks are spread over")] = 100_000,
    updates: Annotated[
        int | None, typer.Option(help="profile updates while loading (default clicks/100)")
    ] = None,
    rate: Annotated[float, typer.Option(help="offered load for the latency run, clicks/s")] = 20_000,
    low_rates: Annotated[
        str, typer.Option(help="lower loads measured first, clicks/s (comma list)")
    ] = "1000,5000",
    latency_seconds: Annotated[float, typer.Option(help="length of each latency window (0: skip)")] = 60,
    scaling_users: Annotated[
        str, typer.Option(help="user counts for the cost-growth steps")
    ] = "10000,100000,1000000",
    scaling_clicks: Annotated[int, typer.Option(help="clicks per cost-growth step")] = 400_000,
    skip_scaling: Annotated[bool, typer.Option(help="no cost-growth steps")] = False,
    skip_naive: Annotated[bool, typer.Option(help="no naive baseline")] = False,
    skip_limits: Annotated[bool, typer.Option(help="no raw consumer / Spark noop")] = False,
    skip_cluster: Annotated[bool, typer.Option(help="no local-vs-cluster comparison")] = False,
    skip_kstreams: Annotated[
        bool, typer.Option(help="no Kafka Streams (the seed's system) side by side")
    ] = False,
    kstreams_variants: Annotated[
        str,
        typer.Option(
            help="Kafka Streams applications to run, the fastest the baseline: lean (GlobalKTable, typed, "
            "lean repartition), global (GlobalKTable), table (KTable)"
        ),
    ] = "lean,global",
    skip_realtime: Annotated[
        bool, typer.Option(help="no run of the same clicks through the real-time mode (run --mode realtime)")
    ] = False,
    skip_kinesis: Annotated[bool, typer.Option(help="no run of the same clicks through Kinesis")] = False,
    skip_avro: Annotated[
        bool, typer.Option(help="no run of the same clicks as Avro events (events.format: avro)")
    ] = False,
    skip_tables: Annotated[
        bool, typer.Option(help="no run of the same clicks joined with three tables (bench/tables_path.py)")
    ] = False,
    cluster_workers: Annotated[
        int, typer.Option(help="one-core Spark workers of the local-vs-cluster comparison")
    ] = 2,
    cluster_clicks: Annotated[
        int | None, typer.Option(help="clicks of the local-vs-cluster comparison (default --clicks)")
    ] = None,
    cluster_only: Annotated[
        bool, typer.Option(help="only the local-vs-cluster comparison (a quick one for development)")
    ] = False,
    profile_seconds: Annotated[
        float, typer.Option(help="py-spy the job this long during the throughput run")
    ] = 0,
    job_conf: Annotated[
        list[str] | None, typer.Option(help="KEY=VALUE for `streamfold run --conf` (experiments)")
    ] = None,
    home: Annotated[
        Path, typer.Option(help="the bench stack's STREAMFOLD_HOME (wiped first)")
    ] = DEFAULT_HOME,
    keep_stack: Annotated[bool, typer.Option(help="leave the stack running afterwards (to inspect)")] = False,
    results_dir: Annotated[
        Path, typer.Option(help="where the results (.json, .md, charts) are written")
    ] = report.RESULTS_DIR,
) -> None:
    """Throughput, latency and memory of streamfold, a naive baseline, and the machine's limit."""
    # Every process the bench starts (the job, Kafka Streams, the baselines) keeps its files, temporary
    # ones in /tmp among them, to its owner.
    os.umask(config.PRIVATE_UMASK)
    variants = tuple(v.strip() for v in kstreams_variants.split(",") if v.strip())
    if not variants or not set(variants) <= set(kstreams.VARIANTS):
        raise typer.BadParameter(f"--kstreams-variants takes some of {', '.join(kstreams.VARIANTS)}")
    if cluster_only and (skip_cluster or cluster_workers < 1):
        raise typer.BadParameter(
            "--cluster-only needs the comparison: --cluster-workers >= 1, no --skip-cluster"
        )
    p = Params(
        clicks=clicks,
        users=users,
        updates=clicks // 100 if updates is None else updates,
        rate=rate,
        low_rates=tuple(float(r) for r in low_rates.split(",") if r.strip()),
        latency_seconds=latency_seconds,
        scaling_users=() if skip_scaling else tuple(int(u) for u in scaling_users.split(",") if u.strip()),
        scaling_clicks=scaling_clicks,
        naive=not skip_naive,
        limits=not skip_limits,
        kstreams=not skip_kstreams,
        kstreams_variants=variants,
        realtime=not skip_realtime,
        kinesis=not skip_kinesis,
        avro=not skip_avro,
        tables=not skip_tables,
        cluster_workers=0 if skip_cluster else cluster_workers,
        cluster_clicks=clicks if cluster_clicks is None else cluster_clicks,
        cluster_only=cluster_only,
        profile_seconds=profile_seconds,
        job_conf=dict(item.split("=", 1) for item in job_conf or []),
        home=home,
        keep_stack=keep_stack,
    )
    started = datetime.now(UTC)
    results: dict[str, Any] = {
        "date": started.isoformat(timespec="seconds"),
        "command": command_line(sys.argv[1:]),
        "machine": report.machine(),
        "params": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(p).items()},
        "how_measured": {
            "throughput": job.__doc__,
            "latency": latency.__doc__,
            "kstreams": kstreams.__doc__,
            "tables": tables_path.__doc__,
        },
        "loadavg_at_start": loadavg(),
    }
    failed = False
    try:
        measure(p, results)
    except Exception:  # noqa: BLE001 - the partial results are still worth writing
        failed = True
        results["error"] = traceback.format_exc()
        console.print_exception()
    results["total_minutes"] = round((datetime.now(UTC) - started).total_seconds() / 60, 1)
    path = report.write(results, started.strftime("%Y-%m-%dT%H%M%SZ"), results_dir)
    report.print_tables(results, Console(width=None if sys.stdout.isatty() else 200))
    echo(f"results: {path}")
    failed |= not draw_charts(results, path)
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
