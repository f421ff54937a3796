"""The Kafka clients' (librdkafka's) own log lines and errors, through Python's logging instead of raw on
stderr (`%3|...|FAIL|...`), where a user reads a retry that then succeeds as a failure.

librdkafka logs every failed attempt of what it retries by itself (a connection, a coordinator still
loading, an idempotent producer's id): those lines go to the `streamfold.kafka` logger at DEBUG. Its
errors come through `error_cb`: one that retrying cannot fix (a fatal error, a refused login or
permission) is one WARNING per client and error, the rest DEBUG; when a broker stays unreachable, the call
that needs it fails with its own error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError

log = logging.getLogger("streamfold.kafka")

# What no retry fixes: the user must change a setting (the login, the ACLs, TLS).
NEEDS_ATTENTION = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError._SSL,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    }
)


class LinesAtDebug(logging.LoggerAdapter):
    """librdkafka's log lines (confluent-kafka calls `log(level, ...)` with the line's syslog level mapped
    to logging's) at DEBUG, whatever their level."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        self.logger.log(logging.DEBUG, msg, *args, **kwargs)


def error_reporter() -> Callable[[KafkaError], None]:
    """An error_cb for one client: a WARNING for the first of each error that needs attention."""
    reported: set[int] = set()

    def on_error(error: KafkaError) -> None:
        code = error.code()
        if (error.fatal() or code in NEEDS_ATTENTION) and code not in reported:
            reported.add(code)
            log.warning("Kafka: %s", error.str())
        else:
            log.debug("Kafka: %s", error.str())

    return on_error


def client_logging() -> dict[str, Any]:
    """The settings that route a client's log lines and errors here."""
    return {"logger": LinesAtDebug(log, {}), "error_cb": error_reporter()}
