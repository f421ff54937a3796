"""Every topic, stream, table and connector name of the contract (docs/contracts.md), and the values that
stand for "no region" and "before any click", defined once."""

from __future__ import annotations

CDC_TOPIC_PREFIX = "cdc"
CDC_USERS_TOPIC = f"{CDC_TOPIC_PREFIX}.public.users"
# Debezium's default heartbeat topics: <topic.heartbeat.prefix>.<topic.prefix>.
HEARTBEAT_TOPIC_PREFIX = "__debezium-heartbeat"
HEARTBEAT_TOPIC = f"{HEARTBEAT_TOPIC_PREFIX}.{CDC_TOPIC_PREFIX}"

CLICKS_TOPIC = "clicks"
CLICKS_STREAM = "clicks"  # Kinesis
USERS_CHANGELOG_TOPIC = "users_changelog"
USER_CLICKS_TOPIC = "user_clicks"
CLICKS_PER_REGION_TOPIC = "clicks_per_region"
URL_REGION_TOPIC = "url_region_click_count"
DLQ_TOPIC = "clicks_dlq"

# Topics `streamfold setup` creates; (name, compacted).
PIPELINE_TOPICS: tuple[tuple[str, bool], ...] = (
    (CLICKS_TOPIC, False),
    (USERS_CHANGELOG_TOPIC, True),
    (USER_CLICKS_TOPIC, False),
    (CLICKS_PER_REGION_TOPIC, True),
    (URL_REGION_TOPIC, True),
    (DLQ_TOPIC, False),
)

# The largest record the job writes to user_clicks or users_changelog, and those topics' max.message.bytes
# (`streamfold setup`): a record carries a profile (from a change event of up to 1 MiB,
# pipeline.cdc_fold.MAX_CHANGE_BYTES) and a click (up to 64 KiB), so it can pass the broker's default 1 MB.
OUTPUT_RECORD_MAX_BYTES = 4 * 1024 * 1024

CONNECTOR_NAME = "streamfold-users"
SLOT_NAME = "streamfold_users"
PUBLICATION_NAME = "streamfold_users"

SINK_SCHEMA = "streamfold"
ENRICHED_CLICKS_TABLE = f"{SINK_SCHEMA}.enriched_clicks"
CLICKS_PER_REGION_TABLE = f"{SINK_SCHEMA}.clicks_per_region"
URL_REGION_TABLE = f"{SINK_SCHEMA}.url_region_click_count"
DEAD_LETTERS_TABLE = f"{SINK_SCHEMA}.dead_letters"

UNKNOWN_REGION = "UNKNOWN"

# Valid-from of snapshot rows (op=r): before any click. Small enough to be below every real time, far
# enough from the long range that adding a retention cannot overflow.
BEGINNING_OF_TIME_MS = -(2**62)
