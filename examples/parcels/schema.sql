-- The tables of examples/parcels/pipeline.yaml: a parcel, its sender (parcels.sender_id) and the depots
-- that scan it. The columns the file does not carry (names, e-mails, phones) stay in PostgreSQL.
CREATE TABLE IF NOT EXISTS public.senders (
    id bigint PRIMARY KEY,
    country text,
    tier text,
    email text
);
CREATE TABLE IF NOT EXISTS public.parcels (
    id bigint PRIMARY KEY,
    sender_id bigint,
    service text,
    weight_kg numeric(8, 2),
    recipient_name text
);
CREATE TABLE IF NOT EXISTS public.depots (
    code text PRIMARY KEY,
    city text,
    region text,
    manager_phone text
);
