"""What the profile history costs the sink, and its readers: insert-only rows (valid_to derived by lead() in a
view, the design taken) against updating the previous version's valid_to in the same transaction
(docs/decisions/profile-history.md).

Runs on a PostgreSQL of its own (the local stack's service, in a temporary home). Both tables start with the
same versions (KEYS keys, VERSIONS_PER_KEY each); then each design lands the same batches of changes to
random keys, each batch in one transaction as a partition lands it (COPY into a staging table, then the
statements), and the median batch time is reported. Then "profile of K at T" is timed both ways, for a key
with a few versions and a key with thousands.

    .venv/bin/python -m bench.history_cost
"""

from __future__ import annotations

import json
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from stack import lifecycle
from stack.home import open_stack

KEYS = 100_000
VERSIONS_PER_KEY = 10
BATCHES = 200
CHANGES_PER_BATCH = 200  # a partition's changes in a busy batch (the demo changes a profile every few clicks)
LONG_HISTORY = 5_000
READS = 500

COLUMNS = (
    "userid text, valid_from timestamptz, lsn bigint, op text, incomplete text, regionid text, gender text"
)
KEY = "PRIMARY KEY (userid, valid_from, lsn)"
SET = (
    "op = excluded.op, incomplete = excluded.incomplete, regionid = excluded.regionid, "
    "gender = excluded.gender"
)
NAMES = "userid, valid_from, lsn, op, incomplete, regionid, gender"

INSERT_ONLY = (
    f"INSERT INTO insert_only ({NAMES}) SELECT {NAMES} FROM staging ON CONFLICT (userid, valid_from, lsn) "
    f"DO UPDATE SET {SET}"
)
# The batch's own versions end each other; the key's open version ends where the batch's first one begins.
UPDATE_PREVIOUS = (
    "UPDATE with_valid_to h SET valid_to = s.valid_from FROM"
    " (SELECT DISTINCT ON (userid) userid, valid_from FROM staging ORDER BY userid, valid_from, lsn) s"
    " WHERE h.userid = s.userid AND h.valid_to IS NULL AND h.valid_from < s.valid_from;"
    f" INSERT INTO with_valid_to ({NAMES}, valid_to) SELECT {NAMES},"
    " lead(valid_from) OVER (PARTITION BY userid ORDER BY valid_from, lsn) FROM staging"
    f" ON CONFLICT (userid, valid_from, lsn) DO UPDATE SET {SET}"
)
AT_LEAD = (
    "SELECT * FROM (SELECT h.*, lead(valid_from) OVER (PARTITION BY userid ORDER BY valid_from, lsn)"
    " AS valid_to FROM insert_only h) v"
    " WHERE userid = %(k)s AND valid_from <= %(t)s AND (valid_to IS NULL OR valid_to > %(t)s)"
)
AT_STORED = (
    "SELECT * FROM with_valid_to WHERE userid = %(k)s AND valid_from <= %(t)s"
    " AND (valid_to IS NULL OR valid_to > %(t)s)"
)


@contextmanager
def postgres() -> Iterator[str]:
    home = Path(tempfile.mkdtemp(prefix="streamfold-history-cost-"))
    home.chmod(0o755)  # as root, the postgres OS user must reach its data folder
    try:
        lifecycle.start_service(home, "postgres")
        yield open_stack(home).env()["STREAMFOLD_PG_DSN"]
    finally:
        lifecycle.down(home)
        shutil.rmtree(home, ignore_errors=True)


def csv(rows: list[tuple]) -> bytes:
    return "".join(",".join(str(v) for v in row) + "\n" for row in rows).encode()


def at(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}+00"


def preload(conn: psycopg.Connection) -> int:
    """Both tables with the same versions; returns the next lsn."""
    conn.execute(f"CREATE TABLE insert_only ({COLUMNS}, {KEY})")
    conn.execute(f"CREATE TABLE with_valid_to ({COLUMNS}, valid_to timestamptz, {KEY})")
    conn.execute(f"CREATE TEMP TABLE staging ({COLUMNS}) ON COMMIT DELETE ROWS")
    rows, lsn = [], 0
    for k in range(KEYS):
        for v in range(VERSIONS_PER_KEY):
            lsn += 1
            rows.append((f"User_{k}", at(1_000_000 * v + k), lsn, "u", "", f"Region_{v}", "F"))
    data = csv(rows)
    with conn.cursor().copy(f"COPY insert_only ({NAMES}) FROM STDIN (FORMAT csv)") as copy:
        copy.write(data)
    conn.execute(
        f"INSERT INTO with_valid_to SELECT {NAMES}, lead(valid_from) OVER (PARTITION BY userid"
        " ORDER BY valid_from, lsn) FROM insert_only"
    )
    conn.execute("ANALYZE insert_only; ANALYZE with_valid_to")
    conn.commit()
    return lsn + 1


