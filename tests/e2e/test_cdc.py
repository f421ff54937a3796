"""Debezium captures public.users into cdc.public.users: snapshot, c/u/d + tombstone, restarts, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
import requests

from common import config, names, plan
from connectors import setup as connector_setup
from tests.e2e.conftest import SNAPSHOT_USERS
from tests.support.kafka import Message, wait_for

pytestmark = pytest.mark.e2e

PII = ("name", "email", "contactinfo")


def events_for(messages: list[Message], userid: str) -> list[Message]:
    return [m for m in messages if isinstance(m.key, dict) and m.key.get("userid") == userid]


def test_rows_before_registration_arrive_as_snapshot_reads(streamfold_setup):
    bootstrap = streamfold_setup.kafka_bootstrap
    messages = wait_for(
        bootstrap,
        names.CDC_USERS_TOPIC,
        lambda ms: all(events_for(ms, u) for u, _ in SNAPSHOT_USERS),
    )
    for userid, region in SNAPSHOT_USERS:
        (event,) = events_for(messages, userid)
        assert event.value["op"] == "r"
        assert event.value["after"]["regionid"] == region
        assert isinstance(event.value["source"]["ts_ms"], int)


def test_insert_update_delete_give_c_u_d_and_a_tombstone(pg, streamfold_setup):
    userid = f"u-{uuid.uuid4().hex[:8]}"
    pg.execute(
        "INSERT INTO public.users (userid, name, email, regionid, gender, interests, contactinfo, "
        "registertime) VALUES (%s, 'Alice', 'alice@example.com', 'asia', 'FEMALE', ARRAY['News'], "
        '\'{"phone": "1"}\', 1)',
        (userid,),
    )
    pg.execute("UPDATE public.users SET regionid = 'europe' WHERE userid = %s", (userid,))
    pg.execute("DELETE FROM public.users WHERE userid = %s", (userid,))

    messages = wait_for(
        streamfold_setup.kafka_bootstrap, names.CDC_USERS_TOPIC, lambda ms: len(events_for(ms, userid)) >= 4
    )
    create, update, delete, tombstone = events_for(messages, userid)
    assert [create.value["op"], update.value["op"], delete.value["op"]] == ["c", "u", "d"]
    assert create.value["before"] is None and create.value["after"]["regionid"] == "asia"
    assert create.value["after"]["interests"] == ["News"]
    assert update.value["after"]["regionid"] == "europe"
    assert delete.value["before"]["userid"] == userid and delete.value["after"] is None
    assert tombstone.value is None
    timestamps = [m.value["source"]["ts_ms"] for m in (create, update, delete)]
    assert timestamps == sorted(timestamps) and all(isinstance(t, int) for t in timestamps)
    # PII never leaves the database: not in after, not in before.
    for event in (create, update, delete):
        for row in (event.value["before"], event.value["after"]):
            assert not set(PII) & set(row or {})


def test_heartbeats_flow(streamfold_setup):
    beats = wait_for(streamfold_setup.kafka_bootstrap, names.HEARTBEAT_TOPIC, lambda ms: len(ms) >= 2)
    assert all(isinstance(m.value["ts_ms"], int) for m in beats)


def test_heartbeat_table_events_follow_changes_in_commit_order_and_are_only_progress(pg, streamfold_setup):
    from pipeline.cdc_fold import HEARTBEAT_TABLE
    from spec.envelopes import Change, Progress, parse_envelope

    DEFAULT_PROFILE_SPEC = plan.of(streamfold_setup.pipeline).profile_spec  # noqa: N806

    userid = f"hb-{uuid.uuid4().hex[:8]}"
    pg.execute("INSERT INTO public.users (userid, regionid) VALUES (%s, 'asia')", (userid,))
    pg.execute("UPDATE public.users SET regionid = 'europe' WHERE userid = %s", (userid,))

    def beats_after_update(ms: list[Message]) -> list[Message]:
        updates = [m for m in events_for(ms, userid) if m.value["op"] == "u"]
        if not updates:
            return []
        return [
            m
            for m in ms
            if m.offset > updates[0].offset
            and isinstance(m.value, dict)
            and m.value["source"].get("table") == HEARTBEAT_TABLE
        ]

    messages = wait_for(
        streamfold_setup.kafka_bootstrap, names.CDC_USERS_TOPIC, lambda ms: len(beats_after_update(ms)) >= 3
    )
    assert {m.partition for m in messages} == {0}
    (update,) = [m for m in events_for(messages, userid) if m.value["op"] == "u"]
    beats = beats_after_update(messages)
    assert all(b.value["source"]["ts_ms"] >= update.value["source"]["ts_ms"] for b in beats)
    # Every 200 ms or so: a few beats within a couple of seconds of the change.
    assert beats[2].value["source"]["ts_ms"] - update.value["source"]["ts_ms"] < 5_000
    all_beats = [
        m for m in messages if isinstance(m.value, dict) and m.value["source"].get("table") == HEARTBEAT_TABLE
    ]
    from db.capture import heartbeat_id

    for beat in all_beats:  # the pipeline's own heartbeat row, no userid: never a user's key
        assert beat.key == {"id": heartbeat_id(plan.of(streamfold_setup.pipeline))}
        folded = parse_envelope(names.CDC_USERS_TOPIC, beat_key(beat), beat.raw_value, DEFAULT_PROFILE_SPEC)
        assert folded == Progress(beat.value["source"]["ts_ms"])
    # The user changes themselves still fold to changes.
    change = parse_envelope(names.CDC_USERS_TOPIC, beat_key(update), update.raw_value, DEFAULT_PROFILE_SPEC)
    assert isinstance(change, Change) and change.key == userid and change.columns["regionid"] == "europe"


def beat_key(message: Message) -> bytes:
    return json.dumps(message.key).encode()


def test_setup_twice_is_a_no_op(streamfold_setup):
    assert connector_setup.ensure_topics(streamfold_setup.kafka_bootstrap, streamfold_setup.pipeline) == []
    cfg = connector_setup.connector_config(streamfold_setup)
    assert (
        connector_setup.register_connector(streamfold_setup.connect_url, names.CONNECTOR_NAME, cfg) is False
    )
    result = subprocess.run(
        [sys.executable, "-m", "streamfold", "setup"], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "unchanged" in result.stderr and "all present" in result.stderr


def test_connector_resumes_after_connect_restart_without_missing_changes(pg, streamfold_setup, services):
    services.stop("connect")
    userid = f"down-{uuid.uuid4().hex[:8]}"
    # Changes made while Kafka Connect is down stay in the replication slot.
    pg.execute("INSERT INTO public.users (userid, regionid) VALUES (%s, 'asia')", (userid,))
    pg.execute("UPDATE public.users SET regionid = 'africa' WHERE userid = %s", (userid,))
    services.start("connect")
    connector_setup.wait_until_running(streamfold_setup.connect_url, names.CONNECTOR_NAME, timeout_s=180)

    messages = wait_for(
        streamfold_setup.kafka_bootstrap, names.CDC_USERS_TOPIC, lambda ms: len(events_for(ms, userid)) >= 2
    )
    assert [m.value["op"] for m in events_for(messages, userid)] == ["c", "u"]
    # Resumed from the stored offset: no second snapshot of the existing rows.
    for snap_user, _ in SNAPSHOT_USERS:
        assert len(events_for(messages, snap_user)) == 1


def test_wrong_password_is_a_clear_error(streamfold_setup):
    cfg = {
        **connector_setup.connector_config(streamfold_setup),
        "database.password": "definitely-wrong",
        "slot.name": "streamfold_bad_test",
    }
    with pytest.raises(connector_setup.SetupError, match="password authentication failed"):
        connector_setup.register_connector(streamfold_setup.connect_url, "streamfold-bad-test", cfg)
    assert (
        requests.get(
            f"{streamfold_setup.connect_url}/connectors/streamfold-bad-test",
            timeout=10,
            auth=config.connect_auth(),
        ).status_code
        == 404
    )


def test_setup_against_an_unreachable_database_exits_1_without_a_traceback(streamfold_setup):
    env = {**os.environ, "STREAMFOLD_CONNECT_PG_PORT": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "streamfold", "setup", "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 1, result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    assert "Connection refused" in result.stderr or "connection" in result.stderr.lower()
    # The running connector kept its good config.
    status = requests.get(
        f"{streamfold_setup.connect_url}/connectors/{names.CONNECTOR_NAME}/status",
        timeout=10,
        auth=config.connect_auth(),
    )
    assert status.json()["connector"]["state"] == "RUNNING"


def test_topics_exist_with_the_right_cleanup_policy_and_record_limit(streamfold_setup):
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient(config.kafka_client_settings(streamfold_setup.kafka_bootstrap))
    topics = admin.list_topics(timeout=10).topics
    big_records = {names.USER_CLICKS_TOPIC, names.USERS_CHANGELOG_TOPIC}
    for topic, compacted in names.PIPELINE_TOPICS:
        assert topic in topics
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        configs = admin.describe_configs([resource])[resource].result()
        assert ("compact" in configs["cleanup.policy"].value) == compacted, topic
        limit = int(configs["max.message.bytes"].value)
        assert (limit == 4 * 1024 * 1024) if topic in big_records else (limit < 2 * 1024 * 1024), topic
    # What reprocessing needs retained (docs/reprocess.md, "Retention"): every change, 30 days of clicks.
    for topic, retention in ((names.CDC_USERS_TOPIC, "-1"), (names.CLICKS_TOPIC, str(30 * 86_400_000))):
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
        assert admin.describe_configs([resource])[resource].result()["retention.ms"].value == retention, topic


def test_a_2_mb_row_does_not_stop_the_connector(pg, streamfold_setup):
    """Over the broker's default 1 MB: the CDC topic and Connect's producer take it, and the ordinary
    changes after it still arrive (the job dead-letters it: pipeline.cdc_fold.MAX_CHANGE_BYTES)."""
    big, after = f"big-{uuid.uuid4().hex[:8]}", f"after-{uuid.uuid4().hex[:8]}"
    pg.execute("INSERT INTO public.users (userid, regionid) VALUES (%s, %s)", (big, "r" * 2_000_000))
    pg.execute("INSERT INTO public.users (userid, regionid) VALUES (%s, 'asia')", (after,))
    pg.execute("UPDATE public.users SET regionid = 'europe' WHERE userid = %s", (after,))
    messages = wait_for(
        streamfold_setup.kafka_bootstrap, names.CDC_USERS_TOPIC, lambda ms: len(events_for(ms, after)) >= 2
    )
    (large,) = events_for(messages, big)
    assert len(large.raw_value or b"") > 2_000_000
    assert [m.value["op"] for m in events_for(messages, after)] == ["c", "u"]
    status = requests.get(
        f"{streamfold_setup.connect_url}/connectors/{names.CONNECTOR_NAME}/status",
        timeout=10,
        auth=config.connect_auth(),
    ).json()
    assert [t["state"] for t in status["tasks"]] == ["RUNNING"]
