"""The temporal join's per-user logic (spec.temporal_state), no Spark: versions, completeness, expiry; and
the join's settings (pipeline.join_config)."""

from __future__ import annotations

import itertools

import pytest

from common.names import BEGINNING_OF_TIME_MS, UNKNOWN_REGION
from pipeline.join_config import JoinConfig, parse_duration_ms
from spec.temporal_state import (
    UNAVAILABLE,
    UNKNOWN_VALUES,
    Click,
    Drifted,
    Enriched,
    IfMissing,
    Step,
    UserState,
    Version,
    add_version,
    expire_versions,
    incomplete,
    version_at,
)
from spec.temporal_state import advance as advance_with
from spec.temporal_state import advance_latest as advance_latest_with

NOON = 1_700_000_000_000  # Alice moves from asia to europe at "12:00"
MINUTE = 60_000
DAY = 86_400_000
RETENTION = 7 * DAY

# The default pipeline's profile columns (region, gender, interests, registertime): region UNKNOWN when
# missing, the others null.
DEFAULT = IfMissing.of(
    [
        {"name": "regionid", "type": "text", "if_missing": UNKNOWN_REGION},
        {"name": "gender", "type": "text"},
        {"name": "interests", "type": "text[]"},
        {"name": "registertime", "type": "bigint"},
    ]
)
SNAPSHOT = Version(BEGINNING_OF_TIME_MS, 1, "r", ("asia", "F", ["news"], 1_600_000_000_000))
MOVE = Version(NOON, 20, "u", ("europe", "F", ["news", "golf"], 1_600_000_000_000))
DELETE = Version(NOON + 10 * MINUTE, 30, "d", (None, None, None, None))
REINSERT = Version(NOON + 20 * MINUTE, 40, "c", ("africa", "F", None, None))


def version(valid_from_ms: int, lsn: int, op: str, region: str | None) -> Version:
    return Version(valid_from_ms, lsn, op, (region, None, None, None))


def click(event_id: str, t: int, userid: str = "alice") -> Click:
    return Click(event_id, userid, t, (f"/page/{event_id}", "phone", "10.0.0.1"), 1)


def regions(rows: list[Enriched]) -> dict[str, str | None]:
    return {r.event_id: r.profile[0] for r in rows}


def advance(
    state: UserState, changes: list[Version], clicks: list[Click], watermark_ms: int, retention_ms: int
) -> Step:
    return advance_with(state, changes, clicks, watermark_ms, retention_ms, DEFAULT)


def advance_latest(state: UserState, changes: list[Version], clicks: list[Click]) -> Step:
    return advance_latest_with(state, changes, clicks, DEFAULT)


def feed(arrivals: list[Version | Click], watermark_ms: int) -> tuple[list[Enriched], UserState]:
    """Every record in its own step below the watermark, then one step at watermark_ms."""
    state, rows = UserState(), list[Enriched]()
    for record in arrivals:
        changes, clicks = ([record], []) if isinstance(record, Version) else ([], [record])
        step = advance(state, changes, clicks, NOON - DAY, RETENTION)
        rows, state = rows + step.rows, step.state
    step = advance(state, [], [], watermark_ms, RETENTION)
    return rows + step.rows, step.state


def test_region_change_between_two_clicks_in_any_arrival_order() -> None:
    records: list[Version | Click] = [
        SNAPSHOT,
        MOVE,
        click("before", NOON - MINUTE),
        click("after", NOON + MINUTE),
    ]
    for arrivals in itertools.permutations(records):
        rows, _ = feed(list(arrivals), watermark_ms=NOON + MINUTE)
        assert regions(rows) == {"before": "asia", "after": "europe"}, arrivals


def test_click_before_the_first_version_is_unknown_with_null_profile() -> None:
    first = Version(NOON, 5, "c", ("europe", "M", ["x"], 42))
    rows, _ = feed([first, click("early", NOON - 1), click("on_time", NOON)], watermark_ms=NOON)
    early, on_time = sorted(rows, key=lambda r: r.time_ms)
    assert (early.profile, early.valid_from_ms) == ((UNKNOWN_REGION, None, None, None), None)
    assert (on_time.profile, on_time.valid_from_ms) == (("europe", "M", ["x"], 42), NOON)


