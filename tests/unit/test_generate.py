"""The click generator's concurrent Kinesis sender: every record once, bounded in flight, errors raised."""

from __future__ import annotations

import threading

import pytest

from streamfold.generate import _put_batches


def records(n: int) -> list[tuple[str, bytes]]:
    return [(str(i), str(i).encode()) for i in range(n)]


def test_every_record_is_put_once_in_batches_of_the_size() -> None:
    seen: list[tuple[str, bytes]] = []
    sizes: list[int] = []
    lock = threading.Lock()

    def put(batch: list[tuple[str, bytes]]) -> int:
        with lock:
            seen.extend(batch)
            sizes.append(len(batch))
        return len(batch)

    done = list(_put_batches(iter(records(1234)), put, senders=3, size=100))
    assert sorted(seen) == sorted(records(1234))
    assert sorted(done) == sorted(sizes) and sum(done) == 1234
    assert sorted(sizes) == [34] + [100] * 12


def test_the_senders_run_at_once_and_no_more() -> None:
    running = peak = 0
    lock = threading.Lock()
    # The first 4 puts meet here: with fewer than 4 running at once the barrier breaks (its timeout).
    first_round = threading.Barrier(4, timeout=30)

    def put(batch: list[tuple[str, bytes]]) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        if int(batch[0][0]) < 200:
            first_round.wait()
        with lock:
            running -= 1
        return len(batch)

    assert sum(_put_batches(iter(records(2000)), put, senders=4, size=50)) == 2000
    assert peak == 4


def test_a_failed_put_is_raised() -> None:
    def put(batch: list[tuple[str, bytes]]) -> int:
        if batch[0][0] == "200":
            raise RuntimeError("PutRecords to clicks: 100 records still failing")
        return len(batch)

    with pytest.raises(RuntimeError, match="still failing"):
        list(_put_batches(iter(records(1000)), put, senders=2, size=100))
