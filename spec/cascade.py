"""The join of several tables as the job is to run it: one stage per join, in the plan's order, over one
stream of micro-batches (docs/decisions/join-cascade.md), free of Spark. The staged design is held to the
per-event reference (spec/several_tables.py join_event) by tests/unit/test_cascade.py over random histories.

Why stages: a Spark query may chain a few stateful operators, but one operator's output cannot feed two
(it would read the source once per consumer). So every stage sees the same stream: every table's changes
and the CDC progress pass through all of them; stage k keeps its own table's versions (by its key) and
takes the events stage k-1 released. An event enters stage k keyed by its foreign key, read from the raw
version stage k-1 found (before if_missing), and waits there until CDC progress passes its time, as a
single table's event does (spec/temporal_state.py). Since stage k-1 released it only once progress had
passed its time, and progress and changes pass every stage in the same batch, it is released by stage k in
that same batch: every hop at the event's time, the whole chain in one batch. An event with no key (a null
field or column, no version, a tombstone, an unknown column) joins nothing, at once in a later stage; the
first stage holds it until progress passes it as any other, so that every event leaving the first stage
was released by progress, and the job's later stages need no progress of their own (they take the one
that released each event: docs/decisions/join-cascade.md, "Latency").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from common.plan import EVENT, TableJoin
from spec.several_tables import Joined, key_text
from spec.temporal_state import (
    DELETE,
    IfMissing,
    Version,
    add_version,
    expire_versions,
    filled,
    previous_version,
    unknown,
    version_at,
)


class Change(NamedTuple):
    """A change of a Postgres table (schema.name) as the fold gives it: its key, its version (values in
    the order of the columns of the join of it). Its commit time is CDC progress (the topic is in commit
    order)."""

    table: str
    key: str
    version: Version


class Event(NamedTuple):
    event_id: str
    time_ms: int
    fields: Mapping[str, Any]


class Progress(NamedTuple):
    """A heartbeat: CDC progress with no change."""

    ms: int


Row = Change | Event | Progress


@dataclass
class _Found:
    """What the stages so far found for one event: per join, Joined, and the raw version (None: none)."""

    event: Event
    joined: dict[str, Joined] = field(default_factory=dict)
    raw: dict[str, Version | None] = field(default_factory=dict)
    key_known: dict[str, bool] = field(default_factory=dict)


class _Waiting(NamedTuple):
    found: _Found
    key_known: bool


@dataclass
class _Stage:
    join: TableJoin
    joins: Mapping[str, TableJoin]  # every join by name: the one a chain reads its key from among them
    if_missing: IfMissing
    versions: dict[str, list[Version]] = field(default_factory=dict)
    pending: dict[str | None, list[_Waiting]] = field(default_factory=dict)  # None: events with no key


def run(
    joins: Sequence[TableJoin], batches: Iterable[Sequence[Row]], retention_ms: int
) -> list[tuple[str, dict[str, Joined]]]:
    """Every event released by the last stage, in release order: its id and its Joined per join. Each
    batch's rows in arrival order; CDC rows (changes, progress) in commit order across batches."""
    by_name = {join.name: join for join in joins}
    stages = [_stage(join, by_name) for join in joins]
    progress_ms: int | None = None
    out: list[tuple[str, dict[str, Joined]]] = []
    for batch in batches:
        for row in batch:
            if isinstance(row, Change | Progress):
                ms = row.ms if isinstance(row, Progress) else row.version.valid_from_ms
                progress_ms = ms if progress_ms is None else max(progress_ms, ms)
        changes = [row for row in batch if isinstance(row, Change)]
        moving = [_Found(row) for row in batch if isinstance(row, Event)]
        for n, stage in enumerate(stages):
            moving = _step(stage, changes, moving, progress_ms, retention_ms, first=n == 0)
        out.extend((found.event.event_id, found.joined) for found in moving)
    return out


def _stage(join: TableJoin, joins: Mapping[str, TableJoin]) -> _Stage:
    columns = join.table.columns.values()
    return _Stage(join, joins, IfMissing.of([{"type": c.type, "if_missing": c.if_missing} for c in columns]))


def _step(
    stage: _Stage,
    changes: list[Change],
    arriving: list[_Found],
    progress_ms: int | None,
    retention_ms: int,
    first: bool,
) -> list[_Found]:
    """One stage in one batch: its table's changes merged, the arriving events keyed (no key: joined at
    once, except by the first stage, which holds every event until progress passes it, so that every event
    leaving it was released by progress), every waiting event progress has passed released in time order,
    old versions expired."""
    for change in changes:
        if change.table == stage.join.table.table:
            versions = stage.versions.get(change.key, [])
            stored = filled(change.version, previous_version(versions, change.version))
            stage.versions[change.key] = add_version(versions, stored)
    released: list[_Found] = []
    for found in arriving:
        key, key_known = _key(stage, found)
        if key is None and not first:
            _join(stage, found, None, None, key_known)
            released.append(found)
        else:
            stage.pending.setdefault(key, []).append(_Waiting(found, key_known))
    if progress_ms is None:
        return released
    for key, waiting in stage.pending.items():
        ready = sorted((w for w in waiting if w.found.event.time_ms <= progress_ms), key=_time)
        stage.pending[key] = [w for w in waiting if w.found.event.time_ms > progress_ms]
        for w in ready:
            version = None if key is None else version_at(stage.versions.get(key, []), w.found.event.time_ms)
            _join(stage, w.found, key, version, w.key_known)
            released.append(w.found)
    for key, versions in stage.versions.items():
        stage.versions[key] = expire_versions(versions, progress_ms - retention_ms)
    return released


def _time(waiting: _Waiting) -> int:
    return waiting.found.event.time_ms


def _join(stage: _Stage, found: _Found, key: str | None, version: Version | None, key_known: bool) -> None:
    """What the stage found for the event: its table's columns (if_missing applied), and the raw version
    the next hop of a chain reads its key from."""
    name = stage.join.name
    found.key_known[name] = key_known
    if version is None or version.op == DELETE:
        found.joined[name] = Joined(key, stage.if_missing.values, None, key_known)
        found.raw[name] = None
        return
    known = key_known and not any(unknown(v) for v in version.profile)
    found.joined[name] = Joined(key, stage.if_missing.fill(version.profile), version.valid_from_ms, known)
    found.raw[name] = version


def _key(stage: _Stage, found: _Found) -> tuple[str | None, bool]:
    """The key the event looks up in this stage and whether it is known: an event field, or a column of
    the raw version an earlier stage found (its own key where the column is that table's key)."""
    source, column = stage.join.on
    if source == EVENT:
        return key_text(found.event.fields.get(column)), True
    version, known = found.raw[source], found.key_known[source]
    if version is None:
        return None, known
    before = stage.joins[source]
    if column == before.table.key:
        return found.joined[source].key, known
    value = version.profile[list(before.table.columns).index(column)]
    if unknown(value):
        return None, False
    return key_text(value), known
