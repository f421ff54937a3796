"""The compose stack's services under testcontainers, for `pytest --stack=containers`.

`start()` brings up the infrastructure of compose/docker-compose.yml with testcontainers'
DockerCompose (`docker compose up --build --wait`): the same images, configuration and healthchecks as
`docker compose up`, so nothing is described twice. The images build from compose/Dockerfile FROM
BASE_IMAGE, with the versions of pom.xml, package-lock.json and Debian bookworm; compose/.env (or the
environment) sets BASE_IMAGE and the image tag, and the `secrets` service generates the passwords. The
host ports are free ones (unless the environment sets them) and the project is this process's own. It
returns the variables the local stack's `streamfold stack env` exports, pointing at those loopback ports.
Like the local stack it starts neither `setup` nor `pipeline`: the tests run those from the host.

Needs a running Docker Engine and Compose v2 (`docker compose`; on Debian 12, scripts/bootstrap.sh
installs it as a CLI plugin). tests/conftest.py starts dockerd when none runs and sets BASE_IMAGE
(tests/support/engine.py); `make test-containers` runs the CDC and pipeline tests this way.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
from pathlib import Path

from psycopg.conninfo import make_conninfo
from testcontainers.compose import DockerCompose

from common import config, registry

COMPOSE_DIR = Path(__file__).resolve().parents[2] / "compose"
COMPOSE_FILE = "docker-compose.yml"
INFRA_SERVICES = ["postgres", "kafka", "connect", "kinesis", "registry"]
# The host ports docker-compose.yml publishes for those services (compose/.env names).
PORT_VARS = (
    "POSTGRES_HOST_PORT",
    "KAFKA_HOST_PORT",
    "CONNECT_HOST_PORT",
    "KINESIS_HOST_PORT",
    "REGISTRY_HOST_PORT",
)
# Every password a client on the host needs, where README says to read it (streamfold/compose_secrets.py).
SECRETS_FILE = "/run/streamfold/secrets.env"

_stack: DockerCompose | None = None


def compose_settings() -> dict[str, str]:
    """compose/.env, overridden by the environment: the precedence docker compose applies."""
    values = config.read_env_file(COMPOSE_DIR / ".env")
    return {key: os.environ.get(key, value) for key, value in values.items()}


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports (all held open while choosing, so none is picked twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def isolated_settings(pid: int) -> dict[str, str]:
    """compose/.env with free host ports (unless the environment sets them) and a project of its own,
    so neither a local stack nor a developer's `docker compose up` gets in the way."""
    settings = compose_settings()
    ports = dict(zip(PORT_VARS, free_ports(len(PORT_VARS)), strict=True))
    settings.update({var: os.environ.get(var) or str(port) for var, port in ports.items()})
    settings["COMPOSE_PROJECT_NAME"] = f"streamfold-test-{pid}"
    return settings


def stack_env(settings: dict[str, str], secrets: dict[str, str], workdir: Path) -> dict[str, str]:
    """What `streamfold stack env` exports, for the containers' published ports and the passwords the
    `secrets` service generated (its secrets.env)."""
    pg_dsn = make_conninfo(
        host="127.0.0.1",
        port=settings["POSTGRES_HOST_PORT"],
        dbname="streamfold",
        user="streamfold",
        password=secrets["STREAMFOLD_PG_PASSWORD"],
    )
    env = {
        "STREAMFOLD_PG_DSN": pg_dsn,
        "STREAMFOLD_KAFKA_BOOTSTRAP": f"127.0.0.1:{settings['KAFKA_HOST_PORT']}",
        "STREAMFOLD_CONNECT_URL": f"http://127.0.0.1:{settings['CONNECT_HOST_PORT']}",
        "STREAMFOLD_KINESIS_ENDPOINT": f"http://127.0.0.1:{settings['KINESIS_HOST_PORT']}",
        config.REGISTRY_URL_VAR: f"http://127.0.0.1:{settings['REGISTRY_HOST_PORT']}{registry.CCOMPAT_PATH}",
        "STREAMFOLD_HOME": str(workdir),
        # Connect runs inside the compose network: it reaches the database by service name, not at the
        # port published on the host. connectors/setup.py must prefer these over the DSN's host/port.
        "STREAMFOLD_CONNECT_PG_HOST": "postgres",
        "STREAMFOLD_CONNECT_PG_PORT": "5432",
    }
    env.update({name: secrets[name] for name in config.SECRET_VARS})
    env.update(dict.fromkeys(config.LOGIN_VARS, config.CLIENT_USER))
    env.update({name: settings[name] for name in config.AWS_VARS})
    return env


def generated_secrets() -> dict[str, str]:
    """The passwords the stack's `secrets` service generated, as README says to read them."""
    return config.parse_env(_compose("exec", "-T", "kafka", "cat", SECRETS_FILE))


def start(workdir: Path) -> dict[str, str]:
    """Build streamfold/connect, start the infrastructure and wait until every healthcheck passes."""
    global _stack
    workdir.mkdir(parents=True, exist_ok=True)
    settings = isolated_settings(os.getpid())
    env_file = workdir / "compose.env"
    env_file.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    _stack = DockerCompose(
        COMPOSE_DIR,
        compose_file_name=COMPOSE_FILE,
        env_file=str(env_file),
        services=INFRA_SERVICES,
        build=True,
        wait=True,
    )
    try:
        _stack.start()
        return stack_env(settings, generated_secrets(), workdir)
    except BaseException:
        stop()
        raise


def _compose(*args: str) -> str:
    """One `docker compose` command on the started stack (its files, env file and project); its output."""
    if _stack is None:
        raise RuntimeError("the containers stack is not started: call start() first")
    done = subprocess.run(
        [*_stack.docker_compose_command(), *args], cwd=COMPOSE_DIR, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"docker compose {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


def stop_service(name: str) -> None:
    """Stop one service's container; its volumes stay (stack.lifecycle.stop_service's counterpart)."""
    _compose("stop", name)


def start_service(name: str) -> None:
    """Start one stopped service again and wait until its healthcheck passes."""
    _compose("up", "--wait", "--no-deps", name)


def stop() -> None:
    """Remove the project's containers and volumes: every service's, the one-shot `secrets` one's too
    (testcontainers' own `down` names only the services it started)."""
    global _stack
    if _stack is not None:
        _compose("down", "--volumes", "--remove-orphans")
        _stack = None
