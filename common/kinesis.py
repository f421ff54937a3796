"""Kinesis helpers for set-up and producers: a configured client, idempotent stream creation, PutRecords.

The Spark source lives in `pipeline/kinesis_source.py`; this module is what `streamfold setup` and the click
generator use.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.utils import parse_timestamp

from common import config

log = logging.getLogger(__name__)

# PutRecords limits (AWS API reference): per request and per record (data plus partition key).
MAX_BATCH_RECORDS = 500
MAX_BATCH_BYTES = 5 * 1024 * 1024
MAX_RECORD_BYTES = 1024 * 1024
MAX_PARTITION_KEY_CHARS = 256
# What a new stream keeps its records for unless told otherwise.
DEFAULT_RETENTION_HOURS = 24
# Retries of records PutRecords reports as failed (throttled shards, internal errors).
PUT_ATTEMPTS = 10
PUT_BACKOFF_S = 0.1
PUT_BACKOFF_CAP_S = 5.0

# botocore's "standard" mode retries throttling (ProvisionedThroughputExceeded, LimitExceeded) and
# transient errors with exponential backoff and jitter.
RETRY_CONFIG = Config(retries={"mode": "standard", "max_attempts": 10}, connect_timeout=10, read_timeout=30)

# The writers' client: `batches` checks their records against the limits above, so botocore's check of
# every field of every record, a third of a PutRecords call's Python CPU, is left out.
PUT_CONFIG = RETRY_CONFIG.merge(Config(parameter_validation=False))

Record = tuple[str, bytes]  # (partition key, data)


def client(retries: Config = RETRY_CONFIG, *, epoch_timestamps: bool = False, **overrides: Any) -> Any:
    """A Kinesis client from the standard AWS settings plus STREAMFOLD_KINESIS_ENDPOINT; `retries`: how
    patient it is (the job's default, or a quick one for `streamfold status`). `epoch_timestamps`:
    timestamps in responses as epoch seconds (float) rather than datetimes."""
    settings = {**config.aws_settings(), **overrides}
    session = _epoch_timestamps_session() if epoch_timestamps else boto3
    return session.client("kinesis", config=retries, **settings)


@functools.cache
def _epoch_timestamps_session() -> boto3.Session:
    # botocore turns each timestamp into a datetime in the local zone through dateutil: most of the CPU of
    # parsing a GetRecords page, one ApproximateArrivalTimestamp per record.
    core = botocore.session.get_session()
    core.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=epoch_seconds)
    return boto3.Session(botocore_session=core)


def epoch_seconds(value: Any) -> float:
    """A response timestamp as epoch seconds: JSON protocols send a number, others a date string."""
    if isinstance(value, int | float):
        return float(value)
    return parse_timestamp(value).timestamp()


def ensure_stream(kinesis: Any, name: str, shards: int, retention_hours: int | None = None) -> bool:
    """Create the stream unless it exists, then wait until it is ACTIVE; a stream it creates gets
    `retention_hours` (IncreaseStreamRetentionPeriod; None: Kinesis's default, 24), one that exists keeps
    its own. Returns whether it created the stream. Safe to run again."""
    try:
        kinesis.create_stream(StreamName=name, ShardCount=shards)
        log.info("created Kinesis stream %s with %d shards", name, shards)
        created = True
    except kinesis.exceptions.ResourceInUseException:
        log.info("Kinesis stream %s exists", name)
        created = False
    _wait_active(kinesis, name)
    if created and retention_hours is not None and retention_hours > DEFAULT_RETENTION_HOURS:
        kinesis.increase_stream_retention_period(StreamName=name, RetentionPeriodHours=retention_hours)
        _wait_active(kinesis, name)  # the stream is UPDATING meanwhile
    return created


def _wait_active(kinesis: Any, name: str) -> None:
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120})


def record_size(record: Record) -> int:
    key, data = record
    return len(key.encode()) + len(data)


def batches(records: Sequence[Record]) -> Iterator[list[Record]]:
    """Split records into PutRecords requests of at most 500 records and 5 MiB, keeping their order."""
    batch: list[Record] = []
    size = 0
    for record in records:
        if not 1 <= len(record[0]) <= MAX_PARTITION_KEY_CHARS:
            raise ValueError(
                f"partition key {record[0][:40]!r} has {len(record[0])} characters;"
                f" Kinesis allows 1 to {MAX_PARTITION_KEY_CHARS}"
            )
        rsize = record_size(record)
        if rsize > MAX_RECORD_BYTES:
            raise ValueError(
                f"record with partition key {record[0]!r} is {rsize} bytes; Kinesis allows 1 MiB"
            )
        if batch and (len(batch) == MAX_BATCH_RECORDS or size + rsize > MAX_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(record)
        size += rsize
    if batch:
        yield batch


def put_batch(kinesis: Any, stream: str, batch: list[Record]) -> list[tuple[Record, str]]:
    """One PutRecords call; returns the records Kinesis rejected with their error codes."""
    response = kinesis.put_records(
        StreamName=stream, Records=[{"PartitionKey": key, "Data": data} for key, data in batch]
    )
    if not response.get("FailedRecordCount"):
        return []
    return [
        (record, result["ErrorCode"])
        for record, result in zip(batch, response["Records"], strict=True)
        if "ErrorCode" in result
    ]


def put_records(kinesis: Any, stream: str, records: Sequence[Record]) -> int:
    """Write records with PutRecords, retrying the ones that fail; returns how many were written.

    A retried record lands after records sent later, so per-key order holds only when nothing fails:
    consumers order by event time, not arrival.
    """
    for batch in batches(records):
        pending = batch
        for attempt in range(PUT_ATTEMPTS):
            if attempt:
                time.sleep(min(PUT_BACKOFF_CAP_S, PUT_BACKOFF_S * 2 ** (attempt - 1)))
            failed = put_batch(kinesis, stream, pending)
            if not failed:
                break
            pending = [record for record, _ in failed]
            log.debug("PutRecords: %d of %d records failed, retrying", len(failed), len(batch))
        else:
            codes = sorted({code for _, code in failed})
            raise RuntimeError(
                f"PutRecords to {stream}: {len(pending)} records still failing after "
                f"{PUT_ATTEMPTS} attempts ({', '.join(codes)})"
            )
    return len(records)
