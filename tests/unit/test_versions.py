"""Output versions' pure logic (common/versions.py, db/versions.py Switch): names, lag and caught-up, where
consumers start after a swap, what a swap changes, the earliest start."""

from __future__ import annotations

import pytest

from common import pipeline_file as pf
from common import plan
from common import versions as v
from db import versions as registry

DEFAULT = pf.load(pf.DEFAULT_PATH)


def test_a_version_renames_every_output_and_keeps_every_input() -> None:
    got = v.versioned(DEFAULT, "v2")
    assert got.name == "clicks__v2"
    assert plan.of(got).enriched_table == "streamfold.enriched_clicks__v2"
    assert [a.table for a in plan.of(got).aggregates] == [
        "streamfold.clicks_per_region__v2",
        "streamfold.url_region_click_count__v2",
    ]
    assert plan.of(got).histories[0].table == "streamfold.profile_history_clicks__v2"
    outputs = {plan.of(got).enriched_topic, plan.of(got).changelog_topic, plan.of(got).dead_letters_topic}
    assert outputs == {"user_clicks.v2", "users_changelog.v2", "clicks_dlq.v2"}
    assert [a.topic for a in plan.of(got).aggregates] == [
        "clicks_per_region.v2",
        "url_region_click_count.v2",
    ]
    inputs = ("cdc_topic", "heartbeat_topic", "connector", "slot", "publication")
    assert [getattr(plan.of(got), n) for n in inputs] == [getattr(plan.of(DEFAULT), n) for n in inputs]
    assert got.events == DEFAULT.events and got.profile == DEFAULT.profile
    assert v.query_name(got) == "clicks__v2-kafka"


def test_defaulted_input_names_do_not_follow_the_versions_name() -> None:
    bare = DEFAULT.model_copy(update={"outputs": pf.Outputs()})
    got = v.versioned(bare, "v2")
    assert (plan.of(got).connector, plan.of(got).slot, plan.of(got).publication) == (
        plan.of(bare).connector,
        plan.of(bare).slot,
        plan.of(bare).publication,
    )


@pytest.mark.parametrize("name", ["", "V2", "2v", "a-b", "live", "a__b", "x" * 17])
def test_bad_version_names_are_refused(name: str) -> None:
    with pytest.raises(v.VersionError):
        v.check_name(name)


def test_a_name_that_would_make_a_table_name_too_long_is_refused() -> None:
    long = DEFAULT.model_copy(update={"name": "p" * 60})
    with pytest.raises(v.VersionError, match="too long or invalid"):
        v.versioned(long, "v2")


def test_the_users_names_map_to_the_versions_tables() -> None:
    assert v.users_tables(v.versioned(DEFAULT, "v2"), "v2") == {
        "streamfold.enriched_clicks": "streamfold.enriched_clicks__v2",
        "streamfold.clicks_per_region": "streamfold.clicks_per_region__v2",
        "streamfold.url_region_click_count": "streamfold.url_region_click_count__v2",
    }
    moved = v.moved_live(DEFAULT)
    assert (
        moved.name == DEFAULT.name and plan.of(moved).enriched_topic == plan.of(DEFAULT).enriched_topic
    )  # same checkpoint
    assert v.users_tables(moved, v.LIVE)["streamfold.enriched_clicks"] == "streamfold.enriched_clicks__live"


def test_once_the_live_tables_moved_each_version_writes_its_own() -> None:
    v2 = v.versioned(DEFAULT, "v2")
    assert plan.of(v.physical(DEFAULT, v.LIVE, None)).enriched_table == "streamfold.enriched_clicks__live"
    assert v.physical(DEFAULT, "v2", v2) == v2
    with pytest.raises(v.VersionError, match="no version 'v3' of clicks"):
        v.physical(DEFAULT, "v3", None)


