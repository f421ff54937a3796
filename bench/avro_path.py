"""The Avro events path of the bench: the main run's clicks again, as Avro events in the Confluent wire
format (`events.format: avro`, docs/avro.md), read by a fresh job from the same topic.

The clicks are the generator's (same seed, count and profile updates as the JSON run), encoded by
streamfold/avro_events.py, which registers the default file's events under `clicks-value` in the bench
stack's registry first. The job runs with a copy of the default pipeline file that says `format: avro`,
applied to the database for the run (as `streamfold setup` would: `run` checks the file it runs is the one
applied), then the default file again: nothing else differs from the JSON run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import pipeline_file as pf
from db import schema
from streamfold import avro_events

KAFKA_TOPIC_LINE = "  kafka_topic: clicks\n"


def pipeline_file(directory: Path) -> Path:
    """The default pipeline file with Avro events, written into `directory`."""
    text = pf.DEFAULT_PATH.read_text()
    if KAFKA_TOPIC_LINE not in text:
        raise RuntimeError(f"{pf.DEFAULT_PATH} has no line {KAFKA_TOPIC_LINE.strip()!r} to add the format to")
    path = directory / "avro-events.yaml"
    path.write_text(text.replace(KAFKA_TOPIC_LINE, f"{KAFKA_TOPIC_LINE}  format: avro\n"))
    return path


def encoder(path: Path) -> Callable[[dict[str, Any]], bytes]:
    """The file's events' encoder (registers their schema in the registry of STREAMFOLD_REGISTRY_URL)."""
    return avro_events.encoder(pf.load(path))


def job_env(path: Path) -> dict[str, str]:
    """What the Avro run's job needs besides the stack's variables: the file."""
    return {pf.PIPELINE_VAR: str(path)}


@contextmanager
def applied(admin_dsn: str, path: Path) -> Iterator[None]:
    """The file applied to the bench's database while the Avro run lasts, then the default file again (the
    later steps run with it)."""
    schema.apply(admin_dsn, pf.load(path))
    try:
        yield
    finally:
        schema.apply(admin_dsn, pf.load())
