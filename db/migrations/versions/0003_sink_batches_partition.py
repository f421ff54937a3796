"""The batch ledger claims each partition of a micro-batch: executors land their partitions themselves.

A micro-batch's partitions are written to Postgres by the executors that computed them, each in one
transaction that claims (query, batch_id, partition_id); a replayed partition finds its claim and
writes nothing. Rows from before this revision (the driver wrote whole batches) become partition 0.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "sink_batches",
        sa.Column("partition_id", sa.Integer, nullable=False, server_default="0"),
        schema="streamfold",
    )
    op.drop_constraint("sink_batches_pkey", "sink_batches", schema="streamfold")
    op.create_primary_key(
        "sink_batches_pkey", "sink_batches", ["query", "batch_id", "partition_id"], schema="streamfold"
    )


def downgrade() -> None:
    # One row per batch again, with the rows of all its partitions.
    op.execute(
        """UPDATE streamfold.sink_batches b SET rows = s.rows
             FROM (SELECT query, batch_id, sum(rows) AS rows FROM streamfold.sink_batches
                   GROUP BY query, batch_id) s
            WHERE b.query = s.query AND b.batch_id = s.batch_id"""
    )
    op.execute(
        """DELETE FROM streamfold.sink_batches a USING streamfold.sink_batches b
            WHERE a.query = b.query AND a.batch_id = b.batch_id AND a.partition_id > b.partition_id"""
    )
    op.drop_constraint("sink_batches_pkey", "sink_batches", schema="streamfold")
    op.create_primary_key("sink_batches_pkey", "sink_batches", ["query", "batch_id"], schema="streamfold")
    op.drop_column("sink_batches", "partition_id", schema="streamfold")
