"""Amazon Kinesis source for Spark Structured Streaming, on PySpark's Python data source API and boto3.

    spark.dataSource.register(KinesisDataSource)
    clicks = spark.readStream.format("kinesis").option("streamName", "clicks").load()

Options: `streamName` (required), `endpointUrl` and `region` (default: the standard AWS settings, with
STREAMFOLD_KINESIS_ENDPOINT as endpoint), `startingPosition` TRIM_HORIZON (default) or LATEST,
`startingTimestamp` (epoch ms, instead of startingPosition: every shard from its first record that arrived at
or after it, AT_TIMESTAMP on ApproximateArrivalTimestamp; not in the future), `maxRecordsPerBatch` (records
per micro-batch across all shards; default unlimited), `maxCachedBytesPerBatch` (read-ahead records handed
to the executors, see below; default 128 MiB, 0 hands none), `readAheadWhileRunning` (true by default: read
the next batch's records while a batch runs, see below). The start applies to a new checkpoint only: one
that exists resumes its own offsets. Credentials come only from the standard AWS settings (environment,
profile, instance role), never from options.

Exactly-once: an offset records, per shard, the sequence number of the last record in the batch. Kinesis
has no API for a shard's end, so the driver decides the end of every batch in `latestOffset()` by reading
ahead from the previous end. It keeps the records it read (up to `maxCachedBytesPerBatch` a batch) and
`partitions()` embeds them in the input partitions (at most 64 MiB a task); `read()` fetches from Kinesis
only what was not embedded, up to the end sequence number. So within the caps the endpoint serves each
record once. A batch is defined by its two offsets alone: a batch Spark replays after a crash (a new
driver, nothing kept) is fetched whole, and gets the same records. Spark keeps the offsets in its
checkpoint; no state lives in Kinesis.

Reading ahead while a batch runs: once `partitions()` has planned a batch, a thread of the driver's reader
reads on from its end (the next batch's records, into the same cache, within the same limits), so that
the endpoint does not idle while Spark runs the batch, nor Spark while the driver reads ahead. The next
`latestOffset()` stops the thread after the page it is reading and reads on from where it got to: a
batch's end is still every readable shard read to its tip within `maxRecordsPerBatch`, and only
`latestOffset()` returns one; what the thread read past it stays in memory. The thread gives up at its
first error (an outage, say), which `latestOffset()` then meets and waits out as without the thread.
`readAheadWhileRunning=false` turns it off.

Trigger.AvailableNow: the reader implements SupportsTriggerAvailableNow with a single batch, since Kinesis
cannot tell where a shard's records end without reading them: `maxRecordsPerBatch` then caps the whole run.
A run that finds a batch left uncommitted by a crash replays it, then reads one batch from its end. To drain
everything available, run a processing-time trigger and stop after `query.processAllAvailable()`.

Resharding: new shards are found with ListShards on every batch. A child shard is read only once all its
parents are closed and read to their end. When a parent finishes and its child starts within one batch,
both are read by the same Spark task, parent first; otherwise one task reads one shard. So for every
partition key, records of a parent come before those of its children.

The only project dependencies are `common.config.aws_settings()` (boto3 client arguments: default
endpoint, region, credentials; make it return `{}` to use the connector elsewhere) and the one Kinesis client
factory, `common.kinesis.client`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from email.utils import parsedate_to_datetime
from itertools import islice, takewhile
from typing import Any, TypeVar

import pyarrow as pa
from botocore.exceptions import (
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from common import kinesis
from common.config import aws_settings
from pipeline.retry import one_line, retry_budget_s, retrying

log = logging.getLogger(__name__)
R = TypeVar("R")

# `data` stays binary like Spark's Kafka `value`: the connector does not guess an encoding, and payloads
# that are not valid UTF-8 or JSON reach the consumer's dead-letter handling instead of failing the read.
SCHEMA = (
    "partition_key string, sequence_number string, shard_id string, "
    "approximate_arrival_timestamp timestamp, data binary"
)
ARRIVAL_TYPE = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema(
    [
        ("partition_key", pa.string()),
        ("sequence_number", pa.string()),
        ("shard_id", pa.string()),
        ("approximate_arrival_timestamp", ARRIVAL_TYPE),
        ("data", pa.binary()),
    ]
)
ARROW_BATCH_ROWS = 10_000  # Spark's own default (spark.sql.execution.arrow.maxRecordsPerBatch)
STARTING_POSITIONS = ("TRIM_HORIZON", "LATEST")
OFFSET_VERSION = 1
GET_RECORDS_MAX = 10_000  # the API's Limit ceiling
# Bounds the driver's memory: enough for a 500,000-click batch, so the executors fetch none of it again.
DEFAULT_CACHED_BYTES_PER_BATCH = 128 * 1024 * 1024
# Bounds each task's size: a cluster refuses tasks over spark.rpc.message.maxSize (128 MiB by default), and
# one shard's records can make one task; past it the task fetches the rest itself.
TASK_CACHED_BYTES_MAX = 64 * 1024 * 1024
# What a kept record costs beyond its partition key, sequence number and data: about the pickled row
# around them (the tuple, the arrival time, the shared shard id), so the cap also bounds what is shipped.
ROW_OVERHEAD_BYTES = 64
FIRST_READ_LIMIT = 500  # executors grow it page by page, so a short range does not fetch 10 000 records
EXPIRED_ITERATOR_ATTEMPTS = 6
EXPIRED_BACKOFF_S = 0.2
# botocore's standard mode retries ProvisionedThroughputExceeded and LimitExceeded with exponential backoff.


# --- offsets ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ShardState:
    """Where reading a shard stands at an offset."""

    parents: tuple[str, ...] = ()
    after: str | None = None  # sequence number of the last record read; None: nothing read yet
    since_ms: int | None = None  # LATEST or startingTimestamp: start at this arrival time, not TRIM_HORIZON
    done: bool = False  # closed and read to its end

    def to_json(self) -> dict[str, Any]:
        return {
            "parents": list(self.parents),
            "after": self.after,
            "since_ms": self.since_ms,
            "done": self.done,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> ShardState:
        return cls(tuple(value["parents"]), value["after"], value["since_ms"], value["done"])

    def iterator_args(self) -> dict[str, Any]:
        """GetShardIterator arguments that start right after this position."""
        if self.after is not None:
            return {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": self.after}
        if self.since_ms is not None:
            return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": self.since_ms / 1000}
        return {"ShardIteratorType": "TRIM_HORIZON"}


States = dict[str, ShardState]


def encode_offset(states: States) -> dict[str, Any]:
    """Spark offset: sorted so that equal states give equal JSON (Spark compares offsets as strings)."""
    return {"v": OFFSET_VERSION, "shards": {sid: states[sid].to_json() for sid in sorted(states)}}


def decode_offset(offset: Mapping[str, Any]) -> States:
    if offset.get("v") != OFFSET_VERSION:
        raise ValueError(f"unsupported Kinesis offset (version {offset.get('v')!r}): {offset}")
    return {sid: ShardState.from_json(value) for sid, value in offset["shards"].items()}


# --- shard lineage ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shard:
    shard_id: str
    parents: tuple[str, ...]
    closed: bool


def shard_from_api(shard: Mapping[str, Any]) -> Shard:
    parents = tuple(p for p in (shard.get("ParentShardId"), shard.get("AdjacentParentShardId")) if p)
    return Shard(shard["ShardId"], parents, "EndingSequenceNumber" in shard["SequenceNumberRange"])


def sync_states(states: States, shards: list[Shard]) -> States:
    """States for exactly the listed shards: new shards start unread, expired ones are forgotten."""
    listed = {shard.shard_id for shard in shards}
    for sid, state in states.items():
        if sid not in listed and not state.done:
            log.warning("shard %s expired before it was read to its end: its remaining records are lost", sid)
    return {s.shard_id: states.get(s.shard_id, ShardState(parents=s.parents)) for s in shards}


def starting_at(shards: list[Shard], since_ms: int) -> States:
    """The initial states of a start at an arrival time: each shard from its first record at or after it."""
    return {s.shard_id: ShardState(s.parents, since_ms=since_ms) for s in shards}


def readable(states: States) -> list[str]:
    """Shards to read now: not finished, and every parent finished (or expired, so absent)."""
    return sorted(
        sid
        for sid, state in states.items()
        if not state.done and all(states[p].done for p in state.parents if p in states)
    )


# SCHEMA's columns, the arrival time in microseconds since the epoch (UTC): a number pickles smaller and
# turns into an Arrow column at once, and has no zone for the executor that reads it to misread.
Row = tuple[str, str, str, int, bytes]


@dataclass(frozen=True)
class Segment:
    """Records of one shard after `start` up to and including sequence number `end`; `rows`: the first of
    them, already read by the driver, in order."""

    shard_id: str
    start: ShardState
    end: str
    rows: tuple[Row, ...] = ()

    def remainder(self) -> Segment | None:
        """The records still to fetch after the embedded rows; None when the rows reach the end."""
        if not self.rows:
            return self
        last = self.rows[-1][1]
        if int(last) >= int(self.end):
            return None
        return Segment(self.shard_id, ShardState(after=last), self.end)


def plan_segments(start: States, end: States) -> list[list[Segment]]:
    """The records between two offsets, one list per Spark task: a shard alone, or with its parents when
    parent and child were both read in this batch (parents first, to keep per-key order)."""
    segments = {
        sid: Segment(sid, start.get(sid, ShardState(parents=state.parents)), state.after)
        for sid, state in end.items()
        if state.after is not None and state.after != start.get(sid, ShardState()).after
    }
    group = {sid: sid for sid in segments}

    def root(sid: str) -> str:
        while group[sid] != sid:
            sid = group[sid]
        return sid

    for sid in sorted(segments):
        for parent in end[sid].parents:
            if parent in segments:
                group[root(sid)] = root(parent)
    depth: dict[str, int] = {}

    def lineage_depth(sid: str) -> int:
        if sid not in depth:
            depth[sid] = 1 + max((lineage_depth(p) for p in end[sid].parents if p in segments), default=0)
        return depth[sid]

    groups: dict[str, list[Segment]] = {}
    for sid in sorted(segments, key=lambda s: (lineage_depth(s), s)):
        groups.setdefault(root(sid), []).append(segments[sid])
    return [groups[key] for key in sorted(groups)]


# --- Kinesis access --------------------------------------------------------------------------------------


# The endpoint is down or unreachable: wait it out (botocore's own retries give up after seconds).
OUTAGE = (EndpointConnectionError, ConnectTimeoutError, ConnectionClosedError, ReadTimeoutError)


# False in the read-ahead thread that runs while a batch runs: it stops at the first error instead of
# waiting out an outage, which the next latestOffset() then meets and waits out with the usual retries and
# log lines. A context variable because every Kinesis call of the reader goes through `patiently`, and each
# thread has its own context.
WAITS_OUT_OUTAGES: ContextVar[bool] = ContextVar("waits_out_outages", default=True)


def patiently(call: Callable[..., R], **kwargs: Any) -> R:
    """One Kinesis API call, retried through an endpoint outage for the retry budget."""
    if not WAITS_OUT_OUTAGES.get():
        return call(**kwargs)
    return retrying("Kinesis", lambda: call(**kwargs), OUTAGE, retry_budget_s())


def make_client(endpoint: str | None, region: str | None) -> Any:
    return kinesis.client(epoch_timestamps=True, endpoint_url=endpoint, region_name=region)


def list_shards(client: Any, stream: str) -> tuple[list[Shard], int]:
    """All shards of the stream (every page of ListShards) and the server's clock in epoch ms."""
    try:
        response = patiently(client.list_shards, StreamName=stream)
    except client.exceptions.ResourceNotFoundException as exc:
        raise ValueError(f"Kinesis stream {stream!r} does not exist ({client.meta.endpoint_url})") from exc
    server_s = int(parsedate_to_datetime(response["ResponseMetadata"]["HTTPHeaders"]["date"]).timestamp())
    shards = [shard_from_api(s) for s in response["Shards"]]
    while token := response.get("NextToken"):
        response = patiently(client.list_shards, NextToken=token)
        shards += [shard_from_api(s) for s in response["Shards"]]
    return shards, server_s * 1000


