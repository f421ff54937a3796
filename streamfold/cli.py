"""The `streamfold` command: stack, setup, run, status, generate, query, reprocess and its versions, swap,
topics."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import sys
import tomllib
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from common import config
from common import pipeline_file as pf

app = typer.Typer(help="streamfold: CDC ingestion and enrichment appliance.", no_args_is_help=True)
stack_app = typer.Typer(help="The local stack: every service as a native process under STREAMFOLD_HOME.")
generate_app = typer.Typer(help="Sample profiles and realistic event load, for any pipeline file.")
app.add_typer(stack_app, name="stack")
app.add_typer(generate_app, name="generate")
# soft_wrap: a line stays one line whatever the width (80 when stderr is a file), so a job's log can be
# grepped; a terminal wraps it anyway.
console = Console(stderr=True, soft_wrap=True)


class Source(StrEnum):
    kafka = "kafka"
    kinesis = "kinesis"


class Mode(StrEnum):
    micro_batch = "micro_batch"
    realtime = "realtime"


PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def version() -> str:
    """The installed distribution's version; where streamfold runs without being pip-installed (the
    compose image puts the packages on PYTHONPATH), the version in the pyproject.toml beside them."""
    try:
        return importlib.metadata.version("streamfold")
    except importlib.metadata.PackageNotFoundError:
        return pyproject_version(PYPROJECT) or "unknown"


def pyproject_version(path: Path) -> str | None:
    try:
        return str(tomllib.loads(path.read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None


def print_version(wanted: bool) -> None:
    if wanted:
        print(f"streamfold {version()}")
        raise typer.Exit()


def fail(message: str, code: int = 1) -> NoReturn:
    console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise typer.Exit(code)


# Commands that need no pipeline file (the local stack is the same whatever the pipeline).
_WITHOUT_PIPELINE = {None, "stack"}


@app.callback()
def main(
    ctx: typer.Context,
    _version: Annotated[
        bool,
        typer.Option("--version", callback=print_version, is_eager=True, help="print the version and exit"),
    ] = False,
    pipeline: Annotated[
        Path | None,
        typer.Option(
            envvar=pf.PIPELINE_VAR,
            help="the pipeline file (default: ./streamfold.yaml)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Reads and validates the pipeline file first: a bad one is one error with its line, exit 2, before any
    service is touched. The file's path goes to every process the command starts."""
    # What any command writes under STREAMFOLD_HOME (checkpoints, status files, logs, stack files) is its
    # owner's only, and so is what the processes it starts write (the job's JVM among them).
    os.umask(config.PRIVATE_UMASK)
    if pipeline is not None:
        os.environ[pf.PIPELINE_VAR] = str(pipeline.resolve())
    if ctx.invoked_subcommand in _WITHOUT_PIPELINE or "--help" in sys.argv:
        return
    try:
        pf.load()
    except pf.PipelineFileError as exc:
        fail(str(exc), code=2)


def progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=console,
    )


ServiceArgument = Annotated[
    str,
    typer.Argument(
        help="postgres, kafka, connect, kinesis; with a Spark cluster spark-master, spark-worker-1..N",
        show_default=False,
    ),
]


@contextlib.contextmanager
def stack_errors() -> Iterator[None]:
    """The launcher's StackError (one line, maybe a log tail after it) is a red error, exit status 1."""
    from stack.home import StackError

    try:
        yield
    except StackError as exc:
        fail(str(exc))


