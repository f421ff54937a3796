"""Time travel over a pipeline's profile history, and each further table's (docs/history.md).

The sink inserts one row per version the join stores into the join's history table (common/plan.py
History, db/pipeline_tables.py history_columns), in the partition's transaction, and never updates a row: a
version's end, valid_to, is the next version's valid_from, derived here by the view (History.view; the
profile's is streamfold.profile_versions_<pipeline>) with lead() over the key's versions in the join's
order (valid_from, lsn). The function (History.function; the profile's is streamfold.profile_at_<pipeline>)
of (key, at) returns the version valid at `at`, as the join would pick it for an event then: the greatest
(valid_from, lsn) <= `at`, nothing when that is a delete or there is none.
`streamfold setup` creates both (CREATE OR REPLACE: a column the file adds goes at the end of the view).

The live pipeline's view and function are the names users' SQL and `streamfold query` read. From the first
`streamfold swap` on they read the current version's history table (db/versions.py): `replace_sql` drops
and creates them over another version's table, as the swap does for the enriched and aggregate names.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from common import pipeline_file as pf
from common import plan
from db.pipeline_tables import COLUMN_TYPES

# The view's columns before the carried ones (which the file may extend at the end).
FIXED = ("valid_from", "valid_to", "op", "lsn", "incomplete")


def _quoted(name: str) -> str:
    return postgresql.dialect().identifier_preparer.quote(name)


def key_type(history: plan.History) -> str:
    return str(COLUMN_TYPES[history.join.table.key_type].compile(dialect=postgresql.dialect()))


def view_columns(history: plan.History) -> list[str]:
    """The view's columns, in view_sql's order."""
    return [history.join.table.key, *FIXED, *history.join.table.columns]


def view_sql(history: plan.History, named: plan.History | None = None) -> str:
    """The view over `history`'s table, under `named`'s view name (default: its own)."""
    key = _quoted(history.join.table.key)
    carried = "".join(f", h.{_quoted(c)}" for c in history.join.table.columns)
    return (
        f"CREATE OR REPLACE VIEW {(named or history).view} AS"
        f" SELECT h.{key}, h.valid_from,"
        f" lead(h.valid_from) OVER (PARTITION BY h.{key} ORDER BY h.valid_from, h.lsn) AS valid_to,"
        f" h.op, h.lsn, h.incomplete{carried}"
        f" FROM {history.table} h"
    )


def function_sql(history: plan.History, named: plan.History | None = None) -> str:
    """valid_to > at also skips a version another one replaces at the same instant (a higher lsn).
    `named`: whose function and view names (default: the history's own)."""
    names = named or history
    key = _quoted(history.join.table.key)
    parameters = f"wanted_key {key_type(history)}, at_time timestamptz"
    return (
        f"CREATE OR REPLACE FUNCTION {names.function}({parameters})"
        f" RETURNS SETOF {names.view} LANGUAGE sql STABLE AS $$"
        f" SELECT * FROM {names.view} v WHERE v.{key} = wanted_key AND v.valid_from <= at_time"
        " AND (v.valid_to IS NULL OR v.valid_to > at_time) AND v.op <> 'd' $$"
    )


def replace_sql(history: plan.History, named: plan.History) -> list[str]:
    """`named`'s view and function dropped and created over `history`'s table: versions differ in their
    columns, which CREATE OR REPLACE VIEW cannot drop. The function first: its result type is the view's."""
    return [
        f"DROP FUNCTION IF EXISTS {named.function}",
        f"DROP VIEW IF EXISTS {named.view}",
        view_sql(history, named),
        function_sql(history, named),
    ]


def create(conn: sa.Connection, pipeline: pf.Pipeline) -> list[str]:
    """Each history's view and function, created or replaced (a file may add columns); reports their
    creation."""
    done = []
    for history in plan.histories(pipeline):
        existed = conn.execute(sa.select(sa.func.to_regclass(history.view))).scalar() is not None
        conn.execute(sa.text(view_sql(history)))
        conn.execute(sa.text(function_sql(history)))
        if not existed:
            done.append(f"created view {history.view} and function {history.function}")
    return done


def versions_query(history: plan.History) -> str:
    """Every version of the key given as the parameter, oldest first."""
    key = _quoted(history.join.table.key)
    return f"SELECT * FROM {history.view} WHERE {key} = %s ORDER BY valid_from, lsn"


def profile_at_query(history: plan.History) -> str:
    """The version of the key (first parameter) valid at the time (second parameter)."""
    return f"SELECT * FROM {history.function}(%s, %s)"