@dataclass
class Page:
    records: list[dict[str, Any]]
    at_tip: bool  # nothing more to read for now
    shard_end: bool  # the shard is closed and fully read


@dataclass
class ShardCursor:
    """Reads one shard page by page, renewing the iterator when it expires (they live 5 minutes)."""

    client: Any
    stream: str
    shard_id: str
    state: ShardState  # advances with every record read
    iterator: str | None = field(default=None, repr=False)

    def fetch(self, limit: int) -> Page:
        for attempt in range(EXPIRED_ITERATOR_ATTEMPTS):
            if self.iterator is None:
                self.iterator = patiently(
                    self.client.get_shard_iterator,
                    StreamName=self.stream,
                    ShardId=self.shard_id,
                    **self.state.iterator_args(),
                )["ShardIterator"]
            try:
                response = patiently(self.client.get_records, ShardIterator=self.iterator, Limit=limit)
            except self.client.exceptions.ExpiredIteratorException:
                log.info("shard %s: iterator expired, renewing it after %s", self.shard_id, self.state.after)
                self.iterator = None
                time.sleep(EXPIRED_BACKOFF_S * 2**attempt)
                continue
            return self._advance(response, limit)
        raise RuntimeError(
            f"shard {self.shard_id} of {self.stream}: shard iterator expired "
            f"{EXPIRED_ITERATOR_ATTEMPTS} times in a row"
        )

    def _advance(self, response: Mapping[str, Any], limit: int) -> Page:
        records = response["Records"]
        self.iterator = response.get("NextShardIterator")
        if records:
            self.state = replace(self.state, after=records[-1]["SequenceNumber"])
        # A short page can also come from the 10 MB response cap, so "behind" must be 0 too.
        at_tip = response.get("MillisBehindLatest") == 0 and len(records) < limit
        return Page(records, at_tip, shard_end=self.iterator is None)


