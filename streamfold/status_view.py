"""The one screen of `streamfold status` (Rich), from the figures of streamfold.status.collect."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.table import Table

from streamfold.status import drift_problems, drift_seen, size


def render(figures: dict[str, Any], console: Console) -> None:
    console.print(job_line(figures["job"]))
    for title, table in (
        ("queries", queries_table(figures["queries"])),
        (
            "Kafka lag",
            rows_table(figures["kafka_lag"], ("query", "topic", "partition", "processed", "end", "lag")),
        ),
        (
            "Kinesis lag",
            rows_table(figures["kinesis_lag"], ("query", "shard", "millis_behind_latest", "records_behind")),
        ),
        (
            "output versions (streamfold reprocess)",
            rows_table(
                figures.get("versions", []), ("name", "running", "from", "behind", "caught_up", "lag")
            ),
        ),
    ):
        if isinstance(table, Table):
            table.title = title
        console.print(table if isinstance(table, Table) else f"{title}: {table}")
    console.print(f"CDC progress: {cdc_line(figures['cdc_progress'])}")
    console.print(f"clicks waiting in the join: {waiting_line(figures['join_waiting'])}")
    console.print(f"dead letters, last hour: {dead_letters_line(figures['dead_letters_last_hour'])}")
    console.print(f"dead letters by reason: {reasons_line(figures['dead_letters_by_reason'])}")
    console.print(f"connector: {connector_line(figures['connector'])}")
    console.print(f"replication slot: {slot_line(figures['replication_slot'])}")
    for warning in slot_warnings(figures["replication_slot"]):
        console.print(f"[bold yellow]warning:[/] {warning}")
    if figures.get("capture") is not None:
        console.print(f"capture: {capture_line(figures['capture'])}")
    for problem in drift_problems(figures):
        console.print(f"[bold red]drift:[/] {problem}")
    for seen in drift_seen(figures):
        console.print(f"[yellow]drift seen:[/] {seen}")


def error(value: Any) -> str | None:
    return f"[red]{value['error']}[/]" if isinstance(value, dict) and "error" in value else None


def ago(ms: int | None) -> str:
    return "-" if ms is None else f"{(time.time() * 1000 - ms) / 1000:.1f} s ago"


def job_line(job: Any) -> str:
    if job is None:
        return "job: [yellow]never started in this STREAMFOLD_HOME[/]"
    if message := error(job):
        return f"job: {message}"
    state = "[green]running[/]" if job["running"] else "[red]not running[/]"
    metrics = f", Prometheus {job['prometheus']}" if job["running"] and job.get("prometheus") else ""
    mode = f", mode {job['mode']}" if job.get("mode") else ""
    return (
        f"job: {state} (pid {job['pid']}, source {job['source']}{mode}, started {ago(job['started_ms'])})"
        f"{metrics}"
    )


def queries_table(queries: Any) -> Table | str:
    if message := error(queries):
        return message
    table = Table(
        "query", "committed batch", "last batch", "duration ms", "rows", "rows/s", "state rows", "reported"
    )
    for name, q in queries.items():
        table.add_row(
            name,
            str(q["committed_batch"]),
            str(q.get("last_batch", "-")),
            str(q.get("last_batch_ms", "-")),
            str(q.get("input_rows", "-")),
            f"{q['rows_per_s']:,.0f}" if "rows_per_s" in q else "-",
            str(q.get("state_rows", "-")),
            ago(q.get("reported_ms")),
        )
    return table


def rows_table(rows: Any, columns: tuple[str, ...]) -> Table | str:
    if message := error(rows):
        return message
    if not rows:
        return "none"
    table = Table(*columns)
    for row in rows:
        table.add_row(*("-" if row[c] is None else str(row[c]) for c in columns))
    return table


def cdc_line(progress: Any) -> str:
    if progress is None:
        return "nothing processed yet"
    return error(progress) or f"{progress['age_s']} s behind (Debezium ts_ms {progress['processed_ts_ms']})"


def waiting_line(waiting: Any) -> str:
    if waiting is None:
        return "not counted yet (a running job counts when status asks)"
    return error(waiting) or f"{waiting['clicks']} (counted {ago(waiting['as_of_ms'])})"


def dead_letters_line(dead: Any) -> str:
    if message := error(dead):
        return message
    return ", ".join(f"{source} {count}" for source, count in dead.items()) or "none"


def reasons_line(letters: Any) -> str:
    """The letters not replayed, the most common reasons first (`streamfold dead-letters replay`)."""
    if message := error(letters):
        return message
    if not letters["waiting"]:
        return f"none waiting ({letters['replayed']} replayed)"
    top = "; ".join(f"{r['count']} × {r['reason']}" for r in letters["reasons"])
    shown = sum(r["count"] for r in letters["reasons"])
    others = letters["waiting"] - shown
    more = f"; {others} of other reasons" if others else ""
    return f"{letters['waiting']} waiting ({letters['replayed']} replayed): {top}{more}"


def connector_line(connector: Any) -> str:
    if message := error(connector):
        return message
    color = "green" if connector["state"] == "RUNNING" else "red"
    tasks = ", ".join(connector["tasks"]) or "no tasks"
    return f"{connector['name']} [{color}]{connector['state']}[/] (tasks: {tasks})"


def slot_line(slot: Any) -> str:
    if message := error(slot):
        return message
    if not slot["exists"]:
        return f"{slot['name']} [red]missing[/]"
    state = "[green]active[/]" if slot["active"] else "[yellow]inactive (no consumer)[/]"
    retained = "-" if slot["retained_wal_bytes"] is None else size(slot["retained_wal_bytes"])
    safe = slot["safe_wal_size_bytes"]
    until = (
        "no limit (max_slot_wal_keep_size -1)" if safe is None else f"{size(max(safe, 0))} until invalidated"
    )
    return f"{slot['name']} {state}, {retained} of WAL retained, wal_status {slot['wal_status']}, {until}"


def slot_warnings(slot: Any) -> list[str]:
    return [] if error(slot) else list(slot.get("warnings", []))


def capture_line(capture: Any) -> str:
    if error(capture):
        return error(capture) or ""
    if capture["lost"]:
        return f"[bold red]{capture['lost']['message']}[/]"
    return f"[green]{capture['table']} captured by publication {capture['publication']}[/]"
