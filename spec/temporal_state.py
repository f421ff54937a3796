"""The temporal join's per-key logic, free of Spark so it is tested in milliseconds.

A key's state is the list of its profile versions, sorted by (valid_from_ms, lsn), plus the events that
wait for completeness. `advance` is the whole event-time operator for one key and one step (new input
rows or a timer); `advance_latest` is the Kafka Streams KStream-KTable flavour. This module is the
reference: the Spark operator (jvm/src/main/java/io/streamfold/join/UserHistory.java) ports it line for
line, and tests/unit/test_join_operator.py runs random schemas and histories through both and compares
every output row.

Nothing here names a column: a version's profile and an event's fields are tuples in the order of the
join spec (pipeline/temporal_join.py join_spec), and the spec's profile columns give the if_missing rules
(IfMissing). Snapshot rows (op=r) are valid from common.names.BEGINNING_OF_TIME_MS; the job's settings
(join.mode, max_wait, version retention) are pipeline.join_config's.

A change may lack columns: Debezium does not send a large (TOASTed) value an UPDATE left unchanged
(spec/envelopes.py, Change.unavailable). Such a column holds UNAVAILABLE, and the change takes its value
from the key's previous version when it is stored (`filled`): the CDC topic is in commit order, so that is
the version the database had before. Without one (no earlier version, or a tombstone) the value stays
UNAVAILABLE: unknown. Events joined to such a version carry null there (or its if_missing) and are not
complete, and its changelog record says which columns are unknown (`incomplete`).

A change may also hold no value its column can take: the table drifted from the pipeline file (a column
renamed, dropped or retyped; spec/envelopes.py, Change.drifted). Such a column holds Drifted (with why):
unknown like UNAVAILABLE, but never filled from the previous version, whose value may have changed since.

A TRUNCATE of the table (spec/envelopes.py Truncate) has no key: it reaches every key that has versions or
input in its step (the operator fans it out to every bucket), as `truncates`, tombstones at the truncate's
(valid_from, lsn). Each one is stored where it ends a profile: after a version that is not a tombstone. So
an event before the truncate joins the version it had, one at or after it joins no profile, as after a
delete, and the changelog gets a tombstone for every key that had a profile.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

DELETE = "d"


class _Unavailable:
    """The one UNAVAILABLE value."""

    def __repr__(self) -> str:
        return "UNAVAILABLE"


# A profile value Debezium did not send (an unchanged TOASTed value) that no earlier version supplied.
UNAVAILABLE: Any = _Unavailable()
# Why a changelog record lacks values, followed by the columns' names (", " between them).
UNKNOWN_VALUES = (
    "unchanged TOASTed values Debezium did not send, and no earlier version of the key to take them from: "
)


@dataclass(frozen=True)
class Drifted:
    """A profile value a change did not hold in a form its column takes (drift), and why."""

    reason: str


def unknown(value: Any) -> bool:
    """Whether a stored value is unknown: UNAVAILABLE with nothing to fill it, or Drifted."""
    return value is UNAVAILABLE or isinstance(value, Drifted)


def incomplete(names: Sequence[str], profile: Sequence[Any]) -> str | None:
    """A changelog record's reason when some of its values are unknown, else None: UNKNOWN_VALUES and the
    unavailable columns' names, then each drifted column's "name: reason", "; " between them."""
    unavailable = [name for name, value in zip(names, profile, strict=True) if value is UNAVAILABLE]
    reasons = [f"{n}: {v.reason}" for n, v in zip(names, profile, strict=True) if isinstance(v, Drifted)]
    if unavailable:
        reasons.insert(0, UNKNOWN_VALUES + ", ".join(unavailable))
    return "; ".join(reasons) or None


class Version(NamedTuple):
    """One profile version of a key: its profile columns' values in the join spec's order; a delete is a
    tombstone version (op=d, every value None)."""

    valid_from_ms: int
    lsn: int
    op: str
    profile: tuple[Any, ...] = ()


class Click(NamedTuple):
    """An event: its fields' values in the join spec's order."""

    event_id: str
    key: str | None
    time_ms: int
    fields: tuple[Any, ...]
    event_count: int


class Enriched(NamedTuple):
    """One output row of kind "event": the event, the profile (if_missing applied) and its valid_from
    (None without a profile version). `row()` is the output's columns after kind, up to valid_from. known:
    the version holds every column's value (none is unknown); the row is complete only then."""

    event_id: str
    key: str | None
    time_ms: int
    fields: tuple[Any, ...]
    event_count: int
    profile: tuple[Any, ...]
    valid_from_ms: int | None
    known: bool = True

    def row(self) -> tuple[Any, ...]:
        return (
            self.event_id,
            self.key,
            self.time_ms,
            *self.fields,
            self.event_count,
            *self.profile,
            self.valid_from_ms,
        )


