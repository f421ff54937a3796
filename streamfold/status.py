"""`streamfold status`: how far behind the job is, gathered from where each fact lives.

- source lag: the checkpoint's last committed offsets (what the job processed) against the Kafka end offsets,
  or per Kinesis shard MillisBehindLatest and the records after the committed sequence number;
- CDC progress age: the newest Debezium timestamp among the CDC records the clicks query has processed;
- batches and clicks waiting in the join: the files the running job writes (pipeline/status_files.py); the
  waiting count is taken when asked, so status asks the running job and waits up to COUNT_WAIT_S for it;
- dead letters of the last hour, and those not replayed by reason (Postgres), and the Debezium connector's
  state (Kafka Connect REST);
- each reprocessed output version: whether its job runs, its lag on every input partition, caught up or not;
- profiles whose current version has drifted columns (renamed, dropped or retyped in the table: the history
  table's `incomplete`, so it holds across restarts until a newer version, e.g. the repair's snapshot,
  replaces them): needs_attention, what `status --check` fails on; and the drifted changes the running
  job saw since it started (the query's status file);
- the pipeline's replication slot (pg_replication_slots): whether Debezium reads it, the WAL it holds back,
  and a warning past STREAMFOLD_SLOT_WAL_WARN_MB or when PostgreSQL is about to invalidate it, or has.
- the capture (db/capture.py): whether the publication still carries the profile table and every column the
  pipeline file carries; when not, `problems` names it and `status --check` exits 1.

Each section is gathered on its own: a service that is down turns its section into an error, not the screen.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import requests
from botocore.config import Config
from confluent_kafka import Consumer, TopicPartition

from common import config, kinesis, names, plan, registry
from common import pipeline_file as pf
from db import capture as db_capture
from pipeline.status_files import JOB_FILE, WAITING_FILE, now_ms, read_json, request_count, status_dir
from pipeline.temporal_join import committed_batches
from streamfold import dead_letters

TIMEOUT_S = 5.0
# Counting the records a Kinesis shard still holds stops here (MillisBehindLatest says the rest).
KINESIS_COUNT_CAP = 100_000
KINESIS_CONFIG = Config(retries={"max_attempts": 2}, connect_timeout=TIMEOUT_S, read_timeout=TIMEOUT_S)
# A count of the clicks waiting in the join takes the running job a few seconds (pipeline/status_files.py).
COUNT_WAIT_S = 15.0
# The WAL a replication slot may hold back before `status` warns (STREAMFOLD_SLOT_WAL_WARN_MB overrides it):
# a quarter of the stacks' max_slot_wal_keep_size (4GB, stack/postgres.py), time to act before PostgreSQL
# invalidates the slot.
SLOT_WAL_WARN_VAR = "STREAMFOLD_SLOT_WAL_WARN_MB"
SLOT_WAL_WARN_MB = 1024
MIB = 1024 * 1024


def collect(settings: config.Settings, versions: Callable[[], list[dict[str, Any]]]) -> dict[str, Any]:
    """Everything `streamfold status` shows, as JSON-able data; `versions` gathers each output version
    `streamfold reprocess` made, its job and its lag (streamfold/reprocess.py, which reads this module)."""
    home, resolved = settings.home, plan.of(settings.pipeline)
    checkpoints = committed_offsets(home / "checkpoints")
    return {
        "generated_ms": now_ms(),
        "job": section(lambda: job(home)),
        "queries": section(lambda: queries(home, checkpoints)),
        "kafka_lag": section(lambda: kafka_lag(settings.kafka_bootstrap, checkpoints)),
        "kinesis_lag": section(lambda: kinesis_lag(settings.clicks_stream, checkpoints)),
        "cdc_progress": section(
            lambda: cdc_progress(settings.kafka_bootstrap, resolved.cdc_topic, checkpoints)
        ),
        "join_waiting": section(lambda: join_waiting(home)),
        "dead_letters_last_hour": section(lambda: dead_letters_last_hour(settings.reader_dsn)),
        "dead_letters_by_reason": section(lambda: dead_letters.by_reason(settings.reader_dsn)),
        "connector": section(lambda: connector(settings.connect_url, resolved.connector)),
        "replication_slot": section(lambda: replication_slot(settings.reader_dsn, resolved.slot)),
        "versions": section(versions),
        "capture": section(lambda: capture(settings.reader_dsn, settings.pipeline)),
        "drifted_profiles": section(lambda: drifted_profiles(settings.reader_dsn, settings.pipeline)),
    }


def capture(reader_dsn: str, pipeline: pf.Pipeline) -> dict[str, Any]:
    """Whether the publication captures the tables and their carried columns (db/capture.py)."""
    resolved = plan.of(pipeline)
    with psycopg.connect(reader_dsn, connect_timeout=int(TIMEOUT_S)) as conn:
        found = db_capture.lost(conn, resolved, resolved.captured)
    lost = None if found is None else {"columns": list(found.columns), "message": found.message()}
    return {"table": pipeline.profile.table, "publication": resolved.publication, "lost": lost}


def capture_problems(figures: dict[str, Any]) -> list[str]:
    """A capture that was lost, as a line."""
    lost = figures["capture"].get("lost") if isinstance(figures.get("capture"), dict) else None
    return [lost["message"]] if lost else []


def drifted_profiles(reader_dsn: str, pipeline: pf.Pipeline) -> dict[str, Any]:
    """The profiles whose current version has drifted columns (db/capture.py drifted)."""
    with psycopg.connect(reader_dsn, connect_timeout=int(TIMEOUT_S)) as conn:
        found = db_capture.drifted(conn, plan.of(pipeline))
    return {"table": found.table, "profiles": found.profiles, "reasons": list(found.reasons)}


def section(gather: Callable[[], Any]) -> Any:
    try:
        return gather()
    except Exception as exc:  # one unreachable service must not hide the others
        return {"error": f"{type(exc).__name__}: {exc}"}


# --- the job and its queries -----------------------------------------------------------------------------


def job(home: Path) -> dict[str, Any] | None:
    """The last job started in this home, and whether its process still runs."""
    started = read_json(status_dir(home) / JOB_FILE)
    if started is None:
        return None
    ui = started.get("spark_ui")
    return {
        **started,
        "running": alive(int(started["pid"])),
        "prometheus": f"{ui}/metrics/prometheus" if ui else None,
    }


def join_waiting(home: Path) -> Any:
    """The running job's fresh count of the clicks waiting in the join (asked for, then awaited up to
    COUNT_WAIT_S); otherwise the last count taken, whose as_of_ms says how old it is."""
    path = status_dir(home) / WAITING_FILE
    started = job(home)
    if started is None or not started["running"]:
        return read_json(path)
    try:
        requested_ms = request_count(home)
    except OSError:  # a status directory this user cannot write: the last count, with its age
        return read_json(path)
    deadline = time.monotonic() + COUNT_WAIT_S
    while time.monotonic() < deadline:
        counted = read_json(path)
        if counted is not None and counted["as_of_ms"] >= requested_ms:
            return counted
        time.sleep(0.2)
    return read_json(path)


def alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"streamfold" in cmdline


def queries(home: Path, checkpoints: dict[str, Committed]) -> dict[str, dict[str, Any]]:
    """Per query: the last committed batch (checkpoint) and the last progress the job reported."""
    result: dict[str, dict[str, Any]] = {}
    for name, committed in checkpoints.items():
        row: dict[str, Any] = {"committed_batch": committed.batch_id}
        report = read_json(status_dir(home) / f"{name}.json")
        if report is not None:
            progress = report["progress"]
            row.update(
                last_batch=progress["batchId"],
                last_batch_ms=progress["batchDuration"],
                input_rows=progress["numInputRows"],
                rows_per_s=progress["processedRowsPerSecond"],
                reported_ms=report["written_ms"],
                state_rows=sum(op.get("numRowsTotal", 0) for op in progress.get("stateOperators", [])),
            )
            if "drift" in report:  # changes with drifted columns since the job started (ProgressListener)
                row["drift"] = report["drift"]
        result[name] = row
    return result


def needs_attention(figures: dict[str, Any]) -> list[str]:
    """What `streamfold status --check` fails on, a line each: a capture that was lost, and changes whose
    columns drifted from the pipeline file (renamed, dropped or retyped in the table: unknown in their
    versions)."""
    return capture_problems(figures) + drift_problems(figures)


def drift_problems(figures: dict[str, Any]) -> list[str]:
    """Profiles whose current version has drifted columns, as a line."""
    found = figures.get("drifted_profiles")
    if not isinstance(found, dict) or not found.get("profiles"):
        return []
    table = found["table"]
    columns = "; ".join(f"{table}.{reason}" for reasons in found["reasons"] for reason in reasons.split("; "))
    return [
        f"{found['profiles']} profiles' current versions have drifted columns ({columns}): restore the "
        "columns or edit the pipeline file, then `streamfold setup` (it recaptures the table)"
    ]


def drift_seen(figures: dict[str, Any]) -> list[str]:
    """Changes with drifted columns the running job saw since it started, a line per query."""
    queries = figures.get("queries")
    if not isinstance(queries, dict) or "error" in queries:
        return []
    return [
        f"{name}: {q['drift']['changes']} changes with drifted columns since the job started "
        f"({'; '.join(q['drift']['columns'])})"
        for name, q in queries.items()
        if q.get("drift")
    ]


# --- the checkpoint's committed offsets --------------------------------------------------------------------


class Committed:
    """A query's last committed batch and the end offsets it processed, one JSON value per source."""

    def __init__(self, batch_id: int | None, sources: list[Any]) -> None:
        self.batch_id = batch_id
        self.sources = sources

    def kafka(self) -> Iterator[tuple[str, dict[str, int]]]:
        """(topic, {partition: next offset to process}) for each Kafka source. Spark's connector writes
        {topic: {partition: offset}}, real-time mode's streamfold-kafka {"topic": t, "partitions": {...}}."""
        for offsets in self.sources:
            if not isinstance(offsets, dict) or "v" in offsets:
                continue
            if isinstance(offsets.get("topic"), str) and isinstance(offsets.get("partitions"), dict):
                offsets = {offsets["topic"]: offsets["partitions"]}
            for topic, partitions in offsets.items():
                if isinstance(partitions, dict) and all(isinstance(o, int) for o in partitions.values()):
                    yield topic, {str(p): o for p, o in partitions.items()}

    def kinesis(self) -> Iterator[dict[str, Any]]:
        for offsets in self.sources:
            if isinstance(offsets, dict) and "shards" in offsets:
                yield offsets


