"""Output versions (docs/reprocess.md): a version is a name; its job reads the same inputs as the live
pipeline and writes every output under the version's own names. The pure parts: the names, the lag that
decides whether a version has caught up, and the earliest start the retained input allows.

A version's names, from the pipeline file it was reprocessed with:
  pipeline name  <name>__<version>    (so its query, checkpoint folder, batch ledger rows, profile history
                                        table, history view and profile_at function are its own)
  tables         <table>__<version>   (the enriched table, each aggregate's table)
  topics         <topic>.<version>    (the enriched topic, the changelog, the dead letters, the aggregates)
The inputs keep theirs: the profile table, the CDC topic, connector, slot and publication, the events.

The names users' SQL reads (the enriched table's, each aggregate table's) become views over the current
version's tables at the first `streamfold swap`, which moves the live pipeline's tables to <table>__live
(moved_live); an installation that never swaps keeps them as tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from common import pipeline_file as pf
from common import plan

# The version every installation starts with: the pipeline's own, unversioned names.
LIVE = "live"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,15}$")
# A version has caught up when no input partition is more than this many records behind its end: a
# continuous job always trails the live end by the records of the micro-batch in flight.
CAUGHT_UP_RECORDS = 1000


class VersionError(ValueError):
    """A refused version command; the message says why and what to do."""


def check_name(version: str) -> str:
    if not _NAME.match(version) or "__" in version:
        raise VersionError(
            f"{version!r} is not a version name: a lower-case letter, then up to 15 of a-z, 0-9, _ "
            "(no double underscore)"
        )
    if version == LIVE:
        raise VersionError(f"{LIVE!r} is the name of the pipeline's own outputs: choose another")
    return version


def versioned(pipeline: pf.Pipeline, version: str) -> pf.Pipeline:
    """The pipeline with every output named for `version` (the module's docstring); the inputs unchanged.
    Raises VersionError when a name would pass a limit (a Postgres identifier has at most 63 characters)."""
    check_name(version)
    spec = pipeline.model_dump(mode="json")
    spec["name"] = f"{pipeline.name}__{version}"
    outputs, resolved = spec["outputs"], plan.of(pipeline)
    outputs["enriched"]["table"] = f"{resolved.enriched_table}__{version}"
    outputs["enriched"]["topic"] = f"{resolved.enriched_topic}.{version}"
    outputs["changelog_topic"] = f"{resolved.changelog_topic}.{version}"
    outputs["dead_letters_topic"] = f"{resolved.dead_letters_topic}.{version}"
    # The inputs, named explicitly: a default derived from the pipeline's name must not follow the new one.
    outputs["connector"], outputs["slot"], outputs["publication"] = (
        resolved.connector,
        resolved.slot,
        resolved.publication,
    )
    for given, aggregate in zip(spec["aggregates"], resolved.aggregates, strict=True):
        given["table"] = f"{aggregate.table}__{version}"
        given["topic"] = f"{aggregate.topic}.{version}"
    try:
        return pf.Pipeline.model_validate(spec)
    except ValueError as exc:
        raise VersionError(f"version {version!r}: a name it needs is too long or invalid: {exc}") from None


def moved_live(pipeline: pf.Pipeline) -> pf.Pipeline:
    """The live pipeline once a swap has made its users' table names views (db/versions.py): its tables are
    <table>__live. Its name, checkpoint, history and topics stay: the live job resumes where it was."""
    spec = pipeline.model_dump(mode="json")
    resolved = plan.of(pipeline)
    spec["outputs"]["enriched"]["table"] = f"{resolved.enriched_table}__{LIVE}"
    for given, aggregate in zip(spec["aggregates"], resolved.aggregates, strict=True):
        given["table"] = f"{aggregate.table}__{LIVE}"
    return pf.Pipeline.model_validate(spec)


def physical(live: pf.Pipeline, version: str, registered: pf.Pipeline | None) -> pf.Pipeline:
    """The pipeline whose tables `version` writes once a swap has moved the live tables: the live file's
    with <table>__live, or the version's registered file (`registered`, None for live)."""
    if version == LIVE:
        return moved_live(live)
    if registered is None:
        raise VersionError(f"no version {version!r} of {live.name}: `streamfold versions` lists them")
    return registered


def users_tables(pipeline: pf.Pipeline, version: str) -> dict[str, str]:
    """The names users' SQL reads -> the version's own tables: the enriched table and each aggregate's,
    whose names are the users' names with the version's suffix (versioned, moved_live)."""
    suffix, resolved = f"__{version}", plan.of(pipeline)
    tables = [resolved.enriched_table, *(a.table for a in resolved.aggregates)]
    return {table.removesuffix(suffix): table for table in tables if table.endswith(suffix)}


def query_name(pipeline: pf.Pipeline, source: str = "kafka") -> str:
    """The streaming query (checkpoint folder, batch ledger prefix) of a pipeline's job."""
    return f"{pipeline.name}-{source}"


# --- lag --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionLag:
    """A version's position on one input partition: a Kafka topic's partition or a Kinesis stream's shard."""

    topic: str  # the Kafka topic, or the Kinesis stream
    partition: int | str  # the Kafka partition, or the Kinesis shard id
    # Kafka: the next offset the job will process. Kinesis: the sequence number of the last record it
    # processed (None: none yet on that shard).
    processed: int | str | None
    behind: int  # the records after `processed`
    source: str = "kafka"  # or "kinesis"

    @classmethod
    def kafka(cls, topic: str, partition: int, processed: int, end: int) -> PartitionLag:
        """end: the partition's end offset (a job may have read past an end fetched earlier)."""
        return cls(topic, partition, processed, max(0, end - processed))

    @classmethod
    def kinesis(cls, stream: str, shard: str, processed: str | None, behind: int) -> PartitionLag:
        return cls(stream, shard, processed, behind, "kinesis")


@dataclass(frozen=True)
class Lag:
    """A version's position on its inputs; `partitions` is empty before its first committed batch."""

    partitions: tuple[PartitionLag, ...]

    @property
    def behind(self) -> int:
        return sum(p.behind for p in self.partitions)

    @property
    def worst(self) -> PartitionLag | None:
        return max(self.partitions, key=lambda p: p.behind, default=None)

    def caught_up(self, threshold: int = CAUGHT_UP_RECORDS) -> bool:
        """Every input partition within `threshold` records of its end, after at least one batch."""
        return bool(self.partitions) and all(p.behind <= threshold for p in self.partitions)

    def describe(self) -> str:
        worst = self.worst
        if worst is None:
            return "no batch committed yet"
        return (
            f"{self.behind} records behind in all, at most {worst.behind} on {worst.topic}[{worst.partition}]"
        )


# --- Kafka consumers across a swap ---------------------------------------------------------------------

# The events are stamped by their producers' clocks, a version's output records by its job's: consumers of
# the new version's topics start this much earlier, for the skew between them.
CLOCK_MARGIN_MS = 60_000


def consumers_from_ms(
    old: Lag, unread_ms: dict[tuple[str, int | str], int | None], now_ms: int, max_wait_ms: int
) -> int | None:
    """Where the consumers of the new version's topics start so as to miss nothing the old version had not
    written when the swap happened (docs/reprocess.md "Kafka consumers across a swap"): its next input
    record's timestamp on each partition it had not read to the end (`unread_ms`, by (topic, partition);
    by (stream, shard) a Kinesis record's ApproximateArrivalTimestamp; now where it had), the earliest,
    less its join.max_wait (how long a click may wait in its join) and CLOCK_MARGIN_MS. The new version
    writes every later event at or after its input's timestamp. None (the topics' beginning) when the old
    version never committed a batch or a next record could not be read."""
    if not old.partitions:
        return None
    unread = [unread_ms.get((p.topic, p.partition)) for p in old.partitions if p.behind > 0]
    if None in unread:
        return None
    return min([now_ms, *(t for t in unread if t is not None)]) - max_wait_ms - CLOCK_MARGIN_MS


# --- refusals ---------------------------------------------------------------------------------------------


def check_known(name: str, known: bool, pipeline: str) -> None:
    if name != LIVE and not known:
        raise VersionError(f"no version {name!r} of {pipeline}: `streamfold versions` lists them")


def check_swap(name: str, current: str, lag: Lag, threshold: int = CAUGHT_UP_RECORDS) -> None:
    """A swap to `name` (known), with `current` the version users' names read now."""
    if name == current:
        raise VersionError(f"{name!r} is the current version already")
    if not lag.caught_up(threshold):
        raise VersionError(
            f"{name!r} is still catching up ({lag.describe()}); swap once every input partition is "
            f"within {threshold} records of its end (`streamfold versions`)"
        )


def check_drop(name: str, current: str) -> None:
    if name == current:
        raise VersionError(f"{name!r} is the current version: swap to another before dropping it")
    if name == LIVE:
        raise VersionError(f"{LIVE!r} is the pipeline's own job and outputs: it is never dropped")


# --- retention --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Retained:
    """A partition's earliest retained record: its offset, and its timestamp (None: an empty partition)."""

    partition: int
    low: int
    first_ms: int | None


def earliest_start_ms(partitions: Iterable[Retained]) -> int | None:
    """The earliest time a reprocess may start from without missing an event: the newest first-retained
    timestamp among the partitions that lost records (low offset > 0); None when none has lost any."""
    lost = [p.first_ms for p in partitions if p.low > 0 and p.first_ms is not None]
    return max(lost, default=None)


HOUR_MS = 3_600_000


def stream_earliest_ms(created_ms: int, retention_hours: int, now_ms: int) -> int | None:
    """The earliest time a reprocess may start from on a Kinesis stream (DescribeStreamSummary's
    StreamCreationTimestamp and RetentionPeriodHours): None while the stream is younger than its retention
    (it lost nothing); else now less the retention, since Kinesis makes older records inaccessible. A
    retention raised later is taken as if it had always been (the API does not say when it changed)."""
    horizon = now_ms - retention_hours * HOUR_MS
    return horizon if horizon > created_ms else None


def check_start(from_ms: int | None, earliest_ms: int | None, source: str) -> None:
    """Refuses a start time before what the events topic or stream `source` retains (`earliest_ms`:
    earliest_start_ms, stream_earliest_ms; None: it lost nothing). None (--from earliest) is every event
    it retains, whatever that is: never refused."""
    if from_ms is not None and earliest_ms is not None and from_ms < earliest_ms:
        raise VersionError(
            f"--from {pf_time(from_ms)} is before what {source} retains: the earliest possible start is "
            f"{pf_time(earliest_ms)} (--from {pf_time(earliest_ms)}, or --from earliest)"
        )


def pf_time(ms: int) -> str:
    """An epoch-ms time as ISO-8601 UTC, as --from takes it."""
    import datetime as dt

    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def parse_from(text: str) -> int | None:
    """--from: `earliest` (None) or an ISO-8601 time (UTC unless it names its zone) -> epoch ms."""
    import datetime as dt

    if text == "earliest":
        return None
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise VersionError(f"--from takes `earliest` or an ISO-8601 time, got {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp() * 1000)