class IfMissing(NamedTuple):
    """Per profile column: its value in an event row without a profile version (none, or a tombstone) or
    whose version holds null there, and whether it also stands in for "" (a text column with if_missing)."""

    values: tuple[Any, ...]
    blank: tuple[bool, ...]

    @staticmethod
    def of(profile_columns: Sequence[Mapping[str, Any]]) -> IfMissing:
        """From the join spec's profile_columns: name, type, if_missing (absent = None)."""
        values = tuple(c.get("if_missing") for c in profile_columns)
        blank = tuple(
            c["type"] == "text" and v is not None for c, v in zip(profile_columns, values, strict=True)
        )
        return IfMissing(values, blank)

    def fill(self, profile: tuple[Any, ...]) -> tuple[Any, ...]:
        """A version's values as an event row holds them: an unknown one is null."""
        known = (None if unknown(value) else value for value in profile)
        return tuple(
            missing if missing is not None and (value is None or (blank and value == "")) else value
            for value, missing, blank in zip(known, self.values, self.blank, strict=True)
        )


@dataclass
class UserState:
    versions: list[Version] = field(default_factory=list)  # sorted by (valid_from_ms, lsn)
    pending: list[Click] = field(default_factory=list)  # events newer than the watermark
    wakeup_ms: int | None = None  # the event-time timer currently registered for this key

    def is_empty(self) -> bool:
        return not self.versions and not self.pending


class Step(NamedTuple):
    rows: list[Enriched]
    state: UserState
    wakeup_ms: int | None  # when this key needs the operator again (event time), None = only on input
    changes: tuple[Version, ...] = ()  # the step's changes as stored (filled), in version order


def _order(version: Version) -> tuple[int, int]:
    return version.valid_from_ms, version.lsn


def add_version(versions: list[Version], version: Version) -> list[Version]:
    """Inserts in (valid_from, lsn) order; the same (valid_from, lsn) again replaces it (replays)."""
    result = [v for v in versions if _order(v) != _order(version)]
    insort(result, version, key=_order)
    return result


def previous_version(versions: list[Version], version: Version) -> Version | None:
    """The version just before `version` in (valid_from, lsn) order (a replayed one's own excluded)."""
    index = bisect_left(versions, _order(version), key=_order) - 1
    return versions[index] if index >= 0 else None


def filled(version: Version, previous: Version | None) -> Version:
    """A change's UNAVAILABLE columns with the previous version's values; they stay UNAVAILABLE without a
    previous version or after a tombstone, and take the previous version's Drifted where that is one."""
    if UNAVAILABLE not in version.profile:
        return version
    source = None if previous is None or previous.op == DELETE else previous.profile
    profile = tuple(
        (UNAVAILABLE if source is None else source[i]) if value is UNAVAILABLE else value
        for i, value in enumerate(version.profile)
    )
    return version._replace(profile=profile)


def version_at(versions: list[Version], time_ms: int) -> Version | None:
    """The version with the greatest valid_from <= time_ms (the highest lsn among equal valid_from)."""
    index = bisect_right(versions, time_ms, key=lambda v: v.valid_from_ms) - 1
    return versions[index] if index >= 0 else None


def expire_versions(versions: list[Version], horizon_ms: int) -> list[Version]:
    """Drops every version whose successor is valid from before the horizon (watermark - retention).

    A key left with a single tombstone from before the horizon is forgotten entirely: every event late
    enough to see it joins no profile either way.
    """
    first_kept = max(bisect_left(versions, horizon_ms, key=lambda v: v.valid_from_ms) - 1, 0)
    kept = versions[first_kept:]
    if len(kept) == 1 and kept[0].op == DELETE and kept[0].valid_from_ms < horizon_ms:
        return []
    return kept


