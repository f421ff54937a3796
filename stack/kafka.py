"""The Kafka broker: one KRaft node, broker and controller, its storage formatted on first start."""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient

from common import config
from stack.home import BROKER_PASSWORD, BROKER_USER, StackError
from stack.service import JavaService


class Kafka(JavaService):
    name = "kafka"
    port_names = ("kafka", "kafka-controller")
    main_class = "kafka.Kafka"
    heap = "768m"

    def endpoint(self) -> str:
        return f"127.0.0.1:{self.stack.ports['kafka']}"

    def properties(self) -> dict[str, object]:
        broker, controller = self.stack.ports["kafka"], self.stack.ports["kafka-controller"]
        return {
            # One combined broker + controller node with a static one-voter quorum.
            "process.roles": "broker,controller",
            "node.id": 1,
            "controller.quorum.voters": f"1@127.0.0.1:{controller}",
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{broker}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "SASL_PLAINTEXT",
            "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT",
            **self._authentication(),
            "log.dirs": self.stack.path("data", "kafka"),
            "num.partitions": 1,
            "default.replication.factor": 1,
            "offsets.topic.replication.factor": 1,
            "offsets.topic.num.partitions": 5,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "transaction.state.log.num.partitions": 5,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            # Every topic is created on purpose, with its partitions and cleanup policy: `streamfold
            # setup` creates the pipeline, CDC and heartbeat topics (the connector's topic.creation.*
            # is the backstop), the Connect worker its internal topics. A typo or an early subscriber
            # then fails loudly instead of leaving a one-partition, non-compacted topic behind.
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": 0,
        }

    def _authentication(self) -> dict[str, object]:
        """Every listener authenticates (any local user can reach loopback ports): clients and the broker
        itself with SCRAM (users added when the storage is formatted), the controller listener with
        PLAIN and the broker's password (SCRAM users live in the metadata the controller serves)."""
        password = self.stack.secrets[BROKER_PASSWORD]
        plain = "org.apache.kafka.common.security.plain.PlainLoginModule required"
        return {
            "sasl.enabled.mechanisms": config.SCRAM_MECHANISM,
            "sasl.mechanism.inter.broker.protocol": config.SCRAM_MECHANISM,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": config.scram_jaas(
                config.Login(BROKER_USER, password)
            ),
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": (
                f'{plain} username="{BROKER_USER}" password="{password}" user_{BROKER_USER}="{password}";'
            ),
        }

    def prepare(self) -> None:
        super().prepare()
        if not (self.stack.path("data", "kafka", "meta.properties")).exists():
            self._format()
        elif not self._scram_marker.exists():
            raise StackError(
                f"{self.stack.path('data', 'kafka')} was formatted without SCRAM users (before Kafka asked "
                "clients to authenticate): stop the stack and remove that folder (its topics go with it)"
            )
        # The broker's files hold every topic, Connect's configs and offsets among them: owner only.
        self.stack.path("data", "kafka").chmod(0o700)

    def _format(self) -> None:
        """KRaft storage must be formatted once with a cluster id before the first start."""
        cluster_id = _kafka_uuid()
        users = [config.Login(BROKER_USER, self.stack.secrets[BROKER_PASSWORD]), self.stack.kafka_login()]
        scram = [arg for user in users for arg in ("--add-scram", _scram_credential(user))]
        cmd = self.java_cmd(
            "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.conf), *scram
        )
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, umask=0o077)
        if result.returncode != 0:
            raise StackError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")
        self._scram_marker.touch()

    @property
    def _scram_marker(self) -> Path:
        """Written once the storage holds the SCRAM users (a home formatted before has none)."""
        return self.stack.path("data", "kafka.scram")

    def healthy(self) -> bool:
        settings = config.librdkafka_settings(self.endpoint(), self.stack.kafka_login())
        admin = AdminClient({**settings, "log_level": 0})
        try:
            return bool(admin.list_topics(timeout=3).brokers)
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False


def _scram_credential(login: config.Login) -> str:
    return f"{config.SCRAM_MECHANISM}=[name={login.user},password={login.password}]"


def _kafka_uuid() -> str:
    """A Kafka Uuid string (url-safe base64 of 16 random bytes), not starting with '-'."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value