def test_if_missing_stands_in_for_no_profile_a_null_and_a_blank_text_value() -> None:
    """No version or a tombstone: every column holds its if_missing. A version's null holds it too in a
    column with if_missing, and "" in a text column with one; other values stay as the version has them."""
    rules = IfMissing.of(
        [
            {"name": "tier", "type": "text", "if_missing": "none"},
            {"name": "note", "type": "text"},
            {"name": "score", "type": "bigint", "if_missing": 0},
            {"name": "vip", "type": "boolean", "if_missing": False},
        ]
    )
    blank = Version(NOON, 1, "c", ("", "", None, None))
    null = Version(NOON + 1, 2, "u", (None, None, None, True))
    gone = Version(NOON + 2, 3, "d", (None, None, None, None))
    clicks = [click("blank", NOON), click("null", NOON + 1), click("gone", NOON + 2), click("before", 1)]
    rows = advance_with(UserState(), [blank, null, gone], clicks, NOON + 2, RETENTION, rules).rows
    assert {r.event_id: (r.profile, r.valid_from_ms) for r in rows} == {
        "before": (("none", None, 0, False), None),
        "blank": (("none", "", 0, False), NOON),
        "null": (("none", None, 0, True), NOON + 1),
        "gone": (("none", None, 0, False), None),
    }
    assert rows[0].row() == (
        "before", "alice", 1, "/page/before", "phone", "10.0.0.1", 1, "none", None, 0, False, None
    )  # fmt: skip


def test_snapshot_version_is_valid_from_the_beginning_of_time() -> None:
    rows, _ = feed([SNAPSHOT, click("old", 946_684_800_000)], watermark_ms=NOON)
    assert rows[0].profile[0] == "asia"
    assert rows[0].valid_from_ms == BEGINNING_OF_TIME_MS


def test_delete_ends_validity_and_reinsert_starts_a_new_version() -> None:
    clicks = [
        click("live", NOON + 5 * MINUTE),
        click("gone", NOON + 15 * MINUTE),
        click("back", NOON + 25 * MINUTE),
    ]
    rows, _ = feed([SNAPSHOT, MOVE, DELETE, REINSERT, *clicks], watermark_ms=NOON + DAY)
    assert regions(rows) == {"live": "europe", "gone": UNKNOWN_REGION, "back": "africa"}


def test_equal_valid_from_is_decided_by_the_higher_lsn() -> None:
    low = version(NOON, 7, "u", "asia")
    high = version(NOON, 8, "u", "europe")
    assert version_at(add_version(add_version([], high), low), NOON) == high
    assert version_at(add_version(add_version([], low), high), NOON) == high


def test_a_replayed_change_is_stored_once() -> None:
    assert add_version(add_version([SNAPSHOT, MOVE], MOVE), SNAPSHOT) == [SNAPSHOT, MOVE]


def test_clicks_wait_until_cdc_progress_reaches_them() -> None:
    """A click newer than the watermark waits; the change that arrives later still decides its region."""
    state = UserState([SNAPSHOT])
    step = advance(
        state, [], [click("c1", NOON + MINUTE)], watermark_ms=NOON - MINUTE, retention_ms=RETENTION
    )
    assert step.rows == []
    assert step.wakeup_ms == NOON + MINUTE  # the event-time timer
    step = advance(step.state, [MOVE], [], watermark_ms=NOON, retention_ms=RETENTION)  # heartbeat at noon
    assert step.rows == []
    step = advance(step.state, [], [], watermark_ms=NOON + MINUTE, retention_ms=RETENTION)
    assert regions(step.rows) == {"c1": "europe"}
    assert step.state.pending == []


