"""The pipeline file held against the live database: each table it joins exists, its key is the primary key
(or has a unique index of its own), and every carried column exists with a type the file's declaration
can carry. Each mistake is one pipeline_file.PipelineFileError at the file's line, with the fix."""

from __future__ import annotations

import difflib

import psycopg

from common import plan
from common.pipeline_file import Pipeline, Profile

# The Postgres types (format_type, without modifiers) each declared type carries.
COMPATIBLE: dict[str, tuple[str, ...]] = {
    "text": ("text", "character varying", "character", "citext", "uuid", "name"),
    "integer": ("integer", "smallint"),
    "bigint": ("bigint", "integer", "smallint"),
    "double": ("double precision", "real"),
    "numeric": ("numeric",),
    "boolean": ("boolean",),
    "timestamptz": ("timestamp with time zone",),
    "timestamp": ("timestamp without time zone",),
    "text[]": ("text[]", "character varying[]"),
    "jsonb": ("jsonb", "json"),
}

_COLUMNS = """
SELECT a.attname, regexp_replace(format_type(a.atttypid, a.atttypmod), '\\(.*\\)', '')
  FROM pg_attribute a
 WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped
 ORDER BY a.attnum"""
# Single-column unique indexes (the primary key's included): a key Debezium and the join can rely on.
_UNIQUE_KEYS = """
SELECT a.attname FROM pg_index i
  JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
 WHERE i.indrelid = %s::regclass AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL"""


def check(conn: psycopg.Connection, pipeline: Pipeline) -> None:
    """Raises PipelineFileError at the first mismatch between the file and the database, table by table
    (the profile, then the file's tables)."""
    for join in plan.joins(pipeline):
        where = "profile" if join.name == plan.PROFILE else f"tables.{join.name}"
        _check_table(conn, pipeline, join.table, where)


def _check_table(conn: psycopg.Connection, pipeline: Pipeline, profile: Profile, where: str) -> None:
    table = profile.table
    if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
        raise pipeline.error(f"{where}.table", f"no table {table} in this database{_near(conn, table)}")
    columns: dict[str, str] = {name: kind for name, kind in conn.execute(_COLUMNS, (table,))}
    key = profile.key
    _check_column(pipeline, table, columns, key, profile.key_type, f"{where}.key", f"{where}.key_type")
    unique = {row[0] for row in conn.execute(_UNIQUE_KEYS, (table,))}
    if key not in unique:
        raise pipeline.error(
            f"{where}.key",
            f"{key} is not the primary key of {table} and has no unique index of its own: name the primary "
            f"key, or add one (CREATE UNIQUE INDEX ON {table} ({key}))",
        )
    for name, column in profile.columns.items():
        path = f"{where}.columns.{name}"
        _check_column(pipeline, table, columns, name, column.type, path, path)


def _check_column(
    pipeline: Pipeline,
    table: str,
    columns: dict[str, str],
    name: str,
    declared: str,
    where: str,
    type_where: str,
) -> None:
    if name not in columns:
        close = difflib.get_close_matches(name, list(columns), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else f"; its columns: {', '.join(columns)}"
        raise pipeline.error(where, f"{table} has no column {name}{hint}")
    actual = columns[name]
    if actual not in COMPATIBLE[declared]:
        fits = [t for t, pg_types in COMPATIBLE.items() if actual in pg_types]
        fix = (
            f"declare it as {fits[0]}" if fits else f"streamfold cannot carry {actual}: leave the column out"
        )
        raise pipeline.error(type_where, f"declared {declared}, but {table}.{name} is {actual}: {fix}")


def _near(conn: psycopg.Connection, table: str) -> str:
    names = [
        f"{schema}.{name}"
        for schema, name in conn.execute(
            "SELECT schemaname, tablename FROM pg_tables "
            "WHERE schemaname NOT IN ('pg_catalog', 'information_schema')"
        )
    ]
    close = difflib.get_close_matches(table, names, n=1)
    return f" (did you mean {close[0]}?)" if close else ""
