"""Pure logic of the Kinesis source: offsets, shard lineage, batch planning, options."""

from __future__ import annotations

import json
import os
import pickle
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from pipeline.kinesis_source import (
    ARROW_BATCH_ROWS,
    ARROW_SCHEMA,
    DEFAULT_CACHED_BYTES_PER_BATCH,
    SCHEMA,
    KinesisPartition,
    KinesisStreamReader,
    ReadAheadCache,
    ReaderOptions,
    Segment,
    Shard,
    ShardState,
    arrow_batches,
    decode_offset,
    encode_offset,
    plan_segments,
    readable,
    row_bytes,
    shard_from_api,
    sync_states,
    to_row,
)
from pipeline.retry import RETRY_ENV

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
    assert ReaderOptions.parse(OPTIONS).max_cached_bytes == DEFAULT_CACHED_BYTES_PER_BATCH
    assert ReaderOptions.parse({**OPTIONS, "maxCachedBytesPerBatch": "0"}).max_cached_bytes == 0
    with pytest.raises(ValueError, match="maxCachedBytesPerBatch"):
        ReaderOptions.parse({**OPTIONS, "maxCachedBytesPerBatch": "64MiB"})
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


# --- records the driver read ahead, handed to the partitions -------------------------------------------

ARRIVAL = datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))
ARRIVAL_S = ARRIVAL.timestamp()  # as the source's client returns it: epoch seconds, ms precision


def records(first: int, last: int) -> list[dict[str, Any]]:
    """GetRecords records with sequence numbers first..last, as the source's client returns them."""
    return [
        {
            "PartitionKey": f"k{n}",
            "SequenceNumber": str(n),
            "ApproximateArrivalTimestamp": ARRIVAL_S + n + 0.123,
            "Data": f"payload {n}".encode(),
        }
        for n in range(first, last + 1)
    ]


def sequence_numbers(segment: Segment) -> list[int]:
    return [int(row[1]) for row in segment.rows]


def test_embeds_the_kept_records_that_lie_in_the_segment() -> None:
    cache = ReadAheadCache(cap_bytes=10**6)
    cache.keep("s0", ShardState(after="10"), records(11, 13))
    cache.keep("s0", ShardState(after="13"), records(14, 15))  # the next page continues the run
    whole = cache.embed(Segment("s0", ShardState(after="10"), "15"))
    assert sequence_numbers(whole) == [11, 12, 13, 14, 15]
    assert whole.remainder() is None
    shorter = cache.embed(Segment("s0", ShardState(after="10"), "12"))
    assert sequence_numbers(shorter) == [11, 12] and shorter.remainder() is None


def test_the_remainder_starts_after_the_last_embedded_record() -> None:
    cache = ReadAheadCache(cap_bytes=10**6)
    cache.keep("s0", ShardState(after="10"), records(11, 13))
    segment = cache.embed(Segment("s0", ShardState(after="10"), "20"))
    assert sequence_numbers(segment) == [11, 12, 13]
    assert segment.remainder() == Segment("s0", ShardState(after="13"), "20")


def test_records_not_kept_from_the_segment_start_are_not_embedded() -> None:
    cache = ReadAheadCache(cap_bytes=10**6)
    cache.keep("s0", ShardState(after="10"), records(11, 13))
    later = Segment("s0", ShardState(after="12"), "13")  # e.g. a batch the checkpoint planned elsewhere
    other = Segment("s1", ShardState(after="10"), "13")
    assert cache.embed(later) == later and later.remainder() == later
    assert cache.embed(other) == other


def test_a_gap_starts_a_new_run() -> None:
    cache = ReadAheadCache(cap_bytes=10**6)
    cache.keep("s0", ShardState(after="10"), records(11, 12))
    cache.keep("s0", ShardState(after="20"), records(21, 22))  # the cursor was moved elsewhere
    assert cache.embed(Segment("s0", ShardState(after="10"), "12")).rows == ()
    assert sequence_numbers(cache.embed(Segment("s0", ShardState(after="20"), "22"))) == [21, 22]


