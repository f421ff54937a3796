"""A user's own pipeline on the session's stack, as different from the demo as a file makes it: a
`customers` table with a bigint key (numeric, boolean, timestamptz, jsonb columns and PII that
must stay behind), `page_views` events with ISO-8601 times and a `views` count, three aggregates, Kafka
and Kinesis. And a row-by-row oracle that reads the same pipeline file: the reference parsers
(spec/events.py, spec/envelopes.py) and a plain sort-and-search over the profile versions."""

from __future__ import annotations

import bisect
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import requests
from psycopg import sql

from common import config, kinesis, plan
from common import pipeline_file as pf
from spec.envelopes import BadEnvelope, Change, parse_envelope
from spec.events import Rejected, parse_event
from tests.support.kafka import read_all
from tests.support.pipeline import Input, kafka_inputs, kinesis_inputs

ROOT = Path(__file__).resolve().parents[2]
TABLE = """CREATE TABLE public.customers_{tag} (
  id bigint PRIMARY KEY, email text NOT NULL, tier text, country varchar(2), credit numeric(12, 2),
  vip boolean, since timestamptz, prefs jsonb, notes text)"""
NEVER = -(2**63)


def pipeline_text(tag: str) -> str:
    """The file: names made unique by `tag` where the stack is shared (topics, stream, slot, connector)."""
    return f"""\
name: views_{tag}
profile:
  table: public.customers_{tag}
  key: id
  key_type: bigint
  columns:
    tier: {{type: text, if_missing: none}}
    country: {{type: text, if_missing: UNKNOWN}}
    credit: numeric
    vip: {{type: boolean, if_missing: false}}
    since: timestamptz
    prefs: jsonb
events:
  kafka_topic: page_views_{tag}
  kinesis_stream: page_views_{tag}
  key: customer_id
  time: {{field: ts, format: iso8601}}
  count: views
  fields: {{path: text, ms_on_page: bigint, score: {{type: double, required: false}}}}
outputs:
  cdc_topic_prefix: shop_{tag}
aggregates:
  - name: views_per_country_{tag}
    group_by: {{country: country}}
    sums: {{ms_total: ms_on_page}}
  - name: views_per_path_vip_{tag}
    group_by: {{path: path, vip: vip}}
  - name: views_per_tier_{tag}
    group_by: {{tier: tier}}
    count_column: views
"""


@dataclass(frozen=True)
class OwnPipeline:
    """The pipeline's database, file, home and parsed file."""

    dsn: str
    file: Path
    home: Path
    pipeline: pf.Pipeline

    def env(self) -> dict[str, str]:
        return {**os.environ, "STREAMFOLD_PG_DSN": self.dsn, "STREAMFOLD_HOME": str(self.home),
                "STREAMFOLD_PIPELINE": str(self.file)}  # fmt: skip

    def streamfold(self, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [sys.executable, "-m", "streamfold", *args],
            capture_output=True, text=True, timeout=timeout_s, env=self.env(), cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-4000:]
        return result

    def refused(self, *args: str) -> str:
        """The reason a `streamfold` command gives for refusing (exit 1), on one line."""
        result = subprocess.run(
            [sys.executable, "-m", "streamfold", *args],
            capture_output=True, text=True, timeout=600, env=self.env(), cwd=ROOT,
        )  # fmt: skip
        assert result.returncode == 1, (args, result.stdout, result.stderr[-2000:])
        return " ".join(result.stderr.split())

    def versions(self) -> dict[str, dict[str, Any]]:
        """`streamfold versions --json`, by name."""
        return {row["name"]: row for row in json.loads(self.streamfold("versions", "--json").stdout)}

    def landed(self, name: str, source: str) -> int:
        """Batches the job of pipeline name `name` (a version's: `<name>__<version>`) landed from `source`."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT count(*) FROM streamfold.sink_batches WHERE starts_with(query, %s)",
                (f"{name}-{source}:",),
            ).fetchone()
        assert row is not None
        return int(row[0])

    def version_pid(self, name: str) -> int:
        """The pid `streamfold reprocess` recorded for version `name`'s job."""
        return int((self.home / "versions" / name / "job.pid").read_text().split()[0])

    def start(self, source: str, log: Path, *args: str) -> subprocess.Popen:
        """The continuous job in its own process group; args: more of `run`'s (--mode, --conf)."""
        return subprocess.Popen(
            [sys.executable, "-m", "streamfold", "run", "--source", source, *args],
            stdout=log.open("a"), stderr=subprocess.STDOUT, env=self.env(), cwd=ROOT, start_new_session=True,
        )  # fmt: skip

    def connect(self) -> psycopg.Connection:
        return psycopg.connect(self.dsn, autocommit=True)

    def inputs(self, source: str, bootstrap: str) -> list[Input]:
        events = self.pipeline.events
        if source == "kinesis":
            assert events.kinesis_stream
            return kinesis_inputs(events.kinesis_stream)
        assert events.kafka_topic
        return kafka_inputs(bootstrap, events.kafka_topic)


