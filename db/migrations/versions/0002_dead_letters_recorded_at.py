"""An index on dead_letters (recorded_at): `streamfold status` counts the dead letters of the last hour.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("dead_letters_recorded_at", "dead_letters", ["recorded_at"], schema="streamfold")


def downgrade() -> None:
    op.drop_index("dead_letters_recorded_at", table_name="dead_letters", schema="streamfold")
