"""`streamfold explain EVENT_ID`: an enriched event, the profile version it joined, the versions either side
of it, and why the join chose it (docs/history.md); for a file with `tables`, each further table's key and
its version valid at the event's time; or why the record is a dead letter.

Everything comes from the sink tables, read with the reader role: the enriched row (its valid_from, the CDC
progress when the join released it, whether join.max_wait did) and the profile history. Times stay the text
Postgres prints (a snapshot version is valid from '-infinity'); comparisons are Postgres's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.string import TextLoader

from common import names, plan
from common import pipeline_file as pf
from db import history
from db.pipeline_tables import CDC_PROGRESS, RELEASED_BY_MAX_WAIT


def explain(reader_dsn: str, pipeline: pf.Pipeline, event_id: str) -> list[str]:
    """The explanation's lines; raises LookupError when the id is neither an event nor a dead letter."""
    resolved = plan.of(pipeline)
    with psycopg.connect(reader_dsn, row_factory=dict_row) as conn:
        conn.read_only = True
        for type_name in ("timestamptz", "timestamp"):
            conn.adapters.register_loader(type_name, TextLoader)
        event = conn.execute(
            f"SELECT * FROM {resolved.enriched_table} WHERE event_id = %s", (event_id,)
        ).fetchone()
        if event is None:
            return dead_letter(conn, event_id)
        columns = resolved.names
        profile, *tables = resolved.histories
        versions = conn.execute(
            f"SELECT v.*, v.valid_from <= %s::timestamptz AS began, v.valid_from > %s::timestamptz AS unseen"
            f" FROM ({history.versions_query(profile)}) v",
            (event[columns.time], event[CDC_PROGRESS], event[columns.key]),
        ).fetchall()
        joined = [table_line(conn, pipeline, columns, event, table) for table in tables]
    lines = describe(pipeline, columns, event, versions)
    return [*lines[:-1], *joined, lines[-1]]  # each further table before the one why


def dead_letter(conn: psycopg.Connection[Any], event_id: str) -> list[str]:
    row = conn.execute(
        f"SELECT source, reason, recorded_at FROM {names.DEAD_LETTERS_TABLE} WHERE dead_letter_id = %s",
        (event_id,),
    ).fetchone()
    if row is None:
        raise LookupError(
            f"no event and no dead letter {event_id} (an id is the record's source position, "
            "kafka:<topic>:<partition>:<offset>; an event not released by the join yet has none)"
        )
    return [
        f"dead letter {event_id} from {row['source']}, recorded {row['recorded_at']}",
        f"why: {row['reason']}",
    ]


def describe(
    pipeline: pf.Pipeline, columns: plan.EnrichedNames, event: dict[str, Any], versions: list[dict[str, Any]]
) -> list[str]:
    """The event, the joined version and its neighbours, and one sentence saying why."""
    at = max((i for i, v in enumerate(versions) if v["began"]), default=None)  # the history's, at its time
    joined = joined_version(columns, event, versions)
    center = at if joined is None else joined
    fields = ", ".join(f"{k}={v}" for k, v in event.items() if k not in {"event_id", CDC_PROGRESS})
    lines = [f"event {event['event_id']}: {fields}"]
    carried = pipeline.profile.columns
    if center is not None and center > 0:
        lines.append(f"  before:  {version_line(carried, versions[center - 1])}")
    if center is not None:
        label = "joined" if joined is not None else "at time"
        lines.append(f"  {label}:  {version_line(carried, versions[center])}")
    else:
        lines.append(f"  joined:  no version of {event[columns.key]} valid at {event[columns.time]}")
    following = versions[(center + 1 if center is not None else 0) :]
    if following:
        lines.append(f"  after:   {version_line(carried, following[0])}")
    lines.append(f"why: {why(columns, event, versions, at)}")
    return lines


