"""Where every endpoint comes from: the environment, so the same code runs in both stacks.

A variable that is not set falls back to the local stack's `$STREAMFOLD_HOME/stack.env`
(written by `streamfold stack up`), so `make demo` works without `eval $(streamfold stack env)`.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from common import kafka_logs, names
from common import pipeline_file as pf

# The contract (docs/contracts.md "Environment variables"): the endpoints, the role passwords and AWS.
ENDPOINT_VARS = (
    "STREAMFOLD_PG_DSN",
    "STREAMFOLD_KAFKA_BOOTSTRAP",
    "STREAMFOLD_CONNECT_URL",
    "STREAMFOLD_KINESIS_ENDPOINT",
    "STREAMFOLD_REGISTRY_URL",
)
AWS_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
# Where the clicks come from, if not the contract's `clicks` topic and stream: several pipelines can share
# a broker, and each test scenario reads only its own input.
INPUT_VARS = ("STREAMFOLD_CLICKS_TOPIC", "STREAMFOLD_CLICKS_STREAM")

# Least-privilege roles created by `streamfold setup` (db/schema.py), and the variable holding each one's
# password: defined here only.
DEBEZIUM_ROLE = "streamfold_debezium"
WRITER_ROLE = "streamfold_writer"
READER_ROLE = "streamfold_reader"
PASSWORD_VARS = {
    DEBEZIUM_ROLE: "STREAMFOLD_DEBEZIUM_PASSWORD",
    WRITER_ROLE: "STREAMFOLD_WRITER_PASSWORD",
    READER_ROLE: "STREAMFOLD_READER_PASSWORD",
}
# Kafka (SASL/SCRAM) and Kafka Connect's REST API (HTTP Basic) authenticate every client: one client
# identity each (docs/decisions/kafka-and-connect-authentication.md). A password left unset or empty:
# that client connects without authentication (to a broker or worker that asks for none).
KAFKA_USER_VAR = "STREAMFOLD_KAFKA_USER"
KAFKA_PASSWORD_VAR = "STREAMFOLD_KAFKA_PASSWORD"
CONNECT_USER_VAR = "STREAMFOLD_CONNECT_USER"
CONNECT_PASSWORD_VAR = "STREAMFOLD_CONNECT_PASSWORD"
# The schema registry (Apicurio, its Confluent-compatible API) asks for HTTP Basic credentials too: anyone
# who reaches it could otherwise write schemas (docs/operations.md "The schema registry").
REGISTRY_URL_VAR = "STREAMFOLD_REGISTRY_URL"
REGISTRY_USER_VAR = "STREAMFOLD_REGISTRY_USER"
REGISTRY_PASSWORD_VAR = "STREAMFOLD_REGISTRY_PASSWORD"
# The broker's own login (the broker connects to itself; the controller listener): the stacks' Kafka only.
KAFKA_BROKER_PASSWORD_VAR = "STREAMFOLD_KAFKA_BROKER_PASSWORD"
CLIENT_USER = "streamfold"
SCRAM_MECHANISM = "SCRAM-SHA-512"
SECRET_VARS = (*PASSWORD_VARS.values(), KAFKA_PASSWORD_VAR, CONNECT_PASSWORD_VAR, REGISTRY_PASSWORD_VAR)
LOGIN_VARS = (KAFKA_USER_VAR, CONNECT_USER_VAR, REGISTRY_USER_VAR)
# Every password a stack generates (the local stack's secrets.json, the compose stack's secrets volume):
# the superuser's, the roles' and clients', and the broker's own.
STACK_PASSWORD_VARS = ("STREAMFOLD_PG_PASSWORD", *SECRET_VARS, KAFKA_BROKER_PASSWORD_VAR)


def new_passwords(names: Iterable[str]) -> dict[str, str]:
    """A new password for each name (URL-safe: they go into connection URLs and JAAS configs)."""
    return {name: secrets.token_urlsafe(24) for name in names}


# Where settings not in the environment are read from, when not the local stack's stack.env.
ENV_FILE_VAR = "STREAMFOLD_ENV_FILE"


class ConfigError(RuntimeError):
    """A required setting is missing; the message names it."""


# What streamfold writes under the home is its owner's only: folders 0700, files 0600 (docs/contracts.md,
# "Files under STREAMFOLD_HOME").
PRIVATE_UMASK = 0o077


def home() -> Path:
    return Path(os.environ.get("STREAMFOLD_HOME", ".streamfold")).resolve()


def stack_env_file(base: Path | None = None) -> Path:
    """The env file settings fall back to: STREAMFOLD_ENV_FILE (the compose stack's generated secrets),
    else the local stack's `stack.env`."""
    chosen = os.environ.get(ENV_FILE_VAR)
    return Path(chosen) if chosen and base is None else (base or home()) / "stack.env"


def read_env_file(path: Path) -> dict[str, str]:
    """Parse `export KEY=VALUE` / `KEY=VALUE` lines (the format `stack env` prints)."""
    return parse_env(path.read_text()) if path.exists() else {}


def parse_env(text: str) -> dict[str, str]:
    """The settings of `export KEY=VALUE` / `KEY=VALUE` lines; comments and other lines are skipped."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip().removeprefix("export ").strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("'\"")
    return values


def lookup(name: str, default: str | None = None) -> str:
    """A setting from the environment, else the local stack's env file, else `default`."""
    value = os.environ.get(name) or read_env_file(stack_env_file()).get(name) or default
    if value is None:
        raise ConfigError(
            f"{name} is not set: export it, or start the local stack with `streamfold stack up`"
        )
    return value


@dataclass(frozen=True)
class Settings:
    pg_dsn: str
    kafka_bootstrap: str
    connect_url: str
    kinesis_endpoint: str
    home: Path
    clicks_topic: str = names.CLICKS_TOPIC
    clicks_stream: str = names.CLICKS_STREAM
    # What the appliance joins and aggregates (--pipeline / STREAMFOLD_PIPELINE / ./streamfold.yaml).
    pipeline: pf.Pipeline = field(default_factory=pf.load)

    def role_dsn(self, role: str) -> str:
        """The admin DSN with another role's credentials (same host, port, database)."""
        params = {**conninfo_to_dict(self.pg_dsn), "user": role, "password": lookup(PASSWORD_VARS[role])}
        return make_conninfo("", **params)

    @property
    def writer_dsn(self) -> str:
        return self.role_dsn(WRITER_ROLE)

    @property
    def reader_dsn(self) -> str:
        return self.role_dsn(READER_ROLE)


def load() -> Settings:
    """The endpoints and the pipeline file; a bad pipeline file raises pipeline_file.PipelineFileError."""
    pipeline = pf.load()
    return Settings(
        pg_dsn=lookup("STREAMFOLD_PG_DSN"),
        kafka_bootstrap=lookup("STREAMFOLD_KAFKA_BOOTSTRAP"),
        connect_url=lookup("STREAMFOLD_CONNECT_URL").rstrip("/"),
        kinesis_endpoint=lookup("STREAMFOLD_KINESIS_ENDPOINT", ""),
        home=home(),
        clicks_topic=lookup("STREAMFOLD_CLICKS_TOPIC", pipeline.events.kafka_topic or names.CLICKS_TOPIC),
        clicks_stream=lookup(
            "STREAMFOLD_CLICKS_STREAM", pipeline.events.kinesis_stream or names.CLICKS_STREAM
        ),
        pipeline=pipeline,
    )


def aws_settings() -> dict[str, str | None]:
    """boto3 client kwargs: standard AWS variables, with STREAMFOLD_KINESIS_ENDPOINT as override."""
    endpoint = lookup("STREAMFOLD_KINESIS_ENDPOINT", "") or None
    env_file = read_env_file(stack_env_file())
    region = os.environ.get("AWS_DEFAULT_REGION") or os.environ.get("AWS_REGION")
    region = region or env_file.get("AWS_DEFAULT_REGION")
    return {
        "endpoint_url": endpoint,
        "region_name": region,
        "aws_access_key_id": os.environ.get("AWS_ACCESS_KEY_ID") or env_file.get("AWS_ACCESS_KEY_ID"),
        "aws_secret_access_key": os.environ.get("AWS_SECRET_ACCESS_KEY")
        or env_file.get("AWS_SECRET_ACCESS_KEY"),
    }


@dataclass(frozen=True)
class Login:
    user: str
    password: str


def _login(user_var: str, password_var: str) -> Login | None:
    password = lookup(password_var, "")
    return Login(lookup(user_var, CLIENT_USER), password) if password else None


def kafka_login() -> Login | None:
    """The Kafka client identity (SASL/SCRAM), or None for a broker without authentication."""
    return _login(KAFKA_USER_VAR, KAFKA_PASSWORD_VAR)


def connect_auth() -> tuple[str, str] | None:
    """requests' `auth` for Kafka Connect's REST API (HTTP Basic), or None for a worker without it."""
    login = _login(CONNECT_USER_VAR, CONNECT_PASSWORD_VAR)
    return (login.user, login.password) if login else None


def registry_url() -> str:
    """The schema registry's Confluent-compatible API (…/apis/ccompat/v7), or "" where none is set."""
    return lookup(REGISTRY_URL_VAR, "").rstrip("/")


def registry_auth() -> tuple[str, str] | None:
    """requests' `auth` for the schema registry (HTTP Basic), or None for a registry without it."""
    login = _login(REGISTRY_USER_VAR, REGISTRY_PASSWORD_VAR)
    return (login.user, login.password) if login else None


def scram_jaas(login: Login) -> str:
    """A Java Kafka client's sasl.jaas.config for `login` (the passwords are URL-safe: no quoting)."""
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{login.user}" password="{login.password}";'
    )


