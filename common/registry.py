"""The schema registry's settings, shared by both stacks: Apicurio Registry 3, a Quarkus app.

The local stack writes them into its conf/ (stack/registry.py); the compose stack's `secrets` service into
the secrets volume (streamfold/compose_secrets.py). A file, not the command line: it holds the password.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fastavro
import requests

from common import config

# The Confluent-compatible API (what Kafka serdes speak); the registry's own v3 API answers too.
CCOMPAT_PATH = "/apis/ccompat/v7"
SCHEMA_TYPE = "application/vnd.schemaregistry.v1+json"


@dataclass(frozen=True)
class Listen:
    """Where the API and the management port (health, metrics) listen."""

    host: str
    port: int
    management_host: str
    management_port: int


def properties(listen: Listen, data_dir: Path, tmp_dir: Path, login: config.Login) -> dict[str, object]:
    """Apicurio's settings besides its defaults: where it listens, its H2 file, its one user."""
    return {
        "quarkus.http.host": listen.host,
        "quarkus.http.port": listen.port,
        "quarkus.management.host": listen.management_host,
        "quarkus.management.port": listen.management_port,
        # A file, not Apicurio's default in-memory H2: schemas (and their ids) survive a restart.
        "apicurio.datasource.url": f"jdbc:h2:file:{data_dir}/registry",
        # An embedded H2 needs no pool of 20 connections (Apicurio's default, sized for a remote database).
        "apicurio.datasource.jdbc.initial-size": 2,
        "apicurio.datasource.jdbc.min-size": 2,
        "apicurio.storage.snapshot.location": tmp_dir,
        # HTTP Basic on every path of the API port (the management port serves health and metrics only).
        # Quarkus warns that auth.basic is fixed at build time, yet without it every request gets 401.
        "quarkus.http.auth.basic": "true",
        "quarkus.security.users.embedded.enabled": "true",
        "quarkus.security.users.embedded.plain-text": "true",
        f"quarkus.security.users.embedded.users.{login.user}": login.password,
        f"quarkus.security.users.embedded.roles.{login.user}": "sr-admin",
        "quarkus.http.auth.permission.authenticated.paths": "/*",
        "quarkus.http.auth.permission.authenticated.policy": "authenticated",
        # Vert.x's file cache (classpath resources copied to java.io.tmpdir/vertx-cache) is made open to
        # others whatever the umask; the registry serves no static files, so it needs none.
        "quarkus.vertx.caching": "false",
        "quarkus.vertx.classpath-resolving": "false",
    }


def properties_text(values: dict[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


def header(schema_id: int) -> bytes:
    """The Confluent wire format's header: the magic byte 0, the schema id in 4 bytes big-endian."""
    return b"\x00" + schema_id.to_bytes(4, "big")


class RegistryUnavailable(RuntimeError):
    """The registry could not be asked (refused, timed out) or answered 429 or 5xx: an outage to wait out."""


def register(subject: str, writer_schema: dict[str, Any]) -> int:
    """The id the registry (STREAMFOLD_REGISTRY_URL, its ccompat API) gives the Avro schema under the
    subject: the same id for a schema the subject has. RegistryUnavailable on an outage, RuntimeError when
    it refuses the schema."""
    url = f"{config.registry_url()}/subjects/{subject}/versions"
    try:
        answer = requests.post(
            url,
            json={"schema": json.dumps(writer_schema)},
            headers={"Content-Type": SCHEMA_TYPE},
            auth=config.registry_auth(),
            timeout=30,
        )
    except (requests.ConnectionError, requests.Timeout) as exc:
        raise RegistryUnavailable(f"the schema registry at {url}: {exc}") from exc
    if answer.status_code == 429 or answer.status_code >= 500:
        raise RegistryUnavailable(f"the schema registry at {url} answered {answer.status_code}")
    if answer.status_code != 200:
        raise RuntimeError(f"the registry refused the schema under {subject}: {answer.text[:300]}")
    return int(answer.json()["id"])


def decode(raw: bytes, schemas: dict[int, Any], timeout_s: float = 30) -> Any:
    """A record in the Confluent wire format, read with its writer's schema (asked of the registry once per
    id, kept in `schemas`). Raises what fastavro raises on a payload that does not decode, and requests'
    errors when the registry cannot be asked."""
    schema_id = int.from_bytes(raw[1:5], "big")
    if schema_id not in schemas:
        answer = requests.get(
            f"{config.registry_url()}/schemas/ids/{schema_id}", auth=config.registry_auth(), timeout=timeout_s
        )
        answer.raise_for_status()
        schemas[schema_id] = fastavro.parse_schema(json.loads(answer.json()["schema"]))
    return fastavro.schemaless_reader(io.BytesIO(raw[5:]), schemas[schema_id], None)