def test_the_first_swap_moves_the_live_tables_with_their_indexes_later_ones_switch_views() -> None:
    v2, moved = v.versioned(DEFAULT, "v2"), v.moved_live(DEFAULT)
    first = registry.Switch.of(DEFAULT, registry.Current(v.LIVE, False, None), "v2", (moved, v2), {}, None)
    assert first.move_live == {
        "streamfold.enriched_clicks": "streamfold.enriched_clicks__live",
        "streamfold.clicks_per_region": "streamfold.clicks_per_region__live",
        "streamfold.url_region_click_count": "streamfold.url_region_click_count__live",
    }
    # As setup names the index of a table called enriched_clicks__live (db/pipeline_tables.py).
    assert first.move_indexes == {"streamfold.enriched_clicks_uid_time": "enriched_clicks__live_uid_time"}
    assert first.dropped == set() and first.views == v.users_tables(v2, "v2")
    back = registry.Switch.of(DEFAULT, registry.Current("v2", True, None), v.LIVE, (v2, moved), {}, None)
    assert back.move_live == {} and back.move_indexes == {}
    assert back.dropped == set(v.users_tables(v2, "v2"))
    assert back.views["streamfold.enriched_clicks"] == "streamfold.enriched_clicks__live"
    assert (back.live, back.target) == (DEFAULT, moved)  # the users' history names, over live's history


def lag(*behind: tuple[int, int]) -> v.Lag:
    return v.Lag(tuple(v.PartitionLag.kafka("clicks", i, done, end) for i, (done, end) in enumerate(behind)))


def test_caught_up_means_every_partition_within_the_threshold() -> None:
    assert lag((100, 100), (90, 1000)).caught_up(threshold=910)
    assert not lag((100, 100), (89, 1000)).caught_up(threshold=910)
    assert not v.Lag(()).caught_up()  # no batch committed yet
    assert lag((10, 5)).behind == 0  # a partition read past an end fetched earlier


def test_the_lag_names_the_partition_furthest_behind() -> None:
    assert lag((0, 10), (0, 500)).describe() == "510 records behind in all, at most 500 on clicks[1]"
    assert v.Lag(()).describe() == "no batch committed yet"


T = 1_700_000_000_000


def test_consumers_of_the_new_version_start_before_anything_the_old_one_had_not_written() -> None:
    margin = v.CLOCK_MARGIN_MS
    caught_up = lag((100, 100), (50, 50))
    assert v.consumers_from_ms(caught_up, {}, T, max_wait_ms=10_000) == T - 10_000 - margin
    # Partition 1's next record, the first the old version had not processed, arrived 5 minutes ago (its
    # job stopped then, say): the new version wrote that event and every later one after that.
    behind = lag((100, 100), (40, 50))
    assert v.consumers_from_ms(behind, {("clicks", 1): T - 300_000}, T, 10_000) == T - 310_000 - margin
    assert v.consumers_from_ms(v.Lag(()), {}, T, 0) is None  # it never committed: from the beginning
    assert v.consumers_from_ms(behind, {("clicks", 1): None}, T, 0) is None  # a record it could not read


def test_any_start_is_fine_while_no_partition_has_lost_records() -> None:
    whole = [v.Retained(0, 0, T), v.Retained(1, 0, None)]
    assert v.earliest_start_ms(whole) is None
    v.check_start(None, v.earliest_start_ms(whole), "clicks")
    v.check_start(T - 10**9, v.earliest_start_ms(whole), "clicks")


def test_a_start_before_what_kafka_retains_is_refused_naming_the_earliest() -> None:
    trimmed = [v.Retained(0, 5, T), v.Retained(1, 7, T + 1000), v.Retained(2, 0, T - 5000)]
    earliest = v.earliest_start_ms(trimmed)
    assert earliest == T + 1000
    v.check_start(T + 1000, earliest, "clicks")
    with pytest.raises(v.VersionError, match=r"earliest possible start is 2023-11-14T22:13:21.000Z"):
        v.check_start(T, earliest, "clicks")
    v.check_start(None, earliest, "clicks")  # --from earliest: whatever Kafka retains


HOUR = 3_600_000


def test_a_stream_younger_than_its_retention_lost_nothing() -> None:
    assert v.stream_earliest_ms(created_ms=T - 23 * HOUR, retention_hours=24, now_ms=T) is None
    assert v.stream_earliest_ms(created_ms=T - 100 * HOUR, retention_hours=168, now_ms=T) is None
    v.check_start(T - 10**9, None, "clicks")  # before the stream existed: every record it has


