"""Several tables per event: the file's `tables`, the plan they compile to, and the reference semantics
(spec/several_tables.py) on the worked examples of docs/join-semantics.md, "Several tables"."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common import pipeline_file as pf
from common import plan
from spec.several_tables import Joined, join_event
from spec.temporal_state import UNAVAILABLE, Version

SCANS = """\
name: scans
profile:
  table: public.parcels
  key: id
  key_type: bigint
  columns:
    sender_id: bigint
    weight: numeric
tables:
  sender:
    table: public.senders
    key: id
    key_type: bigint
    columns:
      country: {type: text, if_missing: XX}
      account: text
    join_on: profile.sender_id
  account:
    table: public.accounts
    key: code
    columns: {plan: {type: text, if_missing: none}}
    join_on: sender.account
  depot:
    table: public.depots
    key: code
    columns: {city: text}
    join_on: event.depot
events:
  kafka_topic: scans
  key: parcel_id
  time: ts
  fields: {depot: {type: text, required: false}}
"""

T0, T1, T2 = 1_000, 2_000, 3_000  # ms


def scans() -> pf.Pipeline:
    return pf.parse(SCANS, "scans.yaml")


def test_the_plan_joins_the_profile_first_then_the_tables_in_the_files_order() -> None:
    joins = plan.joins(scans())
    assert [(j.name, j.on, j.prefix) for j in joins] == [
        ("profile", ("event", "parcel_id"), "profile_"),
        ("sender", ("profile", "sender_id"), "sender_"),
        ("account", ("sender", "account"), "account_"),
        ("depot", ("event", "depot"), "depot_"),
    ]


def test_captured_names_each_table_once_with_the_columns_of_every_join_of_it() -> None:
    text = SCANS.replace("      account: text\n", "      account: text\n      parent: bigint\n").replace(
        "  depot:\n",
        "  parent:\n    table: public.senders\n    key: id\n    key_type: bigint\n"
        "    columns: {vat: text}\n    join_on: sender.parent\n  depot:\n",
    )
    captured = plan.captured(pf.parse(text))
    assert captured == {
        "public.parcels": ("id", "sender_id", "weight"),
        "public.senders": ("id", "country", "account", "parent", "vat"),
        "public.accounts": ("code", "plan"),
        "public.depots": ("code", "city"),
    }


def test_each_join_has_its_own_history_the_profiles_under_its_former_names() -> None:
    pipeline = scans()
    histories = plan.histories(pipeline)
    assert [(h.table, h.view, h.function, h.kind) for h in histories[:2]] == [
        (
            plan.of(pipeline).histories[0].table,
            plan.of(pipeline).histories[0].view,
            plan.of(pipeline).histories[0].function,
            "change",
        ),
        (
            "streamfold.sender_history_scans",
            "streamfold.sender_versions_scans",
            "streamfold.sender_at_scans",
            "change:sender",
        ),
    ]
    assert [h.join.name for h in histories] == ["profile", "sender", "account", "depot"]


def test_a_one_table_file_compiles_to_the_profile_alone() -> None:
    pipeline = pf.load(pf.DEFAULT_PATH)
    assert pipeline.tables == {}
    assert [j.name for j in plan.joins(pipeline)] == ["profile"]
    assert plan.of(pipeline).captured == {
        "public.users": ("userid", "regionid", "gender", "interests", "registertime")
    }


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            "  b:\n    table: t\n    key: id\n    columns: {x: text}\n    join_on: a.x\n",
            "'a' is not the events, the profile or a table declared before 'b'",
        ),
        (
            "  a:\n    table: t\n    key: id\n    columns: {x: text}\n    join_on: profile.weight\n",
            "a numeric value cannot be a key",
        ),
        (
            "  a:\n    table: t\n    key: id\n    columns: {x: text}\n    join_on: profile.sender_id\n",
            "profile.sender_id is bigint, and t's key 'id' is text",
        ),
        (
            "  a:\n    table: t\n    key: id\n    columns: {x: text}\n    join_on: event.nope\n",
            "'nope' is not an event field",
        ),
        (
            "  a:\n    table: t\n    key: id\n    columns: {x: text}\n    join_on: depot\n",
            "is not a reference",
        ),
        (
            "  a:\n    table: t\n    key: id\n    columns: {x: text}\n    join_on: event.depot\n"
            "    prefix: profile_\n",
            "as profile's: set prefix",
        ),
        (
            "  event:\n    table: t\n    key: id\n    columns: {x: text}\n    join_on: event.depot\n",
            "names the events or the profile",
        ),
        (
            f"  {'a' * 50}:\n    table: t\n    key: id\n    columns: {{x: text}}\n    join_on: event.depot\n",
            "longer than PostgreSQL's 63 characters: shorten the table's name or the pipeline's",
        ),
    ],
)
def test_a_table_joins_only_what_comes_before_it_with_a_keys_type(table: str, message: str) -> None:
    text = SCANS.replace("tables:\n", "tables:\n" + table, 1).replace("public.t\n", "public.t\n")
    text = text.replace("    table: t\n", "    table: public.t\n")
    with pytest.raises(pf.PipelineFileError, match="tables\\.") as error:
        pf.parse(text, "scans.yaml")
    assert message.replace("t's", "public.t's") in str(error.value)


def v(valid_from_ms: int, *values: object, lsn: int = 0, op: str = "u") -> Version:
    return Version(valid_from_ms, lsn or valid_from_ms, op, tuple(values))


# The worked example: parcel 7 is sent by sender 1 until T1, then re-assigned to sender 2; sender 1 moves
# from DE to FR at T2; sender 2 has no account row at all.
HISTORIES = {
    "profile": {"7": [v(0, 1, "2.50"), v(T1, 2, "2.50")]},
    "sender": {"1": [v(0, "DE", "acme"), v(T2, "FR", "acme")], "2": [v(0, "NL", "zeta")]},
    "account": {"acme": [v(0, "gold")]},
    "depot": {"HAM": [v(0, "Hamburg")]},
}


def test_each_hop_of_a_chain_is_read_at_the_events_time() -> None:
    joins = plan.joins(scans())
    before = join_event(joins, HISTORIES, {"parcel_id": 7, "depot": "HAM"}, T0)
    assert before == {
        "profile": Joined("7", (1, "2.50"), 0, True),
        "sender": Joined("1", ("DE", "acme"), 0, True),
        "account": Joined("acme", ("gold",), 0, True),
        "depot": Joined("HAM", ("Hamburg",), 0, True),
    }
    # After the re-assignment the parcel's sender is 2, valid from T1; sender 1's move at T2 is not seen.
    after = join_event(joins, HISTORIES, {"parcel_id": 7, "depot": None}, T1)
    assert after["sender"] == Joined("2", ("NL", "zeta"), 0, True)
    # No account row for zeta: if_missing, complete. No depot: the field is null, no key, complete.
    assert after["account"] == Joined("zeta", ("none",), None, True)
    assert after["depot"] == Joined(None, (None,), None, True)


def test_a_deleted_row_in_the_middle_of_a_chain_ends_the_chain() -> None:
    histories = {**HISTORIES, "sender": {"1": [v(0, "DE", "acme"), v(T0 + 1, None, None, op="d")]}}
    joined = join_event(plan.joins(scans()), histories, {"parcel_id": 7}, T0 + 1)
    assert joined["sender"] == Joined("1", ("XX", None), None, True)
    assert joined["account"] == Joined(None, ("none",), None, True)


def test_an_unknown_foreign_key_makes_the_rest_of_the_chain_incomplete() -> None:
    histories = {**HISTORIES, "sender": {"1": [v(0, "DE", UNAVAILABLE)]}}
    joined = join_event(plan.joins(scans()), histories, {"parcel_id": 7}, T0)
    assert joined["sender"].known is False
    assert joined["account"] == Joined(None, ("none",), None, False)


@settings(max_examples=200, deadline=None)
@given(
    time_ms=st.integers(0, 10),
    later=st.lists(
        st.tuples(st.sampled_from(["profile", "sender", "account"]), st.integers(11, 20), st.integers(1, 3)),
        max_size=6,
    ),
)
def test_a_change_after_the_event_never_changes_what_it_joined(
    time_ms: int, later: list[tuple[str, int, int]]
) -> None:
    """Stream-table semantics: whatever is committed after t, in any table, leaves the event at t alone."""
    joins = plan.joins(scans())
    base = {
        "profile": {"7": [v(0, 1, "1"), v(5, 2, "1")]},
        "sender": {"1": [v(0, "DE", "acme")], "2": [v(3, "NL", "zeta")]},
        "account": {"acme": [v(0, "gold")], "zeta": [v(7, "free")]},
    }
    changed = {name: {k: list(vs) for k, vs in keys.items()} for name, keys in base.items()}
    values = {"profile": (3, "9"), "sender": ("FR", "acme"), "account": ("pro",)}
    keys = {"profile": "7", "sender": "1", "account": "acme"}
    for name, at, lsn in later:
        versions = changed[name].setdefault(keys[name], [])
        versions.append(v(at, *values[name], lsn=at * 10 + lsn))
        versions.sort(key=lambda x: (x.valid_from_ms, x.lsn))
    fields = {"parcel_id": 7}
    assert join_event(joins, changed, fields, time_ms) == join_event(joins, base, fields, time_ms)