@stack_app.command("up")
def stack_up(
    spark_workers: Annotated[
        int | None,
        typer.Option(
            help="also run a Spark standalone cluster of N one-core workers (0: none; default: as before)",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Start PostgreSQL, Kafka (KRaft), Kafka Connect + Debezium and kinesalite; idempotent."""
    from stack import lifecycle

    with stack_errors():
        lifecycle.up(config.home(), spark_workers)
    console.print(f"[green]stack up[/] (home {config.home()}); `streamfold stack env` prints its variables")


@stack_app.command("down")
def stack_down() -> None:
    """Stop the processes this stack started (pid files); leaves data in place."""
    from stack import lifecycle

    with stack_errors():
        lifecycle.down(config.home())


@stack_app.command("status")
def stack_status() -> None:
    """Each service, its endpoint and whether it runs."""
    from stack import lifecycle

    table = Table("service", "state", "endpoint", "pid")
    with stack_errors():
        rows = lifecycle.status(config.home())
    for row in rows:
        color = {"up": "green", "unhealthy": "yellow"}.get(row.state, "red")
        table.add_row(row.name, f"[{color}]{row.state}[/]", row.endpoint, str(row.pid or ""))
    Console().print(table)


@stack_app.command("env")
def stack_env() -> None:
    """Print `export KEY=VALUE` lines: eval "$(streamfold stack env)"."""
    from stack import lifecycle

    with stack_errors():
        lines = lifecycle.env_lines(config.home())
    for line in lines:
        print(line)


@stack_app.command("start")
def stack_start(service: ServiceArgument) -> None:
    """Start one service (the services it needs must be up) and wait until it is healthy."""
    from stack import lifecycle

    with stack_errors():
        lifecycle.start_service(config.home(), service)


@stack_app.command("stop")
def stack_stop(service: ServiceArgument) -> None:
    """Stop one service; its data stays."""
    from stack import lifecycle

    with stack_errors():
        lifecycle.stop_service(config.home(), service)
    console.print(f"[yellow]stopped[/] {service}")


@stack_app.command("restart")
def stack_restart(service: ServiceArgument) -> None:
    """Stop one service, start it again and wait until it is healthy."""
    from stack import lifecycle

    with stack_errors():
        lifecycle.restart_service(config.home(), service)


@app.command()
def check() -> None:
    """Validate the pipeline file, and hold it against the database: the table, its key, its columns, and
    the file last set up (a change `setup` and `run` would refuse)."""
    import psycopg

    from db import introspect, pipeline_schema, schema
    from pipeline import preflight

    try:
        preflight.check_plan(pf.load())
    except pf.PipelineFileError as exc:
        fail(str(exc), code=2)
    settings = config.load()
    try:
        with psycopg.connect(settings.pg_dsn, connect_timeout=10) as conn:
            introspect.check(conn, settings.pipeline)
        with schema.engine(settings.pg_dsn).connect() as installed:
            pipeline_schema.check_absorbable(installed, settings.pipeline)
    except pf.PipelineFileError as exc:
        fail(str(exc), code=2)
    except psycopg.OperationalError as exc:
        fail(f"the file is valid, but Postgres is not reachable to check it against: {str(exc).strip()}")
    p = settings.pipeline
    console.print(
        f"[green]ok[/] pipeline {p.name}: {p.profile.table} (key {p.profile.key}, {len(p.profile.columns)} "
        f"columns) joins {p.events.kafka_topic or p.events.kinesis_stream} on {p.events.key}; "
        f"{len(p.aggregates)} aggregates"
    )


@app.command()
def setup(
    timeout: Annotated[float, typer.Option(help="seconds to wait for the connector to run")] = 180,
) -> None:
    """Schema and roles, topics, the Kinesis stream, and the Debezium connector; waits until it runs."""
    from connectors.setup import SetupError, run_setup
    from db.locks import LockWaitTimeout
    from pipeline import preflight

    try:
        preflight.check_plan(pf.load())  # what `run` would refuse, before anything is applied
        run_setup(config.load(), timeout_s=timeout, echo=lambda msg: console.print(f"[cyan]setup[/] {msg}"))
    except pf.PipelineFileError as exc:
        fail(str(exc), code=2)
    except (SetupError, config.ConfigError, LockWaitTimeout) as exc:
        fail(str(exc))


@app.command()
def run(
    source: Annotated[Source, typer.Option(help="where clicks come from")] = Source.kafka,
    once: Annotated[
        bool, typer.Option("--once", help="process everything available at start, then exit")
    ] = False,
    conf: Annotated[
        list[str] | None,
        typer.Option(
            help="KEY=VALUE: join.mode, join.max_wait, join.version_retention, trigger.interval, spark.*"
        ),
    ] = None,
    version: Annotated[
        str | None,
        typer.Option(help="run (restart) the job of an output version `streamfold reprocess` made"),
    ] = None,
    mode: Annotated[
        Mode | None,
        typer.Option(
            help="micro_batch, or Spark's real-time mode (Kafka events); default: the file's run.mode"
        ),
    ] = None,
) -> None:
    """The Spark job: CDC fold, temporal join, aggregates, sinks."""
    from common.versions import VersionError
    from pipeline import job

    settings = conf_pairs(conf)
    try:
        if version is not None:
            if once or settings or source is not Source.kafka or mode is not None:
                fail("run --version takes no other option: the version's settings are those it was made with")
            from streamfold import reprocess

            reprocess.run_version(config.load(), version, echo=console.print)
        else:
            chosen = None if mode is None else mode.value
            job.run(config.load(), source.value, once=once, conf=settings, echo=console.print, mode=chosen)
    except pf.PipelineFileError as exc:
        fail(str(exc), code=2)
    except (config.ConfigError, job.JobError, VersionError) as exc:
        fail(str(exc))


def conf_pairs(conf: list[str] | None) -> dict[str, str]:
    try:
        return dict(item.split("=", 1) for item in conf or [])
    except ValueError:
        fail("--conf takes KEY=VALUE")
        raise  # unreachable: fail exits


VersionArgument = Annotated[str, typer.Argument(help="the version's name, e.g. v2", show_default=False)]


@app.command()
def reprocess(
    version: Annotated[
        str, typer.Option("--version", help="the new version's name, e.g. v2", show_default=False)
    ],
    from_: Annotated[
        str,
        typer.Option(
            "--from",
            help="earliest, or an ISO-8601 time (the events' Kafka timestamps, or Kinesis arrival times)",
        ),
    ] = "earliest",
    source: Annotated[
        Source | None,
        typer.Option(
            help="where the events come from (default: kafka if the file names a topic, else kinesis)"
        ),
    ] = None,
    pipeline: Annotated[
        Path | None, typer.Option(help="the pipeline file to reprocess with (default: the current one)")
    ] = None,
    conf: Annotated[
        list[str] | None,
        typer.Option(
            help="KEY=VALUE for the version's job: spark.* (e.g. spark.sql.shuffle.partitions), join.*"
        ),
    ] = None,
) -> None:
    """Rebuild every output under a new version's names from the retained input, in a job of its own that
    then keeps up with the live input (docs/reprocess.md)."""
    from common.versions import VersionError
    from connectors.setup import SetupError
    from pipeline import job
    from streamfold import reprocess as versions

    settings = conf_pairs(conf)
    if pipeline is not None:
        os.environ[pf.PIPELINE_VAR] = str(pipeline.resolve())
    try:
        log = versions.reprocess(
            config.load(),
            version,
            from_,
            settings,
            echo=lambda m: console.print(f"[cyan]setup[/] {m}"),
            source=source.value if source else None,
        )
    except pf.PipelineFileError as exc:
        fail(str(exc), code=2)
    except (config.ConfigError, job.JobError, VersionError, SetupError) as exc:
        fail(str(exc))
    console.print(f"[green]started[/] the job of {version} (log {log}); `streamfold versions` shows its lag")


@app.command("versions")
def list_versions(
    as_json: Annotated[bool, typer.Option("--json", help="print the versions as JSON")] = False,
) -> None:
    """The output versions: which is current, whether each one's job runs, its lag."""
    import json

    from streamfold import reprocess as versions

    try:
        found = versions.rows(config.load())
    except config.ConfigError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps([row.as_json() for row in found], indent=2))
        return
    table = Table("version", "current", "created", "from", "running", "lag", "caught up")
    for row in found:
        caught = "yes" if row.lag.caught_up() else "no"
        lag = row.lag.describe()
        table.add_row(
            row.name, "*" if row.current else "", row.created, row.start, str(row.running), lag, caught
        )
    Console().print(table)


@app.command()
def swap(version: VersionArgument) -> None:
    """Make a caught-up version the one users' table names read, in one transaction; swap back to roll back
    (`live` is the pipeline's own)."""
    from common.versions import VersionError
    from streamfold import reprocess as versions

    try:
        versions.swap(config.load(), version, echo=console.print)
    except (config.ConfigError, VersionError) as exc:
        fail(str(exc))


@app.command("drop-version")
def drop_version(version: VersionArgument) -> None:
    """Stop a version's job and remove its tables, topics and checkpoint (never the current version's)."""
    from common.versions import VersionError
    from streamfold import reprocess as versions

    try:
        versions.drop_version(config.load(), version, echo=console.print)
    except (config.ConfigError, VersionError) as exc:
        fail(str(exc))


@app.command()
def topics(as_json: Annotated[bool, typer.Option("--json", help="print them as JSON")] = False) -> None:
    """The output topics to consume now: the current version's, by the live pipeline's names, and where a
    consumer that follows a swap starts on them (docs/reprocess.md, "Kafka consumers across a swap")."""
    import json

    from common.versions import VersionError
    from streamfold import reprocess as versions

    try:
        now = versions.current_topics(config.load())
    except (config.ConfigError, VersionError) as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(now, indent=2))
        return
    since = f" since {now['swapped_at']}, consumers from {now['consumers_from']}" if now["swapped_at"] else ""
    print(f"current version {now['version']}{since}")
    for name, topic in now["topics"].items():
        print(f"{name} -> {topic}")


def _generate_profiles(count: int) -> None:
    from common import plan
    from streamfold.generate import load_tables, table_rows

    settings = config.load()
    joins = plan.joins(settings.pipeline)
    with progress() as bar:
        tasks: dict[str, Any] = {}
        for position, join in enumerate(joins):
            if join.table.table not in tasks:
                tasks[join.table.table] = bar.add_task(join.table.table, total=table_rows(count, position))
        inserted = load_tables(
            settings.pg_dsn,
            count,
            settings.pipeline,
            on_progress=lambda table, n: bar.advance(tasks[table], n),
        )
    for table, rows in inserted.items():
        what = "profiles" if table == joins[0].table.table else "rows"
        console.print(f"{rows} {what} inserted into {table}")


@generate_app.command("profiles")
def generate_profiles(count: Annotated[int, typer.Option(help="number of profiles")] = 1000) -> None:
    """Insert sample profiles 1..N into the pipeline's profile table, and keys 1..N/10 into its first further
    table, 1..N/100 into the second... (foreign keys drawn among them; existing keys are left alone)."""
    _generate_profiles(count)


generate_app.command("users", hidden=True)(generate_profiles)


class EventFormat(StrEnum):
    json = "json"
    avro = "avro"


def _event_encoder(pipeline: pf.Pipeline, chosen: EventFormat | None) -> tuple[str, Any]:
    """The format events are sent in (the file's unless chosen) and its encoder; Avro registers the
    file's schema first."""
    from streamfold import avro_events, generate

    fmt = chosen.value if chosen else pipeline.events.format
    if fmt == "json":
        return fmt, generate.as_json
    if not config.registry_url():
        fail(f"Avro events need the schema registry: set {config.REGISTRY_URL_VAR} (`streamfold stack env`)")
    try:
        return f"avro, subject {avro_events.subject(pipeline)}", avro_events.encoder(pipeline)
    except (RuntimeError, OSError) as exc:
        fail(f"the schema registry at {config.registry_url()}: {exc}")


def _generate_events(
    count: int,
    keys: int,
    sink: Source,
    rate: float | None,
    seed: int,
    bad_every: int,
    key_offset: int,
    event_format: EventFormat | None = None,
) -> None:
    from streamfold import generate

    settings = config.load()
    spec = generate.ClickSpec(count, keys, seed, rate, key_offset, settings.pipeline)
    fmt, encode = _event_encoder(settings.pipeline, event_format)
    records = generate.encoded(spec, bad_every=bad_every, encode=encode)
    target = settings.clicks_topic if sink is Source.kafka else settings.clicks_stream
    with progress() as bar:
        task = bar.add_task(f"events ({fmt}) -> {sink.value} {target}", total=count)
        advance = lambda n: bar.advance(task, n)  # noqa: E731
        if sink is Source.kafka:
            sent = generate.send_kafka(settings.kafka_bootstrap, records, advance, target)
        else:
            sent = generate.send_kinesis(records, advance, target)
    console.print(f"{sent} events sent to {sink.value} {target}")


CountOption = Annotated[int, typer.Option(help="number of events")]
KeysOption = Annotated[int, typer.Option("--users", "--keys", help="events are spread over keys 1..M")]
SinkOption = Annotated[
    Source,
    typer.Option(
        help="the pipeline file's Kafka topic or Kinesis stream (or STREAMFOLD_CLICKS_TOPIC / _STREAM)"
    ),
]
RateOption = Annotated[float | None, typer.Option(help="events per second (default: as fast as possible)")]
SeedOption = Annotated[int, typer.Option(help="random seed")]
BadOption = Annotated[int, typer.Option(help="make every Nth record malformed (0: none)")]
OffsetOption = Annotated[
    int, typer.Option("--user-offset", "--key-offset", help="use keys offset+1.. instead of 1..")
]


FormatOption = Annotated[
    EventFormat | None,
    typer.Option("--format", help="json or avro (the schema registered first); default: the file's format"),
]


@generate_app.command("events")
def generate_events(
    count: CountOption = 10_000,
    keys: KeysOption = 1000,
    sink: SinkOption = Source.kafka,
    rate: RateOption = None,
    seed: SeedOption = 11,
    bad_every: BadOption = 0,
    key_offset: OffsetOption = 0,
    event_format: FormatOption = None,
) -> None:
    """Realistic event load for the pipeline file's events (event time = the wall clock at send time)."""
    _generate_events(count, keys, sink, rate, seed, bad_every, key_offset, event_format)


# The default pipeline's names for the same commands.
generate_app.command("clicks", hidden=True)(generate_events)


@app.command()
def status(
    as_json: Annotated[bool, typer.Option("--json", help="print the figures as JSON")] = False,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="exit 1 when something needs attention (lost capture, versions with drifted columns)",
        ),
    ] = False,
) -> None:
    """How far behind the job is: source lag, CDC progress age, clicks waiting, batches, dead letters, the
    replication slot, and whether the publication still captures the profile table."""
    import json

    from streamfold import reprocess
    from streamfold import status as job_status
    from streamfold.status_view import render

    try:
        settings = config.load()
        figures = job_status.collect(settings, lambda: reprocess.version_figures(settings))
    except config.ConfigError as exc:
        fail(str(exc))
    if as_json:
        print(json.dumps(figures, indent=2))
    else:
        render(figures, Console())
    if check and job_status.needs_attention(figures):
        raise typer.Exit(1)


class QueryFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


DISPLAY_ROWS = 1000  # `query --format table` draws at most this many rows unless --limit says otherwise


@app.command()
def query(
    sql_or_name: Annotated[
        str,
        typer.Argument(
            help="SQL, or a name: an aggregate's, the enriched table's, totals, dead_letters, "
            "versions KEY, profile_at KEY TIME"
        ),
    ],
    arguments: Annotated[list[str] | None, typer.Argument(help="the named query's arguments")] = None,
    output: Annotated[
        QueryFormat,
        typer.Option(
            "--format",
            help="table (drawn, at most --limit rows), csv (a header line, then every row) or json "
            "(JSON lines: one object per row, every row)",
        ),
    ] = QueryFormat.table,
    limit: Annotated[
        int | None,
        typer.Option(
            min=0, help=f"rows to print, 0 for all [default: {DISPLAY_ROWS} for table, all for csv and json]"
        ),
    ] = None,
    timeout: Annotated[
        str | None,
        typer.Option(
            help="the statement's timeout, e.g. 5min, instead of the reader role's (setup's "
            "STREAMFOLD_READER_TIMEOUT)"
        ),
    ] = None,
) -> None:
    """Print rows from the sink tables (read-only role), streamed: memory stays bounded whatever their
    number."""
    import psycopg

    from db import queries
    from streamfold import query_output

    given = tuple(arguments or ())
    cap = (DISPLAY_ROWS if output is QueryFormat.table else 0) if limit is None else limit
    try:
        settings = config.load()
        named = queries.named(settings.pipeline)
        sql, wanted = queries.with_arguments(settings.pipeline).get(sql_or_name, (None, ()))
        if len(given) != len(wanted):
            takes = " ".join(wanted) or "no arguments"
            fail(f"query {sql_or_name[:40]} takes {takes}, got {len(given)} argument(s)")
        statement = sql or named.get(sql_or_name, sql_or_name)
        with queries.rows(settings.reader_dsn, statement, given, timeout) as (columns, rows):
            if output is QueryFormat.table:
                titled = sql_or_name in named or sql is not None
                title = " ".join((sql_or_name, *given)) if titled else None
                printed, cut = query_output.table(columns, rows, cap, title)
            else:
                printed, cut = query_output.lines(output.value, columns, rows, cap)
    except psycopg.Error as exc:
        fail(str(exc).strip())
    console.print(f"(first {printed} rows; --limit 0 for all)" if cut else f"({printed} rows)")