def committed_offsets(checkpoints: Path) -> dict[str, Committed]:
    """Per query folder: Spark's offset log entry of the newest batch in its commit log."""
    result = {}
    for folder in sorted(p for p in checkpoints.glob("*") if (p / "offsets").is_dir()):
        batches = committed_batches(folder)
        if not batches:
            result[folder.name] = Committed(None, [])
            continue
        batch = max(batches)
        # offsets/<batch>: "v1", the batch metadata, then one line per source ("-": none yet).
        lines = (folder / "offsets" / str(batch)).read_text().splitlines()[2:]
        result[folder.name] = Committed(batch, [json.loads(s) for s in lines if s.strip() not in ("", "-")])
    return result


# --- Kafka -----------------------------------------------------------------------------------------------


def consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            **config.kafka_client_settings(bootstrap),
            "group.id": "streamfold-status",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def kafka_lag(bootstrap: str, checkpoints: dict[str, Committed]) -> list[dict[str, Any]]:
    """Per query, topic and partition: processed (next offset), end offset, and the difference."""
    rows = []
    client = consumer(bootstrap)
    try:
        for query, committed in checkpoints.items():
            for topic, processed in committed.kafka():
                metadata = client.list_topics(topic, timeout=TIMEOUT_S).topics[topic]
                for partition in sorted(metadata.partitions):
                    low, high = client.get_watermark_offsets(
                        TopicPartition(topic, partition), timeout=TIMEOUT_S
                    )
                    done = processed.get(str(partition), low)
                    rows.append(
                        {
                            "query": query,
                            "topic": topic,
                            "partition": partition,
                            "processed": done,
                            "end": high,
                            "lag": max(0, high - done),
                        }
                    )
    finally:
        client.close()
    return rows


