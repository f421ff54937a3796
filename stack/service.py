"""A service of the stack (prepare, launch, health-check, stop), and JavaService for Kafka's JVMs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stack.home import Stack
from stack.prerequisites import KAFKA_LIB, java_binary
from stack.processes import read_pid, spawn, tail, terminate, verified_pid

# The GC settings of Kafka's own start scripts.
JVM_OPTS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"]


class Service:
    """A process the stack starts, health-checks and stops. Subclasses fill in the specifics."""

    name: str = ""
    port_names: tuple[str, ...] = ()
    health_timeout = 90.0

    def __init__(self, stack: Stack) -> None:
        self.stack = stack

    @property
    def log(self) -> Path:
        return self.stack.path("logs", f"{self.name}.log")

    @property
    def pid_file(self) -> Path:
        return self.stack.path("pids", f"{self.name}.pid")

    @property
    def marker(self) -> str:
        """A string in the process's command line that names this stack's files."""
        raise NotImplementedError

    def endpoint(self) -> str:
        raise NotImplementedError

    def prepare(self) -> None:
        """Write configs and initialise data (idempotent)."""

    def launch(self) -> None:
        raise NotImplementedError

    def healthy(self) -> bool:
        raise NotImplementedError

    def after_healthy(self) -> None:
        """One-time set-up that needs the running service."""

    def pid(self) -> int | None:
        return verified_pid(read_pid(self.pid_file), self.marker)

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            terminate(pid)
        self.pid_file.unlink(missing_ok=True)

    def log_tail(self) -> str:
        return tail(self.log)

    def _spawn_recorded(self, cmd: Sequence[str], out: Path, env: dict[str, str] | None = None) -> None:
        pid = spawn(cmd, out, self.stack.home, env)
        self.pid_file.write_text(f"{pid}\n")


class JavaService(Service):
    """A Kafka JVM: classpath lib/kafka/*, a properties file, log4j2 logging into logs/."""

    main_class = ""
    heap = "512m"  # modest: Spark shares the two cores and the memory

    @property
    def conf(self) -> Path:
        return self.stack.path("conf", f"{self.name}.properties")

    @property
    def marker(self) -> str:
        return str(self.conf)

    @property
    def stdout_log(self) -> Path:
        """JVM output that bypasses log4j (crashes, bad options)."""
        return self.stack.path("logs", f"{self.name}.out")

    def properties(self) -> dict[str, object]:
        raise NotImplementedError

    def prepare(self) -> None:
        lines = [f"{key}={value}" for key, value in self.properties().items()]
        self.conf.write_text("# Written by `streamfold stack up` at every start.\n" + "\n".join(lines) + "\n")
        self._log4j_conf().write_text(self._log4j())

    def _log4j_conf(self) -> Path:
        return self.stack.path("conf", f"log4j2-{self.name}.properties")

    def _log4j(self) -> str:
        # Size-capped rolling file, so a long-lived stack cannot fill the disk.
        return f"""status = warn
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = {self.log}
appender.file.filePattern = {self.log}.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 3
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
"""

    def java_cmd(self, main_class: str, *args: str) -> list[str]:
        return [
            java_binary(), "-Xms128m", f"-Xmx{self.heap}", *JVM_OPTS,
            f"-Dlog4j2.configurationFile={self._log4j_conf()}",
            # Its temporary files (native libraries it unpacks, among them) in the home's private tmp/.
            f"-Djava.io.tmpdir={self.stack.path('tmp')}", *self.jvm_args(),
            "-cp", f"{KAFKA_LIB}/*", main_class, *args,
        ]  # fmt: skip

    def jvm_args(self) -> list[str]:
        """System properties of the service's JVM, besides heap, GC and logging."""
        return []

    def launch_env(self) -> dict[str, str] | None:
        return None

    def launch(self) -> None:
        cmd = self.java_cmd(self.main_class, str(self.conf))
        self._spawn_recorded(cmd, self.stdout_log, self.launch_env())

    def log_tail(self) -> str:
        out = self.stdout_log.read_text(errors="replace").strip() if self.stdout_log.exists() else ""
        return tail(self.log) + (f"\n--- {self.stdout_log}:\n{tail(self.stdout_log, 10)}" if out else "")
