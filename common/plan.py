"""The pipeline file compiled once, after validation, into one resolved plan
(docs/decisions/resolved-plan.md).

`of(pipeline)` decides, once per validated file, everything the appliance derives from its references: the
joins an event goes through, in order (docs/join-semantics.md, "Several tables"), each join's history, the
enriched table's and topic's columns (name, type, the join output column each comes from) and every
aggregate's keys and sums, resolved to their source, type and output column. Setup (db/), the job
(pipeline/), the sinks, the queries and the Java operator's specs read the plan; only validation and the
plan itself read the file's references (Pipeline.resolve).

The profile joins first, on the events' key; then each table of the file's `tables`, in the file's order, on
an event field or on a column of a join before it (a foreign-key chain). The file's validation
(common/pipeline_file.py) made sure every reference points backwards and has a key's type, so the order
of the file is an order the joins can run in.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from common import names
from common import pipeline_file as pf
from common.limits import MAX_KEY_BYTES

PROFILE = "profile"
# A Postgres table (schema.table) -> the columns that may leave the database, its key first.
Captured = dict[str, tuple[str, ...]]
EVENT = "event"
CHANGE = "change"
# The enriched row's columns that no file names: its id, and why the join released it (explain reads them).
EVENT_ID = "event_id"
CDC_PROGRESS = "cdc_progress"
CDC_PROGRESS_MS = "cdc_progress_ms"
RELEASED_BY_MAX_WAIT = "released_by_max_wait"
# The sink's types beside the file's: an event time and a version's start, both carried in epoch ms.
EPOCH_MS = "epoch_ms"
VALID_FROM_MS = "valid_from_ms"


@dataclass(frozen=True)
class TableJoin:
    """One table an event joins: `on` is (EVENT, field) or (the name of a join before it, its column)."""

    name: str
    table: pf.Profile
    prefix: str
    on: tuple[str, str]

    def output(self, column: str) -> str:
        """A column's name in the enriched table, topic and the join's output: under the join's prefix."""
        return f"{self.prefix}{column}"

    def carried(self) -> tuple[str, ...]:
        """The columns that may leave the database for this join: the key, then the declared columns."""
        return (self.table.key, *self.table.columns)


@dataclass(frozen=True)
class History:
    """A join's history in Postgres (db/history.py): the table of every version the join stored, the view
    with each version's valid_to and the function (key, time) -> the version valid then; `kind`: what the
    join's output calls its rows (the profile's are the change rows, the changelog's too)."""

    join: TableJoin
    table: str
    view: str
    function: str
    kind: str


@dataclass(frozen=True)
class EnrichedNames:
    """The enriched columns the file names (outputs.enriched), each defaulting to the field's own name;
    `*_ms`: the join output's column carrying that time in epoch ms."""

    event_key: str  # the events' key field, whose column is `key`
    key: str
    time: str
    time_ms: str
    fields: Mapping[str, str]  # event field -> its column
    count: str  # in the join's output always: 1 per event when the file has no count field
    count_column: str | None  # in the enriched table: only when the file has a count field
    valid_from: str
    valid_from_ms: str
    complete: str

    def column(self, field: str) -> str:
        """An event field's column (the key's too) in the enriched table and the join's output."""
        return self.key if field == self.event_key else self.fields[field]


@dataclass(frozen=True)
class EnrichedColumn:
    """A column of the enriched table (and of the enriched topic's records): its name, the join output
    column it comes from, its type (a file's type, EPOCH_MS or VALID_FROM_MS) and whether it may be null."""

    name: str
    output: str
    type: str
    nullable: bool = True


@dataclass(frozen=True)
class AggregateKey:
    """An aggregate's group-by column: what it resolves to (source: EVENT or a join's name), its type and
    the join output column it is read from. `md5`: Postgres keys an event's text by its digest instead."""

    column: str
    source: str
    name: str
    type: str
    output: str

    @property
    def md5(self) -> bool:
        return self.source == EVENT and self.type == "text"

    @property
    def conflict_column(self) -> str:
        """Its column in the aggregate table's primary key: the digest's for an md5 key."""
        return f"{self.column}_md5" if self.md5 else self.column


