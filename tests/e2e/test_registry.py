"""The schema registry on the session's stack: Apicurio's Confluent-compatible API, for the stack's login
only, on loopback only, its schemas kept across a restart."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import requests

from common import config
from stack import lifecycle
from stack.home import existing_stack

pytestmark = pytest.mark.e2e

SCHEMA_TYPE = "application/vnd.schemaregistry.v1+json"
TCP_LISTEN = "0A"


def register(url: str, subject: str, record: str, auth: tuple[str, str] | None) -> requests.Response:
    schema = {
        "schema": json.dumps({"type": "record", "name": record, "fields": [{"name": "id", "type": "long"}]})
    }
    headers = {"Content-Type": SCHEMA_TYPE}
    return requests.post(
        f"{url}/subjects/{subject}/versions", json=schema, headers=headers, auth=auth, timeout=30
    )


def schema_name(url: str, schema_id: int, auth: tuple[str, str] | None) -> str:
    answer = requests.get(f"{url}/schemas/ids/{schema_id}", auth=auth, timeout=30)
    assert answer.status_code == 200, answer.text
    return str(json.loads(answer.json()["schema"])["name"])


def listen_addresses(port: int) -> set[str]:
    """The local addresses of the TCP sockets listening on `port` (/proc/net/tcp and tcp6, hex-encoded)."""
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path("/proc/net", table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == TCP_LISTEN and int(hex_port, 16) == port:
                # The kernel prints each 32-bit word in host (little-endian) order.
                raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
                found.add(socket.inet_ntop(family, raw))
    return found


def test_a_schema_registered_with_the_stacks_login_reads_back_by_id(stack: dict[str, str]) -> None:
    url, auth = config.registry_url(), config.registry_auth()
    assert url.endswith("/apis/ccompat/v7") and auth is not None
    posted = register(url, "e2e-login-value", "Login", auth)
    assert posted.status_code == 200, posted.text
    assert schema_name(url, posted.json()["id"], auth) == "Login"
    subjects = requests.get(f"{url}/subjects", auth=auth, timeout=30).json()
    assert "e2e-login-value" in subjects


def test_no_login_or_a_wrong_password_is_refused(stack: dict[str, str]) -> None:
    url, auth = config.registry_url(), config.registry_auth()
    assert auth is not None
    for wrong in (None, (auth[0], auth[1] + "x")):
        assert register(url, "e2e-refused-value", "Refused", wrong).status_code == 401
        assert requests.get(f"{url}/subjects", auth=wrong, timeout=30).status_code == 401
    assert "e2e-refused-value" not in requests.get(f"{url}/subjects", auth=auth, timeout=30).json()


def test_the_api_and_the_management_port_listen_on_loopback_only(stack: dict[str, str]) -> None:
    ports = existing_stack(Path(stack["STREAMFOLD_HOME"]))
    assert ports is not None
    for name in ("registry", "registry-management"):
        addresses = listen_addresses(ports.ports[name])
        assert addresses and addresses <= {"127.0.0.1", "::ffff:127.0.0.1"}, (name, addresses)


def test_schemas_survive_a_restart_and_status_shows_the_registry(stack: dict[str, str]) -> None:
    url, auth = config.registry_url(), config.registry_auth()
    home = Path(stack["STREAMFOLD_HOME"])
    posted = register(url, "e2e-restart-value", "Restart", auth)
    assert posted.status_code == 200, posted.text
    lifecycle.restart_service(home, "registry")
    assert schema_name(url, posted.json()["id"], auth) == "Restart"
    (row,) = [row for row in lifecycle.status(home) if row.name == "registry"]
    assert row.up and row.endpoint == url
