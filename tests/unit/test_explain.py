"""`streamfold explain`'s sentence from an enriched row and the key's versions as Postgres returns them
(tests/e2e/test_real_cdc.py runs the command on what a real job wrote)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common import pipeline_file as pf
from common import plan
from streamfold.explain import describe, table_key
from tests.support.pipelines import DEFAULT

COLUMNS = plan.of(DEFAULT).names


def event(**given: Any) -> dict[str, Any]:
    row = {
        "event_id": "kafka:clicks:0:7",
        "uid": "U",
        "click_time": "2026-11-27 14:00:05+00",
        "user_regionid": "north",
        "profile_valid_from": "2026-11-27 14:00:00+00",
        "profile_complete": True,
        "cdc_progress": "2026-11-27 14:00:06+00",
        "released_by_max_wait": False,
    }
    return row | given


def version(
    valid_from: str, valid_to: str | None, op: str, region: str | None, **flags: bool
) -> dict[str, Any]:
    return {
        "valid_from": valid_from,
        "valid_to": valid_to,
        "op": op,
        "lsn": 1,
        "incomplete": None,
        "regionid": region,
        "gender": None,
        "interests": None,
        "registertime": None,
        "began": flags.get("began", True),
        "unseen": flags.get("unseen"),
    }


def test_a_release_by_max_wait_names_the_version_it_could_not_see() -> None:
    released = event(profile_complete=False, released_by_max_wait=True, cdc_progress="2026-11-27 14:00:01+00")
    versions = [
        version("2026-11-27 14:00:00+00", "2026-11-27 14:00:03+00", "c", "north", unseen=False),
        version("2026-11-27 14:00:03+00", None, "u", "south", unseen=True),
    ]
    lines = describe(DEFAULT, COLUMNS, released, versions)
    assert lines[1].startswith("  joined:  valid 2026-11-27 14:00:00+00 .. 2026-11-27 14:00:03+00, op c")
    assert lines[2].startswith("  after:   valid 2026-11-27 14:00:03+00 .. now, op u, lsn 1: regionid=south")
    assert lines[-1] == (
        "why: join.max_wait released it with CDC progress at 2026-11-27 14:00:01+00, short of its time "
        "2026-11-27 14:00:05+00, so a change committed in between could be missing "
        "(profile_complete false); it took the latest version valid at its time, valid from "
        "2026-11-27 14:00:00+00; the history now has a version from 2026-11-27 14:00:03+00 it could not see "
        "then."
    )


def test_an_event_before_the_first_version_has_no_profile() -> None:
    lonely = event(user_regionid="UNKNOWN", profile_valid_from=None)
    later = [version("2026-11-27 15:00:00+00", None, "c", "north", began=False)]
    lines = describe(DEFAULT, COLUMNS, lonely, later)
    assert lines[1] == "  joined:  no version of U valid at 2026-11-27 14:00:05+00"
    assert lines[2].startswith("  after:   valid 2026-11-27 15:00:00+00")
    assert lines[-1].endswith(
        "no profile: its first version is valid from 2026-11-27 15:00:00+00, after the event."
    )
    assert describe(DEFAULT, COLUMNS, lonely, [])[-1].endswith("the history holds no version of it.")


def test_a_row_from_before_the_release_columns_says_so() -> None:
    old = event(cdc_progress=None, released_by_max_wait=None)
    versions = [version("2026-11-27 14:00:00+00", None, "c", "north")]
    assert "does not record its release" in describe(DEFAULT, COLUMNS, old, versions)[-1]


def test_a_further_tables_key_is_read_back_from_the_enriched_row() -> None:
    parcels = pf.load(Path(__file__).parents[2] / "examples" / "parcels" / "pipeline.yaml")
    sender, depot = plan.joins(parcels)[1:]
    scan = {"parcel_id": 7, "depot": "HAM", "parcel_sender_id": 1}
    columns = plan.of(parcels).names
    assert table_key(parcels, columns, scan, sender) == 1  # profile.sender_id, under the profile's prefix
    assert table_key(parcels, columns, scan, depot) == "HAM"  # an event field