@dataclass(frozen=True)
class AggregateSum:
    """An aggregate's sum: its column, the numeric event field it sums, its type and its output column."""

    column: str
    field: str
    type: str
    output: str


@dataclass(frozen=True)
class AggregatePlan:
    """An aggregate of the file, resolved: its table and topic, its keys, its count column and its sums."""

    name: str
    table: str
    topic: str
    keys: tuple[AggregateKey, ...]
    count_column: str
    sums: tuple[AggregateSum, ...]

    @property
    def primary_key(self) -> list[str]:
        return [key.conflict_column for key in self.keys]


@dataclass(frozen=True)
class Plan:
    """A validated pipeline file, resolved: see the module's docstring."""

    joins: tuple[TableJoin, ...]
    histories: tuple[History, ...]
    names: EnrichedNames
    enriched: tuple[EnrichedColumn, ...]
    aggregates: tuple[AggregatePlan, ...]
    # The topics, tables and CDC names no reference decides: the file's, else their defaults (_places).
    cdc_topic: str
    heartbeat_topic: str
    connector: str
    slot: str
    publication: str
    enriched_table: str
    enriched_topic: str
    changelog_topic: str
    dead_letters_topic: str
    # What leaves Postgres for this file (`captured`), and the specs the JVM's event parser and CDC fold take.
    captured: Captured
    event_spec: dict[str, Any]
    profile_spec: dict[str, Any]

    def join(self, name: str) -> TableJoin:
        """The join of that name: the profile's (PROFILE) or a table's of `tables`."""
        return next(join for join in self.joins if join.name == name)

    def grouped(self, source: str) -> frozenset[str]:
        """The columns of a join (`source`) some aggregate groups by: their values are keys in Postgres."""
        return _grouped(self.aggregates, source)


_PLANS: dict[int, Plan] = {}


def of(pipeline: pf.Pipeline) -> Plan:
    """The pipeline's plan, compiled on the first call and kept as long as the pipeline lives (the model
    holds dicts, so it cannot be a hashed cache's key)."""
    found = _PLANS.get(id(pipeline))
    if found is None:
        found = _PLANS[id(pipeline)] = _compile(pipeline)
        weakref.finalize(pipeline, _PLANS.pop, id(pipeline), None)
    return found


def _compile(pipeline: pf.Pipeline) -> Plan:
    all_joins = _joins(pipeline)
    names = _names(pipeline)
    aggregates = tuple(_aggregate(pipeline, a, names, all_joins) for a in pipeline.aggregates)
    return Plan(
        joins=all_joins,
        histories=_histories(pipeline, all_joins),
        names=names,
        enriched=_enriched(pipeline, names, all_joins),
        aggregates=aggregates,
        **_places(pipeline),
        captured=_captured(all_joins),
        event_spec=_event_spec(pipeline),
        profile_spec=_profile_spec(all_joins[0].table, _grouped(aggregates, PROFILE)),
    )


def _grouped(aggregates: tuple[AggregatePlan, ...], source: str) -> frozenset[str]:
    return frozenset(k.name for a in aggregates for k in a.keys if k.source == source)


def _places(pipeline: pf.Pipeline) -> dict[str, str]:
    """The names of the topics, tables and CDC objects, each the file's or its default. Debezium's topic
    for every captured table is <prefix>.<schema>.<table> of the profile's; its heartbeats (CDC progress
    when no change flows) go to the connector's own heartbeat topic."""
    out, table_name = pipeline.outputs, pipeline.profile.table_name
    return {
        "cdc_topic": f"{out.cdc_topic_prefix}.{pipeline.profile.table}",
        "heartbeat_topic": f"{names.HEARTBEAT_TOPIC_PREFIX}.{out.cdc_topic_prefix}",
        "connector": out.connector or f"streamfold-{table_name}",
        "slot": out.slot or f"streamfold_{table_name}",
        "publication": out.publication or f"streamfold_{table_name}",
        "enriched_table": out.enriched.table or f"streamfold.enriched_{pipeline.name}",
        "enriched_topic": out.enriched.topic or f"enriched_{pipeline.name}",
        "changelog_topic": out.changelog_topic or f"{table_name}_changelog",
        "dead_letters_topic": out.dead_letters_topic or f"{pipeline.name}_dlq",
    }


