"""Alembic's environment: migrate on the connection db/schema.py hands over (`streamfold setup`), or,
from the `alembic` command line, on STREAMFOLD_PG_DSN (`eval "$(streamfold stack env)"` sets it), in a
transaction of db/schema.py `migrating`, as setup's."""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from common import config
from db import schema, tables


def run(connection: sa.Connection) -> None:
    # The version table lives in the streamfold schema, which must exist before the first revision runs.
    connection.exec_driver_sql(f"CREATE SCHEMA IF NOT EXISTS {tables.SCHEMA}")
    context.configure(connection=connection, **schema.MIGRATION_OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


given = context.config.attributes.get("connection")
if given is None:
    # The command line takes its locks as setup does (lock_timeout, retries): never queued behind a reader
    # with the job's statements queued behind it.
    schema.migrating(config.lookup("STREAMFOLD_PG_DSN"), run)
else:
    run(given)
