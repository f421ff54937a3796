"""The aggregates: each a table of totals (count and sums) per key, and reading them back for Kafka.

The totals are folded where the events land, in the executors (jvm/src/main/java/io/streamfold/sink/:
`GroupTotals` sums a partition's events per key of each aggregate from the same rows it COPYs into the
enriched table, and `PgWriter` upserts those sums in the partition's Postgres transaction, keys in sorted
order so concurrent partitions cannot deadlock). So Postgres folds a few thousand sums per batch, not every
row, and the totals equal the sums over the enriched table in every committed state, replays included
(docs/guarantees.md "Totals").

The driver then publishes the current totals of the keys a batch touched to each aggregate's compacted
topic (`current_totals` and `record`, called by pipeline/sinks.py): the record's key is the key's values
joined by "|", its value a JSON object of the key columns, the count and the sums.

An aggregate keyed by an event's text field is keyed in Postgres by the text's md5 (`<column>_md5`, a
generated column), so a value of any length fits the btree; `<column>` holds the full text.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import psycopg
from psycopg import sql

# How a key's text (the landing reports Postgres text input) is cast to its column's type in the look-up.
PG_TYPES = {
    "text": "text",
    "integer": "integer",
    "bigint": "bigint",
    "double": "double precision",
    "numeric": "numeric",
    "boolean": "boolean",
    "timestamptz": "timestamptz",
    "timestamp": "timestamp",
}


def current_totals(
    conn: psycopg.Connection, aggregate: dict[str, Any], keys: list[tuple[str, ...]]
) -> list[tuple]:
    """The current rows (key values..., count, sums...) of some keys of an aggregate (its sink spec), in key
    order; `keys` holds each key's values as Postgres text input. A replayed batch republishes them."""
    if not keys:
        return []
    key_specs = aggregate["keys"]
    columns = [k["column"] for k in key_specs]
    written = [*columns, aggregate["count_column"], *(s["column"] for s in aggregate["sums"])]
    conditions = [
        _matches(spec, digest) for spec, digest in zip(key_specs, aggregate["conflict_columns"], strict=True)
    ]
    query = sql.SQL(
        "SELECT {written} FROM {table} t JOIN unnest({arrays}) AS k({columns}) ON {conditions} "
        "ORDER BY {order}"
    ).format(
        written=sql.SQL(", ").join(sql.Identifier("t", c) for c in written),
        table=sql.Identifier(*aggregate["table"].split(".")),
        arrays=sql.SQL(", ").join(sql.SQL("%s::text[]") for _ in columns),
        columns=sql.SQL(", ").join(sql.Identifier(c) for c in columns),
        conditions=sql.SQL(" AND ").join(conditions),
        order=sql.SQL(", ").join(sql.Identifier("t", c) for c in columns),
    )
    distinct = sorted(set(keys))
    return conn.execute(query, [list(values) for values in zip(*distinct, strict=True)]).fetchall()


def _matches(key: dict[str, Any], digest: str) -> sql.Composable:
    column = sql.Identifier(key["column"])
    if key["md5"]:  # the primary key's digest first, so the look-up uses the index
        return sql.SQL("t.{digest} = md5(k.{column})::uuid AND t.{column} = k.{column}").format(
            digest=sql.Identifier(digest), column=column
        )
    cast = sql.SQL(PG_TYPES[key["type"]])
    return sql.SQL("t.{column} = k.{column}::{type}").format(column=column, type=cast)


def record(aggregate: dict[str, Any], row: tuple) -> tuple[str, str]:
    """An aggregate topic's record (key, value) for a current row of `current_totals`."""
    key_count = len(aggregate["keys"])
    names = [
        *(k["column"] for k in aggregate["keys"]),
        aggregate["count_column"],
        *(s["column"] for s in aggregate["sums"]),
    ]
    key = "|".join(_text(value) for value in row[:key_count])
    value = "{" + ", ".join(f"{json.dumps(n)}: {_json(v)}" for n, v in zip(names, row, strict=True)) + "}"
    return key, value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.datetime):
        return _iso(value)
    return str(value)


def _json(value: Any) -> str:
    """As json.dumps writes it (', ' and ': ' apart), with a numeric as a JSON number and times as ISO-8601
    strings; a number JSON cannot hold (NaN, an infinity) as a string."""
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else json.dumps(str(value))
    if isinstance(value, float) and not math.isfinite(value):
        return json.dumps(str(value))
    if isinstance(value, dt.datetime):
        return json.dumps(_iso(value))
    return json.dumps(value)


def _iso(moment: dt.datetime) -> str:
    """The landing's form (jvm/.../sink/Bytes.java): microseconds, Z for UTC, no zone for a timestamp."""
    if moment.tzinfo is None:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
