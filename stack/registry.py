"""The schema registry: Apicurio Registry 3 (its Confluent-compatible API, /apis/ccompat/v7), a Quarkus
app on Java 21+, kept on loopback (the API and the management port that serves its health).

Every request to the API needs the stack's registry credentials (HTTP Basic against Quarkus's embedded
users): without them anyone who reaches the port could write schemas. Schemas live in an H2 file under
the stack's data dir, so they survive a restart (docs/operations.md "The schema registry")."""

from __future__ import annotations

from pathlib import Path

import requests

from common import registry
from stack.prerequisites import REGISTRY_JAR, registry_java_binary
from stack.service import Service

# Small: the registry holds a handful of schemas; Spark and Kafka share the two cores and the memory.
# C1 only and the serial collector: start-up costs less CPU, and its load never needs C2's code.
JVM_OPTS = ["-Xms64m", "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


class Registry(Service):
    name = "registry"
    port_names = ("registry", "registry-management")
    health_timeout = 120.0

    @property
    def conf(self) -> Path:
        return self.stack.path("conf", "registry.properties")

    @property
    def marker(self) -> str:
        return str(self.conf)

    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.stack.ports['registry']}{registry.CCOMPAT_PATH}"

    def prepare(self) -> None:
        data = self.stack.path("data", "registry")
        data.mkdir(exist_ok=True)
        ports = self.stack.ports
        listen = registry.Listen("127.0.0.1", ports["registry"], "127.0.0.1", ports["registry-management"])
        props = registry.properties(listen, data, self.stack.path("tmp"), self.stack.registry_login())
        self.conf.write_text(
            "# Written by `streamfold stack up` at every start.\n" + registry.properties_text(props)
        )

    def launch(self) -> None:
        cmd = [
            registry_java_binary(), *JVM_OPTS,
            # The settings file, not the command line, holds the password (others can read a cmdline).
            f"-Dquarkus.config.locations={self.conf}",
            f"-Djava.io.tmpdir={self.stack.path('tmp')}",
            "-jar", str(REGISTRY_JAR),
        ]  # fmt: skip
        self._spawn_recorded(cmd, self.log)

    def healthy(self) -> bool:
        login = self.stack.registry_login()
        ready = f"http://127.0.0.1:{self.stack.ports['registry-management']}/health/ready"
        try:
            if requests.get(ready, timeout=3).status_code != 200:
                return False
            answer = requests.get(self.endpoint() + "/subjects", auth=(login.user, login.password), timeout=5)
        except requests.RequestException:
            return False
        return answer.status_code == 200