def table_key(
    pipeline: pf.Pipeline, columns: plan.EnrichedNames, event: dict[str, Any], join: plan.TableJoin
) -> Any:
    """The key a further join looked up, read back from the enriched row: the event field, or the column (or
    the key) of the join it chains from. A column with if_missing holds that value where the row had none."""
    source, column = join.on
    if source == plan.EVENT:
        return event[columns.column(column)]
    earlier = plan.of(pipeline).join(source)
    if column != earlier.table.key:
        return event[earlier.output(column)]
    return (
        event[columns.key] if earlier.name == plan.PROFILE else table_key(pipeline, columns, event, earlier)
    )


def table_line(
    conn: psycopg.Connection[Any],
    pipeline: pf.Pipeline,
    columns: plan.EnrichedNames,
    event: dict[str, Any],
    table: plan.History,
) -> str:
    """A further table: the key the event looked up and the version of it valid at the event's time (the
    greatest valid_from, then lsn, at or before it), from the table's history."""
    join = table.join
    key = table_key(pipeline, columns, event, join)
    head = f"  {join.name} ({join.on[0]}.{join.on[1]} = {key}):"
    if key is None:
        return f"{head} no key, so no row: its columns take their if_missing"
    versions = conn.execute(
        f"SELECT v.*, v.valid_from <= %s::timestamptz AS began FROM ({history.versions_query(table)}) v",
        (event[columns.time], key),
    ).fetchall()
    began = [v for v in versions if v["began"]]
    if not began:
        first = f"; its first version is valid from {versions[0]['valid_from']}" if versions else ""
        return f"{head} no version of {join.table.table} valid at the event's time{first}"
    return f"{head} at its time {version_line(join.table.columns, began[-1])}"


def joined_version(
    columns: plan.EnrichedNames, event: dict[str, Any], versions: list[dict[str, Any]]
) -> int | None:
    """The version the event joined: the last one valid from its profile_valid_from (a higher lsn wins)."""
    valid_from = event[columns.valid_from]
    same = [i for i, v in enumerate(versions) if valid_from is not None and v["valid_from"] == valid_from]
    return same[-1] if same else None


def version_line(carried_columns: Iterable[str], version: dict[str, Any]) -> str:
    end = version["valid_to"] or "now"
    carried = ", ".join(f"{c}={version[c]}" for c in carried_columns)
    what = "deleted" if version["op"] == "d" else carried
    unknown = f" ({version['incomplete']})" if version["incomplete"] else ""
    return (
        f"valid {version['valid_from']} .. {end}, op {version['op']}, lsn {version['lsn']}: {what}{unknown}"
    )


def why(
    columns: plan.EnrichedNames, event: dict[str, Any], versions: list[dict[str, Any]], at: int | None
) -> str:
    time, progress = event[columns.time], event[CDC_PROGRESS]
    released_by_wait = event[RELEASED_BY_MAX_WAIT]
    if released_by_wait is None:
        release = "the row does not record its release (join.mode=latest, or landed before it was recorded)"
    elif released_by_wait:
        release = (
            f"join.max_wait released it with CDC progress at {progress or 'none yet'}, short of its time "
            f"{time}, so a change committed in between could be missing (profile_complete false)"
        )
    else:
        release = (
            f"CDC progress ({progress}) had reached its time {time}, so every change before it was known"
        )
    if event[columns.valid_from] is None:
        chosen = f"no profile: {no_version(versions, at)}"
    else:
        chosen = f"it took the latest version valid at its time, valid from {event[columns.valid_from]}"
    missed = [v for v in versions if v["began"] and v["unseen"]] if released_by_wait else []
    if missed:
        chosen += f"; the history now has a version from {missed[-1]['valid_from']} it could not see then"
    elif at is not None and event[columns.valid_from] not in (None, versions[at]["valid_from"]):
        chosen += f"; the history's version at that time is valid from {versions[at]['valid_from']}"
    if not event[columns.complete] and not released_by_wait:
        chosen += "; some of the version's values are unknown (profile_complete false)"
    return f"{release}; {chosen}."


def no_version(versions: list[dict[str, Any]], at: int | None) -> str:
    if at is not None:
        return f"it was deleted at {versions[at]['valid_from']}"
    if versions:
        return f"its first version is valid from {versions[0]['valid_from']}, after the event"
    return "the history holds no version of it"