def cdc_progress(bootstrap: str, cdc_topic: str, checkpoints: dict[str, Committed]) -> dict[str, Any] | None:
    """The newest Debezium ts_ms (a change's commit, or a heartbeat) the job's query has processed."""
    client = consumer(bootstrap)
    try:
        found = [
            newest_ts(client, topic, int(partition), offset)
            for query, committed in checkpoints.items()
            for topic, processed in committed.kafka()
            if topic == cdc_topic
            for partition, offset in processed.items()
        ]
    finally:
        client.close()
    newest = max((ts for ts in found if ts is not None), default=None)
    if newest is None:
        return None
    return {"processed_ts_ms": newest, "age_s": round((now_ms() - newest) / 1000, 1)}


def newest_ts(client: Consumer, topic: str, partition: int, end: int, back: int = 20) -> int | None:
    """The largest envelope ts_ms among the `back` records before offset `end` (tombstones carry none)."""
    start = max(0, end - back)
    client.assign([TopicPartition(topic, partition, start)])
    found: list[int] = []
    schemas: dict[int, Any] = {}
    deadline = time.monotonic() + TIMEOUT_S
    position = start
    while position < end and time.monotonic() < deadline:
        message = client.poll(0.5)
        if message is None or message.error() is not None:
            continue
        position = (message.offset() or 0) + 1
        value = message.value()
        if position <= end and value and (ts := envelope_ts(value, schemas)) is not None:
            found.append(ts)
    return max(found, default=None)