def test_a_click_the_watermark_has_passed_is_emitted_at_once() -> None:
    """Late clicks (and max_wait: the watermark includes wall clock - max_wait) are not held back."""
    step = advance(UserState([SNAPSHOT, MOVE]), [], [click("late", NOON - MINUTE)], NOON + DAY, RETENTION)
    assert regions(step.rows) == {"late": "asia"}
    assert step.wakeup_ms == NOON + RETENTION + 1  # only the expiry of the snapshot version is left


def test_pending_clicks_are_emitted_in_event_time_order_and_the_rest_keeps_waiting() -> None:
    waiting = [click("c3", NOON + 3), click("c1", NOON + 1), click("c2", NOON + 2)]
    step = advance(UserState([SNAPSHOT]), [], waiting, watermark_ms=NOON + 2, retention_ms=RETENTION)
    assert [r.event_id for r in step.rows] == ["c1", "c2"]
    assert [c.event_id for c in step.state.pending] == ["c3"]
    assert step.wakeup_ms == NOON + 3


def test_versions_older_than_the_retention_are_dropped() -> None:
    versions = [SNAPSHOT, MOVE, DELETE, REINSERT]
    assert expire_versions(versions, horizon_ms=NOON) == versions  # MOVE is not older than the horizon
    assert expire_versions(versions, horizon_ms=NOON + 1) == [MOVE, DELETE, REINSERT]
    assert expire_versions(versions, horizon_ms=NOON + DAY) == [REINSERT]
    # The last version stays however old: it is still valid.
    assert expire_versions([SNAPSHOT], horizon_ms=NOON + 1000 * DAY) == [SNAPSHOT]


def test_a_user_whose_last_version_is_an_old_tombstone_is_forgotten() -> None:
    assert expire_versions([MOVE, DELETE], horizon_ms=DELETE.valid_from_ms) == [MOVE, DELETE]
    assert expire_versions([MOVE, DELETE], horizon_ms=DELETE.valid_from_ms + 1) == []
    step = advance(UserState([MOVE, DELETE]), [], [], DELETE.valid_from_ms + RETENTION + 1, RETENTION)
    assert step.state.is_empty() and step.wakeup_ms is None


def test_state_holds_only_retained_versions_and_a_timer_for_the_next_expiry() -> None:
    history = [version(NOON + i * DAY, i, "u", f"r{i}") for i in range(30)]
    step = advance(UserState(), history, [], watermark_ms=NOON + 29 * DAY, retention_ms=RETENTION)
    # The newest version valid before watermark - retention (day 22) and everything after it.
    assert [v.profile[0] for v in step.state.versions] == [f"r{i}" for i in range(21, 30)]
    assert step.wakeup_ms == NOON + 22 * DAY + RETENTION + 1
    step = advance(step.state, [], [], watermark_ms=step.wakeup_ms, retention_ms=RETENTION)
    assert [v.profile[0] for v in step.state.versions] == [f"r{i}" for i in range(22, 30)]


def test_latest_mode_applies_a_batchs_changes_before_its_clicks_and_never_waits() -> None:
    step = advance_latest(UserState(), [MOVE, SNAPSHOT], [click("c1", NOON - DAY)])
    assert regions(step.rows) == {"c1": "europe"}  # processing time: the latest version, not the one at t
    assert step.wakeup_ms is None and step.state.pending == []
    step = advance_latest(step.state, [DELETE], [click("c2", NOON + DAY)])
    assert regions(step.rows) == {"c2": UNKNOWN_REGION}
    assert step.state.is_empty()
    step = advance_latest(step.state, [], [click("c3", NOON)])
    assert regions(step.rows) == {"c3": UNKNOWN_REGION}


# --- unchanged TOASTed values (UNAVAILABLE): the same cases as UserHistoryTest's ------------------------

TOASTED_MOVE = Version(NOON, 20, "u", ("europe", "F", UNAVAILABLE, 1_600_000_000_000))
TOASTED_BACK = Version(NOON + MINUTE, 21, "u", ("asia", "F", UNAVAILABLE, 7))


