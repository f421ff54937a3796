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

from common import plan
from common.pipeline_file import Pipeline

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
# The enriched table's columns that explain a join (not named by the pipeline file).
CDC_PROGRESS = plan.CDC_PROGRESS
RELEASED_BY_MAX_WAIT = plan.RELEASED_BY_MAX_WAIT
# What a sum of an event field of each numeric type is stored as.
SUM_TYPES: dict[str, sa.types.TypeEngine] = {
    "integer": sa.BigInteger(),
    "bigint": sa.BigInteger(),
    "double": DOUBLE_PRECISION(),
    "numeric": sa.Numeric(),
}
# The sink's time types (sink_spec): both land as timestamptz.
_TIMES = {plan.EPOCH_MS: sa.DateTime(timezone=True), plan.VALID_FROM_MS: sa.DateTime(timezone=True)}


def enriched_columns(pipeline: Pipeline) -> list[sa.Column]:
    """The plan's enriched columns (plan.EnrichedColumn). The key, time, count and complete columns, and a
    carried column with if_missing, are never null. valid_from is '-infinity' for a version read by the
    initial snapshot, NULL when the key had no valid profile; complete is false when join.max_wait released
    the event before CDC progress covered it (the profile may be stale); cdc_progress and
    released_by_max_wait say why the join released it (`streamfold explain`), NULL in join.mode=latest (or
    before any progress) and in rows landed before these columns existed."""
    resolved = plan.of(pipeline)
    return [_enriched_column(c, c.name == resolved.names.complete) for c in resolved.enriched]


def _enriched_column(column: plan.EnrichedColumn, complete: bool) -> sa.Column:
    kind = _TIMES.get(column.type) or COLUMN_TYPES[column.type]
    if column.name == plan.EVENT_ID:
        return sa.Column(column.name, kind, primary_key=True)
    default = sa.text("true") if complete else None
    return sa.Column(column.name, kind, nullable=column.nullable, server_default=default)


def history_columns(join: plan.TableJoin) -> list[sa.Column]:
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


def aggregate_columns(aggregate: plan.AggregatePlan) -> tuple[list[sa.Column], list[str]]:
    """The aggregate table's columns and its primary key's column names."""
    columns = [sa.Column(k.column, COLUMN_TYPES[k.type], nullable=False) for k in aggregate.keys]
    columns.append(sa.Column(aggregate.count_column, sa.BigInteger, nullable=False))
    columns += [sa.Column(s.column, SUM_TYPES[s.type], nullable=False) for s in aggregate.sums]
    digests = [
        sa.Column(k.conflict_column, sa.Uuid, sa.Computed(f"md5({k.column})::uuid", persisted=True))
        for k in aggregate.keys
        if k.md5
    ]
    return [*columns, *digests], aggregate.primary_key


def metadata(pipeline: Pipeline, into: sa.MetaData | None = None) -> sa.MetaData:
    """The pipeline's sink tables (added to `into` when given)."""
    meta = into if into is not None else sa.MetaData()
    resolved = plan.of(pipeline)
    schema, name = resolved.enriched_table.split(".")
    key, time = resolved.names.key, resolved.names.time
    sa.Table(
        name,
        meta,
        *enriched_columns(pipeline),
        sa.Index(f"{name}_{key}_time", key, time),
        schema=schema,
    )
    for history in resolved.histories:  # the profile's, then each further table's
        schema, name = history.table.split(".")
        sa.Table(name, meta, *history_columns(history.join), schema=schema)
    for aggregate in resolved.aggregates:
        schema, name = aggregate.table.split(".")
        columns, primary_key = aggregate_columns(aggregate)
        sa.Table(name, meta, *columns, sa.PrimaryKeyConstraint(*primary_key), schema=schema)
    return meta
