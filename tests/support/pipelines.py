"""Pipelines for tests: the default file's, and random ones (random event fields and profile columns of every
type, some with if_missing, random output names) with random values of each column's type."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from common import pipeline_file as pf

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = pf.load(ROOT / pf.DEFAULT_FILE)

# A value of each declared type as the job carries it (pipeline/field_types.py): text[] as a list, times as
# epoch microseconds, numeric and jsonb as text. None (null) is among each type's values.
_TEXTS = [None, "", "a", "\u6771\u4eac", "caf\u00e9 \U0001f3cc", "x" * 300]
VALUES: dict[str, list[Any]] = {
    "text": _TEXTS,
    "integer": [None, 0, -1, 7, 2**31 - 1, -(2**31)],
    "bigint": [None, 0, -1, 7, 2**63 - 1, -(2**63)],
    "double": [None, 0.0, -1.5, 1e300, 2.5e-10, 3.0],
    "numeric": [None, "0", "-12.50", "12345678901234567890.000000001"],
    "boolean": [None, True, False],
    "timestamptz": [None, 0, 1_700_000_000_123_456, -62_135_596_800_000_000],
    "timestamp": [None, 0, 1_700_000_000_123_456],
    "text[]": [None, [], ["a", None, ""], ["\u00e9checs \u265f"]],
    "jsonb": [None, "{}", '{"a": [1, 2.5, null]}', '"x"'],
}
# An if_missing for each type that takes one (a value of the column's type, as the file writes it).
IF_MISSING: dict[str, list[Any]] = {
    "text": ["UNKNOWN", "", "none"],
    "integer": [0, -1],
    "bigint": [0, 2**40],
    "double": [0, -0.5],
    "numeric": [0, "1.25"],
    "boolean": [False, True],
    "jsonb": ["x", 3],
}


def random_pipeline(rng: random.Random, every_type: bool = False) -> pf.Pipeline:
    """A valid pipeline of random shape: event fields and profile columns of random types (every type
    once in each, in random order, when every_type; else 0-4 fields and 1-4 columns), one name that may be
    both an event field and a profile column, if_missing on about half the columns whose type takes one,
    random output names. No aggregates: the join does not read them."""
    fields = {
        name: {"type": kind, "required": rng.random() < 0.5} for name, kind in _named(rng, "f", every_type, 0)
    }
    columns = {}
    for name, kind in _named(rng, "c", every_type, 1):
        column: dict[str, Any] = {"type": kind}
        if kind in IF_MISSING and rng.random() < 0.5:
            column["if_missing"] = rng.choice(IF_MISSING[kind])
        columns[name] = column
    renamed = {name: f"out_{name}" for name in fields if rng.random() < 0.3}
    return pf.Pipeline.model_validate(
        {
            "name": "random",
            "profile": {
                "table": "public.accounts",
                "key": rng.choice(["id", "account"]),
                "key_type": rng.choice(pf.KEY_TYPES),
                "columns": columns,
            },
            "events": {
                "kafka_topic": "events",
                "key": rng.choice(["id", "account_id"]),
                "time": {"field": rng.choice(["ts", "at"])},
                "count": rng.choice([None, "n"]),
                "fields": fields,
            },
            "outputs": {
                "enriched": {
                    "key_column": rng.choice([None, "who"]),
                    "event_columns": renamed,
                    "profile_prefix": rng.choice(["profile_", "p_", "user_"]),
                }
            },
        }
    )


def _named(rng: random.Random, prefix: str, every_type: bool, least: int) -> list[tuple[str, str]]:
    """(name, type) pairs: names prefix<n>, or "shared" (a name event fields and profile columns share)."""
    types = list(pf.TYPES) if every_type else [rng.choice(pf.TYPES) for _ in range(rng.randint(least, 4))]
    rng.shuffle(types)
    names = [f"{prefix}{n}" for n in range(len(types))]
    if names and rng.random() < 0.5:
        names[rng.randrange(len(names))] = "shared"
    return list(zip(names, types, strict=True))