def envelope_ts(raw: bytes, schemas: dict[int, Any] | None = None) -> int | None:
    """source.ts_ms of a JSON envelope, or of an Avro one (cdc.format avro: the Confluent wire format, its
    writer's schema from the registry, kept in `schemas` by id)."""
    try:
        avro = raw[:1] == b"\x00"
        envelope = (
            registry.decode(raw, {} if schemas is None else schemas, TIMEOUT_S) if avro else json.loads(raw)
        )
        return int(envelope["source"]["ts_ms"])
    except (ValueError, KeyError, TypeError, IndexError, EOFError, requests.RequestException):
        return None  # not an envelope the fold accepts (it is in the dead letters), or no registry to ask


# --- Kinesis ---------------------------------------------------------------------------------------------


def kinesis_lag(stream: str, checkpoints: dict[str, Committed]) -> list[dict[str, Any]]:
    """Per shard: the committed position (the last sequence number processed; None: none yet),
    MillisBehindLatest there, and how many records follow it."""
    from pipeline.kinesis_source import decode_offset

    rows = []
    for query, committed in checkpoints.items():
        for offset in committed.kinesis():
            states = decode_offset(offset)
            client = kinesis.client(KINESIS_CONFIG)
            pages = client.get_paginator("list_shards").paginate(StreamName=stream)
            for shard_id in sorted(shard["ShardId"] for page in pages for shard in page["Shards"]):
                state = states.get(shard_id)
                if state is not None and state.done:
                    continue
                behind_ms, records = shard_behind(client, stream, shard_id, state)
                rows.append(
                    {
                        "query": query,
                        "shard": shard_id,
                        "processed": None if state is None else state.after,
                        "millis_behind_latest": behind_ms,
                        "records_behind": records,
                    }
                )
    return rows


def shard_iterator(client: Any, stream: str, shard_id: str, state: Any) -> str:
    """An iterator right after a committed ShardState (pipeline/kinesis_source.py); None: from the start."""
    start = state.iterator_args() if state is not None else {"ShardIteratorType": "TRIM_HORIZON"}
    return str(client.get_shard_iterator(StreamName=stream, ShardId=shard_id, **start)["ShardIterator"])


def shard_behind(client: Any, stream: str, shard_id: str, state: Any) -> tuple[int | None, int]:
    iterator: str | None = shard_iterator(client, stream, shard_id, state)
    behind_ms, records = None, 0
    while iterator and records < KINESIS_COUNT_CAP:
        page = client.get_records(ShardIterator=iterator, Limit=10_000)
        if behind_ms is None:
            behind_ms = page.get("MillisBehindLatest")
        records += len(page["Records"])
        iterator = page.get("NextShardIterator")
        if not page["Records"] and page.get("MillisBehindLatest") == 0:
            break
    return behind_ms, records


def next_arrival_ms(client: Any, stream: str, shard_id: str, state: Any, pages: int = 20) -> int | None:
    """The ApproximateArrivalTimestamp of the first record after `state`, within `pages` GetRecords calls
    (Kinesis may answer empty pages before records); None when there is none yet or it was not found."""
    iterator: str | None = shard_iterator(client, stream, shard_id, state)
    for _ in range(pages):
        if not iterator:
            return None
        page = client.get_records(ShardIterator=iterator, Limit=1)
        if page["Records"]:
            return int(page["Records"][0]["ApproximateArrivalTimestamp"].timestamp() * 1000)
        if page.get("MillisBehindLatest") == 0:
            return None
        iterator = page.get("NextShardIterator")
    return None


