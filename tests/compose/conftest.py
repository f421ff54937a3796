"""The compose stack on a real Docker Engine (`make test-compose`).

Session fixtures, in order: a Docker Engine (the one running, or a `dockerd` started here as root and
stopped at the end), the base image (scripts/images.sh, cached between runs), the images built by
Compose, and the stack itself under a project of its own with host ports 31000+ (the local stack uses
20000-29999, Spark UIs 4040+), removed with its volumes at the end.

Environment: BASE_IMAGE (skip scripts/images.sh and build FROM it, e.g. debian:bookworm-slim where a
registry is reachable); STREAMFOLD_BUILD_CA (a PEM bundle the builds must trust, copied into
compose/build-ca/ and left there: a TLS-intercepting proxy's); STREAMFOLD_COMPOSE_KEEP_IMAGES=0 removes
the service images at the end (the base image always stays); STREAMFOLD_COMPOSE=docker-compose runs the
test with Debian's Compose 1.29 although the v2 plugin is installed (the default prefers v2).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from common import config
from tests.support import engine as docker_engine

REPO = Path(__file__).resolve().parents[2]
COMPOSE_DIR = REPO / "compose"
PROJECT = "streamfold-compose-test"
# Host ports of this test's stack (compose/.env names); the environment may override each.
PORTS = {
    "POSTGRES_HOST_PORT": 31032,
    "KAFKA_HOST_PORT": 31092,
    "CONNECT_HOST_PORT": 31083,
    "KINESIS_HOST_PORT": 31068,
    "REGISTRY_HOST_PORT": 31081,
    "SPARK_UI_HOST_PORT": 31040,
    "SPARK_MASTER_UI_HOST_PORT": 31080,
}
SERVICES = ("postgres", "kafka", "connect", "kinesis", "registry", "pipeline")
IMAGES = ("postgres", "kafka", "kinesis", "registry", "pipeline")


_config: pytest.Config | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _config
    _config = config


def phase(message: str) -> None:
    """A progress line on the terminal while pytest captures output (capture paused for the write)."""
    line = f"[compose-test {time.strftime('%H:%M:%S')}] {message}"
    capture = _config.pluginmanager.get_plugin("capturemanager") if _config else None
    reporter = _config.pluginmanager.get_plugin("terminalreporter") if _config else None
    if capture is None or reporter is None:
        print(line, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)
        reporter.flush()


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A running Docker Engine; one started here is stopped here, and only that one."""
    with docker_engine.running(tmp_path_factory.getbasetemp() / "dockerd.log", phase):
        yield


