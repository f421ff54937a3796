"""Replaying dead letters (`streamfold dead-letters replay`, streamfold/dead_letters.py): when a replay
claimed a letter, when it marked it replayed, and the id of the record it sent (its source position: the
event's event_id, or the dead_letter_id of the letter it became). Older rows: NULL, never replayed.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for name, kind in (
        ("replay_started_at", sa.DateTime(timezone=True)),
        ("replayed_at", sa.DateTime(timezone=True)),
        ("replayed_as", sa.Text),
    ):
        op.add_column("dead_letters", sa.Column(name, kind), schema="streamfold")


def downgrade() -> None:
    for name in ("replayed_as", "replayed_at", "replay_started_at"):
        op.drop_column("dead_letters", name, schema="streamfold")