def test_a_start_before_what_the_stream_retains_is_refused_naming_the_earliest() -> None:
    earliest = v.stream_earliest_ms(created_ms=T - 30 * 24 * HOUR, retention_hours=168, now_ms=T)
    assert earliest == T - 168 * HOUR
    v.check_start(T - 168 * HOUR, earliest, "clicks")
    with pytest.raises(v.VersionError, match=r"before what clicks retains: .* 2023-11-07T22:13:20.000Z"):
        v.check_start(T - 168 * HOUR - 1, earliest, "clicks")
    v.check_start(None, earliest, "clicks")  # --from earliest: whatever the stream retains


def test_a_kinesis_version_lags_by_the_records_after_its_sequence_number_on_each_shard() -> None:
    lag = v.Lag(
        (
            v.PartitionLag.kafka("cdc.public.users", 0, 40, 40),
            v.PartitionLag.kinesis("clicks", "shardId-000000000001", "4961", 1200),
            v.PartitionLag.kinesis("clicks", "shardId-000000000002", None, 3),  # nothing read yet
        )
    )
    assert lag.behind == 1203 and not lag.caught_up()
    assert lag.describe() == "1203 records behind in all, at most 1200 on clicks[shardId-000000000001]"
    assert lag.caught_up(threshold=1200)
    # Consumers of the new version start before the next unprocessed record's arrival on every shard.
    unread = {("clicks", "shardId-000000000001"): T - 60_000, ("clicks", "shardId-000000000002"): T - 5_000}
    assert v.consumers_from_ms(lag, unread, T, max_wait_ms=0) == T - 60_000 - v.CLOCK_MARGIN_MS


def test_from_takes_earliest_or_an_iso_time() -> None:
    assert v.parse_from("earliest") is None
    assert v.parse_from("2023-11-14T22:13:20Z") == T
    assert v.parse_from("2023-11-14T22:13:20") == T  # UTC unless it says
    assert v.parse_from("2023-11-14T23:13:20+01:00") == T
    assert v.pf_time(T) == "2023-11-14T22:13:20.000Z"
    with pytest.raises(v.VersionError, match="--from takes"):
        v.parse_from("yesterday")


def test_unknown_versions_are_refused_and_live_is_always_known() -> None:
    v.check_known("live", False, "clicks")
    v.check_known("v2", True, "clicks")
    with pytest.raises(v.VersionError, match="no version 'v3' of clicks"):
        v.check_known("v3", False, "clicks")


def test_a_swap_is_refused_to_the_current_version_and_while_catching_up() -> None:
    v.check_swap("v2", "live", lag((100, 100)))
    with pytest.raises(v.VersionError, match="'v2' is the current version already"):
        v.check_swap("v2", "v2", lag((100, 100)))
    with pytest.raises(v.VersionError, match=r"still catching up \(5000 records behind in all"):
        v.check_swap("v2", "live", lag((0, 5000)))
    with pytest.raises(v.VersionError, match="no batch committed yet"):
        v.check_swap("live", "v2", v.Lag(()))


def test_the_current_version_and_live_are_never_dropped() -> None:
    v.check_drop("v2", "live")
    v.check_drop("v1", "v2")
    with pytest.raises(v.VersionError, match="'v2' is the current version"):
        v.check_drop("v2", "v2")
    with pytest.raises(v.VersionError, match="'live' is the current version"):
        v.check_drop("live", "live")
    with pytest.raises(v.VersionError, match="never dropped"):
        v.check_drop("live", "v2")


def test_a_versions_output_topics_are_its_own_never_the_shared_events() -> None:
    from streamfold.reprocess import output_topics

    version = v.versioned(DEFAULT, "v2")
    assert sorted(output_topics(version)) == sorted(
        [
            "users_changelog.v2",
            "user_clicks.v2",
            "clicks_per_region.v2",
            "url_region_click_count.v2",
            "clicks_dlq.v2",
        ]
    )
