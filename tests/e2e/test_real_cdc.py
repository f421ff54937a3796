"""CDC as PostgreSQL and Debezium really produce it, end to end on the session's stack, through a user's
pipeline file: an update that leaves large (TOASTed) values unchanged, which Debezium sends as its
placeholder `__debezium_unavailable_value`, and a TRUNCATE of the table. Events before and after each are
checked row by row in the enriched table, the profile changelog record by record, and the profile history
version by version; `streamfold explain` and the history's named queries run on what the job wrote."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from psycopg import sql

from common import pipeline_file as pf
from common import plan, topics
from spec.envelopes import UNAVAILABLE, Change, Truncate, parse_envelope
from tests.support import own_pipeline as own
from tests.support.kafka import Message, read_all, wait_for

pytestmark = pytest.mark.e2e

TABLE = """CREATE TABLE {table} (
  id bigint PRIMARY KEY, email text, region text, interests text[], prefs jsonb, bio text, amount numeric)"""


def pipeline_text(tag: str) -> str:
    """Every varlena type the file allows (the ones PostgreSQL TOASTs), and a region to change."""
    return f"""\
name: real_{tag}
profile:
  table: public.real_{tag}
  key: id
  key_type: bigint
  columns:
    region: {{type: text, if_missing: UNKNOWN}}
    interests: text[]
    prefs: jsonb
    bio: text
    amount: numeric
events:
  kafka_topic: real_views_{tag}
  key: customer_id
  time: {{field: ts, format: epoch_ms}}
  fields: {{path: text}}
outputs:
  cdc_topic_prefix: real_{tag}
