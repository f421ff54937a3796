"""The local stack: every service as a native process under one folder, $STREAMFOLD_HOME.

PostgreSQL (logical decoding), Apache Kafka in KRaft mode, a Kafka Connect distributed worker with
the Debezium plugin, and kinesis-local, all on 127.0.0.1. Data dirs, configs, logs, pid files, ports
and secrets live under the home, so stacks with different homes are independent and a stack keeps
its ports and passwords across restarts. Children run in their own sessions: they outlive the CLI.
"""

from __future__ import annotations

import base64
import collections
import contextlib
import functools
import hashlib
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import boto3
import psycopg
import requests
from botocore.config import Config as BotoConfig
from confluent_kafka.admin import AdminClient
from rich.console import Console

from common.config import DEBEZIUM_ROLE

REPO = Path(__file__).resolve().parents[1]
KAFKA_LIB = REPO / "lib" / "kafka"
PLUGIN_PATH = REPO / "lib" / "connect-plugins"
KINESIS_MAIN = REPO / "node_modules" / "kinesis-local" / "main.js"

SERVICES = ("postgres", "kafka", "connect", "kinesis")
# Services started together, then waited for; Connect needs a healthy broker.
START_WAVES = (("postgres", "kafka", "kinesis"), ("connect",))
DEPENDS_ON = {"connect": ("kafka",)}
# Offsets inside a stack's block of ports.
PORT_OFFSETS = {
    "postgres": 0,
    "kafka": 1,
    "kafka-controller": 2,
    "connect": 3,
    "kinesis": 4,
    "kinesis-tls": 5,
}
PORT_BLOCK = 10
DEFAULT_PORT_RANGE = "20000-29999"

PG_USER = "streamfold"
PG_DATABASE = "streamfold"
DEBEZIUM_CONNECTOR_CLASS = "io.debezium.connector.postgresql.PostgresConnector"
DEBEZIUM_PASSWORD = "STREAMFOLD_DEBEZIUM_PASSWORD"
ROLE_PASSWORDS = (DEBEZIUM_PASSWORD, "STREAMFOLD_WRITER_PASSWORD", "STREAMFOLD_READER_PASSWORD")
SECRET_NAMES = ("STREAMFOLD_PG_PASSWORD", *ROLE_PASSWORDS)
# kinesis-local accepts any credentials; a 12-digit key id would select another account.
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "streamfold",
    "AWS_SECRET_ACCESS_KEY": "streamfold",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# The GC settings of Kafka's own start scripts.
JVM_OPTS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true"]
LOG_TAIL_LINES = 30
STOP_TIMEOUT = 30.0

console = Console(stderr=True, highlight=False, soft_wrap=True)


class StackError(RuntimeError):
    """A one-line, user-facing failure (a log tail may follow on later lines)."""


# ---------------------------------------------------------------- layout, ports, secrets


@dataclass(frozen=True)
class Stack:
    """One stack's folder plus its persisted ports and secrets."""

    home: Path
    ports: dict[str, int]
    secrets: dict[str, str]

    def path(self, *parts: str) -> Path:
        return self.home.joinpath(*parts)

    @property
    def pg_dsn(self) -> str:
        password = self.secrets["STREAMFOLD_PG_PASSWORD"]
        return f"postgresql://{PG_USER}:{password}@127.0.0.1:{self.ports['postgres']}/{PG_DATABASE}"

    def env(self) -> dict[str, str]:
        """The variables `stack env` exports (README, "Using it")."""
        roles = {name: self.secrets[name] for name in ROLE_PASSWORDS}
        return {
            "STREAMFOLD_HOME": str(self.home),
            "STREAMFOLD_PG_DSN": self.pg_dsn,
            "STREAMFOLD_KAFKA_BOOTSTRAP": f"127.0.0.1:{self.ports['kafka']}",
            "STREAMFOLD_CONNECT_URL": f"http://127.0.0.1:{self.ports['connect']}",
            "STREAMFOLD_KINESIS_ENDPOINT": f"http://127.0.0.1:{self.ports['kinesis']}",
            **roles,
            **AWS_ENV,
        }


def resolve_home(home: Path) -> Path:
    return Path(home).expanduser().resolve()