def read_segment(client: Any, stream: str, segment: Segment) -> Iterator[Row]:
    """Rows of exactly the planned records: after `segment.start`, up to `segment.end` inclusive."""
    cursor = ShardCursor(client, stream, segment.shard_id, segment.start)
    end = int(segment.end)
    limit = FIRST_READ_LIMIT
    while True:
        page = cursor.fetch(limit)
        for record in page.records:
            if int(record["SequenceNumber"]) > end:
                return
            yield to_row(segment.shard_id, record)
            if int(record["SequenceNumber"]) == end:
                return
        if page.at_tip or page.shard_end:
            raise RuntimeError(
                f"shard {segment.shard_id} of {stream}: records up to {segment.end} were planned but reading "
                f"stops at {cursor.state.after}; were they trimmed by the retention period?"
            )
        limit = min(limit * 2, GET_RECORDS_MAX)


def to_row(shard_id: str, record: Mapping[str, Any]) -> Row:
    """A GetRecords record of a `make_client` client (its arrival time in epoch seconds) as a Row."""
    return (
        record["PartitionKey"],
        record["SequenceNumber"],
        shard_id,
        round(record["ApproximateArrivalTimestamp"] * 1_000_000),
        record["Data"],
    )


def arrow_batches(rows: Iterable[Row]) -> Iterator[pa.RecordBatch]:
    """Rows as Arrow record batches of SCHEMA: handed to Spark as they are, where rows would be converted
    one value at a time in Python."""
    rows = iter(rows)
    while chunk := list(islice(rows, ARROW_BATCH_ROWS)):
        keys, sequence_numbers, shard_ids, arrivals, data = zip(*chunk, strict=True)
        columns = [
            pa.array(keys, pa.string()),
            pa.array(sequence_numbers, pa.string()),
            pa.array(shard_ids, pa.string()),
            pa.array(arrivals, pa.int64()).cast(ARRIVAL_TYPE),
            pa.array(data, pa.binary()),
        ]
        yield pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def row_bytes(row: Row) -> int:
    """What keeping a row costs against maxCachedBytesPerBatch."""
    return len(row[0]) + len(row[1]) + len(row[4]) + ROW_OVERHEAD_BYTES


