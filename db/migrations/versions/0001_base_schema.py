"""The schema db/schema.sql created before Alembic, adopting a database that already has it.

Revision ID: 0001
Revises:
Create Date: 2026-11-23

Every statement is idempotent: on a pre-Alembic install (no version table) it brings any earlier
db/schema.sql up to this revision, and leaves the rows where they are.
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS public.users (
        userid       text PRIMARY KEY,
        name         text,
        email        text,
        regionid     text,
        gender       text,
        interests    text[],
        contactinfo  jsonb,
        registertime bigint
    )""",
    "CREATE SCHEMA IF NOT EXISTS streamfold",
    """CREATE TABLE IF NOT EXISTS streamfold.cdc_heartbeat (
        id integer PRIMARY KEY,
        ts timestamptz NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS streamfold.enriched_clicks (
        event_id           text PRIMARY KEY,
        uid                text NOT NULL,
        click_time         timestamptz NOT NULL,
        click_url          text,
        device_type        text,
        click_location     text,
        clicks             integer NOT NULL,
        user_regionid      text NOT NULL,
        user_gender        text,
        user_interests     text[],
        user_registertime  bigint,
        profile_valid_from timestamptz,
        profile_complete   boolean NOT NULL DEFAULT true
    )""",
    # Databases created before join.max_wait.
    "ALTER TABLE streamfold.enriched_clicks ADD COLUMN IF NOT EXISTS profile_complete boolean NOT NULL "
    "DEFAULT true",
    "CREATE INDEX IF NOT EXISTS enriched_clicks_uid_time ON streamfold.enriched_clicks (uid, click_time)",
    """CREATE TABLE IF NOT EXISTS streamfold.clicks_per_region (
        region text PRIMARY KEY,
        clicks bigint NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS streamfold.url_region_click_count (
        url         text NOT NULL,
        region      text NOT NULL,
        click_count bigint NOT NULL,
        url_md5     uuid GENERATED ALWAYS AS (md5(url)::uuid) STORED,
        PRIMARY KEY (url_md5, region)
    )""",
    # Databases created before the md5 key: add it and move the primary key.
    """DO $$
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'streamfold'
                       AND table_name = 'url_region_click_count' AND column_name = 'url_md5') THEN
            ALTER TABLE streamfold.url_region_click_count
                ADD COLUMN url_md5 uuid GENERATED ALWAYS AS (md5(url)::uuid) STORED,
                DROP CONSTRAINT IF EXISTS url_region_click_count_pkey;
            ALTER TABLE streamfold.url_region_click_count ADD PRIMARY KEY (url_md5, region);
        END IF;
    END $$""",
    """CREATE TABLE IF NOT EXISTS streamfold.dead_letters (
        dead_letter_id text PRIMARY KEY,
        source         text NOT NULL,
        reason         text NOT NULL,
        payload        bytea,
        recorded_at    timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE TABLE IF NOT EXISTS streamfold.sink_batches (
        query        text NOT NULL,
        batch_id     bigint NOT NULL,
        rows         integer NOT NULL,
        committed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (query, batch_id)
    )""",
)


def upgrade() -> None:
    for statement in STATEMENTS:
        op.execute(statement)


def downgrade() -> None:
    # Below the base there is nothing to keep: public.users is the CDC source, the sink tables hold
    # the results. Drop the database to start over instead.
    raise NotImplementedError("0001 is the base revision: it has no downgrade")