# --- Postgres and Kafka Connect --------------------------------------------------------------------------


def dead_letters_last_hour(reader_dsn: str) -> dict[str, int]:
    with psycopg.connect(reader_dsn, connect_timeout=int(TIMEOUT_S)) as conn:
        rows = conn.execute(
            f"SELECT source, count(*) FROM {names.SINK_SCHEMA}.dead_letters "
            "WHERE recorded_at > now() - interval '1 hour' GROUP BY source ORDER BY source"
        ).fetchall()
    return {source: count for source, count in rows}


def connector(connect_url: str, name: str) -> dict[str, Any]:
    response = requests.get(
        f"{connect_url}/connectors/{name}/status", timeout=TIMEOUT_S, auth=config.connect_auth()
    )
    if response.status_code == 404:
        return {"name": name, "state": "NOT REGISTERED (run `streamfold setup`)", "tasks": []}
    response.raise_for_status()
    body = response.json()
    tasks = [task["state"] for task in body.get("tasks", [])]
    return {"name": name, "state": body["connector"]["state"], "tasks": tasks}


# --- the replication slot ----------------------------------------------------------------------------------

SLOT_QUERY = """
SELECT active,
       wal_status,
       safe_wal_size,
       pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
       pg_size_bytes(current_setting('max_slot_wal_keep_size'))
FROM pg_replication_slots WHERE slot_name = %s
"""


def slot_wal_warn_bytes() -> int:
    value = config.lookup(SLOT_WAL_WARN_VAR, str(SLOT_WAL_WARN_MB))
    if not value.isdigit() or int(value) == 0:
        raise ValueError(f"{SLOT_WAL_WARN_VAR}={value}: expected a whole number of MiB, at least 1")
    return int(value) * MIB


def replication_slot(reader_dsn: str, name: str) -> dict[str, Any]:
    """The slot Debezium reads (pg_replication_slots, readable by any role): whether a consumer holds it,
    the WAL it keeps (current LSN - restart_lsn), wal_status, safe_wal_size, and what to worry about."""
    warn_bytes = slot_wal_warn_bytes()
    with psycopg.connect(reader_dsn, connect_timeout=int(TIMEOUT_S)) as conn:
        row = conn.execute(SLOT_QUERY, (name,)).fetchone()
    if row is None:
        return {
            "name": name,
            "exists": False,
            "warn_bytes": warn_bytes,
            "warnings": [f"no replication slot {name}: the connector creates it (`streamfold setup`)"],
        }
    active, wal_status, safe_wal_size, retained, keep = row
    figures = {
        "name": name,
        "exists": True,
        "active": active,
        "retained_wal_bytes": retained,
        "wal_status": wal_status,
        "safe_wal_size_bytes": safe_wal_size,
        "max_slot_wal_keep_size_bytes": keep if keep >= 0 else None,
        "warn_bytes": warn_bytes,
    }
    return {**figures, "warnings": slot_warnings(figures)}


def slot_warnings(slot: dict[str, Any]) -> list[str]:
    """What an operator must act on: WAL piling up, a slot PostgreSQL is about to invalidate, or has."""
    warnings = []
    retained, keep = slot["retained_wal_bytes"], slot["max_slot_wal_keep_size_bytes"]
    if slot["wal_status"] == "lost":
        warnings.append(
            f"slot {slot['name']} is invalidated (wal_status lost): Debezium cannot resume from it; drop the "
            'slot and take a new snapshot (docs/guarantees.md, "Replication slots")'
        )
    elif slot["wal_status"] == "unreserved":
        warnings.append(
            f"slot {slot['name']} holds more WAL than max_slot_wal_keep_size: PostgreSQL invalidates it at "
            "its next checkpoint unless Debezium catches up first"
        )
    if retained is not None and retained > slot["warn_bytes"]:
        limit = (
            f"invalidated past {size(keep)}"
            if keep
            else "no max_slot_wal_keep_size: it grows until the disk is full"
        )
        warnings.append(
            f"slot {slot['name']} holds {size(retained)} of WAL (over {size(slot['warn_bytes'])}; "
            f"{limit}): is the Debezium connector running?"
        )
    return warnings


def size(count: int) -> str:
    """Bytes as MiB or GiB, for a line a person reads."""
    return f"{count / MIB / 1024:.1f} GiB" if count >= 1024 * MIB else f"{count / MIB:.1f} MiB"