def _joins(pipeline: pf.Pipeline) -> tuple[TableJoin, ...]:
    """The profile on the events' key, then the file's tables in order."""
    first = TableJoin(
        PROFILE, pipeline.profile, pipeline.outputs.enriched.profile_prefix, (EVENT, pipeline.events.key)
    )
    more = (
        TableJoin(name, table, table.prefix or f"{name}_", _reference(table.join_on))
        for name, table in pipeline.tables.items()
    )
    return (first, *more)


def _histories(pipeline: pf.Pipeline, all_joins: tuple[TableJoin, ...]) -> tuple[History, ...]:
    """One per join, the profile's first: `streamfold.<join>_history_<pipeline>`, the view
    `..._versions_...` with each version's valid_to, and the function `..._at_...` (key, time) -> the
    version valid then (db/history.py)."""
    return tuple(
        History(
            join,
            f"streamfold.{join.name}_history_{pipeline.name}",
            f"streamfold.{join.name}_versions_{pipeline.name}",
            f"streamfold.{join.name}_at_{pipeline.name}",
            CHANGE if i == 0 else f"{CHANGE}:{join.name}",
        )
        for i, join in enumerate(all_joins)
    )


def _names(pipeline: pf.Pipeline) -> EnrichedNames:
    out, events = pipeline.outputs.enriched, pipeline.events
    time = out.time_column or events.time.field
    count_column = (out.count_column or events.count) if events.count else None
    return EnrichedNames(
        event_key=events.key,
        key=out.key_column or events.key,
        time=time,
        time_ms=f"{time}_ms",
        fields=MappingProxyType({name: out.event_columns.get(name, name) for name in events.fields}),
        count=count_column or "count",
        count_column=count_column,
        valid_from=out.valid_from_column,
        valid_from_ms=f"{out.valid_from_column}_ms",
        complete=out.complete_column,
    )


def _enriched(
    pipeline: pf.Pipeline, names: EnrichedNames, all_joins: tuple[TableJoin, ...]
) -> tuple[EnrichedColumn, ...]:
    """The enriched table's columns in its order: the event's, each join's (the profile's first), then
    why the join released the event."""
    events = pipeline.events
    columns = [
        EnrichedColumn(EVENT_ID, EVENT_ID, "text", nullable=False),
        EnrichedColumn(names.key, names.key, pipeline.key_type, nullable=False),
        EnrichedColumn(names.time, names.time_ms, EPOCH_MS, nullable=False),
        *(EnrichedColumn(names.fields[n], names.fields[n], f.type) for n, f in events.fields.items()),
    ]
    if names.count_column:
        columns.append(EnrichedColumn(names.count_column, names.count_column, "integer", nullable=False))
    columns += [
        EnrichedColumn(join.output(n), join.output(n), c.type, nullable=c.if_missing is None)
        for join in all_joins
        for n, c in join.table.columns.items()
    ]
    return (
        *columns,
        EnrichedColumn(names.valid_from, names.valid_from_ms, VALID_FROM_MS),
        EnrichedColumn(names.complete, names.complete, "boolean", nullable=False),
        EnrichedColumn(CDC_PROGRESS, CDC_PROGRESS_MS, EPOCH_MS),
        EnrichedColumn(RELEASED_BY_MAX_WAIT, RELEASED_BY_MAX_WAIT, "boolean"),
    )