@app.command()
def explain(
    event_id: Annotated[str, typer.Argument(help="an event's id, e.g. kafka:clicks:0:42")],
) -> None:
    """Print an event, the profile version it joined, the versions either side, and why."""
    import psycopg

    from streamfold.explain import explain as explained

    try:
        settings = config.load()
        lines = explained(settings.reader_dsn, settings.pipeline, event_id)
    except (psycopg.Error, LookupError) as exc:
        fail(str(exc).strip())
    for line in lines:
        print(line)


@app.command()
def topic(
    name: Annotated[str, typer.Argument(help="a Kafka topic, e.g. cdc.public.users, user_clicks")],
    count: Annotated[int, typer.Option(help="how many of the latest records per partition")] = 5,
) -> None:
    """Print the latest records of a Kafka topic (key, value, partition, offset)."""
    from common.topics import latest_records

    try:
        records = latest_records(config.load().kafka_bootstrap, name, count)
    except KeyError:
        fail(f"no topic {name}")
    for record in records:
        print(f"{record.partition}:{record.offset} {record.key} {record.value}")


dead_letters_app = typer.Typer(help="The dead letters: records the job could not process, and their replay.")
app.add_typer(dead_letters_app, name="dead-letters")


@dead_letters_app.command("replay")
def replay_dead_letters(
    reason: Annotated[
        str | None, typer.Option(help="only letters whose reason contains this text", show_default=False)
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="only letters recorded since: an ISO-8601 time or a duration (2h, 7d)", show_default=False
        ),
    ] = None,
    source: Annotated[
        str | None, typer.Option(help="only letters of this source, e.g. kafka:clicks", show_default=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the outcome as JSON")] = False,
) -> None:
    """Send the chosen events' dead letters through the pipeline again, each exactly once (docs/operations.md,
    "Replaying dead letters"); those still bad come back as new dead letters."""
    import dataclasses
    import datetime as dt
    import json

    import psycopg

    from streamfold import dead_letters

    try:
        settings = config.load()
        chosen = dead_letters.Selection(
            reason, dead_letters.parse_since(since, dt.datetime.now(dt.UTC)) if since else None, source
        )
        report = dead_letters.replay(settings, chosen, echo=console.print)
    except (config.ConfigError, dead_letters.ReplayError, psycopg.Error) as exc:
        fail(str(exc).strip())
    if as_json:
        print(json.dumps(dataclasses.asdict(report), indent=2))
        return
    print(dead_letters.describe(report))
