"""The Kinesis source reads the next batch ahead while a batch runs (pipeline/kinesis_source.py), against a
real kinesalite. The tests play Spark's calls on the driver: `latestOffset(start, limit)` ends a batch,
`partitions()` plans it (and starts the read-ahead thread). The reader's client is the real one behind
`Watched`, which counts what GetRecords served on each thread and lets a test act before the thread's
pages."""

from __future__ import annotations

import logging
import pickle
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from pipeline.kinesis_source import KinesisStreamReader, ReaderOptions
from pipeline.retry import RETRY_ENV
from stack.home import AWS_ENV
from tests.support import kinesalite
from tests.support.relay import TcpRelay

STREAM = "clicks"
THREAD = "kinesis-read-ahead"
SHARD_0, SHARD_1 = "0", str(2**127)  # explicit hash keys in each half of a two-shard stream
GUARD_S = 60  # only so that a broken stop fails the test instead of hanging it

Offset = dict[str, Any]
ALL = ReadAllAvailable()  # the reader's default read limit, which Spark passes back
Shards = tuple[range, range]  # the records of shard 0, of shard 1


@pytest.fixture
def endpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A two-shard stream on a kinesalite of the test's own."""
    for name, value in AWS_ENV.items():  # the reader takes its credentials from the environment
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(RETRY_ENV, str(GUARD_S))
    with kinesalite.running(tmp_path) as (_, url):
        client = kinesalite.client(url)
        client.create_stream(StreamName=STREAM, ShardCount=2)
        client.get_waiter("stream_exists").wait(StreamName=STREAM)
        yield url


def put(url: str, hash_key: str, numbers: range) -> None:
    """Records whose data is their number, into the shard `hash_key` falls in."""
    if not numbers:
        return
    records = [
        {"Data": str(n).encode(), "PartitionKey": f"k{n}", "ExplicitHashKey": hash_key} for n in numbers
    ]
    kinesalite.client(url).put_records(StreamName=STREAM, Records=records)


class Watched:
    """The reader's Kinesis client: every call goes to kinesalite. Counts the records GetRecords served per
    thread, and calls `before_read_ahead(page)` before the read-ahead thread's pages (0, 1, ...)."""

    def __init__(self, url: str, before_read_ahead: Callable[[int], None] = lambda page: None) -> None:
        self.client = kinesalite.client(url, epoch_timestamps=True)  # as the reader's own
        self.before_read_ahead = before_read_ahead
        self.served: Counter[str] = Counter()
        self.read_ahead_pages = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def get_records(self, **kwargs: Any) -> dict[str, Any]:
        thread = threading.current_thread().name
        if thread == THREAD:
            self.before_read_ahead(self.read_ahead_pages)
            self.read_ahead_pages += 1
        response: dict[str, Any] = self.client.get_records(**kwargs)
        if response["Records"]:
            self.served[thread] += len(response["Records"])
        return response


Reader = Callable[..., KinesisStreamReader]


@pytest.fixture
def reader(endpoint: str) -> Iterator[Reader]:
    """Makes readers with a watched client, stopped at the end as Spark stops them (planning a batch leaves
    a read-ahead thread running)."""
    made: list[KinesisStreamReader] = []

    def make(url: str, watched: Watched, **options: str) -> KinesisStreamReader:
        made.append(
            KinesisStreamReader(ReaderOptions.parse({"streamName": STREAM, "endpointUrl": url, **options}))
        )
        made[-1]._client = watched
        return made[-1]

    yield make
    for one in made:
        one.stop()


def plan(made: KinesisStreamReader, start: Offset, end: Offset) -> list[int]:
    """Spark planning the batch (start, end]: its records, every one handed by the driver."""
    segments = [segment for partition in made.partitions(start, end) for segment in partition.segments]
    assert all(segment.remainder() is None for segment in segments), "records left for the executors"
    return [int(row[4]) for segment in segments for row in segment.rows]


def plan_first_batch(url: str, made: KinesisStreamReader, first: Shards, then: Shards) -> Offset:
    """Batch 1 of the records `first` ended and planned, the records `then` put after its end (batch 2's,
    for the read-ahead thread to find); returns batch 1's end."""
    put(url, SHARD_0, first[0])
    put(url, SHARD_1, first[1])
    end = made.latestOffset(made.initialOffset(), ALL)
    put(url, SHARD_0, then[0])
    put(url, SHARD_1, then[1])
    assert sorted(plan(made, made.initialOffset(), end)) == [*first[0], *first[1]]
    return end


