"""The Kafka broker: one KRaft node, broker and controller, its storage formatted on first start."""

from __future__ import annotations

import base64
import subprocess
import uuid

from confluent_kafka.admin import AdminClient

from stack.home import StackError
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
            "listeners": f"PLAINTEXT://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
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

    def prepare(self) -> None:
        super().prepare()
        if not (self.stack.path("data", "kafka", "meta.properties")).exists():
            self._format()
        # The broker's files hold every topic, Connect's configs and offsets among them: owner only.
        self.stack.path("data", "kafka").chmod(0o700)

    def _format(self) -> None:
        """KRaft storage must be formatted once with a cluster id before the first start."""
        cluster_id = _kafka_uuid()
        cmd = self.java_cmd("kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(self.conf))
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, umask=0o077)
        if result.returncode != 0:
            raise StackError(f"kafka storage format failed:\n{result.stdout}{result.stderr}")

    def healthy(self) -> bool:
        admin = AdminClient({"bootstrap.servers": self.endpoint(), "log_level": 0})
        try:
            return bool(admin.list_topics(timeout=3).brokers)
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False


def _kafka_uuid() -> str:
    """A Kafka Uuid string (url-safe base64 of 16 random bytes), not starting with '-'."""
    while True:
        value = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not value.startswith("-"):
            return value