def test_an_unavailable_value_takes_the_previous_versions_and_chains_through_later_ones() -> None:
    step = advance(UserState([SNAPSHOT]), [TOASTED_MOVE, TOASTED_BACK], [], NOON - DAY, RETENTION)
    assert [v.profile[2] for v in step.state.versions] == [["news"]] * 3
    assert [v.profile[0] for v in step.changes] == ["europe", "asia"]
    (row,) = advance(step.state, [], [click("after", NOON + 2 * MINUTE)], NOON + DAY, RETENTION).rows
    assert (row.profile, row.valid_from_ms, row.known) == (("asia", "F", ["news"], 7), NOON + MINUTE, True)


def test_an_unavailable_value_without_a_previous_version_or_after_a_tombstone_stays_unknown() -> None:
    for versions in ([], [SNAPSHOT, DELETE]):
        late = Version(NOON + DAY, 50, "u", ("europe", "F", UNAVAILABLE, 1))
        step = advance(UserState(list(versions)), [late], [], NOON, RETENTION)
        assert step.changes[0].profile[2] is UNAVAILABLE
        (row,) = advance(step.state, [], [click("c", NOON + DAY)], NOON + 2 * DAY, RETENTION).rows
        assert (row.profile, row.known) == (("europe", "F", None, 1), False)
        again = Version(NOON + 2 * DAY, 51, "u", ("x", None, UNAVAILABLE, None))
        assert advance(step.state, [again], [], NOON, RETENTION).changes[0].profile[2] is UNAVAILABLE


def test_a_version_filled_from_the_version_before_it_in_version_order_not_arrival_order() -> None:
    replay = Version(MOVE.valid_from_ms, MOVE.lsn, "u", ("oceania", "F", UNAVAILABLE, None))
    step = advance(UserState([SNAPSHOT, MOVE, REINSERT]), [replay], [], NOON - DAY, RETENTION)
    assert step.changes[0].profile[2] == ["news"]
    assert [v.valid_from_ms for v in step.state.versions] == [
        SNAPSHOT.valid_from_ms,
        NOON,
        REINSERT.valid_from_ms,
    ]


def test_latest_mode_fills_each_change_from_the_one_before_it() -> None:
    step = advance_latest(UserState([SNAPSHOT]), [TOASTED_BACK, TOASTED_MOVE], [click("c", NOON)])
    assert [v.valid_from_ms for v in step.changes] == [NOON, NOON + MINUTE]
    assert step.rows[0].profile == ("asia", "F", ["news"], 7)
    gone = advance_latest(step.state, [DELETE], [])
    assert advance_latest(gone.state, [TOASTED_MOVE], []).state.versions[0].profile[2] is UNAVAILABLE


# --- drift (Drifted): the same cases as UserHistoryTest's ---------------------------------------------------

RENAMED = Drifted("missing from the change event: renamed or dropped?")
DRIFTED_MOVE = Version(NOON, 20, "u", ("europe", "F", RENAMED, 1_600_000_000_000))
NAMES = ("regionid", "gender", "interests", "registertime")


def test_a_drifted_value_is_never_filled_from_the_previous_version_and_leaves_events_incomplete() -> None:
    step = advance(UserState([SNAPSHOT]), [DRIFTED_MOVE], [], NOON - DAY, RETENTION)
    assert step.changes[0].profile[2] is RENAMED  # her interests may have changed: unknown
    clicks = [click("before", NOON - MINUTE), click("after", NOON + MINUTE)]
    before, after = advance(step.state, [], clicks, NOON + DAY, RETENTION).rows
    assert (before.profile[2], before.known) == (["news"], True)
    assert (after.profile, after.known) == (("europe", "F", None, 1_600_000_000_000), False)
    assert incomplete(NAMES, step.changes[0].profile) == "interests: " + RENAMED.reason