def batches(first_lsn: int, rng: random.Random) -> list[bytes]:
    out, lsn, now = [], first_lsn, 1_000_000 * VERSIONS_PER_KEY
    for _ in range(BATCHES):
        rows = []
        for _ in range(CHANGES_PER_BATCH):
            now += 1
            rows.append((f"User_{rng.randrange(KEYS)}", at(now), lsn, "u", "", f"Region_{lsn % 50}", "M"))
            lsn += 1
        out.append(csv(rows))
    return out


def land(conn: psycopg.Connection, data: list[bytes], statement: str) -> list[float]:
    """Each batch in one transaction: COPY into the staging table, then the statement; seconds each."""
    took = []
    for batch in data:
        started = time.perf_counter()
        with conn.cursor().copy(f"COPY staging ({NAMES}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(batch)
        conn.execute(statement)
        conn.commit()
        took.append(time.perf_counter() - started)
    return took


def long_history(conn: psycopg.Connection, lsn: int) -> None:
    rows = [("Long", at(10 * v), lsn + v, "u", "", f"R{v}", "F") for v in range(LONG_HISTORY)]
    for table in ("insert_only", "with_valid_to"):
        with conn.cursor().copy(f"COPY staging ({NAMES}) FROM STDIN (FORMAT csv)") as copy:
            copy.write(csv(rows))
        end = ", lead(valid_from) OVER (ORDER BY valid_from, lsn)" if table == "with_valid_to" else ""
        conn.execute(f"INSERT INTO {table} SELECT {NAMES}{end} FROM staging")
        conn.commit()


def read_ms(conn: psycopg.Connection, sql: str, key: Callable[[random.Random], tuple[str, str]]) -> float:
    rng, took = random.Random(1), []
    for _ in range(READS):
        k, t = key(rng)
        started = time.perf_counter()
        assert len(conn.execute(sql, {"k": k, "t": t}).fetchall()) == 1
        took.append(time.perf_counter() - started)
    return round(statistics.median(took) * 1000, 3)


def main() -> None:
    with postgres() as dsn, psycopg.connect(dsn) as conn:
        lsn = preload(conn)
        data = batches(lsn, random.Random(7))
        lsn += BATCHES * CHANGES_PER_BATCH
        # Alternate the designs batch by batch, so the machine's load weighs on both alike.
        insert_only, update_previous = [], []
        for batch in data:
            insert_only += land(conn, [batch], INSERT_ONLY)
            update_previous += land(conn, [batch], UPDATE_PREVIOUS)
        long_history(conn, lsn)

        def few(rng: random.Random) -> tuple[str, str]:  # after each key's first version
            return f"User_{rng.randrange(KEYS)}", at(rng.randrange(KEYS, 1_000_000 * VERSIONS_PER_KEY))

        def many(rng: random.Random) -> tuple[str, str]:
            return "Long", at(rng.randrange(10 * LONG_HISTORY))

        per_version = 1e6 / CHANGES_PER_BATCH
        print(
            json.dumps(
                {
                    "preloaded_versions": KEYS * VERSIONS_PER_KEY,
                    "batch": CHANGES_PER_BATCH,
                    "insert_only_batch_ms": round(statistics.median(insert_only) * 1000, 2),
                    "update_previous_batch_ms": round(statistics.median(update_previous) * 1000, 2),
                    "insert_only_us_per_version": round(statistics.median(insert_only) * per_version, 1),
                    "update_previous_us_per_version": round(
                        statistics.median(update_previous) * per_version, 1
                    ),
                    "at_ms_10_versions_lead": read_ms(conn, AT_LEAD, few),
                    "at_ms_10_versions_stored": read_ms(conn, AT_STORED, few),
                    f"at_ms_{LONG_HISTORY}_versions_lead": read_ms(conn, AT_LEAD, many),
                    f"at_ms_{LONG_HISTORY}_versions_stored": read_ms(conn, AT_STORED, many),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