def create(admin_dsn: str, home: Path, kinesis_only: bool = False) -> OwnPipeline:
    """The customers table, the pipeline file, and `streamfold setup` run on them, in the session's
    database (the local stack lets Debezium's role reach that one only); every name is new.
    kinesis_only: the file names the events' Kinesis stream and no Kafka topic."""
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(TABLE.format(tag=tag))
    home.mkdir(parents=True, exist_ok=True)
    file = home / "pipeline.yaml"
    text = pipeline_text(tag)
    file.write_text(text.replace(f"  kafka_topic: page_views_{tag}\n", "") if kinesis_only else text)
    own = OwnPipeline(admin_dsn, file, home, pf.load(file))
    own.streamfold("setup")
    return own


def drop(own: OwnPipeline, connect_url: str) -> None:
    """The connector, its slot, publication and tables: nothing keeps WAL or rows after the test."""
    p = own.pipeline
    tables = (*plan.of(p).captured, *(a.table for a in plan.of(p).aggregates))
    drop_installation(own.dsn, connect_url, p, tables)


def drop_installation(dsn: str, connect_url: str, p: pf.Pipeline, tables: tuple[str, ...]) -> None:
    """A pipeline's connector, slot, publication, history functions, enriched and history tables, and
    `tables` (the captured ones, aggregates), so that nothing keeps WAL or rows after a test."""
    requests.delete(
        f"{connect_url}/connectors/{plan.of(p).connector}", timeout=30, auth=config.connect_auth()
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(60):
            slot = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (plan.of(p).slot,)
            ).fetchone()
            if slot is None or not slot[0]:
                break
            time.sleep(1)
        if slot is not None:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (plan.of(p).slot,))
        conn.execute(sql.SQL("DROP PUBLICATION IF EXISTS {}").format(sql.Identifier(plan.of(p).publication)))
        histories = plan.histories(p)  # the profile's, and a file's further tables'
        for history in histories:
            conn.execute(sql.SQL("DROP FUNCTION IF EXISTS {}").format(sql.SQL(history.function)))
        for table in (
            *tables,
            plan.of(p).enriched_table,
            *(h.table for h in histories),
        ):  # each history's view too
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(sql.SQL(table)))
        conn.execute("DELETE FROM streamfold.pipelines WHERE name = %s", (p.name,))


def insert_customer(
    conn: psycopg.Connection, pipeline: pf.Pipeline, i: int, country: str | None, **values: Any
) -> None:
    columns = {"id": i, "email": f"secret{i}@example.com", "notes": "PII-NOTE", "country": country, **values}
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.SQL(pipeline.profile.table),
            sql.SQL(", ").join(map(sql.Identifier, columns)),
            sql.SQL(", ").join(sql.Placeholder() * len(columns)),
        ),
        [json.dumps(v) if k == "prefs" else v for k, v in columns.items()],
    )