"""


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture(scope="module")
def real(streamfold_setup, tmp_path_factory) -> Iterator[own.OwnPipeline]:
    """The table, the pipeline file and `streamfold setup` on them; every name new."""
    tag = uuid.uuid4().hex[:8]
    home = tmp_path_factory.mktemp("real-cdc")
    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as conn:
        conn.execute(TABLE.format(table=f"public.real_{tag}"))
    file = home / "pipeline.yaml"
    file.write_text(pipeline_text(tag))
    made = own.OwnPipeline(streamfold_setup.pg_dsn, file, home, pf.load(file))
    made.streamfold("setup")
    yield made
    own.drop(made, streamfold_setup.connect_url)


def send(bootstrap: str, topic: str, events: list[tuple[int, int, str]]) -> None:
    """(key, time, path) events."""
    producer = topics.producer(bootstrap, {"linger.ms": 10})
    for key, t, path in events:
        producer.produce(topic, key=str(key), value=json.dumps({"customer_id": key, "ts": t, "path": path}))
    assert producer.flush(30) == 0


def enriched(conn: psycopg.Connection, p: pf.Pipeline) -> dict[str, tuple[Any, ...]]:
    rows = conn.execute(
        "SELECT path, customer_id, profile_region, profile_interests, profile_prefs, profile_bio, "
        f"profile_amount, profile_complete FROM {plan.of(p).enriched_table}"
    )
    return {row[0]: tuple(row[1:]) for row in rows}


def changes_of(messages: list[Message], table: str, key: int) -> list[Message]:
    """The key's change events (the heartbeat table's events share the topic and the key {"id": 1})."""
    return [
        m
        for m in messages
        if isinstance(m.value, dict) and m.value["source"].get("table") == table and m.key == {"id": key}
    ]


def large_profile(rng: random.Random) -> dict[str, Any]:
    """Values PostgreSQL stores out of line (TOAST): random, so compression does not keep them inline."""
    return {
        "interests": [f"interest-{i}-{rng.getrandbits(32):08x}" for i in range(4_000)],
        "prefs": {f"k{i}": f"{rng.getrandbits(64):016x}" for i in range(1_000)},
        "bio": "".join(rng.choice("abcdefghij klmnopqrstuvwxyz") for _ in range(30_000)),
        "amount": "".join(rng.choice("123456789") for _ in range(20_000)) + ".25",
    }


def test_an_update_leaving_toasted_values_unchanged_keeps_them(real, streamfold_setup):
    bootstrap, p = streamfold_setup.kafka_bootstrap, real.pipeline
    big = large_profile(random.Random(38))
    with real.connect() as pg:
        pg.execute(
            sql.SQL(
                "INSERT INTO {} (id, email, region, interests, prefs, bio, amount) "
                "VALUES (1, 'secret@example.com', 'north', %s, %s, %s, %s)"
            ).format(sql.SQL(p.profile.table)),
            (big["interests"], json.dumps(big["prefs"]), big["bio"], big["amount"]),
        )
        time.sleep(1.5)
        before = now_ms()
        time.sleep(1.5)
        pg.execute(sql.SQL("UPDATE {} SET region = 'south' WHERE id = 1").format(sql.SQL(p.profile.table)))
        time.sleep(1.5)
        after = now_ms()
    assert p.events.kafka_topic
    send(bootstrap, p.events.kafka_topic, [(1, before, "/before"), (1, after, "/after")])

    # What Debezium 3.4 wrote for the update: the new region, and its placeholder for every large value.
    table = p.profile.table.split(".")[1]
    cdc = wait_for(bootstrap, plan.of(p).cdc_topic, lambda ms: len(changes_of(ms, table, 1)) >= 2)
    insert, update = changes_of(cdc, table, 1)
    assert update.value["op"] == "u" and update.value["after"]["region"] == "south"
    sent = {name: update.value["after"][name] for name in ("interests", "prefs", "bio", "amount")}
    assert sent == {"interests": [UNAVAILABLE], **dict.fromkeys(("prefs", "bio", "amount"), UNAVAILABLE)}
    assert insert.value["after"]["interests"] == big["interests"]

    real.streamfold("run", "--source", "kafka", "--once")

    full = (big["interests"], big["prefs"], big["bio"], Decimal(big["amount"]), True)
    with real.connect() as conn:
        rows = enriched(conn, p)
        dead = own.dead_letters(conn, p)
    assert rows == {"/before": (1, "north", *full), "/after": (1, "south", *full)}
    assert not dead, f"dead letters: {dead}"
    changelog = [
        json.loads(m.raw_value, parse_float=Decimal)  # a numeric is a JSON number, here of 20,000 digits
        for m in read_all(bootstrap, plan.of(p).changelog_topic)
        if m.raw_key == b"1" and m.raw_value is not None
    ]
    assert [values["region"] for values in changelog] == ["north", "south"]
    for values in changelog:
        assert "incomplete" not in values
        assert values["interests"] == big["interests"] and values["prefs"] == big["prefs"]
        assert values["bio"] == big["bio"] and values["amount"] == Decimal(big["amount"])
    for topic in (plan.of(p).changelog_topic, plan.of(p).enriched_topic):
        raw = b"".join(m.raw_value or b"" for m in read_all(bootstrap, topic))
        assert raw and UNAVAILABLE.encode() not in raw, topic


def changelog_oracle(bootstrap: str, p: pf.Pipeline) -> dict[str, list[str | None]]:
    """Each key's changelog as the CDC topic implies it, folded by the reference (spec/envelopes.py): its
    versions' regions in version order (None for a delete), and a tombstone at every truncate that ends a
    profile the key had."""
    spec, versions, truncates = plan.of(p).profile_spec, {}, []
    for m in read_all(bootstrap, plan.of(p).cdc_topic):
        folded = parse_envelope(m.topic, m.raw_key, m.raw_value, spec)
        if isinstance(folded, Change):
            region = None if folded.op == "d" else folded.columns["region"]
            versions.setdefault(folded.key, []).append((folded.valid_from_ms, folded.lsn, region))
        elif isinstance(folded, Truncate):
            truncates.append((folded.valid_from_ms, folded.lsn))
    out = {}
    for key, found in versions.items():
        for cut in truncates:
            before = [v for v in sorted(found) if v[:2] < cut]
            if before and before[-1][2] is not None:
                found.append((*cut, None))
        out[key] = [region for _, _, region in sorted(found)]
    return out


def test_a_truncate_ends_every_profile_at_its_commit_time(real, streamfold_setup):
    bootstrap, p = streamfold_setup.kafka_bootstrap, real.pipeline
    table = sql.SQL(p.profile.table)
    with real.connect() as pg:
        for key, region in [(10, "east"), (11, "west"), (12, "north"), (13, "south")]:
            pg.execute(sql.SQL("INSERT INTO {} (id, region) VALUES (%s, %s)").format(table), (key, region))
        pg.execute(sql.SQL("DELETE FROM {} WHERE id = 13").format(table))
        time.sleep(1.5)
        before = now_ms()
        time.sleep(1.5)
        pg.execute(sql.SQL("TRUNCATE {}").format(table))
        time.sleep(1.5)
        after = now_ms()
        time.sleep(1.5)
        pg.execute(sql.SQL("INSERT INTO {} (id, region) VALUES (12, 'again')").format(table))
        time.sleep(1.5)
        later = now_ms()
    assert p.events.kafka_topic
    events = [(k, t, f"/{name}{k}") for k in (10, 11, 12, 13) for t, name in ((before, "b"), (after, "a"))]
    send(bootstrap, p.events.kafka_topic, [*events, (12, later, "/later12")])

    # Debezium captured the truncate: one event, no key, op t, in commit order with the changes.
    name = p.profile.table.split(".")[1]
    cdc = wait_for(bootstrap, plan.of(p).cdc_topic, lambda ms: len(changes_of(ms, name, 12)) >= 2)
    (truncate,) = [m for m in cdc if isinstance(m.value, dict) and m.value.get("op") == "t"]
    assert truncate.raw_key is None and truncate.value["source"]["table"] == name
    assert changes_of(cdc, name, 12)[-1].offset > truncate.offset

    real.streamfold("run", "--source", "kafka", "--once")

    with real.connect() as conn:
        rows = {
            path: row[1] for path, row in enriched(conn, p).items() if path != "/before" and path != "/after"
        }
        valid_from = dict(
            conn.execute(f"SELECT path, profile_valid_from FROM {plan.of(p).enriched_table}").fetchall()
        )
        dead = own.dead_letters(conn, p)
    assert rows == {
        "/b10": "east", "/b11": "west", "/b12": "north", "/b13": "UNKNOWN",  # before: the old versions
        "/a10": "UNKNOWN", "/a11": "UNKNOWN", "/a12": "UNKNOWN", "/a13": "UNKNOWN",  # after: no profile
        "/later12": "again",  # a new insert starts anew
    }  # fmt: skip
    assert all(valid_from[f"/a{k}"] is None for k in (10, 11, 12, 13))
    assert not dead, f"dead letters: {dead}"
    got: dict[str, list[str | None]] = {}
    for m in read_all(bootstrap, plan.of(p).changelog_topic):
        assert m.raw_key is not None
        got.setdefault(m.raw_key.decode(), []).append(None if m.value is None else m.value["region"])
    want = changelog_oracle(bootstrap, p)
    assert got == want
    assert {k: got[k] for k in ("10", "11", "12", "13")} == {
        "10": ["east", None], "11": ["west", None], "12": ["north", None, "again"], "13": ["south", None],
    }  # fmt: skip
    # The profile history holds the same versions, a delete and the truncate's end of a profile as op d.
    view = plan.of(p).histories[0].view
    with real.connect() as conn:
        history: dict[str, list[str | None]] = {}
        for key, op, region in conn.execute(
            f"SELECT id::text, op, region FROM {view} ORDER BY id, valid_from, lsn"
        ):
            history.setdefault(key, []).append(None if op == "d" else region)
        open_after = conn.execute(
            f"SELECT count(*) FROM {view} WHERE valid_to IS NULL AND op <> 'd' AND id <> 12"
        ).fetchone()
    assert history == want
    assert open_after == (0,), "the truncate ended every open version but the re-inserted one"


def explain(real: own.OwnPipeline, event_id: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamfold", "explain", event_id],
        capture_output=True, text=True, timeout=120, env=real.env(), cwd=own.ROOT,
    )  # fmt: skip


def test_explain_names_the_version_its_neighbours_and_why(real, streamfold_setup):
    """A key inserted, updated, deleted: `streamfold explain` of an event in each era, of a dead letter and of
    an id that is neither; `streamfold query profile_at` and `versions` agree with what the join did."""
    bootstrap, p = streamfold_setup.kafka_bootstrap, real.pipeline
    table = sql.SQL(p.profile.table)
    times = {}
    with real.connect() as pg:
        for step, statement in [
            ("north", "INSERT INTO {} (id, region) VALUES (20, 'north')"),
            ("south", "UPDATE {} SET region = 'south' WHERE id = 20"),
            ("gone", "DELETE FROM {} WHERE id = 20"),
        ]:
            pg.execute(sql.SQL(statement).format(table))
            time.sleep(1.5)
            times[step] = now_ms()
            time.sleep(1.5)
    assert p.events.kafka_topic
    send(bootstrap, p.events.kafka_topic, [(20, t, f"/explain-{step}") for step, t in times.items()])
    producer = topics.producer(bootstrap, {})
    producer.produce(p.events.kafka_topic, key="20", value=b"not json")
    assert producer.flush(30) == 0
    real.streamfold("run", "--source", "kafka", "--once")

    with real.connect() as conn:
        ids = dict(
            conn.execute(f"SELECT path, event_id FROM {plan.of(p).enriched_table} WHERE customer_id = 20")
        )
        dead = sorted(own.dead_letters(conn, p))
    south = explain(real, ids["/explain-south"]).stdout.splitlines()
    assert south[0].startswith(f"event {ids['/explain-south']}: customer_id=20,")
    assert "region=north" in south[1] and south[1].startswith("  before:")
    assert "region=south" in south[2] and south[2].startswith("  joined:") and "op u" in south[2]
    assert "op d" in south[3] and south[3].startswith("  after:")
    assert "had reached its time" in south[4] and "latest version valid at its time" in south[4]
    gone = explain(real, ids["/explain-gone"]).stdout
    assert "no profile: it was deleted at" in gone and "at time:" in gone
    (letter,) = [d for d in dead if d.startswith(f"kafka:{p.events.kafka_topic}:")]
    assert explain(real, letter).stdout.splitlines()[1].startswith("why: ")
    missing = explain(real, "kafka:nowhere:0:0")
    assert missing.returncode == 1 and "no event and no dead letter" in missing.stdout + missing.stderr

    versions = real.streamfold("query", "versions", "20").stdout
    assert [r for r in ("north", "south") if r in versions] == ["north", "south"]
    at_south = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(times["south"] / 1000))
    assert "south" in real.streamfold("query", "profile_at", "20", at_south).stdout
