"""PutRecords request splitting in common.kinesis."""

from __future__ import annotations

import pytest

from common.kinesis import (
    MAX_BATCH_BYTES,
    MAX_BATCH_RECORDS,
    MAX_PARTITION_KEY_CHARS,
    MAX_RECORD_BYTES,
    batches,
)


def test_batches_hold_at_most_500_records_in_order() -> None:
    records = [(f"k{i}", b"x") for i in range(1201)]
    split = list(batches(records))
    assert [len(b) for b in split] == [MAX_BATCH_RECORDS, MAX_BATCH_RECORDS, 201]
    assert [r for b in split for r in b] == records


def test_batches_stay_under_5_mib() -> None:
    record = ("k", b"x" * (MAX_RECORD_BYTES - 1))
    split = list(batches([record] * 12))
    assert [len(b) for b in split] == [5, 5, 2]
    assert all(sum(len(k) + len(d) for k, d in b) <= MAX_BATCH_BYTES for b in split)


def test_oversized_record_is_refused() -> None:
    with pytest.raises(ValueError, match="1 MiB"):
        list(batches([("k", b"x" * MAX_RECORD_BYTES)]))


@pytest.mark.parametrize("key", ["", "é" * (MAX_PARTITION_KEY_CHARS + 1)])
def test_partition_key_outside_kinesis_limits_is_refused(key: str) -> None:
    # The writers' client leaves botocore's parameter checks out: this is where such a key stops.
    with pytest.raises(ValueError, match="1 to 256"):
        list(batches([("ok", b"x"), (key, b"x")]))


def test_partition_key_of_256_characters_is_taken() -> None:
    record = ("é" * MAX_PARTITION_KEY_CHARS, b"x")
    assert list(batches([record])) == [[record]]


def test_no_records_no_batches() -> None:
    assert list(batches([])) == []
