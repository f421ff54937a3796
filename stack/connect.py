"""The Kafka Connect distributed worker with the Debezium PostgreSQL plugin."""

from __future__ import annotations

from pathlib import Path

import requests

from common import config
from stack.home import DEBEZIUM_PASSWORD
from stack.prerequisites import PLUGIN_PATH
from stack.service import JavaService

DEBEZIUM_CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
# Kafka's connect-basic-auth-extension (pom.xml): HTTP Basic against a JAAS PropertyFileLoginModule.
BASIC_AUTH_EXTENSION = "org.apache.kafka.connect.rest.basic.auth.extension.BasicAuthSecurityRestExtension"
PROPERTY_FILE_LOGIN = "org.apache.kafka.connect.rest.basic.auth.extension.PropertyFileLoginModule"


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
            # The connector config says ${env:STREAMFOLD_DEBEZIUM_PASSWORD} (and the registry's), never a
            # password itself.
            # A large profile row must not fail the Debezium task (connectors/setup.py, CDC_MAX_BYTES).
            "producer.max.request.size": 16 * 1024 * 1024,
            "config.providers": "env",
            "config.providers.env.class": "org.apache.kafka.common.config.provider.EnvVarConfigProvider",
            "config.providers.env.param.allowlist.pattern": f"^({'|'.join(self.launch_env())})$",
            # The REST API asks for HTTP Basic credentials (jvm_args: the JAAS file, _users).
            "rest.extension.classes": BASIC_AUTH_EXTENSION,
            **self._kafka_security(),
        }

    def _kafka_security(self) -> dict[str, str]:
        """The worker's own clients and those it runs connectors with log in as the stack's client."""
        security = config.java_kafka_settings(self.stack.kafka_login())
        return {
            f"{prefix}{key}": value
            for prefix in ("", "producer.", "consumer.", "admin.")
            for key, value in security.items()
        }

    def prepare(self) -> None:
        super().prepare()
        login = self.stack.connect_login()
        self._users.write_text(f"{login.user}: {login.password}\n")
        self._jaas.write_text(
            f'KafkaConnect {{\n  {PROPERTY_FILE_LOGIN} required\n  file="{self._users}";\n}};\n'
        )

    @property
    def _users(self) -> Path:
        return self.stack.path("conf", "connect-users.properties")

    @property
    def _jaas(self) -> Path:
        return self.stack.path("conf", "connect-jaas.conf")

    def jvm_args(self) -> list[str]:
        return [f"-Djava.security.auth.login.config={self._jaas}"]

    def launch_env(self) -> dict[str, str]:
        # The secrets the connector references: the Debezium role's and, for cdc.format avro, the
        # registry's; no other role's, never the superuser's.
        registry = config.REGISTRY_PASSWORD_VAR
        return {
            DEBEZIUM_PASSWORD: self.stack.secrets[DEBEZIUM_PASSWORD],
            registry: self.stack.secrets[registry],
        }

    def healthy(self) -> bool:
        login = self.stack.connect_login()
        auth = (login.user, login.password)
        try:
            # /health turns 200 only once the worker has joined its group and can run connectors.
            for path in ("/", "/health"):
                if requests.get(self.endpoint() + path, auth=auth, timeout=3).status_code != 200:
                    return False
            plugins = requests.get(self.endpoint() + "/connector-plugins", auth=auth, timeout=5).json()
        except (requests.RequestException, ValueError):
            return False
        return any(plugin.get("class") == DEBEZIUM_CONNECTOR_CLASS for plugin in plugins)
