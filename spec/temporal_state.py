"""The temporal join's per-user logic, free of Spark so it is tested in milliseconds.

A user's state is the list of their profile versions, sorted by (valid_from_ms, lsn), plus the clicks that
wait for completeness. `advance` is the whole event-time operator for one user and one step (new input
rows or a timer); `advance_latest` is the Kafka Streams KStream-KTable flavour. This module is the
reference: the Spark operator (jvm/src/main/java/io/streamfold/join/UserHistory.java) ports it line for
line, and tests/unit/test_join_operator.py runs random histories through both and compares every output row.
Snapshot rows (op=r) are valid from common.names.BEGINNING_OF_TIME_MS; the job's settings (join.mode,
max_wait, version retention) are pipeline.join_config's.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from common.names import UNKNOWN_REGION

DELETE = "d"


class Version(NamedTuple):
    """One profile version of a user; a delete is a tombstone version (op=d, profile fields None)."""

    valid_from_ms: int
    lsn: int
    op: str
    regionid: str | None = None
    gender: str | None = None
    interests: list[str] | None = None
    registertime: int | None = None


class Click(NamedTuple):
    event_id: str
    userid: str | None
    click_time_ms: int
    url: str | None
    device_id: str | None
    ip: str | None
    clicks: int


class Enriched(NamedTuple):
    """One output row; field order is the operator's output schema."""

    event_id: str
    uid: str | None
    click_time_ms: int
    click_url: str | None
    device_type: str | None
    click_location: str | None
    clicks: int
    user_regionid: str | None
    user_gender: str | None
    user_interests: list[str] | None
    user_registertime: int | None
    profile_valid_from_ms: int | None


@dataclass
class UserState:
    versions: list[Version] = field(default_factory=list)  # sorted by (valid_from_ms, lsn)
    pending: list[Click] = field(default_factory=list)  # clicks newer than the watermark
    wakeup_ms: int | None = None  # the event-time timer currently registered for this user

    def is_empty(self) -> bool:
        return not self.versions and not self.pending


class Step(NamedTuple):
    rows: list[Enriched]
    state: UserState
    wakeup_ms: int | None  # when this user needs the operator again (event time), None = only on input


def _order(version: Version) -> tuple[int, int]:
    return version.valid_from_ms, version.lsn


def add_version(versions: list[Version], version: Version) -> list[Version]:
    """Inserts in (valid_from, lsn) order; the same (valid_from, lsn) again replaces it (replays)."""
    result = [v for v in versions if _order(v) != _order(version)]
    insort(result, version, key=_order)
    return result


def version_at(versions: list[Version], time_ms: int) -> Version | None:
    """The version with the greatest valid_from <= time_ms (the highest lsn among equal valid_from)."""
    index = bisect_right(versions, time_ms, key=lambda v: v.valid_from_ms) - 1
    return versions[index] if index >= 0 else None


def expire_versions(versions: list[Version], horizon_ms: int) -> list[Version]:
    """Drops every version whose successor is valid from before the horizon (watermark - retention).

    A user left with a single tombstone from before the horizon is forgotten entirely: every click late
    enough to see it joins UNKNOWN either way.
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


_NO_PROFILE = (UNKNOWN_REGION, None, None, None, None)


def enrich(click: Click, version: Version | None) -> Enriched:
    """Click fields are Enriched's first seven; a tombstone, no version at all, or a profile without a
    region means region UNKNOWN (the aggregates need a region)."""
    if version is None or version.op == DELETE:
        return Enriched(*click, *_NO_PROFILE)
    profile = (
        version.regionid or UNKNOWN_REGION,
        version.gender,
        version.interests,
        version.registertime,
        version.valid_from_ms,
    )
    return Enriched(*click, *profile)


def advance(
    state: UserState,
    changes: Iterable[Version],
    clicks: Iterable[Click],
    watermark_ms: int,
    retention_ms: int,
) -> Step:
    """Event-time join for one user: merge changes, emit every click the watermark has passed, expire.

    The watermark is max(CDC progress, wall clock - max_wait), so a click at t <= watermark has seen every
    change committed up to t (or has waited long enough), whatever order the records arrived in.
    """
    versions = state.versions
    for change in changes:
        versions = add_version(versions, change)
    waiting = state.pending + list(clicks)
    ready = sorted((c for c in waiting if c.click_time_ms <= watermark_ms), key=lambda c: c.click_time_ms)
    pending = [c for c in waiting if c.click_time_ms > watermark_ms]
    rows = [enrich(c, version_at(versions, c.click_time_ms)) for c in ready]
    versions = expire_versions(versions, watermark_ms - retention_ms)
    return Step(rows, UserState(versions, pending, state.wakeup_ms), _wakeup(versions, pending, retention_ms))


def _wakeup(versions: list[Version], pending: list[Click], retention_ms: int) -> int | None:
    """Both candidates are above the watermark: pending clicks by definition, expiry by construction."""
    times = [c.click_time_ms for c in pending]
    expiry = next_expiry_ms(versions, retention_ms)
    if expiry is not None:
        times.append(expiry)
    return min(times, default=None)


def advance_latest(state: UserState, changes: Iterable[Version], clicks: Iterable[Click]) -> Step:
    """KStream-KTable left join: this batch's changes first (the newest wins), then every click joins the
    latest version; nothing waits. A delete forgets the user."""
    latest = state.versions[-1] if state.versions else None
    for change in sorted(changes, key=_order):
        latest = change
    versions = [] if latest is None or latest.op == DELETE else [latest]
    rows = [enrich(c, latest) for c in clicks]
    return Step(rows, UserState(versions, [], None), None)
