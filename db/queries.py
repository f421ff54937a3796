"""Named queries over the enriched tables, run with the read-only role."""

from __future__ import annotations

import psycopg
from psycopg.types.string import TextLoader

from common import names

NAMED = {
    "clicks_per_region": (
        f"SELECT region, clicks FROM {names.CLICKS_PER_REGION_TABLE} ORDER BY clicks DESC, region"
    ),
    "url_region_click_count": (
        f"SELECT url, region, click_count FROM {names.URL_REGION_TABLE} "
        "ORDER BY click_count DESC, url, region LIMIT 50"
    ),
    "enriched_clicks": (
        f"SELECT event_id, uid, click_time, click_url, device_type, user_regionid, user_gender, clicks, "
        f"profile_valid_from FROM {names.ENRICHED_CLICKS_TABLE} ORDER BY click_time DESC, event_id LIMIT 20"
    ),
    "dead_letters": (
        f"SELECT dead_letter_id, source, reason, left(encode(payload, 'escape'), 60) AS payload, recorded_at "
        f"FROM {names.DEAD_LETTERS_TABLE} ORDER BY recorded_at DESC LIMIT 20"
    ),
    "totals": (
        f"SELECT (SELECT count(*) FROM {names.ENRICHED_CLICKS_TABLE}) AS enriched_rows, "
        f"(SELECT coalesce(sum(clicks), 0) FROM {names.ENRICHED_CLICKS_TABLE}) AS clicks, "
        f"(SELECT count(*) FROM {names.DEAD_LETTERS_TABLE}) AS dead_letters"
    ),
}


def resolve(sql_or_name: str) -> str:
    return NAMED.get(sql_or_name, sql_or_name)


def run(reader_dsn: str, sql_or_name: str) -> tuple[list[str], list[tuple]]:
    """Column names and rows, from ONE statement in a read-only transaction.

    The reader role can only SELECT from the sink schema, but any role may alter itself: the extended
    query protocol (pipeline mode) refuses "COMMIT; ALTER ROLE ..." as several statements, so nothing
    ever runs outside the read-only transaction.
    """
    with psycopg.connect(reader_dsn) as conn:
        conn.read_only = True
        # Timestamps as Postgres prints them: profile_valid_from may be '-infinity' (no Python datetime).
        for type_name in ("timestamptz", "timestamp"):
            conn.adapters.register_loader(type_name, TextLoader)
        with conn.pipeline():
            cur = conn.execute(resolve(sql_or_name))
        columns = [c.name for c in cur.description or []]
        return columns, cur.fetchall()
