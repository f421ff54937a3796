"""The aggregates: total clicks per region and per URL x region.

They are folded in Postgres, in the same statement that inserts the batch's enriched clicks, from the
rows that insert actually added (`RETURNING`). So the totals always equal the sum over
`streamfold.enriched_clicks`, even if a click were ever offered twice.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from streamfold import names

# pg_temp.batch_clicks holds the micro-batch (see sinks.STAGING_COLUMNS).
INSERT_AND_AGGREGATE = f"""
WITH inserted AS (
    INSERT INTO {names.ENRICHED_CLICKS_TABLE} (
        event_id, uid, click_time, click_url, device_type, click_location, clicks,
        user_regionid, user_gender, user_interests, user_registertime, profile_valid_from)
    SELECT event_id, uid, to_timestamp(click_time_ms / 1000.0), click_url, device_type, click_location,
           clicks, user_regionid, user_gender, user_interests::text[], user_registertime,
           CASE WHEN profile_valid_from_ms IS NULL THEN NULL
                WHEN profile_valid_from_ms < 0 THEN '-infinity'::timestamptz
                ELSE to_timestamp(profile_valid_from_ms / 1000.0) END
    FROM pg_temp.batch_clicks
    ON CONFLICT (event_id) DO NOTHING
    RETURNING click_url, user_regionid, clicks
), per_region AS (
    INSERT INTO {names.CLICKS_PER_REGION_TABLE} AS t (region, clicks)
    SELECT user_regionid, sum(clicks) FROM inserted GROUP BY user_regionid
    ON CONFLICT (region) DO UPDATE SET clicks = t.clicks + excluded.clicks
    RETURNING 1
), per_url_region AS (
    INSERT INTO {names.URL_REGION_TABLE} AS t (url, region, click_count)
    SELECT click_url, user_regionid, sum(clicks) FROM inserted GROUP BY click_url, user_regionid
    ON CONFLICT (url, region) DO UPDATE SET click_count = t.click_count + excluded.click_count
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted),
       (SELECT count(*) FROM per_region),
       (SELECT count(*) FROM per_url_region)
"""


def region_totals(conn: psycopg.Connection, regions: Iterable[str]) -> list[tuple[str, int]]:
    """Current totals for the given regions (what the Kafka changelog publishes)."""
    return conn.execute(
        f"SELECT region, clicks FROM {names.CLICKS_PER_REGION_TABLE} WHERE region = ANY(%s) ORDER BY region",
        (sorted(set(regions)),),
    ).fetchall()


def url_region_totals(
    conn: psycopg.Connection, pairs: Iterable[tuple[str, str]]
) -> list[tuple[str, str, int]]:
    keys = sorted(set(pairs))
    return conn.execute(
        f"""SELECT t.url, t.region, t.click_count FROM {names.URL_REGION_TABLE} t
            JOIN unnest(%s::text[], %s::text[]) AS k(url, region) USING (url, region)
            ORDER BY t.url, t.region""",
        ([url for url, _ in keys], [region for _, region in keys]),
    ).fetchall()
