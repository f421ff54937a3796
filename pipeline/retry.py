"""Waiting out a dependency's outage: retry a call with backoff for a bounded time, one log line a try.

Used by the sinks (Postgres, Kafka) and the Kinesis source, so an outage of any of them stalls the job
instead of failing it, for up to STREAMFOLD_SINK_RETRY_S seconds (default 900).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)

# How long a call keeps retrying through an outage before the query fails. The name says "sink" because
# the sinks had it first; it covers the Kinesis source too.
DEFAULT_RETRY_S = 900.0
RETRY_ENV = "STREAMFOLD_SINK_RETRY_S"

R = TypeVar("R")


def retry_budget_s() -> float:
    return float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_S))


def retrying(
    what: str,
    attempt: Callable[[], R],
    transient: tuple[type[BaseException], ...],
    budget_s: float,
    sleep: Callable[[float], None] = time.sleep,
    first_delay_s: float = 1.0,
    max_delay_s: float = 15.0,
) -> R:
    """attempt() until it returns; on a transient error wait (1, 2, 4 ... max_delay_s s) and try again,
    for up to budget_s seconds in all, then raise the last error."""
    deadline = time.monotonic() + budget_s
    delay = first_delay_s
    while True:
        try:
            return attempt()
        except transient as error:
            left = deadline - time.monotonic()
            if left <= 0:
                log.error("%s unavailable (%s): giving up after %.0f s", what, one_line(error), budget_s)
                raise
            wait = min(delay, max_delay_s, left)
            log.warning("%s unavailable (%s), retrying in %.0fs", what, one_line(error), wait)
            sleep(wait)
            delay = min(delay * 2, max_delay_s)


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text[:200]}"
