"""Alembic's environment: migrate on the connection db/schema.py hands over (`streamfold setup`), or,
from the `alembic` command line, on STREAMFOLD_PG_DSN (`eval "$(streamfold stack env)"` sets it)."""

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
    with schema.engine(config.lookup("STREAMFOLD_PG_DSN")).begin() as connection:
        run(connection)
else:
    run(given)