def port_range() -> tuple[int, int]:
    """STREAMFOLD_PORT_RANGE=LOW-HIGH confines new stacks, e.g. to share a machine."""
    value = os.environ.get("STREAMFOLD_PORT_RANGE", DEFAULT_PORT_RANGE)
    match = re.fullmatch(r"(\d+)-(\d+)", value)
    if not match or int(match[2]) - int(match[1]) + 1 < PORT_BLOCK:
        raise StackError(f"STREAMFOLD_PORT_RANGE={value}: expected LOW-HIGH spanning >= {PORT_BLOCK} ports")
    return int(match[1]), int(match[2])


def _block_index(home: Path, blocks: int) -> int:
    digest = hashlib.sha256(str(resolve_home(home)).encode()).digest()
    return int.from_bytes(digest[:8], "big") % blocks


def derived_base(home: Path) -> int:
    """The first port of the block a hash of the home path picks."""
    low, high = port_range()
    return low + _block_index(home, (high - low + 1) // PORT_BLOCK) * PORT_BLOCK


def port_free(port: int) -> bool:
    # SO_REUSEADDR: ports in TIME_WAIT after a restart are free for a listening server.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def allocate_ports(home: Path) -> dict[str, int]:
    """The stack's ports: persisted ones, else the hashed block (or the next free one), persisted."""
    home = _make_home(home)
    path = home / "ports.json"
    if path.exists():
        return json.loads(path.read_text())
    low, high = port_range()
    blocks = (high - low + 1) // PORT_BLOCK
    first = _block_index(home, blocks)
    # A block in use by a running stack (a hash collision) is skipped, so running stacks never clash.
    for step in range(blocks):
        base = low + (first + step) % blocks * PORT_BLOCK
        ports = {name: base + offset for name, offset in PORT_OFFSETS.items()}
        if all(port_free(port) for port in ports.values()):
            _write_private(path, json.dumps(ports, indent=2) + "\n", mode=0o644)
            return ports
    raise StackError(f"no free block of {PORT_BLOCK} ports in {low}-{high}")


def _load_secrets(home: Path) -> dict[str, str]:
    path = home / "secrets.json"
    if path.exists():
        return json.loads(path.read_text())
    values = {name: secrets.token_urlsafe(24) for name in SECRET_NAMES}
    _write_private(path, json.dumps(values, indent=2) + "\n")
    return values


def _write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Write atomically with `mode` from the start (secrets are never world-readable, even briefly)."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.replace(path)


def _make_home(home: Path) -> Path:
    home = resolve_home(home)
    if not home.exists():
        # Traversable by the postgres OS user, but not listable.
        home.mkdir(parents=True, mode=0o711)
    return home


def open_stack(home: Path) -> Stack:
    """Create the folder layout, ports and secrets on first use; reuse them afterwards."""
    home = _make_home(home)
    for sub in ("conf", "data", "logs", "pids", "run"):
        (home / sub).mkdir(exist_ok=True)
    return Stack(home, allocate_ports(home), _load_secrets(home))


def _existing_stack(home: Path) -> Stack | None:
    home = resolve_home(home)
    if not (home / "ports.json").exists() or not (home / "secrets.json").exists():
        return None
    return Stack(home, json.loads((home / "ports.json").read_text()), _load_secrets(home))


# ---------------------------------------------------------------- processes

# Popen objects of children this process started, so they are reaped (no zombies in a test session).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    child = _CHILDREN.get(pid)
    if child is not None and child.poll() is not None:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def _verified_pid(pid: int | None, marker: str) -> int | None:
    """`pid` if that process is alive and still the one we started (its cmdline names `marker`)."""
    if pid is None:
        return None
    child = _CHILDREN.get(pid)
    if child is not None:
        # Our unreaped child cannot have had its pid reused; and just after exec its cmdline can
        # still read empty (the kernel fills it in after closing the fd Popen waits on).
        return pid if child.poll() is None else None
    return pid if _alive(pid) and marker in _cmdline(pid) else None


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _spawn(cmd: Sequence[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> int:
    """Start `cmd` in its own session (it survives the CLI; a Ctrl-C of the CLI does not reach it),
    with the caller's environment minus streamfold's settings and secrets (after `eval "$(streamfold
    stack env)"` it holds the superuser DSN), plus `env`; files it creates are private (umask 077)."""
    inherited = {k: v for k, v in os.environ.items() if not _is_secret_setting(k)}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**inherited, **(env or {})},
            cwd=cwd,
            start_new_session=True,
            umask=0o077,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def _is_secret_setting(name: str) -> bool:
    return name.startswith(("STREAMFOLD_", "PG", "AWS_")) and name != "STREAMFOLD_PORT_RANGE"


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    _CHILDREN.pop(pid, None)
    return True


def _terminate(pid: int, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM the process group the service leads, SIGKILL it if it outlives `timeout`."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    if not _wait_gone(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        _wait_gone(pid, 10)


def _tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        with path.open(errors="replace") as handle:
            return "".join(collections.deque(handle, maxlen=lines)).rstrip("\n")
    except OSError:
        return f"({path} not found)"


# ---------------------------------------------------------------- prerequisites


@functools.cache
def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise StackError("java not found: install a JDK >= 17 (Debian package openjdk-17-jdk-headless)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(1\.)?(\d+)', out)  # "1.8.0_402" is Java 8, "17.0.15" Java 17
    major = int(match[2]) if match else 0
    if major < 17:
        raise StackError(f"{java} is Java {major or 'unknown'}: Kafka 4 needs a JDK >= 17")
    return java


@functools.cache
def pg_bindir() -> Path:
    """PostgreSQL server binaries: pg_config's, then PATH's, then the newest /usr/lib/postgresql/*/bin."""
    candidates: list[Path] = []
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        candidates.append(Path(out))
    if shutil.which("pg_ctl"):
        candidates.append(Path(shutil.which("pg_ctl") or "").resolve().parent)
    versions = Path("/usr/lib/postgresql").glob("*/bin")
    candidates += sorted(versions, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)[::-1]
    for bindir in candidates:
        if all((bindir / tool).exists() for tool in ("initdb", "pg_ctl", "postgres")):
            return bindir
    raise StackError(
        "initdb/pg_ctl not found: install postgresql (Debian package postgresql) or run scripts/bootstrap.sh"
    )


def check_prerequisites(names: Sequence[str]) -> None:
    if "postgres" in names:
        pg_bindir()
    if {"kafka", "connect"} & set(names):
        java_binary()
        if not any(KAFKA_LIB.glob("kafka_2.13-*.jar")):
            raise StackError(f"{KAFKA_LIB} is missing the Kafka jars: run make setup")
    if "connect" in names and not any(PLUGIN_PATH.glob("debezium-connector-postgres/*.jar")):
        raise StackError(f"{PLUGIN_PATH} has no Debezium Postgres plugin: run make setup")
    if "kinesis" in names:
        if not KINESIS_MAIN.exists():
            raise StackError(f"{KINESIS_MAIN.parent} is missing: run make setup (npm ci)")
        if not shutil.which("node"):
            raise StackError("node not found: install Node.js (Debian package nodejs)")


# ---------------------------------------------------------------- services


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
        return _verified_pid(_read_pid(self.pid_file), self.marker)

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            _terminate(pid)
        self.pid_file.unlink(missing_ok=True)

    def log_tail(self) -> str:
        return _tail(self.log)

    def _spawn_recorded(self, cmd: Sequence[str], out: Path, env: dict[str, str] | None = None) -> None:
        pid = _spawn(cmd, out, self.stack.home, env)
        self.pid_file.write_text(f"{pid}\n")


# No "replication" line: physical replication (pg_basebackup, a copy of the whole cluster) is refused
# to every role. Debezium's logical replication connection matches the database name like any other.
# No `replication` line: nobody can take a physical copy of the cluster (pg_basebackup). The Debezium role
# connects to its database only (its logical replication connection matches that database's line).
PG_HBA = f"""\
# TYPE  DATABASE       USER                 ADDRESS       METHOD   (written by `streamfold stack up`)
host    {PG_DATABASE}     {DEBEZIUM_ROLE}  127.0.0.1/32  scram-sha-256
host    all            {DEBEZIUM_ROLE}  all           reject
local   all            {DEBEZIUM_ROLE}                reject
local   all            all                  scram-sha-256
host    all            all                  127.0.0.1/32  scram-sha-256
"""


class Postgres(Service):
    name = "postgres"
    port_names = ("postgres",)
    health_timeout = 60.0

    @property
    def data(self) -> Path:
        return self.stack.path("data", "postgres")

    @property
    def marker(self) -> str:
        return str(self.data)

    def endpoint(self) -> str:
        return f"127.0.0.1:{self.stack.ports['postgres']}"

    def pid(self) -> int | None:
        # The postmaster records itself; pg_ctl only forks it.
        return _verified_pid(_read_pid(self.data / "postmaster.pid"), self.marker)

    def _os_user(self) -> pwd.struct_passwd | None:
        """Postgres refuses to run as root: as root, run it as the `postgres` OS user."""
        if os.geteuid() != 0:
            return None
        try:
            return pwd.getpwnam("postgres")
        except KeyError:
            raise StackError(
                "running as root needs a `postgres` OS user (Debian package postgresql)"
            ) from None

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        user = self._os_user()
        return subprocess.run(
            [str(pg_bindir() / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.stack.home,
            start_new_session=True,
            user=user.pw_uid if user else None,
            group=user.pw_gid if user else None,
            extra_groups=[] if user else None,
        )

    def _give_to_postgres(self, *paths: Path) -> None:
        user = self._os_user()
        if user is None:
            return
        for path in paths:
            os.chown(path, user.pw_uid, user.pw_gid)

    def _check_reachable(self, user: pwd.struct_passwd) -> None:
        groups = set(os.getgrouplist(user.pw_name, user.pw_gid))
        for folder in [self.stack.home, *self.stack.home.parents]:
            st = folder.stat()
            if st.st_uid == user.pw_uid:
                bit = stat.S_IXUSR
            else:
                bit = stat.S_IXGRP if st.st_gid in groups else stat.S_IXOTH
            if not st.st_mode & bit:
                raise StackError(
                    f"postgres runs as OS user `postgres`, which cannot enter {folder}: "
                    f"chmod o+x {folder} or choose a STREAMFOLD_HOME it can reach"
                )

    def prepare(self) -> None:
        user = self._os_user()
        if user is not None:
            self._check_reachable(user)
        run_dir = self.stack.path("run")
        self.log.touch()
        self._give_to_postgres(run_dir, self.log)
        if not (self.data / "PG_VERSION").exists():
            self._initdb()
        (self.data / "streamfold.conf").write_text(self._config())
        (self.data / "pg_hba.conf").write_text(PG_HBA)
        self._give_to_postgres(self.data / "streamfold.conf", self.data / "pg_hba.conf")

    def _initdb(self) -> None:
        shutil.rmtree(self.data, ignore_errors=True)
        self.data.mkdir(mode=0o700)
        pwfile = self.stack.path("run", "initdb.pw")
        _write_private(pwfile, self.stack.secrets["STREAMFOLD_PG_PASSWORD"] + "\n")
        self._give_to_postgres(self.data, pwfile)
        try:
            result = self._run(
                "initdb", "-D", str(self.data), "--auth=scram-sha-256", f"--username={PG_USER}",
                f"--pwfile={pwfile}", "--encoding=UTF8", "--no-locale",
            )  # fmt: skip
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise StackError(f"initdb failed:\n{result.stdout}{result.stderr}")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\ninclude = 'streamfold.conf'\n")

    def _config(self) -> str:
        return "\n".join(
            [
                "# Written by `streamfold stack up` at every start.",
                "listen_addresses = '127.0.0.1'",
                f"port = {self.stack.ports['postgres']}",
                f"unix_socket_directories = '{self.stack.path('run')}'",
                "wal_level = logical",
                "max_replication_slots = 10",
                "max_wal_senders = 10",
                "",
            ]
        )

    def launch(self) -> None:
        # -w: returns once the server accepts connections (about a second).
        result = self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "start")
        if result.returncode != 0:
            raise StackError(f"postgres failed to start; last lines of {self.log}:\n{self.log_tail()}")

    def _connect(self, dbname: str) -> psycopg.Connection[tuple[object, ...]]:
        dsn = self.stack.pg_dsn.rsplit("/", 1)[0] + f"/{dbname}"
        return psycopg.connect(dsn, connect_timeout=3, autocommit=True)

    def healthy(self) -> bool:
        try:
            with self._connect("postgres") as conn:
                conn.execute("select 1")
        except psycopg.Error:
            return False
        return True

    def after_healthy(self) -> None:
        with self._connect("postgres") as conn:
            if not conn.execute("select 1 from pg_database where datname = %s", [PG_DATABASE]).fetchone():
                conn.execute(f'create database "{PG_DATABASE}"')

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            return
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", str(int(STOP_TIMEOUT)), "stop")
        if _verified_pid(pid, self.marker) is not None:
            _terminate(pid)


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
            "-cp", f"{KAFKA_LIB}/*", main_class, *args,
        ]  # fmt: skip

    def launch_env(self) -> dict[str, str] | None:
        return None

    def launch(self) -> None:
        cmd = self.java_cmd(self.main_class, str(self.conf))
        self._spawn_recorded(cmd, self.stdout_log, self.launch_env())

    def log_tail(self) -> str:
        out = self.stdout_log.read_text(errors="replace").strip() if self.stdout_log.exists() else ""
        return _tail(self.log) + (f"\n--- {self.stdout_log}:\n{_tail(self.stdout_log, 10)}" if out else "")


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


# kinesis-local has no bind-address setting and listens on every interface; this preload keeps it
# on loopback like every other service.
KINESIS_LOOPBACK_JS = """\
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && typeof args[1] !== 'string') args.splice(1, 0, '127.0.0.1');
  return listen.apply(this, args);
};
"""


class Kinesis(Service):
    name = "kinesis"
    port_names = ("kinesis", "kinesis-tls")
    health_timeout = 60.0

    @property
    def preload(self) -> Path:
        return self.stack.path("conf", "kinesis-loopback.js")

    @property
    def marker(self) -> str:
        return str(self.preload)

    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.stack.ports['kinesis']}"

    def prepare(self) -> None:
        self.preload.write_text(KINESIS_LOOPBACK_JS)
        self.stack.path("data", "kinesis").mkdir(exist_ok=True)

    def launch(self) -> None:
        env = {
            "KINESIS_MOCK_PLAIN_PORT": str(self.stack.ports["kinesis"]),
            "KINESIS_MOCK_TLS_PORT": str(self.stack.ports["kinesis-tls"]),
            "KINESIS_MOCK_CERT_PATH": str(KINESIS_MAIN.parent / "server.json"),
            # Streams and records survive a restart.
            "SHOULD_PERSIST_DATA": "true",
            "PERSIST_PATH": str(self.stack.path("data", "kinesis")),
            "PERSIST_INTERVAL": "1s",
            "AWS_REGION": AWS_ENV["AWS_DEFAULT_REGION"],
        }
        self._spawn_recorded(["node", "--require", str(self.preload), str(KINESIS_MAIN)], self.log, env)

    @property
    def data_file(self) -> Path:
        return self.stack.path("data", "kinesis") / "kinesis-data.json"

    def stop(self) -> None:
        """kinesis-local rewrites its whole data file in place every PERSIST_INTERVAL: a stop in the middle
        of a write leaves it truncated, and the streams are gone at the next start (seen in CI). So it is
        frozen at a moment its file is whole, then killed; like any crash of it, that loses the writes of
        at most the last interval."""
        pid = self.pid()
        if pid is not None:
            _freeze_when_whole(pid, self.data_file)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _wait_gone(pid, 10)
            # A killed process's sockets close a moment after it is gone (seen: ~0.3 s): wait, or a
            # start right after this stop finds its port taken.
            deadline = time.monotonic() + 10
            while not all(port_free(self.stack.ports[p]) for p in self.port_names):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        self.pid_file.unlink(missing_ok=True)

    def healthy(self) -> bool:
        client = boto3.client(
            "kinesis",
            endpoint_url=self.endpoint(),
            region_name=AWS_ENV["AWS_DEFAULT_REGION"],
            aws_access_key_id=AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            config=BotoConfig(connect_timeout=2, read_timeout=5, retries={"max_attempts": 1}),
        )
        try:
            client.list_streams()
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False
        return True


def _freeze_when_whole(pid: int, data_file: Path, timeout: float = 30.0) -> None:
    """SIGSTOP the process group at a moment data_file is absent or whole JSON (not mid-rewrite)."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGSTOP)
        if time.monotonic() > deadline or _whole_json(data_file):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)
        time.sleep(0.05)


def _whole_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except FileNotFoundError:
        return True
    except (OSError, ValueError):
        return False
    return True


SERVICE_CLASSES: dict[str, type[Service]] = {
    "postgres": Postgres,
    "kafka": Kafka,
    "connect": Connect,
    "kinesis": Kinesis,
}


def service(stack: Stack, name: str) -> Service:
    if name not in SERVICE_CLASSES:
        raise StackError(f"unknown service {name!r}: one of {', '.join(SERVICES)}")
    return SERVICE_CLASSES[name](stack)


# ---------------------------------------------------------------- lifecycle


def _busy_ports(svc: Service) -> list[tuple[str, int]]:
    """The service's ports (name, number) that something holds."""
    ports = [(name, svc.stack.ports[name]) for name in svc.port_names]
    return [(name, port) for name, port in ports if not port_free(port)]


def _check_ports(services: Sequence[Service]) -> None:
    for svc in services:
        for port_name, port in _busy_ports(svc):
            raise StackError(f"port {port} needed by {port_name} is already in use")


def _wait_ports_free(svc: Service, timeout: float) -> None:
    """A killed JVM's group leader can be a zombie (gone, for _wait_gone) before its last threads have
    exited and closed its sockets: a restart straight after the kill once found the port still bound."""
    deadline = time.monotonic() + timeout
    while _busy_ports(svc) and time.monotonic() < deadline:
        time.sleep(0.2)


def _wait_healthy(svc: Service, started: float) -> None:
    deadline = started + svc.health_timeout
    while not svc.healthy():
        if svc.pid() is None:
            raise StackError(f"{svc.name} exited during start-up; last lines of {svc.log}:\n{svc.log_tail()}")
        if time.monotonic() > deadline:
            raise StackError(
                f"{svc.name} not healthy after {svc.health_timeout:.0f}s; last lines of {svc.log}:\n"
                f"{svc.log_tail()}"
            )
        time.sleep(0.25)
    svc.after_healthy()
    took = time.monotonic() - started
    console.print(f"[green]up[/] {svc.name:<9} {svc.endpoint():<28} pid {svc.pid()}  ({took:.1f}s)")


@contextlib.contextmanager
def _stop_on_failure(stack: Stack) -> Iterator[list[str]]:
    """Services started by a failing call are stopped again: nothing half-started is left behind."""
    started: list[str] = []
    try:
        yield started
    except BaseException:
        for name in reversed(started):
            service(stack, name).stop()
        raise


def _start(stack: Stack, waves: Sequence[Sequence[str]]) -> None:
    check_prerequisites([name for wave in waves for name in wave])
    pending = [service(stack, name) for wave in waves for name in wave]
    _check_ports([svc for svc in pending if svc.pid() is None])
    with _stop_on_failure(stack) as started:
        for wave in waves:
            svcs = [service(stack, name) for name in wave]
            began = time.monotonic()
            for svc in svcs:
                if svc.pid() is None:
                    started.append(svc.name)
                    svc.prepare()
                    svc.launch()
            for svc in svcs:
                _wait_healthy(svc, began)


def up(home: Path) -> dict[str, str]:
    """Start whatever is not running, wait until all is healthy, write stack.env; return the env."""
    stack = open_stack(home)
    _start(stack, START_WAVES)
    env = stack.env()
    _write_private(stack.path("stack.env"), "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    return env


def down(home: Path) -> None:
    """Stop every service this stack started (Connect first: it flushes offsets to Kafka)."""
    stack = _existing_stack(home)
    if stack is None:
        return
    for name in ("connect", "kinesis", "kafka", "postgres"):
        svc = service(stack, name)
        if svc.pid() is not None:
            svc.stop()
            console.print(f"[yellow]stopped[/] {name}")
        svc.pid_file.unlink(missing_ok=True)


def start_service(home: Path, name: str) -> None:
    """Start one service (its dependencies must be up) and wait until it is healthy."""
    stack = open_stack(home)
    for needed in DEPENDS_ON.get(name, ()):
        if service(stack, needed).pid() is None:
            raise StackError(f"{name} needs {needed}, which is not running: start it first")
    _start(stack, [[service(stack, name).name]])


def stop_service(home: Path, name: str) -> None:
    stack = _existing_stack(home)
    if stack is not None:
        service(stack, name).stop()


def restart_service(home: Path, name: str) -> None:
    stop_service(home, name)
    start_service(home, name)


def kill_service(home: Path, name: str) -> None:
    """SIGKILL one service, as a crash would (no graceful shutdown)."""
    stack = _existing_stack(home)
    if stack is None:
        return
    svc = service(stack, name)
    pid = svc.pid()
    if pid is not None:
        os.killpg(pid, signal.SIGKILL)
        _wait_gone(pid, 10)
        _wait_ports_free(svc, 30)


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    endpoint: str
    state: str  # up | unhealthy | down
    pid: int | None

    @property
    def up(self) -> bool:
        return self.state == "up"


def status(home: Path) -> list[ServiceStatus]:
    stack = _existing_stack(home)
    if stack is None:
        return [ServiceStatus(name, "-", "down", None) for name in SERVICES]
    rows = []
    for name in SERVICES:
        svc = service(stack, name)
        pid = svc.pid()
        state = "down" if pid is None else ("up" if svc.healthy() else "unhealthy")
        rows.append(ServiceStatus(name, svc.endpoint(), state, pid))
    return rows


def env_lines(home: Path) -> list[str]:
    path = resolve_home(home) / "stack.env"
    if not path.exists():
        raise StackError(f"{path} not found: start the stack with `streamfold stack up`")
    return path.read_text().splitlines()
