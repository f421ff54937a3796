"""Where a new Kinesis checkpoint starts: the startingTimestamp option -> the initial shard states
(`streamfold reprocess --source kinesis --from TIME`), the retention a stream setup creates gets, and the
next record a swap reads the arrival time of."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest

from common import kinesis
from pipeline.kinesis_source import KinesisStreamReader, ReaderOptions, Shard, ShardState, starting_at
from streamfold import status

OPTIONS = {"streamName": "clicks", "endpointUrl": "http://localhost:1", "region": "eu-west-1"}
T = 1_700_000_000_000


def test_starting_timestamp_is_parsed_and_exclusive_with_starting_position() -> None:
    assert ReaderOptions.parse({**OPTIONS, "startingTimestamp": str(T)}).starting_ms == T
    assert ReaderOptions.parse(OPTIONS).starting_ms is None
    with pytest.raises(ValueError, match="epoch milliseconds"):
        ReaderOptions.parse({**OPTIONS, "startingTimestamp": "2023-11-14T22:13:20Z"})
    with pytest.raises(ValueError, match="not both"):
        ReaderOptions.parse({**OPTIONS, "startingTimestamp": str(T), "startingPosition": "TRIM_HORIZON"})


def test_a_start_time_starts_every_shard_there_closed_ones_too() -> None:
    shards = [Shard("s0", (), closed=True), Shard("s1", ("s0",), closed=False)]
    assert starting_at(shards, T) == {
        "s0": ShardState(since_ms=T),  # closed after T, it may hold records that arrived from T on
        "s1": ShardState(parents=("s0",), since_ms=T),  # read once its parent is done, as always
    }
    assert ShardState(since_ms=T).iterator_args() == {
        "ShardIteratorType": "AT_TIMESTAMP",
        "Timestamp": T / 1000,
    }


class Listing:
    """A Kinesis client that lists two shards (the reader's only call to plan its start)."""

    def __init__(self) -> None:
        self.calls = 0

    def list_shards(self, **_: Any) -> dict[str, Any]:
        self.calls += 1
        date = format_datetime(datetime.fromtimestamp(T / 1000 + 3600, UTC), usegmt=True)
        closed = {"StartingSequenceNumber": "1", "EndingSequenceNumber": "9"}
        return {
            "Shards": [
                {"ShardId": "s0", "SequenceNumberRange": closed},
                {
                    "ShardId": "s1",
                    "ParentShardId": "s0",
                    "SequenceNumberRange": {"StartingSequenceNumber": "10"},
                },
            ],
            "ResponseMetadata": {"HTTPHeaders": {"date": date}},
        }


def reader(**options: str) -> tuple[KinesisStreamReader, Listing]:
    made = KinesisStreamReader(ReaderOptions.parse({**OPTIONS, **options}))
    made._client = client = Listing()
    return made, client


def test_the_initial_offset_of_a_start_time_names_every_shard_and_is_stable() -> None:
    made, client = reader(startingTimestamp=str(T))
    assert made.initial_states() == {
        "s0": ShardState(since_ms=T),
        "s1": ShardState(parents=("s0",), since_ms=T),
    }
    assert made.initial_states() is made.initial_states() and client.calls == 1  # Spark may ask twice


def test_trim_horizon_and_latest_starts_are_unchanged() -> None:
    assert reader()[0].initial_states() == {}  # every shard from its start, as listed per batch
    latest = reader(startingPosition="LATEST")[0].initial_states()
    now = T + 3_600_000  # the server's clock, not the client's
    assert latest == {"s0": ShardState(done=True), "s1": ShardState(parents=("s0",), since_ms=now)}


class Streams:
    """A Kinesis client for ensure_stream: creates (or finds) a stream and records the calls."""

    class exceptions:  # noqa: N801 (botocore's spelling)
        class ResourceInUseException(Exception):
            pass

    def __init__(self, exists: bool) -> None:
        self.exists, self.calls = exists, []

    def create_stream(self, **kwargs: Any) -> None:
        self.calls.append(("create", kwargs))
        if self.exists:
            raise self.exceptions.ResourceInUseException()

    def increase_stream_retention_period(self, **kwargs: Any) -> None:
        self.calls.append(("retention", kwargs))

    def get_waiter(self, name: str) -> Any:
        calls = self.calls

        class Waiter:
            def wait(self, **_: Any) -> None:
                calls.append(("wait", {}))

        return Waiter()


def test_a_stream_setup_creates_gets_the_retention_one_that_exists_keeps_its_own() -> None:
    new = Streams(exists=False)
    assert kinesis.ensure_stream(new, "clicks", shards=3, retention_hours=168)
    assert ("retention", {"StreamName": "clicks", "RetentionPeriodHours": 168}) in new.calls
    assert new.calls[-1] == ("wait", {})  # ACTIVE again after the update
    old = Streams(exists=True)
    assert not kinesis.ensure_stream(old, "clicks", shards=3, retention_hours=168)
    assert [name for name, _ in old.calls] == ["create", "wait"]
    default = Streams(exists=False)
    kinesis.ensure_stream(default, "clicks", shards=3)
    assert [name for name, _ in default.calls] == ["create", "wait"]


class Pages:
    """GetShardIterator and GetRecords answering the given pages in turn."""

    def __init__(self, *pages: dict[str, Any]) -> None:
        self.pages, self.started = list(pages), {}

    def get_shard_iterator(self, **kwargs: Any) -> dict[str, str]:
        self.started = kwargs
        return {"ShardIterator": "it-0"}

    def get_records(self, ShardIterator: str, Limit: int) -> dict[str, Any]:  # noqa: N803 (boto3's names)
        return self.pages.pop(0)


def test_the_next_record_to_process_is_found_past_empty_pages() -> None:
    arrived = datetime.fromtimestamp(T / 1000, UTC)
    client = Pages(
        {"Records": [], "MillisBehindLatest": 5000, "NextShardIterator": "it-1"},  # Kinesis may answer so
        {"Records": [{"ApproximateArrivalTimestamp": arrived}], "NextShardIterator": "it-2"},
    )
    assert status.next_arrival_ms(client, "clicks", "s0", ShardState(after="42")) == T
    assert client.started["ShardIteratorType"] == "AFTER_SEQUENCE_NUMBER"
    at_tip = Pages({"Records": [], "MillisBehindLatest": 0, "NextShardIterator": "it-1"})
    assert status.next_arrival_ms(at_tip, "clicks", "s0", None) is None  # read to the end: none yet
    assert at_tip.started["ShardIteratorType"] == "TRIM_HORIZON"
