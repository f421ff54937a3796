"""A Docker Engine and the compose images' base, for the tests that run containers: tests/compose
(`make test-compose`) and `pytest --stack=containers` (`make test-containers`).

Environment: BASE_IMAGE (skip scripts/images.sh and build FROM it, e.g. debian:bookworm-slim where a
registry is reachable); STREAMFOLD_BUILD_CA (a PEM bundle the builds must trust, copied into
compose/build-ca/ and left there: a TLS-intercepting proxy's).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CA_COPY = REPO / "compose" / "build-ca" / "streamfold-build-ca.crt"


def docker_ok() -> bool:
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextlib.contextmanager
def running(log_path: Path, say: Callable[[str], None] = print) -> Iterator[None]:
    """The Docker Engine that answers `docker info`, or a `dockerd` started here as root and stopped
    on exit: only the one started here."""
    if docker_ok():
        yield
        return
    if os.geteuid() != 0 or not shutil.which("dockerd"):
        pytest.fail("no Docker Engine answers `docker info`, and this is not root with dockerd to start one")
    say(f"starting dockerd (log: {log_path})")
    with log_path.open("wb") as log:
        proc = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not docker_ok():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not start:\n{log_path.read_text()[-3000:]}")
            time.sleep(1)
        yield
    finally:
        say("stopping the dockerd this run started")
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def base_image(env: Mapping[str, str]) -> str:
    """The BASE_IMAGE the compose builds use: env's, or the Debian base scripts/images.sh makes (once
    per machine). Puts env's STREAMFOLD_BUILD_CA into compose/build-ca/ and leaves it there (git
    ignores it): every later build, a test's or a developer's `up --build`, then sees the same context
    and hits the cache."""
    if env.get("STREAMFOLD_BUILD_CA"):
        bundle = Path(env["STREAMFOLD_BUILD_CA"]).read_bytes()
        if not CA_COPY.exists() or CA_COPY.read_bytes() != bundle:
            CA_COPY.write_bytes(bundle)
    if env.get("BASE_IMAGE"):
        return env["BASE_IMAGE"]
    made = subprocess.run(["bash", "scripts/images.sh"], cwd=REPO, capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"scripts/images.sh failed:\n{made.stderr}")
    return made.stdout.strip().splitlines()[-1]
