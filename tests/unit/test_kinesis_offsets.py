"""Pure logic of the Kinesis source: offsets, shard lineage, batch planning, options."""

from __future__ import annotations

import json
import pickle

import pytest

from pipeline.kinesis_source import (
    KinesisStreamReader,
    ReaderOptions,
    Segment,
    Shard,
    ShardState,
    decode_offset,
    encode_offset,
    plan_segments,
    readable,
    shard_from_api,
    sync_states,
)

OPTIONS = {"streamName": "clicks", "endpointUrl": "http://localhost:1", "region": "eu-west-1"}


def test_offset_round_trips_through_json() -> None:
    states = {
        "shardId-000000000002": ShardState(parents=("shardId-000000000000",), after="496", done=False),
        "shardId-000000000000": ShardState(after="495", done=True),
        "shardId-000000000001": ShardState(since_ms=1_700_000_000_000),
    }
    offset = json.loads(json.dumps(encode_offset(states)))
    assert decode_offset(offset) == states


def test_equal_states_give_identical_offset_json() -> None:
    # Spark decides "new data or not" by comparing offset JSON strings.
    a = {"s1": ShardState(after="1"), "s0": ShardState()}
    b = {"s0": ShardState(), "s1": ShardState(after="1")}
    assert json.dumps(encode_offset(a)) == json.dumps(encode_offset(b))


def test_unknown_offset_version_is_rejected() -> None:
    with pytest.raises(ValueError, match="unsupported Kinesis offset"):
        decode_offset({"v": 99, "shards": {}})


def test_iterator_args_resume_after_last_record() -> None:
    assert ShardState(after="42", since_ms=5).iterator_args() == {
        "ShardIteratorType": "AFTER_SEQUENCE_NUMBER",
        "StartingSequenceNumber": "42",
    }
    assert ShardState(since_ms=1500).iterator_args() == {
        "ShardIteratorType": "AT_TIMESTAMP",
        "Timestamp": 1.5,
    }
    assert ShardState().iterator_args() == {"ShardIteratorType": "TRIM_HORIZON"}


def test_shard_from_api_reads_parents_and_closed_state() -> None:
    merged = shard_from_api(
        {
            "ShardId": "c",
            "ParentShardId": "a",
            "AdjacentParentShardId": "b",
            "SequenceNumberRange": {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"},
        }
    )
    assert merged == Shard("c", ("a", "b"), closed=True)
    assert shard_from_api({"ShardId": "a", "SequenceNumberRange": {"StartingSequenceNumber": "1"}}) == Shard(
        "a", (), closed=False
    )


def test_sync_adds_new_shards_and_forgets_expired_ones() -> None:
    states = {"old": ShardState(after="1", done=True), "p": ShardState(after="5")}
    shards = [Shard("p", (), True), Shard("c1", ("p",), False), Shard("c2", ("p",), False)]
    assert sync_states(states, shards) == {
        "p": ShardState(after="5"),
        "c1": ShardState(parents=("p",)),
        "c2": ShardState(parents=("p",)),
    }


def test_children_wait_until_every_parent_is_done() -> None:
    states = {
        "a": ShardState(after="1", done=True),
        "b": ShardState(after="2"),
        "merged": ShardState(parents=("a", "b")),
        "orphan": ShardState(parents=("expired",)),
    }
    assert readable(states) == ["b", "orphan"]
    states["b"] = ShardState(after="3", done=True)
    assert readable(states) == ["merged", "orphan"]


def test_plan_reads_each_shard_from_start_to_end() -> None:
    start = {"s0": ShardState(after="10"), "s1": ShardState(after="20")}
    end = {"s0": ShardState(after="15"), "s1": ShardState(after="20"), "s2": ShardState(after="7")}
    assert plan_segments(start, end) == [
        [Segment("s0", ShardState(after="10"), "15")],
        [Segment("s2", ShardState(), "7")],
    ]


def test_plan_chains_parent_and_children_read_in_one_batch() -> None:
    start = {"p": ShardState(after="1"), "other": ShardState(after="1")}
    end = {
        "p": ShardState(after="9", done=True),
        "c1": ShardState(parents=("p",), after="12", done=True),
        "c2": ShardState(parents=("p",), after="13"),
        "m": ShardState(parents=("c1", "x"), after="20"),
        "x": ShardState(after="19", done=True),
        "other": ShardState(after="5"),
    }
    groups = [[segment.shard_id for segment in group] for group in plan_segments(start, end)]
    assert groups == [["other"], ["p", "x", "c1", "c2", "m"]]


def test_plan_replaying_first_latest_batch_is_empty() -> None:
    # Batch 0 of a LATEST query ends at the anchor; a replay recomputes a later anchor as its start.
    anchor = {"s0": ShardState(since_ms=1000)}
    later = {"s0": ShardState(since_ms=2000)}
    assert plan_segments(later, anchor) == []
    assert plan_segments(anchor, anchor) == []


def test_options_are_validated() -> None:
    assert ReaderOptions.parse({**OPTIONS, "maxRecordsPerBatch": "100", "startingPosition": "latest"}) == (
        ReaderOptions("clicks", "http://localhost:1", "eu-west-1", "LATEST", 100)
    )
    with pytest.raises(ValueError, match="streamName"):
        ReaderOptions.parse({})
    with pytest.raises(ValueError, match="startingPosition"):
        ReaderOptions.parse({**OPTIONS, "startingPosition": "EARLIEST"})
    with pytest.raises(ValueError, match="maxRecordsPerBatch"):
        ReaderOptions.parse({**OPTIONS, "maxRecordsPerBatch": "0"})


def test_reader_with_a_client_still_pickles() -> None:
    reader = KinesisStreamReader(ReaderOptions.parse(OPTIONS))
    assert reader.client() is not None
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options and copy._client is None