def kept(made: KinesisStreamReader) -> list[int]:
    """The records the reader keeps for the next batch."""
    return sorted(int(row[4]) for run in made._cache.runs.values() for row in run.rows)


def read_ahead_thread(made: KinesisStreamReader) -> threading.Thread:
    assert made._prefetch is not None, "no read-ahead after planning a batch"
    return made._prefetch.thread


@pytest.mark.timeout(GUARD_S)
def test_records_read_while_a_batch_runs_join_the_next_batch_and_its_cache(
    endpoint: str, reader: Reader
) -> None:
    watched = Watched(endpoint)
    made = reader(endpoint, watched)
    first_end = plan_first_batch(
        endpoint, made, (range(0, 5), range(100, 105)), (range(5, 10), range(105, 110))
    )
    read_ahead_thread(made).join()  # it reads every shard to its tip, then ends
    assert kept(made) == [*range(5, 10), *range(105, 110)]
    assert pickle.loads(pickle.dumps(made))._prefetch is None  # Spark may pickle the reader meanwhile
    put(endpoint, SHARD_1, range(110, 112))  # after the thread ended: latestOffset reads them
    second_end = made.latestOffset(first_end, ALL)
    assert plan(made, first_end, second_end) == [*range(5, 10), *range(105, 112)]  # shard by shard, in order
    assert watched.served == {"MainThread": 12, THREAD: 10}  # each record once


@pytest.mark.timeout(GUARD_S)
def test_latest_offset_stops_the_read_ahead_after_its_page_and_reads_on(
    endpoint: str, reader: Reader
) -> None:
    in_first_page = threading.Event()

    def hold_first_page_until_stopped(page: int) -> None:
        if page == 0:
            assert made._prefetch is not None
            stopping = made._prefetch.stopping
            in_first_page.set()
            stopping.wait()  # set by latestOffset(), which then waits for this page

    watched = Watched(endpoint, hold_first_page_until_stopped)
    made = reader(endpoint, watched)
    first_end = plan_first_batch(endpoint, made, (range(0, 5), range(0)), (range(5, 10), range(100, 105)))
    in_first_page.wait()
    second_end = made.latestOffset(first_end, ALL)
    assert watched.read_ahead_pages == 1  # the first shard's page, then it stopped
    assert plan(made, first_end, second_end) == [*range(5, 10), *range(100, 105)]
    assert watched.served == {"MainThread": 10, THREAD: 5}