def test_a_shard_read_from_its_start_is_embedded() -> None:
    cache = ReadAheadCache(cap_bytes=10**6)
    cache.keep("child", ShardState(parents=("p",)), records(1, 2))
    cache.keep("late", ShardState(since_ms=5000), records(7, 8))
    assert sequence_numbers(cache.embed(Segment("child", ShardState(parents=("p",)), "2"))) == [1, 2]
    assert sequence_numbers(cache.embed(Segment("late", ShardState(since_ms=5000), "8"))) == [7, 8]
    assert cache.embed(Segment("late", ShardState(since_ms=6000), "8")).rows == ()


def test_past_the_cap_nothing_more_is_kept_for_the_batch() -> None:
    three = sum(row_bytes(to_row("s0", r)) for r in records(11, 13))
    cache = ReadAheadCache(cap_bytes=three + 10)
    cache.keep("s0", ShardState(after="10"), records(11, 15))
    cache.keep("s1", ShardState(after="1"), records(2, 2))  # would fit in the 10 bytes left: not kept
    assert cache.full and cache.size == three
    s0 = cache.embed(Segment("s0", ShardState(after="10"), "15"))
    assert sequence_numbers(s0) == [11, 12, 13]
    assert s0.remainder() == Segment("s0", ShardState(after="13"), "15")
    assert cache.embed(Segment("s1", ShardState(after="1"), "2")).rows == ()
    cache.clear()  # the batch is planned: the next one may keep records again
    cache.keep("s0", ShardState(after="15"), records(16, 16))
    assert sequence_numbers(cache.embed(Segment("s0", ShardState(after="15"), "16"))) == [16]


def test_a_task_embeds_its_segments_within_its_own_budget() -> None:
    # A parent and its child in one task: the budget is the task's, shared in order; the rest is fetched.
    two = sum(row_bytes(to_row("p", r)) for r in records(1, 2))
    cache = ReadAheadCache(cap_bytes=10**6)
    cache.keep("p", ShardState(after="0"), records(1, 3))
    cache.keep("child", ShardState(parents=("p",)), records(11, 12))
    task = [Segment("p", ShardState(after="0"), "3"), Segment("child", ShardState(parents=("p",)), "12")]
    parent, child = cache.embed_task(task, two + 10)
    assert sequence_numbers(parent) == [1, 2]
    assert parent.remainder() == Segment("p", ShardState(after="2"), "3")
    assert child.rows == () and child.remainder() == child
    (alone,) = cache.embed_task([Segment("child", ShardState(parents=("p",)), "12")], two + 10)
    assert sequence_numbers(alone) == [11, 12]  # each task has a budget of its own


def test_a_zero_cap_keeps_nothing() -> None:
    cache = ReadAheadCache(cap_bytes=0)
    cache.keep("s0", ShardState(after="10"), records(11, 13))
    assert cache.embed(Segment("s0", ShardState(after="10"), "13")).rows == ()


def test_embedded_rows_are_the_rows_read_would_make() -> None:
    (record,) = records(11, 11)
    cache = ReadAheadCache(cap_bytes=10**6)
    cache.keep("s0", ShardState(after="10"), [record])
    (row,) = cache.embed(Segment("s0", ShardState(after="10"), "11")).rows
    assert row == ("k11", "11", "s0", int(ARRIVAL_S + 11) * 1_000_000 + 123_000, b"payload 11")


def reader_with_kept_records() -> KinesisStreamReader:
    # No read-ahead after planning: there is no endpoint here (tests/unit/test_kinesis_read_ahead.py).
    reader = KinesisStreamReader(ReaderOptions.parse({**OPTIONS, "readAheadWhileRunning": "false"}))
    reader._cache.keep("p", ShardState(after="10"), records(11, 12))
    reader._cache.keep("c", ShardState(parents=("p",)), records(30, 31))
    reader._cache.keep("s", ShardState(after="5"), records(6, 9))
    return reader


