"""The pipeline file applied to the database: its sink tables brought to what the file declares, and the file
recorded in streamfold.pipelines so the next `streamfold setup` (and `run`) can hold a changed file
against it.

What a changed file may do, and what it may not (docs/contracts.md "Changing the pipeline file"):
- add a carried profile column or an event field, at the end of its list: the enriched table gets a new
  column (older rows null), the join's state carries the value from then on;
- add an aggregate: a new table, filled from the events enriched from then on;
- change names that only the outputs use (topics, the join settings).
It may not change the profile table, its key or key type, the event key, the event-time field or its
format, a column's or field's type, an aggregate's keys, nor reorder or remove columns whose values the
join's state holds: those are refused, naming what changed, before anything is applied.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext

from common import pipeline_file as pf
from common.versions import moved_live
from db import history, pipeline_tables, tables

_RESTART = (
    "the join's state and the sink tables hold values of the old file: keep the old setting, or set the "
    "pipeline up anew under another name (`name:`) with its own tables and topics"
)


# What may change without `setup`: the join settings (`run --conf` overrides them too) and the sample data.
_FREE = {"join", "run", "sample"}


class IncompatibleChange(pf.PipelineFileError):
    """A changed pipeline file the installation cannot absorb."""


def applied(conn: sa.Connection, name: str) -> pf.Pipeline | None:
    """The file the pipeline `name` was last set up with, if any."""
    row = conn.execute(sa.select(tables.pipelines.c.spec).where(tables.pipelines.c.name == name)).first()
    return None if row is None else pf.Pipeline.model_validate(row[0])


def check_applied(conn: sa.Connection, pipeline: pf.Pipeline) -> None:
    """What `run` checks: setup applied exactly this file (a changed file needs `streamfold setup` first,
    which refuses a change the installation cannot absorb)."""
    before = applied(conn, pipeline.name)
    if before is None:
        raise pipeline.error(
            "name", f"pipeline {pipeline.name!r} is not set up in this database: run `streamfold setup`"
        )
    if before.model_dump(mode="json", exclude=_FREE) != pipeline.model_dump(mode="json", exclude=_FREE):
        check_change(before, pipeline)
        raise pipeline.error(
            "name", "the file changed since `streamfold setup` applied it: run `streamfold setup` first"
        )


def check_absorbable(conn: sa.Connection, pipeline: pf.Pipeline) -> None:
    """What `setup` (apply) and `run` (check_applied) refuse about the installation, for `check`: a change
    from the file last set up that the installation cannot absorb. Nothing set up yet: nothing to hold."""
    if not sa.inspect(conn).has_table(tables.pipelines.name, schema=tables.pipelines.schema):
        return
    before = applied(conn, pipeline.name)
    if before is not None:
        check_change(before, pipeline)


def check_change(before: pf.Pipeline, after: pf.Pipeline) -> None:
    """Raises IncompatibleChange at the first change the installation cannot absorb."""
    fixed: list[tuple[str, Any, Any]] = [
        ("profile.table", before.profile.table, after.profile.table),
        ("profile.key", before.profile.key, after.profile.key),
        ("profile.key_type", before.profile.key_type, after.profile.key_type),
        ("events.key", before.events.key, after.events.key),
        ("events.time.field", before.events.time.field, after.events.time.field),
        ("events.time.format", before.events.time.format, after.events.time.format),
        ("events.count", before.events.count, after.events.count),
    ]
    for path, old, new in fixed:
        if old != new:
            raise after.error(path, f"changed from {old!r} to {new!r}, which {_RESTART}")
    if (before.cdc.format, after.cdc.format) == ("avro", "json"):
        # The Avro fold reads the JSON envelopes a topic holds from before (docs/avro.md); the JSON fold
        # would dead-letter every Avro one, and the CDC topic keeps every change.
        raise after.error(
            "cdc.format",
            "changed from 'avro' to 'json', but the CDC topic keeps its Avro change events, which the JSON "
            "fold cannot read: keep `format: avro`",
        )
    _check_list(after, "profile.columns", before.profile.columns, after.profile.columns)
    _check_list(after, "events.fields", before.events.fields, after.events.fields)
    _check_tables(before, after)
    old_aggregates = {a.name: a for a in before.aggregates}
    for i, aggregate in enumerate(after.aggregates):
        old = old_aggregates.get(aggregate.name)
        if old is not None and (old.group_by, old.count_column, old.sums) != (
            aggregate.group_by,
            aggregate.count_column,
            aggregate.sums,
        ):
            raise after.error(
                f"aggregates.{i}",
                f"aggregate {aggregate.name!r} changed its keys, count or sums, so its totals would mix two "
                "definitions: give the new one another name (the old table stays as it is)",
            )


def _check_tables(before: pf.Pipeline, after: pf.Pipeline) -> None:
    """Each table is a stage of the join, its state kept by the stage's position in the checkpoint
    (docs/decisions/join-cascade.md): the old tables stay, in order, with their table, key and what they
    join on; new ones come after them. Each table's columns change as the profile's may."""
    old_names = list(before.tables)
    for name in old_names:
        if name not in after.tables:
            raise after.error(
                "tables", f"{name!r} is gone, but the join's state holds its versions: {_RESTART}"
            )
    for position, name in enumerate(old_names):
        now = list(after.tables)[position]
        if now != name:
            raise after.error(f"tables.{now}", f"new tables go after the existing ones ({name!r})")
        old, new = before.tables[name], after.tables[name]
        for field in ("table", "key", "key_type", "join_on"):
            if getattr(old, field) != getattr(new, field):
                raise after.error(
                    f"tables.{name}.{field}",
                    f"changed from {getattr(old, field)!r} to {getattr(new, field)!r}, which {_RESTART}",
                )
        _check_list(after, f"tables.{name}.columns", old.columns, new.columns)


def _check_list(after: pf.Pipeline, path: str, old: dict[str, Any], new: dict[str, Any]) -> None:
    """The join's state holds these values by position: the old ones stay, in order, with their types;
    new ones come after them."""
    for name in old:
        if name not in new:
            raise after.error(path, f"{name!r} is gone, but the join's state holds its values: {_RESTART}")
    kept = list(new)[: len(old)]
    for position, name in enumerate(old):
        if kept[position] != name:
            raise after.error(
                f"{path}.{kept[position]}", f"new entries go after the existing ones ({name!r})"
            )
        if old[name].type != new[name].type:
            raise after.error(
                f"{path}.{name}.type", f"changed from {old[name].type} to {new[name].type}, which {_RESTART}"
            )


def apply(conn: sa.Connection, pipeline: pf.Pipeline, moved: bool = False) -> list[str]:
    """Creates the sink tables that are missing and adds new columns (nullable: older rows have none);
    records the file. Returns what changed, one line each. Refuses (IncompatibleChange) before changing
    anything when the file changed in a way the installation cannot absorb.

    moved: a swap has moved the live pipeline's tables to <table>__live (common/versions.py moved_live):
    those are the tables to apply the file to, and the users' names, views by then (the history's view and
    function among them), are db/versions.py ensure_views' to keep."""
    before = applied(conn, pipeline.name)
    if before is not None:
        check_change(before, pipeline)
    wanted = pipeline_tables.metadata(moved_live(pipeline) if moved else pipeline)
    done: list[str] = []
    operations = Operations(MigrationContext.configure(conn))
    for diff in _differences(conn, wanted):
        done += _apply(operations, conn, wanted, diff)
    if not moved:
        done += history.create(conn, pipeline)
    record = {"name": pipeline.name, "spec": pipeline.model_dump(mode="json")}
    statement = sa.dialects.postgresql.insert(tables.pipelines).values(record)
    conn.execute(
        statement.on_conflict_do_update(
            index_elements=["name"], set_={"spec": statement.excluded.spec, "applied_at": sa.func.now()}
        )
    )
    return done


