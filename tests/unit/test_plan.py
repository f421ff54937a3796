"""The resolved plan (common/plan.py): decided once per validated file, every reference resolved to its
source, type and output column."""

from __future__ import annotations

import gc

from common import pipeline_file as pf
from common import plan

FILE = """\
name: scans
profile:
  table: public.shipments
  key: id
  key_type: bigint
  columns: {sender_id: bigint, service: {type: text, if_missing: none}}
tables:
  sender:
    table: public.senders
    key: id
    key_type: bigint
    columns: {country: {type: text, if_missing: XX}}
    join_on: profile.sender_id
events:
  kafka_topic: scans
  key: parcel_id
  time: ts
  count: n
  fields: {status: text, grams: bigint}
outputs:
  enriched:
    key_column: parcel
    event_columns: {status: scan_status}
aggregates:
  - name: per_country_status
    group_by: {country: sender.country, status: status, parcel: parcel_id}
    sums: {grams: grams}
"""


def test_the_plan_is_compiled_once_per_file_and_dropped_with_it() -> None:
    pipeline = pf.parse(FILE, "scans.yaml")
    first = plan.of(pipeline)
    assert plan.of(pipeline) is first
    assert plan.of(pf.parse(FILE, "scans.yaml")) is not first  # another model, its own plan
    held = len(plan._PLANS)
    del pipeline
    gc.collect()
    assert len(plan._PLANS) < held


def test_an_aggregates_references_resolve_to_their_source_type_and_output_column() -> None:
    [aggregate] = plan.of(pf.parse(FILE, "scans.yaml")).aggregates
    keys = [(k.column, k.source, k.name, k.type, k.output, k.md5) for k in aggregate.keys]
    assert keys == [
        ("country", "sender", "country", "text", "sender_country", False),
        ("status", plan.EVENT, "status", "text", "scan_status", True),
        ("parcel", plan.EVENT, "parcel_id", "bigint", "parcel", False),
    ]
    assert aggregate.primary_key == ["country", "status_md5", "parcel"]
    assert [(s.column, s.field, s.type, s.output) for s in aggregate.sums] == [
        ("grams", "grams", "bigint", "grams")
    ]
    assert (aggregate.table, aggregate.topic) == ("streamfold.per_country_status", "per_country_status")


def test_the_enriched_columns_come_from_the_events_then_each_join_under_its_prefix() -> None:
    resolved = plan.of(pf.parse(FILE, "scans.yaml"))
    columns = [(c.name, c.output, c.type, c.nullable) for c in resolved.enriched]
    assert columns == [
        ("event_id", "event_id", "text", False),
        ("parcel", "parcel", "bigint", False),
        ("ts", "ts_ms", plan.EPOCH_MS, False),
        ("scan_status", "scan_status", "text", True),
        ("grams", "grams", "bigint", True),
        ("n", "n", "integer", False),
        ("profile_sender_id", "profile_sender_id", "bigint", True),
        ("profile_service", "profile_service", "text", False),
        ("sender_country", "sender_country", "text", False),
        ("profile_valid_from", "profile_valid_from_ms", plan.VALID_FROM_MS, True),
        ("profile_complete", "profile_complete", "boolean", False),
        (plan.CDC_PROGRESS, plan.CDC_PROGRESS_MS, plan.EPOCH_MS, True),
        (plan.RELEASED_BY_MAX_WAIT, plan.RELEASED_BY_MAX_WAIT, "boolean", True),
    ]
    assert resolved.grouped("sender") == {"country"} and resolved.grouped(plan.PROFILE) == set()
