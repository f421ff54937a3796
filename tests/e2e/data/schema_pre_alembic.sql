-- Applied idempotently by `streamfold setup` (and by the compose postgres service at init).

-- The source table Debezium captures. name, email and contactinfo are PII: the publication and the
-- Debezium role's column grants leave them out, so they never leave this database.
CREATE TABLE IF NOT EXISTS public.users (
    userid       text PRIMARY KEY,
    name         text,
    email        text,
    regionid     text,
    gender       text,
    interests    text[],
    contactinfo  jsonb,
    registertime bigint
);

CREATE SCHEMA IF NOT EXISTS streamfold;

-- CDC progress: Debezium's heartbeat.action.query upserts this row every 200 ms; its change events are
-- routed into the users topic, in WAL commit order with the user changes (pipeline/cdc_fold.py).
CREATE TABLE IF NOT EXISTS streamfold.cdc_heartbeat (
    id integer PRIMARY KEY,
    ts timestamptz NOT NULL
);

-- One row per click, keyed by a deterministic event id derived from the click's source position.
CREATE TABLE IF NOT EXISTS streamfold.enriched_clicks (
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
    -- '-infinity' for a version read by the initial snapshot; NULL when the user had no valid profile.
    profile_valid_from timestamptz,
    -- false: released by join.max_wait before CDC progress covered the click (the profile may be stale).
    profile_complete   boolean NOT NULL DEFAULT true
);
ALTER TABLE streamfold.enriched_clicks ADD COLUMN IF NOT EXISTS profile_complete boolean NOT NULL DEFAULT true;
CREATE INDEX IF NOT EXISTS enriched_clicks_uid_time ON streamfold.enriched_clicks (uid, click_time);

CREATE TABLE IF NOT EXISTS streamfold.clicks_per_region (
    region text PRIMARY KEY,
    clicks bigint NOT NULL
);

-- Keyed by md5(url), not url: a btree key must stay under ~2.7 kB and a URL may be up to 64 KiB.
CREATE TABLE IF NOT EXISTS streamfold.url_region_click_count (
    url         text NOT NULL,
    region      text NOT NULL,
    click_count bigint NOT NULL,
    url_md5     uuid GENERATED ALWAYS AS (md5(url)::uuid) STORED,
    PRIMARY KEY (url_md5, region)
);
-- Databases created before the md5 key: add it and move the primary key (idempotent).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = 'streamfold'
                   AND table_name = 'url_region_click_count' AND column_name = 'url_md5') THEN
        ALTER TABLE streamfold.url_region_click_count
            ADD COLUMN url_md5 uuid GENERATED ALWAYS AS (md5(url)::uuid) STORED,
            DROP CONSTRAINT IF EXISTS url_region_click_count_pkey;
        ALTER TABLE streamfold.url_region_click_count ADD PRIMARY KEY (url_md5, region);
    END IF;
END $$;

-- Everything that could not be processed, with the reason and the original bytes.
CREATE TABLE IF NOT EXISTS streamfold.dead_letters (
    dead_letter_id text PRIMARY KEY,          -- deterministic: source position of the bad record
    source         text NOT NULL,             -- e.g. kafka:clicks, kinesis:clicks, kafka:cdc.public.users
    reason         text NOT NULL,
    payload        bytea,
    recorded_at    timestamptz NOT NULL DEFAULT now()
);

-- Exactly once: a micro-batch's rows and its id commit in one transaction; a replay is a no-op.
CREATE TABLE IF NOT EXISTS streamfold.sink_batches (
    query        text NOT NULL,
    batch_id     bigint NOT NULL,
    rows         integer NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (query, batch_id)
);
