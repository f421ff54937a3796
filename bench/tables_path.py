"""The three-table path of the bench: the main run's clicks joined with three tables, shaped like
examples/parcels/ (a profile, a table chained through a foreign key of the profile, and an independent
lookup on an event field), by a fresh job of a pipeline file of its own on the same stack.

The file is the default pipeline with two more tables and nothing else changed but names: its profile
table holds the users (public.users' columns) and a foreign key `plan_id` of a plan in a chained table of
plans; each click carries a `page_id`, the key of a page in a lookup table of pages. Its own connector,
slot, CDC topic and outputs run beside the default file's; it reads the same `clicks` topic. `streamfold
generate` fills the tables (keys 1..users, 1..users/10, 1..users/100, every foreign key and page_id drawn
among existing keys), and the clicks come from the same generator (its seed and count, a page drawn for
each click besides) with as many profile updates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import yaml

from common import config
from common import pipeline_file as pf
from connectors.setup import run_setup

NAME = "clicks_tables"
# The tables: the profile (the users with a plan), the chained plans and the looked-up pages.
PROFILE_TABLE = "public.bench_users"
PLANS_TABLE = "public.bench_plans"
PAGES_TABLE = "public.bench_pages"
FOREIGN_KEY = "plan_id"  # a column of the profile: the key of the user's plan
LOOKUP_FIELD = "page_id"  # a field of each click: the key of its page
# The profile keeps public.users' columns (its PII too, which stays behind): the same rows as the main run's.
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {PROFILE_TABLE} (LIKE public.users INCLUDING ALL, {FOREIGN_KEY} bigint)",
    f"CREATE TABLE IF NOT EXISTS {PLANS_TABLE} (id bigint PRIMARY KEY, tier text, seats integer)",
    f"CREATE TABLE IF NOT EXISTS {PAGES_TABLE} (id bigint PRIMARY KEY, section text, title text)",
)
TABLES = {
    "plan": {
        "table": PLANS_TABLE,
        "key": "id",
        "key_type": "bigint",
        "columns": {"tier": {"type": "text"}, "seats": {"type": "integer"}},
        "join_on": f"profile.{FOREIGN_KEY}",
    },
    "page": {
        "table": PAGES_TABLE,
        "key": "id",
        "key_type": "bigint",
        "columns": {"section": {"type": "text"}, "title": {"type": "text"}},
        "join_on": f"event.{LOOKUP_FIELD}",
    },
}
SAMPLES = {
    "tier": ["free", "pro", "team", "enterprise"],
    "section": ["home", "news", "shop", "video", "help"],
}


def own(name: str) -> str:
    """An output name of the default file, made the three-table file's own."""
    return f"{name}_tables"


def spec() -> dict[str, Any]:
    """The default pipeline file with the two further tables, the foreign key and the lookup field, and
    outputs of its own (a connector, a slot, a CDC topic, sink tables and topics)."""
    spec = pf.load(pf.DEFAULT_PATH).model_dump(mode="json", exclude_defaults=True)
    spec["profile"]["table"] = PROFILE_TABLE
    spec["profile"]["columns"][FOREIGN_KEY] = {"type": "bigint"}
    spec["events"]["fields"][LOOKUP_FIELD] = {"type": "bigint"}
    outputs, enriched = spec["outputs"], spec["outputs"]["enriched"]
    outputs.update(
        cdc_topic_prefix=own("cdc"),
        connector="streamfold-bench-tables",
        slot="streamfold_bench_tables",
        publication="streamfold_bench_tables",
        changelog_topic=own(outputs["changelog_topic"]),
        dead_letters_topic=own(outputs["dead_letters_topic"]),
    )
    enriched.update(table=own(enriched["table"]), topic=own(enriched["topic"]))
    for aggregate in spec["aggregates"]:
        aggregate.update(name=own(aggregate["name"]), table=own(aggregate["table"]))
    spec["sample"]["values"].update(SAMPLES)
    del spec["name"]
    return {"name": NAME, "profile": spec.pop("profile"), "tables": TABLES, **spec}  # in the file's order


def pipeline_file(directory: Path) -> Path:
    """The three-table pipeline file, written into `directory`."""
    path = directory / "three-tables.yaml"
    path.write_text(yaml.safe_dump(spec(), sort_keys=False))
    return path


def set_up(settings: config.Settings, pipeline: pf.Pipeline, echo: Callable[[str], None]) -> None:
    """The tables created, then `streamfold setup` of the file: its connector captures the three tables
    through its own slot, into its one CDC topic."""
    with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
        for statement in SCHEMA:
            conn.execute(statement)
    run_setup(dataclasses.replace(settings, pipeline=pipeline), echo=echo)


def job_env(path: Path) -> dict[str, str]:
    """What the three-table run's job needs besides the stack's variables: the file."""
    return {pf.PIPELINE_VAR: str(path)}


def per_million_rows_mb(state_bytes: float, table_rows: int) -> float:
    """MB (10^6 bytes, the target's unit) of join state per 1,000,000 rows of all the tables."""
    return round(state_bytes / table_rows, 1)