BATCH_START = {"p": ShardState(after="10"), "s": ShardState(after="5")}
BATCH_END = {
    "p": ShardState(after="12", done=True),
    "c": ShardState(parents=("p",), after="31"),
    "s": ShardState(after="7"),
}


def test_partitions_embed_the_batch_and_drop_what_they_kept() -> None:
    reader = reader_with_kept_records()
    planned = reader.partitions(encode_offset(BATCH_START), encode_offset(BATCH_END))
    embedded = [
        [(seg.shard_id, sequence_numbers(seg), seg.remainder()) for seg in p.segments] for p in planned
    ]
    assert embedded == [[("p", [11, 12], None), ("c", [30, 31], None)], [("s", [6, 7], None)]]
    # Planned again (a replay): nothing kept any more, so every segment is fetched whole.
    replanned = reader.partitions(encode_offset(BATCH_START), encode_offset(BATCH_END))
    whole = plan_segments(BATCH_START, BATCH_END)
    assert replanned == [KinesisPartition(reader.options, group) for group in whole]


def test_read_yields_embedded_rows_without_calling_kinesis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(RETRY_ENV, "0")  # a call to the unreachable endpoint would fail, not wait
    reader = reader_with_kept_records()
    (parent_and_child, _) = reader.partitions(encode_offset(BATCH_START), encode_offset(BATCH_END))
    batches = list(pickle.loads(pickle.dumps(reader)).read(pickle.loads(pickle.dumps(parent_and_child))))
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [(row["shard_id"], row["sequence_number"]) for row in rows] == [
        ("p", "11"),
        ("p", "12"),
        ("c", "30"),
        ("c", "31"),
    ]
    assert rows[0] == {
        "partition_key": "k11",
        "sequence_number": "11",
        "shard_id": "p",
        "approximate_arrival_timestamp": ARRIVAL + timedelta(seconds=11, milliseconds=123),
        "data": b"payload 11",
    }


def test_rows_become_arrow_batches_of_the_sources_schema() -> None:
    rows = [(f"k{n}", str(n), "s0", 1_700_000_000_123_000 + n, bytes([n % 256])) for n in range(25_001)]
    batches = list(arrow_batches(rows))
    assert [b.num_rows for b in batches] == [ARROW_BATCH_ROWS, ARROW_BATCH_ROWS, 5_001]
    assert all(b.schema == ARROW_SCHEMA for b in batches)
    assert ARROW_SCHEMA.names == [f.split()[0] for f in SCHEMA.split(", ")]
    last = batches[-1].to_pylist()[-1]
    assert last["approximate_arrival_timestamp"] == datetime(2023, 11, 14, 22, 13, 20, 148_000, tzinfo=UTC)
    assert list(arrow_batches([])) == []


def test_the_cap_bounds_what_a_partition_pickles_to() -> None:
    kept = [
        {
            "PartitionKey": f"User_{n}",
            "SequenceNumber": f"4959{n:052d}",
            "ApproximateArrivalTimestamp": ARRIVAL_S + n / 1000,
            "Data": os.urandom(130),
        }
        for n in range(1, 2001)
    ]
    cache = ReadAheadCache(cap_bytes=DEFAULT_CACHED_BYTES_PER_BATCH)
    cache.keep("shardId-000000000000", ShardState(), kept)
    segment = cache.embed(Segment("shardId-000000000000", ShardState(), kept[-1]["SequenceNumber"]))
    partition = KinesisPartition(ReaderOptions.parse(OPTIONS), [segment])
    assert len(segment.rows) == 2000
    assert len(pickle.dumps(partition, protocol=pickle.HIGHEST_PROTOCOL)) <= cache.size
