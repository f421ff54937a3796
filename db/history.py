"""Time travel over a pipeline's profile history (docs/history.md).

The sink inserts one row per profile version the join stores into the history table
(Pipeline.history_table, db/pipeline_tables.py history_columns), in the partition's transaction, and never
updates a row: a version's end, valid_to, is the next version's valid_from, derived here by the view
(Pipeline.versions_view) with lead() over the key's versions in the join's order (valid_from, lsn). The
function Pipeline.profile_at_function(key, at) returns the version valid at `at`, as the join would pick it
for an event then: the greatest (valid_from, lsn) <= `at`, nothing when that is a delete or there is none.
`streamfold setup` creates both (CREATE OR REPLACE: a column the file adds goes at the end of the view).

The live pipeline's view and function are the names users' SQL and `streamfold query` read. From the first
`streamfold swap` on they read the current version's history table (db/versions.py): `replace_sql` drops
and creates them over another version's table, as the swap does for the enriched and aggregate names.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from common import pipeline_file as pf
from db.pipeline_tables import COLUMN_TYPES

# The view's columns before the carried ones (which the file may extend at the end).
FIXED = ("valid_from", "valid_to", "op", "lsn", "incomplete")


def _quoted(name: str) -> str:
    return postgresql.dialect().identifier_preparer.quote(name)


def key_type(pipeline: pf.Pipeline) -> str:
    return str(COLUMN_TYPES[pipeline.key_type].compile(dialect=postgresql.dialect()))


def view_columns(pipeline: pf.Pipeline) -> list[str]:
    """The view's columns, in view_sql's order."""
    return [pipeline.profile.key, *FIXED, *pipeline.profile.columns]


def view_sql(pipeline: pf.Pipeline, named: pf.Pipeline | None = None) -> str:
    """The view over `pipeline`'s history table, under `named`'s view name (default: its own)."""
    key = _quoted(pipeline.profile.key)
    carried = "".join(f", h.{_quoted(c)}" for c in pipeline.profile.columns)
    return (
        f"CREATE OR REPLACE VIEW {(named or pipeline).versions_view} AS"
        f" SELECT h.{key}, h.valid_from,"
        f" lead(h.valid_from) OVER (PARTITION BY h.{key} ORDER BY h.valid_from, h.lsn) AS valid_to,"
        f" h.op, h.lsn, h.incomplete{carried}"
        f" FROM {pipeline.history_table} h"
    )


def function_sql(pipeline: pf.Pipeline, named: pf.Pipeline | None = None) -> str:
    """valid_to > at also skips a version another one replaces at the same instant (a higher lsn).
    `named`: whose function and view names (default: the pipeline's own)."""
    names = named or pipeline
    key = _quoted(pipeline.profile.key)
    parameters = f"wanted_key {key_type(pipeline)}, at_time timestamptz"
    return (
        f"CREATE OR REPLACE FUNCTION {names.profile_at_function}({parameters})"
        f" RETURNS SETOF {names.versions_view} LANGUAGE sql STABLE AS $$"
        f" SELECT * FROM {names.versions_view} v WHERE v.{key} = wanted_key AND v.valid_from <= at_time"
        " AND (v.valid_to IS NULL OR v.valid_to > at_time) AND v.op <> 'd' $$"
    )


def replace_sql(pipeline: pf.Pipeline, named: pf.Pipeline) -> list[str]:
    """`named`'s view and function dropped and created over `pipeline`'s history: versions differ in their
    columns, which CREATE OR REPLACE VIEW cannot drop. The function first: its result type is the view's."""
    return [
        f"DROP FUNCTION IF EXISTS {named.profile_at_function}",
        f"DROP VIEW IF EXISTS {named.versions_view}",
        view_sql(pipeline, named),
        function_sql(pipeline, named),
    ]


def create(conn: sa.Connection, pipeline: pf.Pipeline) -> list[str]:
    """The view and the function, created or replaced (a file may add columns); reports their creation."""
    existed = conn.execute(sa.select(sa.func.to_regclass(pipeline.versions_view))).scalar() is not None
    conn.execute(sa.text(view_sql(pipeline)))
    conn.execute(sa.text(function_sql(pipeline)))
    if existed:
        return []
    return [f"created view {pipeline.versions_view} and function {pipeline.profile_at_function}"]


def versions_query(pipeline: pf.Pipeline) -> str:
    """Every version of the key given as the parameter, oldest first."""
    key = _quoted(pipeline.profile.key)
    return f"SELECT * FROM {pipeline.versions_view} WHERE {key} = %s ORDER BY valid_from, lsn"


def profile_at_query(pipeline: pf.Pipeline) -> str:
    """The version of the key (first parameter) valid at the time (second parameter)."""
    return f"SELECT * FROM {pipeline.profile_at_function}(%s, %s)"
