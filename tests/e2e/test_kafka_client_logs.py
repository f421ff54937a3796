"""The Kafka clients against the session's real broker (common/kafka_logs.py): no raw librdkafka line on
stderr; a wrong password is a warning that says so, once per client, and the right one prints nothing."""

from __future__ import annotations

import pytest

from common import config
from tests.support.kafka_clients import RAW_LINE, stderr_of_clients

pytestmark = pytest.mark.e2e


def test_a_wrong_password_is_one_warning_per_client_and_no_raw_line(stack):
    stderr = stderr_of_clients(stack["STREAMFOLD_KAFKA_BOOTSTRAP"], {config.KAFKA_PASSWORD_VAR: "wrong"})
    assert not RAW_LINE.search(stderr), stderr[-3000:]
    warnings = stderr.strip().splitlines()
    assert warnings and all("Authentication failed" in line for line in warnings), stderr[-3000:]
    assert len(warnings) <= 3  # the producer, the consumer, the admin client


def test_the_right_password_prints_nothing(stack):
    assert stderr_of_clients(stack["STREAMFOLD_KAFKA_BOOTSTRAP"]).strip() == ""
