"""Secrets and the PII boundary on the session's stack: what a holder of a credential, a file or a
process's environment can and cannot read."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest
import requests

from common import config, names
from stack import lifecycle
from stack.home import PG_DATABASE, open_stack
from stack.prerequisites import pg_bindir

pytestmark = pytest.mark.e2e


def test_the_connector_config_holds_a_reference_not_the_password(streamfold_setup):
    password = config.lookup("STREAMFOLD_DEBEZIUM_PASSWORD")
    url = f"{streamfold_setup.connect_url}/connectors/{names.CONNECTOR_NAME}/config"
    connector = requests.get(url, timeout=10).json()
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
    for name in ("kafka", "connect", "kinesis"):
        pid = lifecycle.service(stack, name).pid()
        assert pid, f"{name} is not running"
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert "STREAMFOLD_PG_DSN" not in environ
        leaked = [secret for secret, value in others.items() if value in environ]
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
