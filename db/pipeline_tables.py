"""The sink tables a pipeline file declares, as SQLAlchemy Core: the enriched table, the profile history and
one table per aggregate (docs/contracts.md "The pipeline file").

The enriched table: event_id (the record's source position, the primary key), the key, the event time,
the event fields, the count, the carried profile columns (prefixed), when that profile version became
valid and whether CDC progress covered the event, the CDC progress at its release and whether join.max_wait
released it. The history table: every profile version the join stored (db/history.py queries it). An
aggregate table: its group-by columns, the count, the sums; keyed by the group-by columns, an event text
field by its md5 (a generated column), so a value of any length fits the B-tree.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION, JSONB

from common import join_plan
from common.pipeline_file import Aggregate, Pipeline

COLUMN_TYPES: dict[str, sa.types.TypeEngine] = {
    "text": sa.Text(),
    "integer": sa.Integer(),
    "bigint": sa.BigInteger(),
    "double": DOUBLE_PRECISION(),
    "numeric": sa.Numeric(),
    "boolean": sa.Boolean(),
    "timestamptz": sa.DateTime(timezone=True),
    "timestamp": sa.DateTime(),
    "text[]": ARRAY(sa.Text),
    "jsonb": JSONB(),
}
# What a sum of an event field of each numeric type is stored as.
# The enriched table's columns that explain a join (not named by the pipeline file).
CDC_PROGRESS = "cdc_progress"
RELEASED_BY_MAX_WAIT = "released_by_max_wait"
SUM_TYPES: dict[str, sa.types.TypeEngine] = {
    "integer": sa.BigInteger(),
    "bigint": sa.BigInteger(),
    "double": DOUBLE_PRECISION(),
    "numeric": sa.Numeric(),
}


def enriched_columns(pipeline: Pipeline) -> list[sa.Column]:
    names, events = pipeline.outputs.enriched, pipeline.events
    columns = [
        sa.Column("event_id", sa.Text, primary_key=True),
        sa.Column(names.key_column or events.key, COLUMN_TYPES[pipeline.key_type], nullable=False),
        sa.Column(names.time_column or events.time.field, sa.DateTime(timezone=True), nullable=False),
        *(
            sa.Column(names.event_columns.get(name, name), COLUMN_TYPES[field.type])
            for name, field in events.fields.items()
        ),
    ]
    if events.count:
        columns.append(sa.Column(names.count_column or events.count, sa.Integer, nullable=False))
    columns += [
        sa.Column(
            f"{names.profile_prefix}{name}", COLUMN_TYPES[column.type], nullable=column.if_missing is None
        )
        for name, column in pipeline.profile.columns.items()
    ]
    columns += [  # each further table's columns under its prefix (none in a one-table file)
        sa.Column(join.output(name), COLUMN_TYPES[column.type], nullable=column.if_missing is None)
        for join in join_plan.joins(pipeline)[1:]
        for name, column in join.table.columns.items()
    ]
    # A nullable=... keyword per column: '-infinity' for a version read by the initial snapshot, NULL
    # when the key had no valid profile; false when join.max_wait released the event before CDC progress
    # covered it (the profile may be stale).
    columns += [
        sa.Column(names.valid_from_column, sa.DateTime(timezone=True)),
        sa.Column(names.complete_column, sa.Boolean, nullable=False, server_default=sa.text("true")),
    ]
    # Why the event joined its version (`streamfold explain`): the CDC progress when the join released it
    # (NULL in join.mode=latest, or before any progress), and whether join.max_wait released it before CDC
    # progress reached its time. NULL in rows landed before these columns existed.
    columns += [
        sa.Column(CDC_PROGRESS, sa.DateTime(timezone=True)),
        sa.Column(RELEASED_BY_MAX_WAIT, sa.Boolean),
    ]
    return columns


def history_columns(join: join_plan.TableJoin) -> list[sa.Column]:
    """A history table: one row per version of the join's table the join stored, keyed like the join orders
    versions (key, valid_from, lsn). A delete (or a truncate's end of a row) is a version with op 'd' and no
    values; `incomplete` says which values are unknown (unchanged TOASTed values with nothing to fill
    them)."""
    table = join.table
    return [
        sa.Column(table.key, COLUMN_TYPES[table.key_type], primary_key=True),
        sa.Column("valid_from", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("lsn", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("op", sa.Text, nullable=False),
        sa.Column("incomplete", sa.Text),
        *(sa.Column(name, COLUMN_TYPES[column.type]) for name, column in table.columns.items()),
    ]


def aggregate_columns(pipeline: Pipeline, aggregate: Aggregate) -> tuple[list[sa.Column], list[str]]:
    """The aggregate table's columns and its primary key's column names."""
    columns: list[sa.Column] = []
    digests: list[sa.Column] = []
    key: list[str] = []
    for column, ref in aggregate.group_by.items():
        source, name = pipeline.resolve(ref, f"aggregates.{aggregate.name}.group_by.{column}")
        kind = pipeline.reference_type(source, name)
        columns.append(sa.Column(column, COLUMN_TYPES[kind], nullable=False))
        if source == "event" and kind == "text":
            digest = f"{column}_md5"
            digests.append(sa.Column(digest, sa.Uuid, sa.Computed(f"md5({column})::uuid", persisted=True)))
            key.append(digest)
        else:
            key.append(column)
    columns.append(sa.Column(aggregate.count_column, sa.BigInteger, nullable=False))
    for column, ref in aggregate.sums.items():
        _, name = pipeline.resolve(ref, f"aggregates.{aggregate.name}.sums.{column}")
        columns.append(sa.Column(column, SUM_TYPES[pipeline.events.fields[name].type], nullable=False))
    return [*columns, *digests], key


def metadata(pipeline: Pipeline, into: sa.MetaData | None = None) -> sa.MetaData:
    """The pipeline's sink tables (added to `into` when given)."""
    meta = into if into is not None else sa.MetaData()
    schema, name = pipeline.enriched_table.split(".")
    key = pipeline.outputs.enriched.key_column or pipeline.events.key
    time = pipeline.outputs.enriched.time_column or pipeline.events.time.field
    sa.Table(
        name,
        meta,
        *enriched_columns(pipeline),
        sa.Index(f"{name}_{key}_time", key, time),
        schema=schema,
    )
    for history in join_plan.histories(pipeline):  # the profile's, then each further table's
        schema, name = history.table.split(".")
        sa.Table(name, meta, *history_columns(history.join), schema=schema)
    for aggregate in pipeline.aggregates:
        schema, name = pipeline.aggregate_table(aggregate).split(".")
        columns, primary_key = aggregate_columns(pipeline, aggregate)
        sa.Table(name, meta, *columns, sa.PrimaryKeyConstraint(*primary_key), schema=schema)
    return meta
