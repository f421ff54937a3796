"""`streamfold query`: the reader's tables, and nothing but reading."""

from __future__ import annotations

import psycopg
import pytest

from common import config
from common import pipeline_file as pf
from db import queries

pytestmark = pytest.mark.e2e


def test_query_reads_named_and_free_sql(streamfold_setup) -> None:
    reader = streamfold_setup.reader_dsn
    columns, _ = queries.run(reader, queries.resolve(pf.load(), "clicks_per_region"))
    assert columns == ["region", "clicks"]
    assert queries.run(reader, "SELECT 40 + 2 AS answer") == (["answer"], [(42,)])


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
        queries.run(streamfold_setup.reader_dsn, statement)
    (settings,) = pg.execute(
        "SELECT rolconfig FROM pg_roles WHERE rolname = %s", (config.READER_ROLE,)
    ).fetchone()
    assert not settings
