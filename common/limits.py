"""Limits of the default pipeline's contract (docs/contracts.md), defined once: the job's default specs
(pipeline/events.py, pipeline/cdc_fold.py) and the reference models (spec/) both read them."""

from __future__ import annotations

# A key or a profile column Postgres indexes (an aggregate's key) longer than this, in UTF-8, is a dead
# letter: Postgres indexes them (the enriched table's (key, time), an aggregate's key) and a B-tree row holds
# ~2.7 KB, so a much longer one would fail its batch's COPY at every restart.
MAX_KEY_BYTES = 1024
# Device clocks drift a little; an event stamped further ahead of the time its record reached the source
# (Kafka's record timestamp, Kinesis's arrival time) is bogus (and would hold back `--once`, which waits
# for the watermark to pass every click).
MAX_FUTURE_MS = 60 * 1000
