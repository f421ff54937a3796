"""Record shapes as users see them (docs/contracts.md "Topics"), written out: the spec the code is held to."""

# A user_clicks value's fields, in the order the sink writes them: the enriched click, times in epoch ms.
USER_CLICKS_FIELDS = (
    "event_id",
    "uid",
    "click_time",
    "click_url",
    "device_type",
    "click_location",
    "clicks",
    "user_regionid",
    "user_gender",
    "user_interests",
    "user_registertime",
    "profile_valid_from",
    "profile_complete",
)
