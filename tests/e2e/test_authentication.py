"""Kafka and Kafka Connect refuse clients without the stack's credentials: any local user reaches their
loopback ports, and a forged change event in the CDC topic would fold into the profiles."""

from __future__ import annotations

import json
import uuid

import pytest
import requests

from common import config, names
from connectors import setup as connector_setup
from tests.support.kafka import produce_once, read_all

pytestmark = pytest.mark.e2e


def forged_change(user_id: str) -> bytes:
    """A Debezium-shaped create of a profile nobody inserted."""
    return json.dumps({"payload": {"op": "c", "before": None, "after": {"user_id": user_id}}}).encode()


def test_an_unauthenticated_producer_cannot_write_the_cdc_topic(streamfold_setup):
    forged = f"forged-{uuid.uuid4()}"
    bootstrap = streamfold_setup.kafka_bootstrap
    error = produce_once(
        {"bootstrap.servers": bootstrap}, names.CDC_USERS_TOPIC, forged.encode(), forged_change(forged)
    )
    assert error is not None, "the broker took a record from a client that did not authenticate"
    # Nothing reached the topic, so nothing can fold: every record up to its end is the connector's.
    assert all(forged not in json.dumps(m.value) for m in read_all(bootstrap, names.CDC_USERS_TOPIC))


def test_a_wrong_kafka_password_is_refused(streamfold_setup):
    login = config.kafka_login()
    assert login is not None, "the stack's Kafka client login is not exported"
    settings = config.librdkafka_settings(streamfold_setup.kafka_bootstrap, config.Login(login.user, "wrong"))
    error = produce_once(settings, names.CDC_USERS_TOPIC, b"forged", forged_change("forged"))
    assert error is not None


def test_an_unauthenticated_connector_delete_is_refused(streamfold_setup):
    url = f"{streamfold_setup.connect_url}/connectors/{names.CONNECTOR_NAME}"
    assert requests.delete(url, timeout=30).status_code == 401
    assert requests.delete(url, auth=("streamfold", "wrong"), timeout=30).status_code == 401
    # The connector is still there and running, as the stack's credentials show.
    connector_setup.wait_until_running(streamfold_setup.connect_url, names.CONNECTOR_NAME, timeout_s=60)
    assert requests.get(url, auth=config.connect_auth(), timeout=30).status_code == 200
