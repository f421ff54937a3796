"""`streamfold dead-letters replay` on the real stack: events dead-lettered by the job, the pipeline file
fixed, the letters replayed into Kafka or Kinesis and joined exactly once by the job; a second replay
changes nothing; those still bad come back with their new reason, under the id the replay gave them; a
replay interrupted after its claim or after its send neither loses nor doubles a letter; `status` counts
the letters by reason."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from common import config, topics
from common import pipeline_file as pf
from db import schema
from streamfold import dead_letters
from streamfold.generate import ClickSpec, clicks
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e

FUTURE = "outside the plausible range"
HOUR_MS = 3_600_000
EARLY_MS = 75_000


def streamfold(sandbox: sp.Sandbox, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamfold", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=sandbox.env(**env),
        cwd=sp.ROOT,
    )


def replay(sandbox: sp.Sandbox, *args: str, **env: str) -> dict[str, Any]:
    result = streamfold(sandbox, "dead-letters", "replay", "--json", *args, **env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


def run_once(sandbox: sp.Sandbox, source: str, **env: str) -> None:
    if source == "kinesis":
        sandbox.stream()
    result = streamfold(sandbox, "run", "--source", source, "--once", **env)
    assert result.returncode == 0, result.stderr[-4000:]


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({**config.kafka_client_settings(bootstrap), "group.id": "test-dead-letters"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
        }
    finally:
        consumer.close()


# The sandbox's job folds the session's shared CDC topic too, whose letters other tests made.
EVENT_LETTERS = "source NOT LIKE 'kafka:cdc.%'"


def letters(sandbox: sp.Sandbox) -> dict[str, tuple[str, str | None, bool]]:
    """dead_letter_id -> (reason, replayed_as, replayed), of the events' letters."""
    with sandbox.connect() as conn:
        rows = conn.execute(
            "SELECT dead_letter_id, reason, replayed_as, replayed_at IS NOT NULL "
            f"FROM streamfold.dead_letters WHERE {EVENT_LETTERS}"
        ).fetchall()
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def event_status(sandbox: sp.Sandbox, **env: str) -> dict[str, Any]:
    """status's dead letters by reason, less the CDC letters' (a change event's reasons)."""
    status = json.loads(streamfold(sandbox, "status", "--json", **env).stdout)["dead_letters_by_reason"]
    with sandbox.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM streamfold.dead_letters "
            f"WHERE NOT ({EVENT_LETTERS}) AND replayed_at IS NULL"
        ).fetchone()
    cdc = row[0] if row else 0
    reasons = [r for r in status["reasons"] if not r["reason"].startswith("change event")]
    return {**status, "waiting": status["waiting"] - cdc, "reasons": reasons}


def joined(sandbox: sp.Sandbox) -> list[str]:
    with sandbox.connect() as conn:
        return [row[0] for row in conn.execute("SELECT event_id FROM streamfold.enriched_clicks")]


def click_at(seed: int, event_ms: int) -> bytes:
    [event] = clicks(ClickSpec(count=1, users=3, seed=seed))
    return json.dumps({**event, "event_time": event_ms}).encode()


def fixed_file(tmp_path: Path) -> Path:
    """The default pipeline file with events a day ahead of their arrival allowed, not a minute."""
    text = pf.DEFAULT_PATH.read_text()
    assert "    max_future: 60s\n" in text
    path = tmp_path / "streamfold.yaml"
    path.write_text(text.replace("    max_future: 60s\n", "    max_future: 1d\n"))
    return path


