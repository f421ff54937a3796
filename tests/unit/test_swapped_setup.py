"""The users' names across swaps and `streamfold setup` of the live file after them (db/versions.py swap and
ensure_views, db/schema.py apply), on a real PostgreSQL (the local stack's, in a temporary home): the
enriched and aggregate names, the profile history's view and function, a column or an aggregate the live
file gains while it is current, and a second setup that changes nothing. The jobs, Kafka and the CLI are
the end-to-end story's (tests/e2e/test_reprocess.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from common import config, plan
from common import pipeline_file as pf
from common import versions as v
from db import schema
from db import versions as registry
from stack.home import open_stack
from tests.support import own_pipeline as own
from tests.unit.test_sinks import dsn, pg_home

__all__ = ["dsn", "pg_home"]  # the PostgreSQL fixtures of test_sinks

V2_COLUMN = "    prefs: jsonb\n"
NOTES = "    notes: {type: text, if_missing: none}\n"


@pytest.fixture
def admin(dsn: str, pg_home: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The DSN, with the roles' passwords exported for setup; a customers table for the own pipeline."""
    for name, value in open_stack(pg_home).env().items():
        monkeypatch.setenv(name, value)
    return dsn


def files(tmp_path: Path, admin: str) -> tuple[pf.Pipeline, pf.Pipeline]:
    """The live file and a changed one (a carried column `notes`), on a customers table of their own."""
    tag = uuid.uuid4().hex[:8]
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(own.TABLE.format(tag=tag))
        conn.execute(f"INSERT INTO public.customers_{tag} (id, email, tier) VALUES (1, 'x', 'gold')")
    text = own.pipeline_text(tag)
    (tmp_path / "live.yaml").write_text(text)
    (tmp_path / "v2.yaml").write_text(text.replace(V2_COLUMN, V2_COLUMN + NOTES))
    return pf.load(tmp_path / "live.yaml"), pf.load(tmp_path / "v2.yaml")


def setup(admin: str, pipeline: pf.Pipeline) -> list[str]:
    changes: list[str] = []
    schema.apply(admin, pipeline, echo=changes.append)
    return changes


def swap(admin: str, live: pf.Pipeline, to: str, version: pf.Pipeline | None) -> None:
    """What `streamfold swap` does once the target has caught up (streamfold/reprocess.py swap)."""
    with psycopg.connect(admin, autocommit=True) as conn:
        before = registry.current(conn, live.name, v.LIVE)
        old = registry.get(conn, live.name, before.version)
        tables = (
            v.physical(live, before.version, old.pipeline if old else None),
            v.physical(live, to, version),
        )
        switch = registry.Switch.of(live, before, to, tables, {}, None)
        registry.swap(conn, live.name, before, switch, config.READER_ROLE)


