"""`streamfold check` holds every table of a `tables:` file against the database (db/introspect.py), not
only the profile: the three-table example's tables in a throwaway database, then one mistake at a time in
the sender or the depot table, each reported as one line with its place in the file and the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from tests.e2e.test_own_pipeline import database
from tests.e2e.test_several_tables_join import EXAMPLE

pytestmark = pytest.mark.e2e

__all__ = ["database"]  # the fixture, shared with the own pipeline's tests


def check(dsn: str, file: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamfold", "--pipeline", str(file), "check"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "STREAMFOLD_PG_DSN": dsn, "COLUMNS": "400"},
    )


def line_of(file: Path, text: str, after: str) -> int:
    """The line number of the first line holding `text` after the first holding `after`."""
    lines = file.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i, line in enumerate(lines) if i > start and text in line) + 1


@pytest.mark.parametrize(
    ("damage", "place", "message"),
    [
        (
            "ALTER TABLE public.senders DROP COLUMN tier",
            ("tier: text", "sender:"),
            "tables.sender.columns.tier: public.senders has no column tier; its columns: id, country, email",
        ),
        (
            "ALTER TABLE public.depots ALTER COLUMN region TYPE integer USING 0",
            ("region:", "depot:"),
            "tables.depot.columns.region: declared text, but public.depots.region is integer: declare it as "
            "integer",
        ),
        (
            "ALTER TABLE public.depots DROP CONSTRAINT depots_pkey",
            ("key: code", "depot:"),
            "tables.depot.key: code is not the primary key of public.depots and has no unique index of its "
            "own: name the primary key, or add one (CREATE UNIQUE INDEX ON public.depots (code))",
        ),
        (
            "ALTER TABLE public.senders RENAME TO sender",
            ("table: public.senders", "sender:"),
            "tables.sender.table: no table public.senders in this database (did you mean public.sender?)",
        ),
    ],
)
def test_check_holds_the_sender_and_depot_tables_against_the_database(
    database: str, damage: str, place: tuple[str, str], message: str
) -> None:
    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute((EXAMPLE / "schema.sql").read_text())
    file = EXAMPLE / "pipeline.yaml"
    fine = check(database, file)
    assert fine.returncode == 0 and "ok pipeline scans" in fine.stderr, fine.stderr[-3000:]

    with psycopg.connect(database, autocommit=True) as conn:
        conn.execute(damage)
    refused = check(database, file)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert refused.stderr.strip() == f"error: {file}:{line_of(file, *place)}: {message}"
