"""The aggregates: total clicks per region and per URL x region.

A partition's totals are computed once, from the same Arrow table that is COPYed into
streamfold.enriched_clicks (`batch_totals`), and upserted in the same transaction (`upsert_totals`),
so Postgres folds a few thousand totals instead of every row. The partitions of a batch commit
concurrently, so every upsert touches its keys in sorted order (no deadlock between them). When a
partition holds clicks that are already in enriched_clicks (a topic reprocessed under a new
checkpoint), `insert_and_aggregate` inserts only the new rows and folds the totals from the rows
that insert actually added (`RETURNING`). Either way the totals equal the sum over
`streamfold.enriched_clicks`.

url_region_click_count is keyed by (md5(url), region) (`url_md5`, a generated column), so a URL of any
length fits the btree; `url` holds the full URL.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv

from common import names


@dataclass(frozen=True)
class Totals:
    """(region, clicks) and (url, region, clicks): a batch's sums, or the current totals of some keys."""

    regions: list[tuple[str, int]]
    url_regions: list[tuple[str, str, int]]
    # batch_totals keeps its (url, region, clicks) table for COPY.
    url_region_table: pa.Table | None = None

    @staticmethod
    def empty() -> Totals:
        return Totals([], [])


def batch_totals(rows: pa.Table) -> Totals:
    """Sums of clicks per region and per (url, region) (columns click_url, user_regionid, clicks)."""
    if rows.num_rows == 0:
        return Totals.empty()
    base = rows.select(["click_url", "user_regionid", "clicks"])
    per_region = base.group_by("user_regionid").aggregate([("clicks", "sum")])
    per_url = base.group_by(["click_url", "user_regionid"]).aggregate([("clicks", "sum")])
    return Totals(
        list(
            zip(
                per_region.column("user_regionid").to_pylist(),
                per_region.column("clicks_sum").to_pylist(),
                strict=True,
            )
        ),
        list(
            zip(
                per_url.column("click_url").to_pylist(),
                per_url.column("user_regionid").to_pylist(),
                per_url.column("clicks_sum").to_pylist(),
                strict=True,
            )
        ),
        per_url.select(["click_url", "user_regionid", "clicks_sum"]),
    )


REGION_UPSERT = f"""
INSERT INTO {names.CLICKS_PER_REGION_TABLE} AS t (region, clicks)
SELECT * FROM unnest(%s::text[], %s::bigint[]) ORDER BY 1
ON CONFLICT (region) DO UPDATE SET clicks = t.clicks + excluded.clicks
"""
URL_REGION_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS batch_url_region (url text, region text, clicks bigint) ON COMMIT DELETE ROWS
"""
URL_REGION_UPSERT = f"""
INSERT INTO {names.URL_REGION_TABLE} AS t (url, region, click_count)
SELECT url, region, clicks FROM pg_temp.batch_url_region ORDER BY url, region
ON CONFLICT (url_md5, region) DO UPDATE SET click_count = t.click_count + excluded.click_count
"""


def upsert_totals(conn: psycopg.Connection, totals: Totals) -> None:
    """Add a batch's sums to the totals."""
    if not totals.regions:
        return
    conn.execute(REGION_UPSERT, ([r for r, _ in totals.regions], [c for _, c in totals.regions]))
    conn.execute(URL_REGION_STAGE)
    buffer = io.BytesIO()
    pacsv.write_csv(totals.url_region_table, buffer, pacsv.WriteOptions(include_header=False))
    with conn.cursor().copy(
        "COPY pg_temp.batch_url_region (url, region, clicks) FROM STDIN (FORMAT csv)"
    ) as copy:
        copy.write(buffer.getvalue())
    conn.execute(URL_REGION_UPSERT)


# pg_temp.batch_clicks holds the micro-batch (see sinks.STAGING_COLUMNS).
INSERT_AND_AGGREGATE = f"""
WITH inserted AS (
    INSERT INTO {names.ENRICHED_CLICKS_TABLE} (
        event_id, uid, click_time, click_url, device_type, click_location, clicks,
        user_regionid, user_gender, user_interests, user_registertime, profile_valid_from, profile_complete)
    SELECT event_id, uid, to_timestamp(click_time_ms / 1000.0), click_url, device_type, click_location,
           clicks, user_regionid, user_gender, user_interests::text[], user_registertime,
           CASE WHEN profile_valid_from_ms IS NULL THEN NULL
                WHEN profile_valid_from_ms < 0 THEN '-infinity'::timestamptz
                ELSE to_timestamp(profile_valid_from_ms / 1000.0) END,
           profile_complete
    FROM pg_temp.batch_clicks
    ON CONFLICT (event_id) DO NOTHING
    RETURNING click_url, user_regionid, clicks
), per_region AS (
    INSERT INTO {names.CLICKS_PER_REGION_TABLE} AS t (region, clicks)
    SELECT user_regionid, sum(clicks) FROM inserted GROUP BY user_regionid ORDER BY 1
    ON CONFLICT (region) DO UPDATE SET clicks = t.clicks + excluded.clicks
    RETURNING 1
), per_url_region AS (
    INSERT INTO {names.URL_REGION_TABLE} AS t (url, region, click_count)
    SELECT click_url, user_regionid, sum(clicks) FROM inserted
    GROUP BY click_url, user_regionid ORDER BY 1, 2
    ON CONFLICT (url_md5, region) DO UPDATE SET click_count = t.click_count + excluded.click_count
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM per_region),
       (SELECT count(*) FROM per_url_region)
"""


def insert_and_aggregate(conn: psycopg.Connection) -> int:
    """Insert pg_temp.batch_clicks' new rows and fold the totals from them; returns the rows inserted."""
    row = conn.execute(INSERT_AND_AGGREGATE).fetchone()
    return row[0] if row else 0


def current_totals(conn: psycopg.Connection, keys: Totals) -> Totals:
    """The current totals of the keys in `keys` (a replayed batch republishes them)."""
    regions = conn.execute(
        f"SELECT region, clicks FROM {names.CLICKS_PER_REGION_TABLE} WHERE region = ANY(%s) ORDER BY region",
        (sorted({r for r, _ in keys.regions}),),
    ).fetchall()
    pairs = sorted({(u, r) for u, r, _ in keys.url_regions})
    url_regions = conn.execute(
        f"""SELECT t.url, t.region, t.click_count FROM {names.URL_REGION_TABLE} t
            JOIN unnest(%s::text[], %s::text[]) AS k(url, region)
              ON t.url_md5 = md5(k.url)::uuid AND t.region = k.region AND t.url = k.url
            ORDER BY t.url, t.region""",
        ([u for u, _ in pairs], [r for _, r in pairs]),
    ).fetchall()
    return Totals(regions, url_regions)