def view(customer: int | str, t_ms: int, path: str = "/a", ms: int = 1000, views: int | None = None) -> bytes:
    """A page_views record with an ISO-8601 time."""
    import datetime as dt

    ts = (
        dt.datetime.fromtimestamp(t_ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
    body: dict[str, Any] = {"customer_id": customer, "ts": ts, "path": path, "ms_on_page": ms}
    if views is not None:
        body["views"] = views
    return json.dumps(body).encode()


def send_kinesis(stream: str, records: list[tuple[str, bytes]]) -> None:
    client = kinesis.client()
    kinesis.ensure_stream(client, stream, shards=2)
    for start in range(0, len(records), 500):
        kinesis.put_records(client, stream, records[start : start + 500])


# --- the oracle ---------------------------------------------------------------------------------------


Versions = dict[str, list[tuple[int, int, dict[str, Any] | None]]]


def history(bootstrap: str, pipeline: pf.Pipeline) -> tuple[Versions, set[str]]:
    """Every key's versions (valid_from, lsn, columns or None for a delete) from the CDC topic, and the
    CDC records the reference fold rejects, by dead-letter id."""
    spec, versions, dead = plan.of(pipeline).profile_spec, {}, set()
    for topic in (plan.of(pipeline).cdc_topic, plan.of(pipeline).heartbeat_topic):
        for m in read_all(bootstrap, topic):
            try:
                folded = parse_envelope(m.topic, m.raw_key, m.raw_value, spec)
            except BadEnvelope:
                dead.add(f"kafka:{m.topic}:{m.partition}:{m.offset}")
                continue
            if isinstance(folded, Change):
                columns = None if folded.op == "d" else folded.columns
                versions.setdefault(folded.key, []).append((folded.valid_from_ms, folded.lsn, columns))
    for found in versions.values():
        found.sort(key=lambda v: (v[0], v[1]))
    return versions, dead


def profile_at(versions: Versions, key: str, t: int, pipeline: pf.Pipeline) -> dict[str, Any]:
    """The carried columns as the enriched row holds them: the version valid at t, if_missing applied."""
    found = versions.get(key, [])
    i = bisect.bisect_right([v[0] for v in found], t) - 1
    columns = found[i][2] if i >= 0 else None
    out = {}
    for name, column in pipeline.profile.columns.items():
        value = None if columns is None else columns.get(name)
        missing = columns is None or value is None or (column.type == "text" and value == "")
        out[name] = column.if_missing if missing and column.if_missing is not None else value
    return out


@dataclass
class Expected:
    rows: dict[str, tuple[str, str, str, bool, Decimal | None, int]]  # event_id -> key, country, tier, vip...
    dead: set[str]


def expected(inputs: list[Input], versions: Versions, cdc_dead: set[str], pipeline: pf.Pipeline) -> Expected:
    now_ms, spec = int(time.time() * 1000), plan.of(pipeline).event_spec
    rows, dead = {}, set(cdc_dead)
    for item in inputs:
        try:
            event = parse_event(item.payload, now_ms, spec)
        except Rejected:
            dead.add(item.event_id)
            continue
        p = profile_at(versions, event.key, event.time_ms, pipeline)
        credit = None if p["credit"] is None else Decimal(p["credit"])
        rows[item.event_id] = (event.key, p["country"], p["tier"], p["vip"], credit, event.count)
    return Expected(rows, dead)


def actual_rows(
    conn: psycopg.Connection, pipeline: pf.Pipeline
) -> dict[str, tuple[str, str, str, bool, Decimal | None, int]]:
    cur = conn.execute(
        "SELECT event_id, customer_id::text, profile_country, profile_tier, profile_vip, profile_credit, "
        f"views FROM {plan.of(pipeline).enriched_table}"
    )
    return {row[0]: tuple(row[1:]) for row in cur}  # type: ignore[misc]


def dead_letters(conn: psycopg.Connection, pipeline: pf.Pipeline) -> set[str]:
    """The pipeline's dead letters: those of its events and CDC topics (the table is shared)."""
    resolved = plan.of(pipeline)
    sources = [f"kafka:{pipeline.events.kafka_topic}", f"kinesis:{pipeline.events.kinesis_stream}",
               f"kafka:{resolved.cdc_topic}", f"kafka:{resolved.heartbeat_topic}"]  # fmt: skip
    rows = conn.execute(
        "SELECT dead_letter_id FROM streamfold.dead_letters WHERE source = ANY(%s)", (sources,)
    )
    return {row[0] for row in rows}


def assert_matches(conn: psycopg.Connection, want: Expected, pipeline: pf.Pipeline) -> None:
    """Row by row, every aggregate equal to the sums over the enriched table, every dead letter."""
    got = actual_rows(conn, pipeline)
    missing, extra = want.rows.keys() - got.keys(), got.keys() - want.rows.keys()
    assert not missing and not extra, f"{len(missing)} events missing, {len(extra)} unexpected"
    wrong = {e: (got[e], want.rows[e]) for e in want.rows if got[e] != want.rows[e]}
    assert not wrong, f"{len(wrong)} events joined wrong, e.g. {list(wrong.items())[:3]}"
    # The file's first three aggregates (a test may add more, counted from then on).
    country, path_vip, tier = (a.table for a in plan.of(pipeline).aggregates[:3])
    checks = {
        country: ("country, count, ms_total", "profile_country, sum(views), sum(ms_on_page)", "1"),
        path_vip: ("path, vip, count", "path, profile_vip, sum(views)", "1, 2"),
        tier: ("tier, views", "profile_tier, sum(views)", "1"),
    }
    for table, (columns, from_rows, by) in checks.items():
        totals = set(conn.execute(f"SELECT {columns} FROM {table}").fetchall())
        sums = set(
            conn.execute(
                f"SELECT {from_rows} FROM {plan.of(pipeline).enriched_table} GROUP BY {by}"
            ).fetchall()
        )
        assert totals == sums, table
    (views,) = conn.execute(f"SELECT coalesce(sum(views), 0) FROM {tier}").fetchone()
    assert views == sum(r[-1] for r in want.rows.values())
    dead = dead_letters(conn, pipeline)
    assert dead == want.dead, f"missing {want.dead - dead}, unexpected {list(dead - want.dead)[:5]}"


def run_python(script: str, asked: Any) -> Any:
    """`script` in a Python process of its own (a Spark session an earlier test of the pytest process made
    holds a JVM without the streamfold jars), `asked` as JSON on its stdin; its last line, as JSON."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(asked), capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])
