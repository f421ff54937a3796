"""The pipeline file each installation was set up with: `streamfold setup` records it, and refuses a
later file whose changes the sink tables or the join's state cannot absorb. json, not jsonb: the order
of the file's columns and fields is part of it.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pipelines",
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("spec", sa.JSON, nullable=False),
        sa.Column("applied_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        schema="streamfold",
    )


def downgrade() -> None:
    op.drop_table("pipelines", schema="streamfold")
