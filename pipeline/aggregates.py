"""The aggregates: total clicks per region and per URL x region, and reading them back for Kafka.

The totals are folded where the clicks land, in the executors (jvm/src/main/java/io/streamfold/sink/:
`PartitionRows` sums a partition's clicks per region and per (url, region) from the same rows it COPYs
into streamfold.enriched_clicks, and `PgWriter` upserts those sums in the partition's Postgres
transaction, keys in sorted order so concurrent partitions cannot deadlock). So Postgres folds a few
thousand sums per batch, not every row, and the totals equal the sum over `streamfold.enriched_clicks`
in every committed state, replays included (docs/guarantees.md "Totals").

The driver then publishes the current totals of the keys a batch touched to the compacted aggregate
topics (`current_totals`, called by pipeline/sinks.py).

url_region_click_count is keyed by (md5(url), region) (`url_md5`, a generated column), so a URL of any
length fits the btree; `url` holds the full URL.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from common import names


@dataclass(frozen=True)
class Totals:
    """(region, clicks) and (url, region, clicks): the current totals of some keys."""

    regions: list[tuple[str, int]]
    url_regions: list[tuple[str, str, int]]


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
