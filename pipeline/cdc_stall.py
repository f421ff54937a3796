"""Says plainly in the job's log when CDC progress stalls while join.max_wait releases events without it.

CDC progress is what the join waits for: the newest Debezium commit time (a change, or a heartbeat every
200 ms) the job has read, capped as pipeline/cdc_fold.py caps it. The query measures it per micro-batch,
the largest progress_ms among the batch's CDC rows (pipeline/temporal_join.py, CDC_PROGRESS_METRIC), and
the sink reads it from the batch before (the query's last progress) together with its own count of the
events join.max_wait released (pipeline/sinks.py).

A stall is CDC progress that has not advanced for longer than join.max_wait while events are released by
it. It is said once as a WARNING when it begins, again every REPEAT_MS while it lasts, and once as an
INFO line when progress advances again: a batch line every half second must not bury it, nor repeat it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

REPEAT_MS = 5 * 60_000
CHECK = (
    "likely the Debezium connector is stopped, paused or failed, Kafka Connect is down, or the replication "
    "slot was invalidated (wal_status lost); check `streamfold status` (connector, replication slot)"
)


@dataclass(frozen=True)
class Notice:
    """A line for the job's log: its level (logging.WARNING or logging.INFO) and text."""

    level: int
    text: str


class CdcStall:
    """Follows CDC progress batch by batch; `batch` returns the line to log, if any."""

    def __init__(
        self,
        topic: str,
        max_wait_ms: int,
        started_ms: int,
        repeat_ms: int = REPEAT_MS,
        cause: Callable[[], str | None] = lambda: None,
    ) -> None:
        """cause: the stall's known cause, when there is one (a capture that was lost, db/capture.py)."""
        self.topic = topic
        self.cause = cause
        self.max_wait_ms = max_wait_ms
        self.repeat_ms = repeat_ms
        self.started_ms = started_ms
        self.progress_ms: int | None = None  # the newest CDC progress read since the job started
        self.advanced_ms = started_ms  # when it last advanced (wall clock)
        self.stalled_ms: int | None = None  # when the stall was first said; None while CDC flows
        self.warned_ms = 0
        self.released = 0  # events released by join.max_wait since the stall began

    @property
    def stalled(self) -> bool:
        return self.stalled_ms is not None

    def batch(self, now_ms: int, progress_ms: int | None, released: int) -> Notice | None:
        """One micro-batch: the CDC progress the query last measured (None: no CDC row in that batch) and
        the events this batch released by join.max_wait."""
        if progress_ms is not None and (self.progress_ms is None or progress_ms > self.progress_ms):
            still_ms = now_ms - self.advanced_ms
            self.progress_ms, self.advanced_ms = progress_ms, now_ms
            return self._recovered(still_ms) if self.stalled else None
        if self.stalled:
            self.released += released
            if now_ms - self.warned_ms < self.repeat_ms:
                return None
        elif released == 0 or now_ms - self.advanced_ms <= self.max_wait_ms:
            return None
        else:
            self.stalled_ms, self.released = now_ms, released
        self.warned_ms = now_ms
        return Notice(logging.WARNING, self._warning(now_ms))

    def _warning(self, now_ms: int) -> str:
        return (
            f"CDC stalled: progress on {self.topic} has not advanced for {seconds(now_ms - self.advanced_ms)}"
            f" ({self._newest(now_ms)}); {self.released} events released by join.max_wait "
            f"({seconds(self.max_wait_ms)}) without it, marked profile_complete = false; "
            f"{self.cause() or CHECK}"
        )

    def _newest(self, now_ms: int) -> str:
        if self.progress_ms is None:
            return f"none read since the job started {seconds(now_ms - self.started_ms)} ago"
        at = datetime.fromtimestamp(self.progress_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        return f"newest commit time read {at}, {seconds(now_ms - self.progress_ms)} ago"

    def _recovered(self, still_ms: int) -> Notice:
        text = (
            f"CDC progress on {self.topic} advances again after {seconds(still_ms)} stalled; {self.released} "
            "events were released by join.max_wait meanwhile (profile_complete = false)"
        )
        self.stalled_ms, self.released = None, 0
        return Notice(logging.INFO, text)


def seconds(ms: int) -> str:
    """A duration a person reads: `42 s`, `3 min 05 s`, `2 h 07 min`."""
    total = max(0, ms) // 1000
    if total < 60:
        return f"{total} s"
    if total < 3600:
        return f"{total // 60} min {total % 60:02d} s"
    return f"{total // 3600} h {total % 3600 // 60:02d} min"
