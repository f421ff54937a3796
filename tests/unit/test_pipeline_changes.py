"""A changed pipeline file against the one set up (db/pipeline_schema.check_change): what the join's state
and the sink tables can absorb. Tables are stages of the join kept by position: added at the end only."""

from __future__ import annotations

import re

import pytest

from common import pipeline_file as pf
from db.pipeline_schema import check_change

BASE = """\
profile:
  table: public.parcels
  key: id
  key_type: bigint
  columns: {sender_id: bigint, weight: numeric}
tables:
  sender:
    table: public.senders
    key: id
    key_type: bigint
    columns: {country: text}
    join_on: profile.sender_id
events:
  kafka_topic: scans
  key: parcel_id
  time: ts
  fields: {depot: text}
"""
DEPOT = """\
  depot:
    table: public.depots
    key: code
    columns: {city: text}
    join_on: event.depot
"""


def file(text: str) -> pf.Pipeline:
    return pf.parse(text)


def with_depot(text: str) -> str:
    return text.replace("events:", DEPOT + "events:")


def test_a_table_added_at_the_end_and_a_column_added_to_a_table_are_absorbed() -> None:
    check_change(file(BASE), file(with_depot(BASE)))
    check_change(file(BASE), file(BASE.replace("{country: text}", "{country: text, tier: text}")))
    check_change(file(BASE), file(BASE))


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (BASE.replace("  sender:\n", "  shipper:\n"), "tables: 'sender' is gone"),
        (
            BASE.replace("tables:\n", "tables:\n" + DEPOT),
            "tables.depot: new tables go after the existing ones ('sender')",
        ),
        (
            BASE.replace("join_on: profile.sender_id", "join_on: event.sender").replace(
                "{depot: text}", "{depot: text, sender: bigint}"
            ),
            "tables.sender.join_on: changed",
        ),
        (BASE.replace("public.senders", "public.shippers"), "tables.sender.table: changed"),
        (BASE.replace("{country: text}", "{region: text}"), "tables.sender.columns: 'country' is gone"),
        (BASE.replace("{country: text}", "{country: bigint}"), "tables.sender.columns.country.type: changed"),
    ],
)
def test_a_table_removed_moved_or_rejoined_is_refused(after: str, expected: str) -> None:
    with pytest.raises(pf.PipelineFileError, match=re.escape(expected)):
        check_change(file(BASE), file(after))