def _differences(conn: sa.Connection, wanted: sa.MetaData) -> list[Any]:
    names = {(t.schema, t.name) for t in wanted.tables.values()}

    def ours(name: str | None, type_: str, parent: dict[str, Any]) -> bool:
        if type_ == "schema":
            return name in {schema for schema, _ in names}
        if type_ == "table":
            return (parent.get("schema_name"), name) in names
        return True

    context = MigrationContext.configure(
        conn, opts={"include_schemas": True, "include_name": ours, "compare_type": True}
    )
    diffs: list[Any] = []
    for diff in compare_metadata(context, wanted):
        diffs += diff if isinstance(diff, list) else [diff]
    return diffs


def _apply(operations: Operations, conn: sa.Connection, wanted: sa.MetaData, diff: tuple) -> list[str]:
    kind = diff[0]
    if kind == "add_table":
        table: sa.Table = diff[1]
        table.create(conn)
        return [f"created table {table.schema}.{table.name}"]
    if kind == "add_column":
        schema, name, column = diff[1], diff[2], diff[3]
        operations.add_column(name, sa.Column(column.name, column.type, nullable=True), schema=schema)
        return [f"added column {column.name} to {schema}.{name} (older rows: null)"]
    if kind == "add_index":
        index: sa.Index = diff[1]
        index.create(conn)
        return [f"created index {index.name}"]
    # A column kept nullable for older rows, or left by an earlier file: nothing to do.
    if kind in ("modify_nullable", "remove_column"):
        return []
    raise IncompatibleChange(
        f"the sink tables differ from the pipeline file in a way setup will not change: {diff}"
    )
