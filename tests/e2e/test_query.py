"""`streamfold query`: the reader's tables, and nothing but reading."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from decimal import Decimal

import psycopg
import pytest

from common import config
from common import pipeline_file as pf
from db import queries

pytestmark = pytest.mark.e2e


def read(reader: str, statement: str) -> tuple[list[str], list[tuple]]:
    with queries.rows(reader, statement) as (columns, rows):
        return columns, list(rows)


def test_query_reads_named_and_free_sql(streamfold_setup) -> None:
    reader = streamfold_setup.reader_dsn
    columns, _ = read(reader, queries.resolve(pf.load(), "clicks_per_region"))
    assert columns == ["region", "clicks"]
    assert read(reader, "SELECT 40 + 2 AS answer") == (["answer"], [(42,)])


@pytest.mark.parametrize(
    "statement",
    [
        # Any role may set its own session defaults: only the read-only transaction stops it.
        f"COMMIT; ALTER ROLE {config.READER_ROLE} SET statement_timeout = '42s'",
        f"ALTER ROLE {config.READER_ROLE} SET statement_timeout = '42s'",
        "CREATE TEMP TABLE t AS SELECT 1",
    ],
)
def test_query_never_writes(streamfold_setup, pg, statement: str) -> None:
    with pytest.raises(psycopg.Error):
        read(streamfold_setup.reader_dsn, statement)
    (settings,) = pg.execute(
        "SELECT rolconfig FROM pg_roles WHERE rolname = %s", (config.READER_ROLE,)
    ).fetchone()
    assert settings == ["statement_timeout=60s"]  # setup's, not the statement's 42s


def query(*args: str, stdout: int | None = subprocess.PIPE) -> tuple[subprocess.CompletedProcess, int]:
    """`streamfold query ARGS` and its peak resident memory in KiB (measured by a parent of its own, the
    only child that parent waits for)."""
    measure = (
        "import resource, subprocess, sys; "
        "code = subprocess.call([sys.executable, '-m', 'streamfold', 'query', *sys.argv[1:]]); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", measure, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=1800
    )
    return done, int(done.stderr.strip().splitlines()[-1])


MILLIONS = "SELECT n, n * 2 AS twice, 'row ' || n AS label FROM generate_series(1, 5000000) AS n"


def test_a_huge_result_prints_its_first_rows_in_bounded_memory(streamfold_setup) -> None:
    done, peak_kib = query(MILLIONS)
    assert done.returncode == 0, done.stderr
    assert "row 1 " in done.stdout and "row 1000 " in done.stdout and "row 1001 " not in done.stdout
    assert "(first 1000 rows; --limit 0 for all)" in done.stderr
    assert peak_kib < 300 * 1024, f"peak RSS {peak_kib} KiB"


def test_csv_streams_every_row_in_bounded_memory(streamfold_setup, tmp_path) -> None:
    out = tmp_path / "rows.csv"
    with out.open("w") as handle:
        done, peak_kib = query("--format", "csv", MILLIONS, stdout=handle)
    assert done.returncode == 0, done.stderr
    assert peak_kib < 300 * 1024, f"peak RSS {peak_kib} KiB"
    with out.open(newline="") as handle:
        reader = csv.reader(handle)
        assert next(reader) == ["n", "twice", "label"]
        count = 0
        for count, row in enumerate(reader, start=1):
            assert row == [str(count), str(2 * count), f"row {count}"]
    assert count == 5_000_000
    assert "(5000000 rows)" in done.stderr


def test_json_lines_and_limit_parse_back(streamfold_setup) -> None:
    sql = "SELECT n, n::numeric / 4 AS quarter, NULL::text AS nothing FROM generate_series(1, 10) AS n"
    done, _ = query("--format", "json", "--limit", "3", sql)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["n"], Decimal(r["quarter"]), r["nothing"]) for r in rows] == [
        (n, Decimal(n) / 4, None) for n in (1, 2, 3)
    ]  # a numeric as its exact text
    assert "(first 3 rows; --limit 0 for all)" in done.stderr


def test_timeout_ends_a_query(streamfold_setup) -> None:
    done, _ = query("--timeout", "1s", "SELECT pg_sleep(600)")
    assert done.returncode == 1
    assert "statement timeout" in done.stderr
