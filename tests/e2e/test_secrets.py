"""Secrets and the PII boundary on the session's stack: what a holder of a credential, a file or a
process's environment can and cannot read."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest
import requests

from common import config, names, topics
from stack import lifecycle
from stack.home import PG_DATABASE, folder_mode, open_stack, paths_under
from stack.prerequisites import pg_bindir
from streamfold.generate import ClickSpec, clicks
from tests.support import pipeline as sp

pytestmark = pytest.mark.e2e


def test_the_connector_config_holds_a_reference_not_the_password(streamfold_setup):
    password = config.lookup("STREAMFOLD_DEBEZIUM_PASSWORD")
    url = f"{streamfold_setup.connect_url}/connectors/{names.CONNECTOR_NAME}/config"
    connector = requests.get(url, timeout=10, auth=config.connect_auth()).json()
    assert connector["database.password"] == "${env:STREAMFOLD_DEBEZIUM_PASSWORD}"
    assert password not in repr(connector)
    # Connect's config topic, on the broker's disk: the password is not in it, and no file is world-readable.
    segments = list(Path(config.home(), "data", "kafka").glob("streamfold-connect-configs-*/*.log"))
    assert segments, "the Connect config topic's segments were not found"
    for segment in segments:
        assert password.encode() not in segment.read_bytes()
    for path in Path(config.home(), "data", "kafka").rglob("*"):
        assert not path.stat().st_mode & stat.S_IRWXO, f"{path} is open to other users"


def test_services_get_only_the_secrets_they_need(streamfold_setup):
    stack = open_stack(config.home())
    others = {name: value for name, value in stack.secrets.items() if name != "STREAMFOLD_DEBEZIUM_PASSWORD"}
    # Connect resolves the connector's references: the Debezium role's and the registry's (cdc.format avro).
    needs = {"connect": {config.REGISTRY_PASSWORD_VAR}}
    for name in ("kafka", "connect", "kinesis", "registry"):
        pid = lifecycle.service(stack, name).pid()
        assert pid, f"{name} is not running"
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert "STREAMFOLD_PG_DSN" not in environ
        held = needs.get(name, set())
        leaked = [secret for secret, value in others.items() if value in environ and secret not in held]
        assert not leaked, f"{name} holds {leaked}"


def test_the_debezium_role_cannot_copy_the_cluster(streamfold_setup, tmp_path):
    """pg_basebackup (physical replication) as the Debezium role is refused by pg_hba."""
    stack = open_stack(config.home())
    result = subprocess.run(
        [
            str(pg_bindir() / "pg_basebackup"),
            *("-h", "127.0.0.1", "-p", str(stack.ports["postgres"]), "-U", config.DEBEZIUM_ROLE),
            *("-D", str(tmp_path / "copy"), "-X", "none", "--no-password"),
        ],
        env={**os.environ, "PGPASSWORD": stack.secrets["STREAMFOLD_DEBEZIUM_PASSWORD"]},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "no pg_hba.conf entry for replication connection" in result.stderr, result.stderr
    assert not (tmp_path / "copy" / "global").exists()


def test_the_debezium_role_reaches_its_own_database_only(streamfold_setup):
    """Its REPLICATION attribute could decode any database it can connect to; pg_hba allows one."""
    stack = open_stack(config.home())
    login = {
        "host": "127.0.0.1",
        "port": stack.ports["postgres"],
        "user": config.DEBEZIUM_ROLE,
        "password": stack.secrets["STREAMFOLD_DEBEZIUM_PASSWORD"],
    }
    with psycopg.connect(**login, dbname=PG_DATABASE) as conn:
        assert conn.execute("SELECT current_database()").fetchone() == (PG_DATABASE,)
    for other in ("postgres", "template1"):
        with pytest.raises(psycopg.OperationalError, match="pg_hba.conf rejects connection"):
            psycopg.connect(**login, dbname=other)


def open_to_others(home: Path) -> list[str]:
    """Every path under `home` (itself included) with a group or other bit, beyond the traverse-only
    folders PostgreSQL passes through when it runs as its own OS user (stack/home.py, folder_mode)."""
    offenders = []
    for path in paths_under(home):
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:  # the running stack removed it since the listing (PostgreSQL's caches)
            continue
        if stat.S_ISLNK(mode):
            continue
        allowed = folder_mode(home, path) & 0o077 if stat.S_ISDIR(mode) else 0
        if stat.S_IMODE(mode) & 0o077 & ~allowed:
            offenders.append(f"{oct(stat.S_IMODE(mode))} {path}")
    return offenders


def test_files_under_the_homes_are_their_owners_only(streamfold_setup, tmp_path):
    """The running stack's home (logs, data dirs, configs, pid files, ports, secrets, stack.env) and the home
    of a job that ran (checkpoints with the join's state, status files, run.lock): owner only."""
    sandbox = sp.make_sandbox(streamfold_setup.pg_dsn, "owner_only", tmp_path / "home")
    producer = topics.producer(streamfold_setup.kafka_bootstrap)
    for click in clicks(ClickSpec(count=20, users=5, seed=601)):
        producer.produce(sandbox.clicks_topic, key=click["userid"], value=json.dumps(click).encode())
    producer.produce(sandbox.clicks_topic, key="bad", value=b"{not json")  # a dead letter
    assert producer.flush(30) == 0
    sandbox.run_once("kafka")
    written = [
        sandbox.home / "checkpoints" / "clicks-kafka" / "state",
        sandbox.home / "status" / "job.json",
        sandbox.home / "status" / "clicks-kafka.json",
        config.home() / "logs" / "postgres.log",
        config.home() / "stack.env",
    ]
    assert all(path.exists() for path in written), [str(p) for p in written if not p.exists()]
    offenders = open_to_others(config.home()) + open_to_others(sandbox.home)
    assert not offenders, "open to group or others:\n" + "\n".join(offenders)