def test_an_unavailable_value_after_a_drifted_one_is_unknown_for_the_same_reason() -> None:
    for latest in (False, True):
        state, changes = UserState([SNAPSHOT]), [DRIFTED_MOVE, TOASTED_BACK]
        step = advance_latest(state, changes, []) if latest else advance(state, changes, [], NOON, RETENTION)
        assert step.changes[1].profile[:3] == ("asia", "F", RENAMED)


def test_incomplete_names_the_unavailable_columns_then_each_drifted_one() -> None:
    retyped = Drifted("a string in the change event where the column takes an integer: retyped?")
    profile = (UNAVAILABLE, RENAMED, UNAVAILABLE, retyped)
    assert incomplete(NAMES, profile) == (
        f"{UNKNOWN_VALUES}regionid, interests; gender: {RENAMED.reason}; registertime: {retyped.reason}"
    )
    assert incomplete(NAMES, ("asia", None, [], 1)) is None


# --- TRUNCATE: the same cases as UserHistoryTest's -------------------------------------------------------

TRUNCATE = Version(NOON + 5 * MINUTE, 25, "d", (None, None, None, None))


def test_a_truncate_ends_the_profile_at_its_commit_time_exactly() -> None:
    clicks = [click("before", NOON + 5 * MINUTE - 1), click("at", NOON + 5 * MINUTE)]
    step = advance_with(UserState([SNAPSHOT, MOVE]), [], clicks, NOON + DAY, RETENTION, DEFAULT, [TRUNCATE])
    assert regions(step.rows) == {"before": "europe", "at": UNKNOWN_REGION}
    assert step.changes == (TRUNCATE,)
    assert step.state.versions == [SNAPSHOT, MOVE, TRUNCATE]


def test_a_truncate_after_a_tombstone_or_with_nothing_before_it_stores_nothing() -> None:
    for versions in ([], [SNAPSHOT, version(NOON, 20, "d", None)], [REINSERT]):
        step = advance_with(UserState(list(versions)), [], [], NOON - DAY, RETENTION, DEFAULT, [TRUNCATE])
        assert (step.changes, step.state.versions) == ((), versions)


def test_a_truncate_takes_the_steps_changes_before_it_whatever_their_arrival_order() -> None:
    reinsert = Version(NOON + 6 * MINUTE, 26, "c", ("africa", None, None, None))
    step = advance_with(UserState(), [reinsert, MOVE], [], NOON - DAY, RETENTION, DEFAULT, [TRUNCATE])
    assert step.state.versions == list(step.changes) == [MOVE, TRUNCATE, reinsert]
    again = advance_with(step.state, [], [], NOON - DAY, RETENTION, DEFAULT, [TRUNCATE])
    assert (again.changes, again.state.versions) == ((TRUNCATE,), [MOVE, TRUNCATE, reinsert])


def test_latest_mode_applies_a_truncate_in_version_order_and_forgets_the_key() -> None:
    step = advance_latest_with(UserState([SNAPSHOT]), [MOVE], [click("c", NOON)], DEFAULT, [TRUNCATE])
    assert regions(step.rows) == {"c": UNKNOWN_REGION}
    assert (step.changes, step.state.versions) == ((MOVE, TRUNCATE), [])
    assert advance_latest_with(step.state, [], [], DEFAULT, [TRUNCATE]).changes == ()


def test_join_config_from_conf() -> None:
    assert JoinConfig.from_conf({}) == JoinConfig("event_time", 10_000, 7 * DAY)
    conf = {"join.mode": "latest", "join.max_wait": "500ms", "join.version_retention": "2h"}
    assert JoinConfig.from_conf(conf) == JoinConfig("latest", 500, 7_200_000)
    assert [parse_duration_ms(d) for d in ("10s", "7d", "3 m", "1H")] == [10_000, 7 * DAY, 180_000, 3_600_000]


@pytest.mark.parametrize(
    "conf", [{"join.mode": "fastest"}, {"join.max_wait": "10"}, {"join.max_wait": "-1s"}]
)
def test_join_config_rejects_bad_values(conf: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        JoinConfig.from_conf(conf)
