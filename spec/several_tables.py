"""Which version of each table an event joins, when it joins several (docs/join-semantics.md, "Several
tables"): the reference the job's joins are held to, free of Spark.

The joins run in the plan's order (common/plan.py). Each one looks up its key's version valid at the
event's time, exactly as a single table does (spec/temporal_state.py version_at). The key is an event field,
or a column of the version an earlier join found valid at that same time: along a chain every hop is read
at the event's time, never at the time the row was changed or the event arrived.

- No key (the field or column is null, or the earlier join found no version or a tombstone): the table's
  columns take their if_missing, as for an unknown key. That is a fact about the data, not an unknown: the
  row stays complete.
- An unknown key (the earlier version's column is unknown: an unchanged TOASTed value nothing filled, or a
  drifted column): the table's columns take their if_missing and the row is not complete, since the version
  it should have joined is unknown.
- A foreign key is read as the database holds it, before if_missing: a null key column with an if_missing
  joins nothing, it does not join a row whose key is the if_missing value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from common.plan import EVENT, TableJoin
from spec.temporal_state import DELETE, IfMissing, Version, unknown, version_at


class Joined(NamedTuple):
    """What one join gave an event: the key it looked up (None: no key), the version's values as the row
    holds them (if_missing applied), its valid_from (None: no version), and whether all of it is known."""

    key: str | None
    values: tuple[Any, ...]
    valid_from_ms: int | None
    known: bool


def key_text(value: Any) -> str | None:
    """A key as the join state holds it: text, an integer in decimal; None stays None."""
    if value is None:
        return None
    return str(value)


def join_event(
    joins: Sequence[TableJoin],
    histories: Mapping[str, Mapping[str, list[Version]]],
    fields: Mapping[str, Any],
    time_ms: int,
) -> dict[str, Joined]:
    """Every join of one event at `time_ms`. histories: per join's name, per key, its versions sorted by
    (valid_from, lsn), each version's values in the order of the join's columns. fields: the event's fields
    by name, its key among them."""
    found: dict[str, tuple[Version | None, str | None, bool]] = {}  # per join: its version, key, key known
    out: dict[str, Joined] = {}
    for join in joins:
        columns = join.table.columns.values()
        if_missing = IfMissing.of([{"type": c.type, "if_missing": c.if_missing} for c in columns])
        key, key_known = _key(join, fields, found, joins)
        versions = histories.get(join.name, {}).get(key, []) if key is not None else []
        version = version_at(list(versions), time_ms)
        found[join.name] = (version, key, key_known)
        if version is None or version.op == DELETE:
            out[join.name] = Joined(key, if_missing.values, None, key_known)
            continue
        known = key_known and not any(unknown(v) for v in version.profile)
        out[join.name] = Joined(key, if_missing.fill(version.profile), version.valid_from_ms, known)
    return out


def _key(
    join: TableJoin,
    fields: Mapping[str, Any],
    found: Mapping[str, tuple[Version | None, str | None, bool]],
    joins: Sequence[TableJoin],
) -> tuple[str | None, bool]:
    """The key `join` looks up, and whether it is known: a column of the version an earlier join found
    (its own key is the key it looked up), None where it found none."""
    source, column = join.on
    if source == EVENT:
        return key_text(fields.get(column)), True
    version, before_key, known = found[source]
    if version is None or version.op == DELETE:
        return None, known
    before = next(j for j in joins if j.name == source)
    if column == before.table.key:
        return before_key, known
    value = version.profile[list(before.table.columns).index(column)]
    if unknown(value):
        return None, False
    return key_text(value), known
