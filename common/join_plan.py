"""The pipeline file compiled into the joins an event goes through, in order (docs/join-semantics.md,
"Several tables").

The profile joins first, on the events' key; then each table of the file's `tables`, in the file's order, on
an event field or on a column of a join before it (a foreign-key chain). The file's validation
(common/pipeline_file.py) made sure every reference points backwards and has a key's type, so the order
of the file is an order the joins can run in. Every part that deals with tables reads them from here: what
setup captures, what the join carries, what the outputs name.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import pipeline_file as pf

PROFILE = "profile"
# A Postgres table (schema.table) -> the columns that may leave the database, its key first.
Captured = dict[str, tuple[str, ...]]
EVENT = "event"


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


def joins(pipeline: pf.Pipeline) -> tuple[TableJoin, ...]:
    """The profile on the events' key, then the file's tables in order."""
    first = TableJoin(
        PROFILE, pipeline.profile, pipeline.outputs.enriched.profile_prefix, (EVENT, pipeline.events.key)
    )
    more = (
        TableJoin(name, table, table.prefix or f"{name}_", _reference(table.join_on))
        for name, table in pipeline.tables.items()
    )
    return (first, *more)


def join_named(pipeline: pf.Pipeline, name: str) -> TableJoin:
    """The join of that name: the profile's (PROFILE) or a table's of `tables`."""
    return next(join for join in joins(pipeline) if join.name == name)


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


CHANGE = "change"


def histories(pipeline: pf.Pipeline) -> tuple[History, ...]:
    """One per join, the profile's first: `streamfold.<join>_history_<pipeline>`, `..._versions_...` and
    `..._at_...` (the profile's are Pipeline.history_table, versions_view and profile_at_function)."""
    return tuple(
        History(
            join,
            f"streamfold.{join.name}_history_{pipeline.name}",
            f"streamfold.{join.name}_versions_{pipeline.name}",
            f"streamfold.{join.name}_at_{pipeline.name}",
            CHANGE if i == 0 else f"{CHANGE}:{join.name}",
        )
        for i, join in enumerate(joins(pipeline))
    )


def _reference(text: str) -> tuple[str, str]:
    source, _, name = text.partition(".")
    return source, name


def captured(*pipelines: pf.Pipeline) -> Captured:
    """Each Postgres table the files join, with the columns that may leave the database (key first), across
    every join of it in every file: a table joined twice is captured once. PII, every other column, stays."""
    tables: dict[str, dict[str, None]] = {}
    for pipeline in pipelines:
        for join in joins(pipeline):
            tables.setdefault(join.table.table, {}).update(dict.fromkeys(join.carried()))
    return {table: tuple(columns) for table, columns in tables.items()}