def java_kafka_settings(login: Login | None) -> dict[str, str]:
    """A Java Kafka client's security settings (Spark's Kafka source, the Connect worker, the sink)."""
    if login is None:
        return {}
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.jaas.config": scram_jaas(login),
    }


# confluent-kafka's type for a client's settings (the logger and error_cb are Python objects).
ClientSettings = dict[str, Any]


def librdkafka_settings(bootstrap: str, login: Login | None) -> ClientSettings:
    """librdkafka's (confluent-kafka's) connection settings: the brokers and the client identity, and its
    log lines and errors through logging (common/kafka_logs.py)."""
    if login is None:
        return {"bootstrap.servers": bootstrap, **kafka_logs.client_logging()}
    return {
        "bootstrap.servers": bootstrap,
        **kafka_logs.client_logging(),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": SCRAM_MECHANISM,
        "sasl.username": login.user,
        "sasl.password": login.password,
    }


def kafka_client_settings(bootstrap: str) -> ClientSettings:
    """librdkafka's settings for the configured broker and client identity (kafka_login)."""
    return librdkafka_settings(bootstrap, kafka_login())


def spark_kafka_options() -> dict[str, str]:
    """Spark's Kafka source options for the configured client identity (kafka.-prefixed client settings)."""
    return {f"kafka.{key}": value for key, value in java_kafka_settings(kafka_login()).items()}
