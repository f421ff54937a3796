"""The default pipeline's profile history and explained joins: every profile version the join stores, in
streamfold.profile_history_clicks (the sink inserts it in the partition's transaction), and in each enriched
row the CDC progress at its release and whether join.max_wait released it (older rows: NULL). The view and
function over the history are `streamfold setup`'s (db/history.py), for every pipeline alike.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "enriched_clicks", sa.Column("cdc_progress", sa.DateTime(timezone=True)), schema="streamfold"
    )
    op.add_column("enriched_clicks", sa.Column("released_by_max_wait", sa.Boolean), schema="streamfold")
    op.create_table(
        "profile_history_clicks",
        sa.Column("userid", sa.Text, primary_key=True),
        sa.Column("valid_from", sa.DateTime(timezone=True), primary_key=True),
        sa.Column("lsn", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("op", sa.Text, nullable=False),
        sa.Column("incomplete", sa.Text),
        sa.Column("regionid", sa.Text),
        sa.Column("gender", sa.Text),
        sa.Column("interests", ARRAY(sa.Text)),
        sa.Column("registertime", sa.BigInteger),
        schema="streamfold",
    )


def downgrade() -> None:
    op.execute("DROP FUNCTION IF EXISTS streamfold.profile_at_clicks(text, timestamptz)")
    op.execute("DROP VIEW IF EXISTS streamfold.profile_versions_clicks")
    op.drop_table("profile_history_clicks", schema="streamfold")
    op.drop_column("enriched_clicks", "released_by_max_wait", schema="streamfold")
    op.drop_column("enriched_clicks", "cdc_progress", schema="streamfold")