@dataclass
class Compose:
    """`docker compose` (v2) or Debian's `docker-compose` (1.29), run in compose/ with this test's env."""

    command: list[str]
    env: dict[str, str]
    timings: dict[str, float] = field(default_factory=dict)

    def argv(self, *args: str) -> list[str]:
        return [*self.command, *args]

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            self.argv(*args), cwd=COMPOSE_DIR, env=self.env, capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=timeout,
        )  # fmt: skip
        if check and result.returncode != 0:
            pytest.fail(
                f"{' '.join(self.argv(*args))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
            )
        return result

    def shell(self, line: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """A README command line, `docker compose` spelled as this machine's Compose."""
        line = line.replace("docker compose ", " ".join(self.command) + " ", 1)
        result = subprocess.run(
            ["bash", "-c", line], cwd=COMPOSE_DIR, env=self.env, capture_output=True, text=True,
            stdin=subprocess.DEVNULL, timeout=timeout,
        )  # fmt: skip
        if result.returncode != 0:
            pytest.fail(f"`{line}` exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
        return result

    def settings(self) -> dict[str, str]:
        """compose/.env overridden by this test's environment (what Compose interpolates)."""
        values = config.read_env_file(COMPOSE_DIR / ".env")
        return {key: self.env.get(key, value) for key, value in values.items()}

    def containers(self, service: str | None = None) -> list[dict]:
        """`docker inspect` of this project's containers, stopped ones included."""
        filters = ["--filter", f"label=com.docker.compose.project={PROJECT}"]
        if service:
            filters += ["--filter", f"label=com.docker.compose.service={service}"]
        ids = subprocess.run(
            ["docker", "ps", "-aq", *filters], capture_output=True, text=True, check=True
        ).stdout.split()
        if not ids:
            return []
        out = subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, check=True).stdout
        return list(json.loads(out))


def compose_command() -> list[str]:
    if chosen := os.environ.get("STREAMFOLD_COMPOSE"):
        return chosen.split()  # e.g. docker-compose: Debian's 1.29 where the v2 plugin is installed too
    v2 = subprocess.run(["docker", "compose", "version"], capture_output=True)
    if v2.returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.fail("neither `docker compose` (v2) nor `docker-compose` (1.29) is installed")


@pytest.fixture(scope="session")
def compose(engine: None) -> Iterator[Compose]:
    env = dict(os.environ)
    env["COMPOSE_PROJECT_NAME"] = PROJECT
    for var, port in PORTS.items():
        env.setdefault(var, str(port))
    # The stack must not inherit the caller's streamfold settings (a local stack's, say).
    for key in [k for k in env if k.startswith("STREAMFOLD_") and k != "STREAMFOLD_BUILD_CA"]:
        del env[key]
    yield Compose(compose_command(), env)


@pytest.fixture(scope="session")
def images(compose: Compose) -> Iterator[Compose]:
    """The base image (made once per machine unless BASE_IMAGE is given) and the service images."""
    started = time.monotonic()
    compose.env["BASE_IMAGE"] = docker_engine.base_image(compose.env)
    compose.timings["base image"] = time.monotonic() - started
    phase(f"base image {compose.env['BASE_IMAGE']} ready in {compose.timings['base image']:.0f} s")
    started = time.monotonic()
    phase("building the images (docker compose build)")
    compose.run("build", "--force-rm", timeout=1800)
    compose.timings["build"] = time.monotonic() - started
    phase(f"images built in {compose.timings['build']:.0f} s")
    yield compose
    if compose.env.get("STREAMFOLD_COMPOSE_KEEP_IMAGES", "1") == "0":
        tag = compose.settings()["STREAMFOLD_IMAGE_TAG"]
        subprocess.run(
            ["docker", "rmi", *(f"streamfold/{name}:{tag}" for name in IMAGES)], capture_output=True
        )


def assert_project_gone(compose: Compose) -> None:
    """No container, volume or network of this project is left."""
    label = f"label=com.docker.compose.project={compose.env['COMPOSE_PROJECT_NAME']}"
    for kind in ("ps -a", "volume ls", "network ls"):
        left = subprocess.run(
            ["docker", *kind.split(), "-q", "--filter", label], capture_output=True, text=True, check=True
        ).stdout.split()
        assert left == [], f"docker {kind}: {left}"


def wait_healthy(compose: Compose, services: tuple[str, ...], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        states = {}
        for service in services:
            found = compose.containers(service)
            states[service] = (
                (found[0]["State"].get("Health") or {}).get("Status", "none") if found else "absent"
            )
        if all(state == "healthy" for state in states.values()):
            return
        if time.monotonic() > deadline:
            logs = compose.run("logs", "--tail", "40", check=False).stdout
            pytest.fail(f"not healthy after {timeout_s:.0f} s: {states}\n{logs[-6000:]}")
        time.sleep(3)


def running_stack(compose: Compose, up: list[str], services: tuple[str, ...], name: str) -> Iterator[Compose]:
    """`up` (a `docker compose up -d` line): every service healthy. Removed (down -v) at the end."""
    compose.run("down", "-v", "--remove-orphans", check=False)  # what a failed earlier run left
    started = time.monotonic()
    phase(" ".join(up))
    try:
        compose.run(*up, timeout=900)
        wait_healthy(compose, services, 600)
        compose.timings[f"{name} up"] = time.monotonic() - started
        phase(f"every service healthy {compose.timings[f'{name} up']:.0f} s after `up -d`")
        yield compose
    finally:
        compose.run("down", "-v", "--remove-orphans", check=False)
        phase("timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in compose.timings.items()))


@pytest.fixture(scope="module")
def stack(images: Compose) -> Iterator[Compose]:
    """docker-compose.yml up: every service healthy, `setup` exited 0."""
    yield from running_stack(images, ["up", "-d", "--no-build"], SERVICES, "stack")