def register(admin: str, live: pf.Pipeline, changed: pf.Pipeline, name: str) -> pf.Pipeline:
    """What `streamfold reprocess` does in the database: the version registered, its outputs set up."""
    version = v.versioned(changed, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        assert registry.add(conn, registry.Version(name, live.name, version, "kafka", None, {}))
        registered = registry.get(conn, live.name, name)
    assert registered and registered.pipeline == version
    assert list(registered.pipeline.profile.columns) == list(version.profile.columns)  # in the file's order
    setup(admin, version)
    return version


def kinds_and_oids(conn: psycopg.Connection, names: list[str]) -> dict[str, tuple[str, int]]:
    """Each relation's kind and oid: a view replaced gets a new oid."""
    found = {}
    for name in names:
        row = conn.execute("SELECT relkind, oid FROM pg_class WHERE oid = to_regclass(%s)", [name]).fetchone()
        found[name] = (str(row[0]), int(row[1])) if row else ("", 0)
    return found


def published(conn: psycopg.Connection, p: pf.Pipeline) -> list[str]:
    """The profile table's columns the publication carries and Debezium's role may read."""
    row = conn.execute(
        "SELECT array(SELECT c FROM unnest(attnames) c WHERE has_column_privilege(%s, %s, c, 'SELECT'))"
        " FROM pg_publication_tables WHERE pubname = %s AND tablename = %s",
        (config.DEBEZIUM_ROLE, p.profile.table, plan.of(p).publication, p.profile.table_name),
    ).fetchone()
    assert row is not None
    return list(row[0])


def users_names(p: pf.Pipeline) -> list[str]:
    return [
        plan.of(p).enriched_table,
        *(a.table for a in plan.of(p).aggregates),
        plan.of(p).histories[0].view,
    ]


def profile_at(conn: psycopg.Connection, p: pf.Pipeline) -> list[str]:
    """The columns of what the users' function answers."""
    cursor = conn.execute(
        sql.SQL("SELECT * FROM {}(1, now())").format(sql.SQL(plan.of(p).histories[0].function))
    )
    return [c.name for c in cursor.description or []]


def test_setup_after_swaps_keeps_the_users_names_on_the_current_version(admin: str, tmp_path: Path) -> None:
    live, changed = files(tmp_path, admin)
    setup(admin, live)
    with psycopg.connect(admin, autocommit=True) as conn:
        before = kinds_and_oids(conn, users_names(live))
    assert setup(admin, live) == []  # a pipeline that never swapped: as before, tables under the users' names
    with psycopg.connect(admin, autocommit=True) as conn:
        assert kinds_and_oids(conn, users_names(live)) == before
    assert {kind for kind, _ in before.values()} == {"r", "v"}  # the history's view is a view already

    v2 = register(admin, live, changed, "v2")
    swap(admin, live, "v2", v2)
    with psycopg.connect(admin, autocommit=True) as conn:
        swapped = kinds_and_oids(conn, users_names(live))
        assert "profile_notes" in registry.columns(conn, plan.of(live).enriched_table)
        assert "notes" in registry.columns(
            conn, plan.of(live).histories[0].view
        )  # the history's view follows the swap
        assert "notes" in profile_at(conn, live)
        assert "profile_notes" not in registry.columns(conn, f"{plan.of(live).enriched_table}__live")
    assert setup(admin, live) == []  # the live file's tables are __live now; nothing else changes
    with psycopg.connect(admin, autocommit=True) as conn:
        assert kinds_and_oids(conn, users_names(live)) == swapped
        assert "profile_notes" in registry.columns(conn, plan.of(live).enriched_table)
        assert "notes" in published(conn, live)  # v2's job still gets its column from the live file's setup
    assert schema.shared_capture(admin, live)[live.profile.table][-1] == "notes"  # and so does the connector

    swap(admin, live, v.LIVE, None)  # the rollback
    with psycopg.connect(admin, autocommit=True) as conn:
        assert "profile_notes" not in registry.columns(conn, plan.of(live).enriched_table)
        assert "notes" not in registry.columns(conn, plan.of(live).histories[0].view)
        assert "notes" not in profile_at(conn, live)

    # The live file gains the column and an aggregate while live is current: the users' names show them.
    grown = tmp_path / "grown.yaml"
    grown.write_text(
        (tmp_path / "v2.yaml").read_text() + f"  - name: notes_{live.name}\n    group_by: {{notes: notes}}\n"
    )
    bigger = pf.load(grown)
    changes = setup(admin, bigger)
    assert f"created table {plan.of(bigger).aggregates[-1].table}__live" in changes, changes
    with psycopg.connect(admin, autocommit=True) as conn:
        assert "profile_notes" in registry.columns(conn, plan.of(live).enriched_table)
        assert "notes" in registry.columns(conn, plan.of(live).histories[0].view) and "notes" in profile_at(
            conn, live
        )
        assert registry.columns(conn, plan.of(bigger).aggregates[-1].table)[0] == "notes"
        grown_names = kinds_and_oids(conn, users_names(bigger))
        (readable,) = conn.execute(
            "SELECT bool_and(has_table_privilege(%s, n, 'SELECT')) FROM unnest(%s::text[]) n",
            (config.READER_ROLE, users_names(bigger)),
        ).fetchone()
    assert readable
    assert setup(admin, bigger) == []
    with psycopg.connect(admin, autocommit=True) as conn:
        assert kinds_and_oids(conn, users_names(bigger)) == grown_names