def test_replayed_letters_join_once_and_the_still_bad_come_back(streamfold_setup, tmp_path):
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "dead_letters_kafka", tmp_path / "home")
    bootstrap, topic = streamfold_setup.kafka_bootstrap, sandbox.clicks_topic
    source = f"kafka:{topic}"
    now = int(time.time() * 1000)
    producer = topics.producer(bootstrap)
    for c in clicks(ClickSpec(count=10, users=3, seed=801)):
        producer.produce(topic, key=c["userid"], value=json.dumps(c).encode())
    # Stamped by a clock 75 s fast: more than the minute allowed ahead of their arrival, but past by the
    # time they are replayed (they then join at once: CDC progress is past them).
    soon = [click_at(810 + i, now + EARLY_MS) for i in range(3)]
    later = [click_at(820 + i, now + 30 * 24 * HOUR_MS) for i in range(2)]  # still too far ahead
    for payload in [*soon, *later, b"{not json", b"[1, 2"]:
        producer.produce(topic, key=b"bad", value=payload)
    assert producer.flush(30) == 0
    run_once(sandbox, "kafka")

    first = letters(sandbox)
    assert len(first) == 7 and len(joined(sandbox)) == 10
    assert sum(FUTURE in reason for reason, _, _ in first.values()) == 5
    with sandbox.connect() as conn:
        stored = {row[0] for row in conn.execute("SELECT payload FROM streamfold.dead_letters")}
    assert set(soon) | set(later) <= stored
    status = event_status(sandbox)
    assert status == {
        "waiting": 7,
        "replayed": 0,
        "reasons": [
            {
                "reason": "event_time … is outside the plausible range (2000-01-01 .. arrival + 1 minute)",
                "count": 5,
            },
            {"reason": "not JSON: …", "count": 2},
        ],
    }

    # CDC letters are never replayed: the table is the truth.
    refused = streamfold(sandbox, "dead-letters", "replay", "--source", "kafka:cdc.public.users")
    assert refused.returncode == 1 and "only events are replayed" in refused.stderr, refused.stderr

    # The file fixed and set up (a day ahead allowed); once the fast clock's time has passed, the letters
    # too far ahead are replayed into the topic, keyed by their ids.
    sp.wait_until(lambda: time.time() * 1000 > now + EARLY_MS + 5000, 180, "the early clicks' time to pass")
    fixed = {pf.PIPELINE_VAR: str(fixed_file(tmp_path))}
    schema.apply(sandbox.admin_dsn, pf.load(fixed[pf.PIPELINE_VAR]))
    before = end_offsets(bootstrap, topic)
    report = replay(sandbox, "--reason", FUTURE, "--since", "1h", **fixed)
    assert report == {"replayed": 5, "found": 0, "already": 0, "not_replayable": {}}
    assert sum(end_offsets(bootstrap, topic).values()) == sum(before.values()) + 5
    marked = {i: as_ for i, (reason, as_, done) in letters(sandbox).items() if done}
    assert len(marked) == 5 and all(FUTURE in first[i][0] for i in marked)
    assert all(as_ and as_.startswith(f"{source}:") for as_ in marked.values())

    # Replaying again sends nothing: every matching letter is marked.
    assert replay(sandbox, "--reason", FUTURE, **fixed)["already"] == 5
    assert sum(end_offsets(bootstrap, topic).values()) == sum(before.values()) + 5

    run_once(sandbox, "kafka", **fixed)
    events = joined(sandbox)
    replayed_as = set(marked.values())
    assert len(events) == 13 and len(set(events)) == 13
    assert len(replayed_as & set(events)) == 3
    after = letters(sandbox)
    back = {i: reason for i, (reason, _, _) in after.items() if i in replayed_as}
    assert len(back) == 2 and len(after) == 9, after
    assert all(FUTURE in reason and "arrival + 1 day" in reason for reason in back.values()), back

    # A replay of the first letters' reason changes nothing, and neither does the job's next pass.
    assert replay(sandbox, "--reason", "arrival + 1 minute", **fixed) == {
        "replayed": 0,
        "found": 0,
        "already": 5,
        "not_replayable": {},
    }
    run_once(sandbox, "kafka", **fixed)
    assert sorted(joined(sandbox)) == sorted(events) and letters(sandbox) == after

    status = event_status(sandbox, **fixed)
    assert status["waiting"] == 4 and status["replayed"] == 5
    assert {r["reason"]: r["count"] for r in status["reasons"]} == {
        "event_time … is outside the plausible range (2000-01-01 .. arrival + 1 day)": 2,
        "not JSON: …": 2,
    }


def insert_letters(sandbox: sp.Sandbox, source: str, payloads: list[bytes]) -> list[str]:
    """Dead letters as the job's sink records them (ids of positions that never existed)."""
    ids = [f"{source}:9:{n}" for n in range(len(payloads))]
    with sandbox.connect() as conn:
        conn.cursor().executemany(
            "INSERT INTO streamfold.dead_letters (dead_letter_id, source, reason, payload) "
            "VALUES (%s, %s, 'event_time 1 is outside the plausible range', %s)",
            [(i, source, p) for i, p in zip(ids, payloads, strict=True)],
        )
    return ids


def interrupted(sandbox: sp.Sandbox, source: str, sent: list[str], claimed: list[str]) -> None:
    """A replay that crashed: `sent` claimed and sent, not marked; `claimed` claimed only."""
    settings = config.load()
    with sandbox.connect() as conn:
        letters_ = {
            letter.dead_letter_id: letter
            for letter in dead_letters.waiting(conn, dead_letters.Selection(), (source,))
        }
        now_ms = int(time.time() * 1000)
        dead_letters.claim(conn, [letters_[i] for i in sent + claimed], now_ms)
        bodies = dead_letters.payloads(conn, [letters_[i] for i in sent])
    out = dead_letters.target(settings, source)
    result = out.send([(i, bodies[i]) for i in sent])
    assert result.problem is None and len(result.positions) == len(sent)


@pytest.mark.parametrize("kind", ["kafka", "kinesis"])
def test_an_interrupted_replay_loses_and_doubles_nothing(streamfold_setup, tmp_path, kind):
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, f"dead_letters_crash_{kind}", tmp_path / "home")
    name = sandbox.stream() if kind == "kinesis" else sandbox.clicks_topic
    source = f"{kind}:{name}"
    payloads = [json.dumps(c).encode() for c in clicks(ClickSpec(count=6, users=3, seed=830))]
    ids = insert_letters(sandbox, source, payloads)
    interrupted(sandbox, source, sent=ids[:2], claimed=ids[2:4])

    report = replay(sandbox)
    assert report == {"replayed": 4, "found": 2, "already": 0, "not_replayable": {}}
    run_once(sandbox, kind)
    marked = {i: as_ for i, (_, as_, done) in letters(sandbox).items() if done}
    assert sorted(marked) == sorted(ids)
    # Each letter joined once, as the record its mark names; nothing else reached the job.
    assert sorted(joined(sandbox)) == sorted(marked.values())
    assert replay(sandbox)["already"] == 6