@dataclass
class ShardRun:
    """Records of one shard read one after another, right after position `origin`."""

    origin: ShardState
    rows: list[Row] = field(default_factory=list)

    def follows(self, state: ShardState) -> bool:
        """Whether records read after `state` continue this run without a gap."""
        tail = ShardState(after=self.rows[-1][1]) if self.rows else self.origin
        return tail.iterator_args() == state.iterator_args()


@dataclass
class ReadAheadCache:
    """The records the driver read ahead for the next batch, per shard, within `cap_bytes`: past the cap it
    keeps nothing more until the batch is planned, so every shard's run is a prefix of its records."""

    cap_bytes: int
    runs: dict[str, ShardRun] = field(default_factory=dict)
    size: int = 0
    full: bool = False

    def keep(self, shard_id: str, after: ShardState, records: Sequence[Mapping[str, Any]]) -> None:
        """Records of `shard_id` read right after position `after`."""
        if self.full or not records:
            return
        run = self.runs.get(shard_id)
        if run is None or not run.follows(after):
            run = self.runs[shard_id] = ShardRun(after)
        for record in records:
            row = to_row(shard_id, record)
            cost = row_bytes(row)
            if self.size + cost > self.cap_bytes:
                self.full = True
                return
            run.rows.append(row)
            self.size += cost

    def embed(self, segment: Segment) -> Segment:
        """The segment with the kept rows that lie in it; none unless a run starts exactly at its start."""
        run = self.runs.get(segment.shard_id)
        if run is None or run.origin.iterator_args() != segment.start.iterator_args():
            return segment
        end = int(segment.end)
        return replace(segment, rows=tuple(takewhile(lambda row: int(row[1]) <= end, run.rows)))

    def embed_task(self, segments: list[Segment], budget: int) -> list[Segment]:
        """One task's segments, in order, each with as many of its kept rows as fit in what is left of the
        task's `budget` bytes."""
        embedded = []
        for segment in segments:
            rows = []
            for row in self.embed(segment).rows:
                cost = row_bytes(row)
                if cost > budget:
                    break
                budget -= cost
                rows.append(row)
            embedded.append(replace(segment, rows=tuple(rows)))
        return embedded

    def clear(self) -> None:
        self.runs, self.size, self.full = {}, 0, False


