"""Every table streamfold owns, as SQLAlchemy Core: the schema's source of truth.

db/migrations/ turns changes here into revisions (tests/e2e/test_migrations.py fails when the two
differ). Downstream applications import the tables to query them:

    from db.tables import enriched_clicks
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

SCHEMA = "streamfold"

# PostgreSQL's own names for unnamed constraints, so the metadata and the database agree on them.
metadata = sa.MetaData(
    naming_convention={
        "pk": "%(table_name)s_pkey",
        "uq": "%(table_name)s_%(column_0_N_name)s_key",
        "fk": "%(table_name)s_%(column_0_name)s_fkey",
    }
)

# The source table Debezium captures. name, email and contactinfo are PII: the publication and the
# Debezium role's column grants (db/schema.py) leave them out, so they never leave this database.
users = sa.Table(
    "users",
    metadata,
    sa.Column("userid", sa.Text, primary_key=True),
    sa.Column("name", sa.Text),
    sa.Column("email", sa.Text),
    sa.Column("regionid", sa.Text),
    sa.Column("gender", sa.Text),
    sa.Column("interests", ARRAY(sa.Text)),
    sa.Column("contactinfo", JSONB),
    sa.Column("registertime", sa.BigInteger),
    schema="public",
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

# One row per click, keyed by a deterministic event id derived from the click's source position.
enriched_clicks = sa.Table(
    "enriched_clicks",
    metadata,
    sa.Column("event_id", sa.Text, primary_key=True),
    sa.Column("uid", sa.Text, nullable=False),
    sa.Column("click_time", sa.DateTime(timezone=True), nullable=False),
    sa.Column("click_url", sa.Text),
    sa.Column("device_type", sa.Text),
    sa.Column("click_location", sa.Text),
    sa.Column("clicks", sa.Integer, nullable=False),
    sa.Column("user_regionid", sa.Text, nullable=False),
    sa.Column("user_gender", sa.Text),
    sa.Column("user_interests", ARRAY(sa.Text)),
    sa.Column("user_registertime", sa.BigInteger),
    # '-infinity' for a version read by the initial snapshot; NULL when the user had no valid profile.
    sa.Column("profile_valid_from", sa.DateTime(timezone=True)),
    # false: released by join.max_wait before CDC progress covered the click (the profile may be stale).
    sa.Column("profile_complete", sa.Boolean, nullable=False, server_default=sa.text("true")),
    sa.Index("enriched_clicks_uid_time", "uid", "click_time"),
    schema=SCHEMA,
)

clicks_per_region = sa.Table(
    "clicks_per_region",
    metadata,
    sa.Column("region", sa.Text, primary_key=True),
    sa.Column("clicks", sa.BigInteger, nullable=False),
    schema=SCHEMA,
)

# Keyed by md5(url), not url: a btree key must stay under ~2.7 kB and a URL may be up to 64 KiB.
url_region_click_count = sa.Table(
    "url_region_click_count",
    metadata,
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("region", sa.Text, nullable=False),
    sa.Column("click_count", sa.BigInteger, nullable=False),
    sa.Column("url_md5", sa.Uuid, sa.Computed("md5(url)::uuid", persisted=True)),
    sa.PrimaryKeyConstraint("url_md5", "region"),
    schema=SCHEMA,
)

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
