"""Where every endpoint comes from: the environment, so the same code runs in both stacks.

A variable that is not set falls back to the local stack's `$STREAMFOLD_HOME/stack.env`
(written by `streamfold stack up`), so `make demo` works without `eval $(streamfold stack env)`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from common import names
from common import pipeline_file as pf

# The contract (docs/contracts.md "Environment variables"): the endpoints, the role passwords and AWS.
ENDPOINT_VARS = (
    "STREAMFOLD_PG_DSN",
    "STREAMFOLD_KAFKA_BOOTSTRAP",
    "STREAMFOLD_CONNECT_URL",
    "STREAMFOLD_KINESIS_ENDPOINT",
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
SECRET_VARS = tuple(PASSWORD_VARS.values())


class ConfigError(RuntimeError):
    """A required setting is missing; the message names it."""


# What streamfold writes under the home is its owner's only: folders 0700, files 0600 (docs/contracts.md,
# "Files under STREAMFOLD_HOME").
PRIVATE_UMASK = 0o077


def home() -> Path:
    return Path(os.environ.get("STREAMFOLD_HOME", ".streamfold")).resolve()


def stack_env_file(base: Path | None = None) -> Path:
    return (base or home()) / "stack.env"


def read_env_file(path: Path) -> dict[str, str]:
    """Parse `export KEY=VALUE` / `KEY=VALUE` lines (the format `stack env` prints)."""
    if not path.exists():
        return {}
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
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