# --- Spark -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReaderOptions:
    stream: str
    endpoint: str | None
    region: str | None
    starting: str
    max_records: int | None
    starting_ms: int | None = None  # startingTimestamp
    max_cached_bytes: int = DEFAULT_CACHED_BYTES_PER_BATCH
    read_ahead_while_running: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReaderOptions:
        stream = options.get("streamName")
        if not stream:
            raise ValueError("the kinesis source needs the option streamName")
        starting = options.get("startingPosition", "TRIM_HORIZON").upper()
        if starting not in STARTING_POSITIONS:
            raise ValueError(f"startingPosition must be one of {STARTING_POSITIONS}, not {starting!r}")
        max_records = options.get("maxRecordsPerBatch")
        if max_records is not None and (not max_records.isdigit() or int(max_records) < 1):
            raise ValueError(f"maxRecordsPerBatch must be a positive integer, not {max_records!r}")
        starting_ms = options.get("startingTimestamp")
        if starting_ms is not None and not starting_ms.isdigit():
            raise ValueError(f"startingTimestamp must be epoch milliseconds, not {starting_ms!r}")
        if starting_ms is not None and "startingPosition" in options:
            raise ValueError("give startingPosition or startingTimestamp, not both")
        max_cached = options.get("maxCachedBytesPerBatch", str(DEFAULT_CACHED_BYTES_PER_BATCH))
        if not max_cached.isdigit():
            raise ValueError(f"maxCachedBytesPerBatch must be a whole number of bytes, not {max_cached!r}")
        while_running = options.get("readAheadWhileRunning", "true").lower()
        if while_running not in ("true", "false"):
            raise ValueError(f"readAheadWhileRunning must be true or false, not {while_running!r}")
        defaults = aws_settings()
        return cls(
            stream=stream,
            endpoint=options.get("endpointUrl") or defaults.get("endpoint_url"),
            region=options.get("region") or defaults.get("region_name"),
            starting=starting,
            max_records=int(max_records) if max_records else None,
            starting_ms=int(starting_ms) if starting_ms is not None else None,
            max_cached_bytes=int(max_cached),
            read_ahead_while_running=while_running == "true",
        )


@dataclass
class KinesisPartition(InputPartition):
    options: ReaderOptions
    segments: list[Segment]


@dataclass
class ReadAhead:
    """A read-ahead to the next batch end, under way: where every shard stands (updated page by page) and
    how many records it read, which count against maxRecordsPerBatch when it is continued."""

    states: States
    count: int = 0


