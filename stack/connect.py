"""The Kafka Connect distributed worker with the Debezium PostgreSQL plugin."""

from __future__ import annotations

import requests

from stack.home import DEBEZIUM_PASSWORD
from stack.prerequisites import PLUGIN_PATH
from stack.service import JavaService

DEBEZIUM_CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"


class Connect(JavaService):
    name = "connect"
    port_names = ("connect",)
    main_class = "org.apache.kafka.connect.cli.ConnectDistributed"
    health_timeout = 180.0

    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.stack.ports['connect']}"

    def properties(self) -> dict[str, object]:
        port = self.stack.ports["connect"]
        return {
            "bootstrap.servers": f"127.0.0.1:{self.stack.ports['kafka']}",
            "group.id": "streamfold-connect",
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "config.storage.topic": "streamfold-connect-configs",
            "offset.storage.topic": "streamfold-connect-offsets",
            "status.storage.topic": "streamfold-connect-status",
            "config.storage.replication.factor": 1,
            "offset.storage.replication.factor": 1,
            "status.storage.replication.factor": 1,
            "offset.storage.partitions": 1,
            "status.storage.partitions": 1,
            # Source offsets committed every second: a restarted worker resumes close to where it was.
            "offset.flush.interval.ms": 1000,
            # A single worker: waiting for a "lost" worker to come back only delays recovery.
            "scheduled.rebalance.max.delay.ms": 0,
            "listeners": f"http://127.0.0.1:{port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": port,
            "plugin.path": PLUGIN_PATH,
            # Every plugin ships ServiceLoader manifests: skip the slow reflective classpath scan.
            "plugin.discovery": "service_load",
            # The connector config says ${env:STREAMFOLD_DEBEZIUM_PASSWORD}, never the password itself.
            # A large profile row must not fail the Debezium task (connectors/setup.py, CDC_MAX_BYTES).
            "producer.max.request.size": 16 * 1024 * 1024,
            "config.providers": "env",
            "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "config.providers.env.param.allowlist.pattern": f"^{DEBEZIUM_PASSWORD}$",
        }

    def launch_env(self) -> dict[str, str]:
        # The one secret the connector references; no other role's, never the superuser's.
        return {DEBEZIUM_PASSWORD: self.stack.secrets[DEBEZIUM_PASSWORD]}

    def healthy(self) -> bool:
        try:
            # /health turns 200 only once the worker has joined its group and can run connectors.
            for path in ("/", "/health"):
                if requests.get(self.endpoint() + path, timeout=3).status_code != 200:
                    return False
            plugins = requests.get(self.endpoint() + "/connector-plugins", timeout=5).json()
        except (requests.RequestException, ValueError):
            return False
        return any(plugin.get("class") == DEBEZIUM_CONNECTOR_CLASS for plugin in plugins)
