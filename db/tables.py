"""Every table streamfold owns, as SQLAlchemy Core: the schema's source of truth.

db/migrations/ turns changes here into revisions (tests/e2e/test_migrations.py fails when the two
differ). Downstream applications import the tables to query them:

    from db.tables import enriched_clicks
"""

from __future__ import annotations

import sqlalchemy as sa

from common import pipeline_file as pf
from db import pipeline_tables

SCHEMA = "streamfold"

# PostgreSQL's own names for unnamed constraints, so the metadata and the database agree on them.
metadata = sa.MetaData(
    naming_convention={
        "pk": "%(table_name)s_pkey",
        "uq": "%(table_name)s_%(column_0_N_name)s_key",
        "fk": "%(table_name)s_%(column_0_name)s_fkey",
    }
)

# CDC progress: Debezium's heartbeat.action.query upserts this row every 200 ms; its change events are
# routed into the users topic, in WAL commit order with the user changes (spec/envelopes.py).
cdc_heartbeat = sa.Table(
    "cdc_heartbeat",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
    schema=SCHEMA,
)

# Debezium's signal table (signal.data.collection): `streamfold setup` inserts an incremental snapshot of the
# profile table here when its capture was lost, and Debezium its snapshot windows' watermarks
# (connectors/setup.py). Its three columns are the ones Debezium requires, in its order.
debezium_signal = sa.Table(
    "debezium_signal",
    metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("type", sa.Text, nullable=False),
    sa.Column("data", sa.Text),
    schema=SCHEMA,
)

# The default pipeline's sink tables (streamfold.yaml: the enriched table and one table per aggregate),
# derived from the file as any pipeline's are (db/pipeline_tables.py); the first migrations created them.
# The demo's source table, public.users, is the demo's own: the first migration creates it, and nothing
# here owns it.
pipeline_tables.metadata(pf.load(pf.DEFAULT_PATH), into=metadata)
enriched_clicks = metadata.tables["streamfold.enriched_clicks"]

# Everything that could not be processed, with the reason and the original bytes.
dead_letters = sa.Table(
    "dead_letters",
    metadata,
    # Deterministic: the source position of the bad record.
    sa.Column("dead_letter_id", sa.Text, primary_key=True),
    # e.g. kafka:clicks, kinesis:clicks, kafka:cdc.public.users
    sa.Column("source", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("payload", sa.LargeBinary),
    sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    # `streamfold dead-letters replay` (streamfold/dead_letters.py): claimed, then marked replayed with the
    # id (source position) of the record it sent. NULL: never replayed.
    sa.Column("replay_started_at", sa.DateTime(timezone=True)),
    sa.Column("replayed_at", sa.DateTime(timezone=True)),
    sa.Column("replayed_as", sa.Text),
    # `streamfold status` counts the dead letters of the last hour.
    sa.Index("dead_letters_recorded_at", "recorded_at"),
    schema=SCHEMA,
)

# Exactly once: each partition of a micro-batch commits its rows and its claim in one transaction; a
# replayed partition is a no-op.
sink_batches = sa.Table(
    "sink_batches",
    metadata,
    sa.Column("query", sa.Text, primary_key=True),
    sa.Column("batch_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("partition_id", sa.Integer, primary_key=True, autoincrement=False, server_default="0"),
    sa.Column("rows", sa.Integer, nullable=False),
    sa.Column("committed_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    schema=SCHEMA,
)

# The pipeline file each pipeline was last set up with (`streamfold setup`, db/pipeline_schema.py): a later
# file is held against it.
pipelines = sa.Table(
    "pipelines",
    metadata,
    sa.Column("name", sa.Text, primary_key=True),
    sa.Column("spec", sa.JSON, nullable=False),
    sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
    schema=SCHEMA,
)