class Prefetch:
    """The next batch's read-ahead, started from the end of the batch just planned, in a thread of its own
    while Spark runs that batch. Until `finish()` has joined it, the thread alone uses the reader's client,
    cursors and cache."""

    def __init__(self, reader: KinesisStreamReader, start: States) -> None:
        self.origin = dict(start)
        self.ahead = ReadAhead(dict(start))
        self.stopping = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(reader,), name="kinesis-read-ahead", daemon=True
        )

    def _run(self, reader: KinesisStreamReader) -> None:
        WAITS_OUT_OUTAGES.set(False)
        try:
            reader.read_ahead(self.ahead, self.stopping)
        except Exception as error:  # latestOffset() reads on, and meets an error that lasts itself
            log.warning("reading the next batch ahead stopped (%s); its planning reads on", one_line(error))

    def finish(self) -> ReadAhead:
        """Stop the thread after the page it is reading, and return where it got to."""
        self.stopping.set()
        self.thread.join()
        return self.ahead


class KinesisStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Driver side: decides batch ends by reading ahead, and hands what it read to the batch's partitions.
    Executor side: `read()` hands Spark a partition's embedded rows and fetches the rest of its planned
    range, as Arrow batches.

    Spark calls `latestOffset(start, limit)` with the previous batch's end (the checkpoint's after a
    restart, `initialOffset()` for a new query), and the reader reads on from that `start`: it keeps no
    position of its own across calls. Spark plans each batch once, right after the `latestOffset()` that
    ended it, in the same long-lived Python process; the read-ahead thread started there is used only
    when the next `start` is that batch's end.
    """

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self._initial: States | None = None
        self._anchored = False
        self._available_now = False
        self._target: States | None = None
        self._client: Any = None
        self._cursors: dict[str, ShardCursor] = {}
        self._cache = ReadAheadCache(options.max_cached_bytes)
        self._prefetch: Prefetch | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the reader for executors; clients and cursors are rebuilt where they are used, and
        # the kept records reach them inside the partitions.
        return {
            **self.__dict__,
            "_client": None,
            "_cursors": {},
            "_cache": ReadAheadCache(self.options.max_cached_bytes),
            "_prefetch": None,
        }

    def client(self) -> Any:
        if self._client is None:
            self._client = make_client(self.options.endpoint, self.options.region)
        return self._client

    def initialOffset(self) -> dict[str, Any]:
        return encode_offset(self.initial_states())

    def initial_states(self) -> States:
        """TRIM_HORIZON: every shard from its start. startingTimestamp: every listed shard, closed ones too,
        from that arrival time (shards made later hold only later records: they start unread). LATEST: open
        shards from the server's current second (kept for the reader's lifetime: Spark may ask twice)."""
        if self._initial is None:
            if self.options.starting_ms is not None:
                shards, _ = list_shards(self.client(), self.options.stream)
                self._initial = starting_at(shards, self.options.starting_ms)
            elif self.options.starting == "TRIM_HORIZON":
                self._initial = {}
            else:
                shards, now_ms = list_shards(self.client(), self.options.stream)
                self._initial = {
                    s.shard_id: ShardState(s.parents, since_ms=None if s.closed else now_ms, done=s.closed)
                    for s in shards
                }
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow (`streamfold run --once`): one batch, read from its start as any other (so
        `maxRecordsPerBatch` caps the whole run); its end is the run's target, which every later
        `latestOffset()` returns."""
        self._available_now = True

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The next batch's end, read ahead from `start`. `limit` is always ReadAllAvailable (the default
        read limit): the cap is the reader's own `maxRecordsPerBatch`, as for every trigger."""
        if self._target is not None:
            return encode_offset(self._target)
        states = decode_offset(start)
        # A new LATEST query's first batch is empty and ends at its anchor, so the anchor is in the offset
        # log; a replay of batch 0 after a crash recomputes a later anchor and still reads nothing.
        end = states if self._anchor(states) else self.read_ahead(self._continue_from(states)).states
        if self._available_now:
            self._target = end
        return encode_offset(end)

    def _anchor(self, start: States) -> bool:
        """Whether `start` is this query's own new LATEST anchor, not yet returned as a batch end."""
        fresh = not self._anchored and self._initial is not None and start == self._initial
        self._anchored = True
        return self.options.starting == "LATEST" and fresh

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[KinesisPartition]:
        # Normally latestOffset() has stopped the thread already; a batch planned again (a replay) drops
        # what it read: its records start at the last end, not at this batch's start.
        self._finish_prefetch()
        groups = plan_segments(decode_offset(start), decode_offset(end))
        # The cache holds at most maxCachedBytesPerBatch in all, so only the task cap can bind here.
        embedded = (self._cache.embed_task(group, TASK_CACHED_BYTES_MAX) for group in groups)
        planned = [KinesisPartition(self.options, segments) for segments in embedded]
        self._cache.clear()  # the next batch starts where this one ends
        if self.options.read_ahead_while_running and self._target is None:
            self._prefetch = Prefetch(self, decode_offset(end))
            self._prefetch.thread.start()
        return planned

    def stop(self) -> None:
        self._finish_prefetch()

    def _finish_prefetch(self) -> ReadAhead | None:
        prefetch, self._prefetch = self._prefetch, None
        return prefetch.finish() if prefetch else None

    def _continue_from(self, start: States) -> ReadAhead:
        """The read-ahead thread's progress when it started at `start`, else a new read-ahead from there."""
        prefetch = self._prefetch
        ahead = self._finish_prefetch()
        if ahead is not None and prefetch is not None and prefetch.origin == start:
            return ahead
        return ReadAhead(dict(start))

    def read(self, partition: KinesisPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return arrow_batches(self.rows(partition))

    def rows(self, partition: KinesisPartition) -> Iterator[Row]:
        client = None  # not made when the driver handed every record
        for segment in partition.segments:
            yield from segment.rows
            rest = segment.remainder()
            if rest is not None:
                client = client or make_client(partition.options.endpoint, partition.options.region)
                yield from read_segment(client, partition.options.stream, rest)

    def read_ahead(self, ahead: ReadAhead, stopping: threading.Event | None = None) -> ReadAhead:
        """Continue `ahead` to the next batch end: every readable shard read up to its tip (or end), within
        maxRecordsPerBatch shared fairly across shards. Children unlocked by a parent finishing are read in
        the same batch. The records read are kept for `partitions()`. Once `stopping` is set, it returns
        after the page it is reading, and can be continued from there."""
        stopping = stopping or threading.Event()  # latestOffset()'s own read-ahead is never stopped
        shards, _ = list_shards(self.client(), self.options.stream)
        states = ahead.states = sync_states(ahead.states, shards)  # advance() updates it page by page
        budget: float = (self.options.max_records or math.inf) - ahead.count
        visited: set[str] = set()
        hungry: list[str] = []  # shards that used their whole share: they may have more
        while budget > 0 and (pending := hungry + [sid for sid in readable(states) if sid not in visited]):
            share = budget if math.isinf(budget) else max(1, int(budget) // len(pending))
            visited.update(pending)
            hungry = []
            for sid in pending:
                if stopping.is_set():
                    return ahead
                limit = min(share, budget)
                count = self.advance(ahead, sid, limit, stopping)
                budget -= count
                if count == limit and not states[sid].done:
                    hungry.append(sid)
        return ahead

    def advance(self, ahead: ReadAhead, sid: str, limit: float, stopping: threading.Event) -> int:
        """Read one shard ahead by at most `limit` records, recording each page in `ahead` (so an error
        leaves it where the cursor and the cache are); returns the count."""
        state = ahead.states[sid]
        cursor = self._cursors.get(sid)
        if cursor is None or cursor.state != state:
            cursor = ShardCursor(self.client(), self.options.stream, sid, state)
        self._cursors[sid] = cursor
        count = 0
        while count < limit and not stopping.is_set():
            before = cursor.state
            page = cursor.fetch(int(min(GET_RECORDS_MAX, limit - count)))
            self._cache.keep(sid, before, page.records)
            count += len(page.records)
            ahead.count += len(page.records)
            ahead.states[sid] = cursor.state
            if page.shard_end:
                del self._cursors[sid]
                ahead.states[sid] = replace(cursor.state, done=True)
                break
            if page.at_tip:
                break
        return count


class KinesisDataSource(DataSource):
    """`spark.readStream.format("kinesis")` after `spark.dataSource.register(KinesisDataSource)`."""

    @classmethod
    def name(cls) -> str:
        return "kinesis"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: StructType) -> KinesisStreamReader:
        return KinesisStreamReader(ReaderOptions.parse(self.options))
