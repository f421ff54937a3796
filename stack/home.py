"""One stack's home: its folder layout, persisted ports and generated secrets, and StackError.

Data dirs, configs, logs, pid files, ports and secrets live under the home, so stacks with different
homes are independent and a stack keeps its ports and passwords across restarts.

Everything under the home is its owner's only (folders 0700, files 0600): logs record failing rows,
data dirs and checkpoints hold the data, stack.env and secrets.json the passwords. One exception: as
root, PostgreSQL runs as the `postgres` OS user, which must pass through the home, data/ and logs/ to
reach its data dir and log; those three folders are then 0711 (others may enter, not list or read).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common import config, registry

# Offsets inside a stack's block of ports.
PORT_OFFSETS = {
    "postgres": 0,
    "kafka": 1,
    "kafka-controller": 2,
    "connect": 3,
    "kinesis": 4,
    "spark-master": 6,
    "spark-master-ui": 7,
    "registry": 8,
    "registry-management": 9,
}
PORT_BLOCK = 10
DEFAULT_PORT_RANGE = "20000-29999"

PG_USER = "streamfold"
PG_DATABASE = "streamfold"
DEBEZIUM_PASSWORD = config.PASSWORD_VARS[config.DEBEZIUM_ROLE]
# The broker's own SCRAM user (the broker connects to itself) and the controller's PLAIN password: never
# exported, only the stack's Kafka configs hold them.
BROKER_USER = "broker"
BROKER_PASSWORD = config.KAFKA_BROKER_PASSWORD_VAR
SECRET_NAMES = config.STACK_PASSWORD_VARS
# kinesalite accepts any credentials (it checks that a request is signed, not by whom).
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "streamfold",
    "AWS_SECRET_ACCESS_KEY": "streamfold",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# The GC settings of Kafka's own start scripts.


class StackError(RuntimeError):
    """A one-line, user-facing failure (a log tail may follow on later lines)."""


@dataclass(frozen=True)
class Stack:
    """One stack's folder plus its persisted ports and secrets."""

    home: Path
    ports: dict[str, int]
    secrets: dict[str, str]

    def path(self, *parts: str) -> Path:
        return self.home.joinpath(*parts)

    def kafka_login(self) -> config.Login:
        return config.Login(config.CLIENT_USER, self.secrets[config.KAFKA_PASSWORD_VAR])

    def connect_login(self) -> config.Login:
        return config.Login(config.CLIENT_USER, self.secrets[config.CONNECT_PASSWORD_VAR])

    def registry_login(self) -> config.Login:
        return config.Login(config.CLIENT_USER, self.secrets[config.REGISTRY_PASSWORD_VAR])

    @property
    def pg_dsn(self) -> str:
        password = self.secrets["STREAMFOLD_PG_PASSWORD"]
        return f"postgresql://{PG_USER}:{password}@127.0.0.1:{self.ports['postgres']}/{PG_DATABASE}"

    def env(self) -> dict[str, str]:
        """The variables `stack env` exports (README, "Run natively")."""
        roles = {name: self.secrets[name] for name in config.SECRET_VARS}
        return {
            "STREAMFOLD_HOME": str(self.home),
            "STREAMFOLD_PG_DSN": self.pg_dsn,
            "STREAMFOLD_KAFKA_BOOTSTRAP": f"127.0.0.1:{self.ports['kafka']}",
            "STREAMFOLD_CONNECT_URL": f"http://127.0.0.1:{self.ports['connect']}",
            "STREAMFOLD_KINESIS_ENDPOINT": f"http://127.0.0.1:{self.ports['kinesis']}",
            config.REGISTRY_URL_VAR: f"http://127.0.0.1:{self.ports['registry']}{registry.CCOMPAT_PATH}",
            **dict.fromkeys(config.LOGIN_VARS, config.CLIENT_USER),
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
        return _with_new_services(path, json.loads(path.read_text()))
    low, high = port_range()
    blocks = (high - low + 1) // PORT_BLOCK
    first = _block_index(home, blocks)
    # A block in use by a running stack (a hash collision) is skipped, so running stacks never clash.
    for step in range(blocks):
        base = low + (first + step) % blocks * PORT_BLOCK
        ports = {name: base + offset for name, offset in PORT_OFFSETS.items()}
        if all(port_free(port) for port in ports.values()):
            write_private(path, json.dumps(ports, indent=2) + "\n")
            return ports
    raise StackError(f"no free block of {PORT_BLOCK} ports in {low}-{high}")


def _with_new_services(path: Path, ports: dict[str, int]) -> dict[str, int]:
    """A home made before a service existed gets that service's port in its own block."""
    base = ports["postgres"] - PORT_OFFSETS["postgres"]
    missing = {name: base + offset for name, offset in PORT_OFFSETS.items() if name not in ports}
    if missing:
        ports = {**ports, **missing}
        write_private(path, json.dumps(ports, indent=2) + "\n")
    return ports


def _load_secrets(home: Path) -> dict[str, str]:
    """The stack's passwords, generated on first use; a home made before a secret existed gets it too."""
    path = home / "secrets.json"
    values = json.loads(path.read_text()) if path.exists() else {}
    missing = config.new_passwords(name for name in SECRET_NAMES if name not in values)
    if missing:
        values = {**values, **missing}
        write_private(path, json.dumps(values, indent=2) + "\n")
    return values


def write_private(path: Path, text: str, mode: int = 0o600) -> None:
    """Write atomically with `mode` from the start (secrets are never world-readable, even briefly)."""
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    tmp.replace(path)


# The folders the postgres OS user passes through, relative to the home (see the module's docstring).
POSTGRES_PASSES = (".", "data", "logs")


def postgres_runs_apart() -> bool:
    """As root, PostgreSQL runs as the `postgres` OS user (it refuses to run as root): stack/postgres.py."""
    return os.geteuid() == 0


def folder_mode(home: Path, folder: Path) -> int:
    """0700, or 0711 for a folder the postgres OS user passes through when it runs apart."""
    passes = {home / name for name in POSTGRES_PASSES}
    return 0o711 if postgres_runs_apart() and folder in passes else 0o700


@contextlib.contextmanager
def private_files() -> Iterator[None]:
    """Files and folders created meanwhile (configs, pid files, logs, and by the services spawned) are
    their owner's only."""
    previous = os.umask(config.PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)


def paths_under(home: Path) -> list[Path]:
    """The home, and every folder, file, socket and link under it (links not followed)."""
    paths = [home]
    for folder, dirs, files in os.walk(home):
        paths += [Path(folder, name) for name in [*dirs, *files]]
    return paths


def make_private(home: Path) -> list[Path]:
    """Takes the group and other bits off everything under the home (a home from a version that left
    logs, configs and ports.json readable by all); returns what it changed."""
    home = resolve_home(home)
    return [path for path in paths_under(home) if _make_path_private(home, path)]


def _make_path_private(home: Path, path: Path) -> bool:
    """Whether the path's mode was changed. A running service's files come and go while the home is walked
    (PostgreSQL's temporary relations, Kafka's segments): one gone by now has nothing to change."""
    try:
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            return False  # chmod would follow it
        others = folder_mode(home, path) & 0o077 if stat.S_ISDIR(mode) else 0
        wanted = stat.S_IMODE(mode) & 0o700 | others
        if wanted == stat.S_IMODE(mode):
            return False
        path.chmod(wanted)
    except FileNotFoundError:
        return False
    return True


def _make_home(home: Path) -> Path:
    home = resolve_home(home)
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(folder_mode(home, home))
    return home


def open_stack(home: Path) -> Stack:
    """Create the folder layout, ports and secrets on first use; reuse them afterwards."""
    home = _make_home(home)
    for sub in ("conf", "data", "logs", "pids", "run", "tmp"):
        (home / sub).mkdir(exist_ok=True)
        (home / sub).chmod(folder_mode(home, home / sub))
    return Stack(home, allocate_ports(home), _load_secrets(home))


def existing_stack(home: Path) -> Stack | None:
    home = resolve_home(home)
    if not (home / "ports.json").exists() or not (home / "secrets.json").exists():
        return None
    path = home / "ports.json"
    return Stack(home, _with_new_services(path, json.loads(path.read_text())), _load_secrets(home))