def next_expiry_ms(versions: list[Version], retention_ms: int) -> int | None:
    """The first watermark at which expire_versions would drop something (timers fire at ts <= watermark)."""
    if len(versions) >= 2:
        return versions[1].valid_from_ms + retention_ms + 1
    if versions and versions[0].op == DELETE:
        return versions[0].valid_from_ms + retention_ms + 1
    return None


def enrich(click: Click, version: Version | None, if_missing: IfMissing) -> Enriched:
    """A tombstone or no version at all: every profile column holds its if_missing; a version's text column
    with if_missing holds it for a null or empty value too (an aggregate keyed by it needs a value)."""
    if version is None or version.op == DELETE:
        return Enriched(*click, if_missing.values, None)
    known = not any(unknown(value) for value in version.profile)
    return Enriched(*click, if_missing.fill(version.profile), version.valid_from_ms, known)


def ends_a_profile(previous: Version | None) -> bool:
    """Whether a truncate's tombstone after `previous` ends something: a version that is no tombstone."""
    return previous is not None and previous.op != DELETE


def advance(
    state: UserState,
    changes: Iterable[Version],
    clicks: Iterable[Click],
    watermark_ms: int,
    retention_ms: int,
    if_missing: IfMissing,
    truncates: Iterable[Version] = (),
) -> Step:
    """Event-time join for one key: merge changes, then the step's truncates (tombstones), emit every event
    the watermark has passed, expire.

    The watermark is max(CDC progress, wall clock - max_wait), so an event at t <= watermark has seen every
    change committed up to t (or has waited long enough), whatever order the records arrived in.
    """
    versions, stored = state.versions, []
    for change in changes:  # in arrival order, each filled from the versions stored so far
        stored.append(filled(change, previous_version(versions, change)))
        versions = add_version(versions, stored[-1])
    for tombstone in truncates:
        if ends_a_profile(previous_version(versions, tombstone)):
            stored.append(tombstone)
            versions = add_version(versions, tombstone)
    waiting = state.pending + list(clicks)
    ready = sorted((c for c in waiting if c.time_ms <= watermark_ms), key=lambda c: c.time_ms)
    pending = [c for c in waiting if c.time_ms > watermark_ms]
    rows = [enrich(c, version_at(versions, c.time_ms), if_missing) for c in ready]
    versions = expire_versions(versions, watermark_ms - retention_ms)
    wakeup = _wakeup(versions, pending, retention_ms)
    changelog = tuple(sorted(stored, key=_order))
    return Step(rows, UserState(versions, pending, state.wakeup_ms), wakeup, changelog)


def _wakeup(versions: list[Version], pending: list[Click], retention_ms: int) -> int | None:
    """Both candidates are above the watermark: pending clicks by definition, expiry by construction."""
    times = [c.time_ms for c in pending]
    expiry = next_expiry_ms(versions, retention_ms)
    if expiry is not None:
        times.append(expiry)
    return min(times, default=None)


def advance_latest(
    state: UserState,
    changes: Iterable[Version],
    clicks: Iterable[Click],
    if_missing: IfMissing,
    truncates: Iterable[Version] = (),
) -> Step:
    """KStream-KTable left join: this batch's changes and truncates first, in version order (the newest
    wins, each change filled from the one before, a truncate's tombstone stored where it ends a profile),
    then every event joins the latest version; nothing waits. A delete forgets the key."""
    latest = state.versions[-1] if state.versions else None
    stored = []
    ordered = [(c, False) for c in changes] + [(t, True) for t in truncates]
    for version, truncate in sorted(ordered, key=lambda item: _order(item[0])):
        if truncate and not ends_a_profile(latest):
            continue
        latest = version if truncate else filled(version, latest)
        stored.append(latest)
    versions = [] if latest is None or latest.op == DELETE else [latest]
    rows = [enrich(c, latest, if_missing) for c in clicks]
    return Step(rows, UserState(versions, [], None), None, tuple(stored))
