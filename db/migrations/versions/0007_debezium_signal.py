"""Debezium's signal table: `streamfold setup` asks the connector here for an incremental snapshot of the
profile table when its capture was lost (connectors/setup.py), and Debezium writes its snapshot windows'
watermarks here.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "debezium_signal",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("data", sa.Text),
        schema="streamfold",
    )


def downgrade() -> None:
    op.drop_table("debezium_signal", schema="streamfold")
