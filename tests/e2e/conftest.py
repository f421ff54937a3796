"""End-to-end fixtures on the session's stack: schema, snapshot rows, then the connector."""

from __future__ import annotations

import psycopg
import pytest

from common import config
from connectors.setup import run_setup
from db import schema

# Users that exist before the connector is registered: Debezium must deliver them as snapshot reads.
SNAPSHOT_USERS = [("snap_1", "asia"), ("snap_2", "europe"), ("snap_3", "americas")]


@pytest.fixture(scope="session")
def settings(stack) -> config.Settings:
    return config.load()


@pytest.fixture(scope="session")
def streamfold_setup(settings: config.Settings) -> config.Settings:
    schema.apply(settings.pg_dsn)
    with psycopg.connect(settings.pg_dsn) as conn:
        conn.cursor().executemany(
            "INSERT INTO public.users (userid, name, email, regionid, contactinfo) VALUES "
            "(%s, 'Snap Shot', 'snap@example.com', %s, '{\"city\": \"Nowhere\"}') ON CONFLICT DO NOTHING",
            SNAPSHOT_USERS,
        )
    run_setup(settings, echo=lambda _: None)
    return settings


@pytest.fixture
def pg(streamfold_setup: config.Settings):
    with psycopg.connect(streamfold_setup.pg_dsn, autocommit=True) as conn:
        yield conn