@pytest.mark.timeout(GUARD_S)
def test_an_outage_stops_the_read_ahead_and_latest_offset_waits_it_out(
    endpoint: str, reader: Reader, caplog: pytest.LogCaptureFixture
) -> None:
    target = urlsplit(endpoint)
    relay = TcpRelay(target.hostname or "127.0.0.1", target.port or 80)

    def outage_after_first_page(page: int) -> None:
        if page == 1:
            relay.down()

    class RelayUpOnRetry(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "Kinesis unavailable" in record.getMessage() and not relay_is_up.is_set():
                relay_is_up.set()
                relay.up()

    relay_is_up = threading.Event()
    watched = Watched(relay.url, outage_after_first_page)
    made = reader(relay.url, watched)
    first_end = plan_first_batch(
        endpoint, made, (range(0, 5), range(100, 105)), (range(5, 10), range(105, 110))
    )
    read_ahead_thread(made).join()  # the second shard's page met the outage: the thread ended
    assert "reading the next batch ahead stopped" in caplog.text
    assert "Kinesis unavailable" not in caplog.text  # the thread does not wait outages out
    assert kept(made) == [*range(5, 10)]
    retries = logging.getLogger("pipeline.retry")
    retries.addHandler(handler := RelayUpOnRetry())
    try:
        second_end = made.latestOffset(first_end, ALL)
    finally:
        retries.removeHandler(handler)
        relay.down()
    assert "Kinesis unavailable" in caplog.text  # latestOffset met the outage, as without the thread
    assert plan(made, first_end, second_end) == [*range(5, 10), *range(105, 110)]
    assert watched.served == {"MainThread": 15, THREAD: 5}  # nothing lost, nothing read twice


@pytest.mark.timeout(GUARD_S)
def test_the_batch_limit_counts_what_the_thread_read(endpoint: str, reader: Reader) -> None:
    watched = Watched(endpoint)
    made = reader(endpoint, watched, maxRecordsPerBatch="6")
    first_end = plan_first_batch(
        endpoint, made, (range(0, 3), range(100, 103)), (range(3, 8), range(103, 108))
    )
    read_ahead_thread(made).join()
    second_end = made.latestOffset(first_end, ALL)
    assert plan(made, first_end, second_end) == [*range(3, 6), *range(103, 106)]  # 6, shared fairly
    read_ahead_thread(made).join()
    third_end = made.latestOffset(second_end, ALL)
    assert plan(made, second_end, third_end) == [6, 7, 106, 107]
    assert watched.served[THREAD] == 10 and watched.served["MainThread"] == 6


@pytest.mark.timeout(GUARD_S)
def test_a_restarted_reader_reads_from_the_last_logged_end(endpoint: str, reader: Reader) -> None:
    before_crash = reader(endpoint, Watched(endpoint))
    put(endpoint, SHARD_0, range(0, 5))
    logged_end = before_crash.latestOffset(before_crash.initialOffset(), ALL)
    put(endpoint, SHARD_0, range(5, 10))
    watched = Watched(endpoint)
    made = reader(endpoint, watched)  # a new driver: Spark asks for the batch after the logged end
    assert plan(made, logged_end, made.latestOffset(logged_end, ALL)) == [*range(5, 10)]
    assert watched.served == {"MainThread": 5}


@pytest.mark.timeout(GUARD_S)
def test_a_read_ahead_from_another_end_is_not_used(endpoint: str, reader: Reader) -> None:
    """The thread reads on from the end of the batch just planned; a `start` elsewhere (Spark's own
    offsets rule) reads from there, and the thread's records are not used."""
    watched = Watched(endpoint)
    made = reader(endpoint, watched)
    first_end = plan_first_batch(endpoint, made, (range(0, 5), range(0)), (range(5, 10), range(0)))
    read_ahead_thread(made).join()
    assert kept(made) == [*range(5, 10)]
    elsewhere = made.latestOffset(made.initialOffset(), ALL)
    assert elsewhere != first_end
    assert plan(made, made.initialOffset(), elsewhere) == [*range(10)]
    assert watched.served == {"MainThread": 15, THREAD: 5}


@pytest.mark.timeout(GUARD_S)
def test_available_now_runs_one_batch_from_its_start(endpoint: str, reader: Reader) -> None:
    """Trigger.AvailableNow: the first batch's end is the run's target; later records wait for the next run,
    and no read-ahead runs meanwhile."""
    watched = Watched(endpoint)
    made = reader(endpoint, watched, maxRecordsPerBatch="3")
    made.prepareForTriggerAvailableNow()
    put(endpoint, SHARD_0, range(0, 5))
    target = made.latestOffset(made.initialOffset(), ALL)
    assert plan(made, made.initialOffset(), target) == [0, 1, 2]  # the cap holds for the whole run
    assert made._prefetch is None
    put(endpoint, SHARD_0, range(5, 10))
    assert made.latestOffset(target, ALL) == target  # nothing more: the run ends


@pytest.mark.timeout(GUARD_S)
def test_the_read_ahead_while_a_batch_runs_can_be_turned_off(endpoint: str, reader: Reader) -> None:
    watched = Watched(endpoint)
    made = reader(endpoint, watched, readAheadWhileRunning="false")
    put(endpoint, SHARD_0, range(0, 5))
    first_end = made.latestOffset(made.initialOffset(), ALL)
    put(endpoint, SHARD_0, range(5, 10))
    plan(made, made.initialOffset(), first_end)
    assert made._prefetch is None
    assert plan(made, first_end, made.latestOffset(first_end, ALL)) == [*range(5, 10)]
    assert watched.served == {"MainThread": 10}
    with pytest.raises(ValueError, match="readAheadWhileRunning"):
        ReaderOptions.parse({"streamName": STREAM, "readAheadWhileRunning": "no"})