def _aggregate(
    pipeline: pf.Pipeline, aggregate: pf.Aggregate, names: EnrichedNames, all_joins: tuple[TableJoin, ...]
) -> AggregatePlan:
    """An aggregate with its references resolved (validation has checked them: `where` is never said)."""
    by_name = {join.name: join for join in all_joins}

    def output(source: str, name: str) -> str:
        if source != EVENT:
            return by_name[source].output(name)
        return names.column(name)

    keys = []
    for column, ref in aggregate.group_by.items():
        source, name = pipeline.resolve(ref, f"aggregates.{aggregate.name}.group_by.{column}")
        kind = pipeline.reference_type(source, name)
        keys.append(AggregateKey(column, source, name, kind, output(source, name)))
    sums = []
    for column, ref in aggregate.sums.items():
        _, field = pipeline.resolve(ref, f"aggregates.{aggregate.name}.sums.{column}")
        sums.append(AggregateSum(column, field, pipeline.events.fields[field].type, names.fields[field]))
    return AggregatePlan(
        aggregate.name,
        aggregate.table or f"streamfold.{aggregate.name}",
        aggregate.topic or aggregate.name,
        tuple(keys),
        aggregate.count_column,
        tuple(sums),
    )


def _reference(text: str) -> tuple[str, str]:
    source, _, name = text.partition(".")
    return source, name


def joins(pipeline: pf.Pipeline) -> tuple[TableJoin, ...]:
    """The profile on the events' key, then the file's tables in order."""
    return of(pipeline).joins


def join_named(pipeline: pf.Pipeline, name: str) -> TableJoin:
    """The join of that name: the profile's (PROFILE) or a table's of `tables`."""
    return of(pipeline).join(name)


def histories(pipeline: pf.Pipeline) -> tuple[History, ...]:
    """One per join, the profile's first."""
    return of(pipeline).histories


def captured(*pipelines: pf.Pipeline) -> Captured:
    """Each Postgres table the files join, with the columns that may leave the database (key first), across
    every join of it in every file: a table joined twice is captured once. PII, every other column, stays."""
    return _captured(tuple(join for pipeline in pipelines for join in joins(pipeline)))


def _captured(all_joins: tuple[TableJoin, ...]) -> Captured:
    tables: dict[str, dict[str, None]] = {}
    for join in all_joins:
        tables.setdefault(join.table.table, {}).update(dict.fromkeys(join.carried()))
    return {table: tuple(columns) for table, columns in tables.items()}


def _event_spec(pipeline: pf.Pipeline) -> dict[str, Any]:
    """What the event parser needs (pipeline/events.py): the key, the fields in order, the event time, the
    count, limits."""
    events, limits = pipeline.events, pipeline.events.limits
    return {
        "key": {"field": events.key, "type": pipeline.key_type},
        "fields": [{"name": n, "type": f.type, "required": f.required} for n, f in events.fields.items()],
        "time": {"field": events.time.field, "format": events.time.format},
        "count": {"field": events.count, "max": limits.max_count} if events.count else None,
        "max_record_bytes": limits.max_record_bytes,
        "min_time_ms": limits.earliest,
        "max_future_ms": limits.max_future,
        "max_key_bytes": MAX_KEY_BYTES,
    }


def _profile_spec(profile: pf.Profile, keys: frozenset[str]) -> dict[str, Any]:
    """What the CDC fold needs (pipeline/cdc_fold.py): the profile's key, its carried columns in order (an
    aggregate key's text, `keys`, limited to MAX_KEY_BYTES), the heartbeat table, the size limit of a change
    event."""
    return {
        "key": {"column": profile.key, "type": profile.key_type},
        "columns": [
            {
                "name": n,
                "type": c.type,
                **({"max_bytes": MAX_KEY_BYTES} if n in keys and c.type == "text" else {}),
            }
            for n, c in profile.columns.items()
        ],
        "heartbeat": {"schema": pf.HEARTBEAT_SCHEMA, "table": pf.HEARTBEAT_TABLE},
        "max_change_bytes": pf.MAX_CHANGE_BYTES,
    }
