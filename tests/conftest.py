"""Session-wide fixtures: one stack (local processes, or containers) shared by every e2e test.

Only tests that request `stack` start it; unit tests never do.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

# Every JVM a session with a stack starts (the services, the jobs, Spark's workers) compiles with C1 only:
# the scenarios' jobs are short and their inputs small, so C2's compilations cost more CPU than their code
# saves (one e2e file: 35% less CPU, 20% less time; the unit suite's in-process Spark: no change).
# `make bench` and the compose stack keep the job's own JIT settings (pipeline/spark.py).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stack",
        choices=("local", "containers"),
        default="local",
        help="local: native processes (stack/); containers: tests/support/containers.py",
    )


def _reachable_by_postgres(home: Path, basetemp: Path) -> Path:
    """pytest makes its temp dirs 0700, but postgres runs as its own OS user when we are root and
    must reach its data dir under the home: let others traverse (not list) these temp dirs."""
    if os.geteuid() == 0:
        for folder in [home, *home.parents]:
            mode = stat.S_IMODE(folder.stat().st_mode)
            if not mode & stat.S_IXOTH:
                os.chmod(folder, mode | stat.S_IXOTH)
            if folder == basetemp.parent:
                break
    return home


@pytest.fixture(scope="session")
def new_stack_home(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """A factory of fresh, empty STREAMFOLD_HOME folders a local stack can use."""

    def make(name: str) -> Path:
        return _reachable_by_postgres(tmp_path_factory.mktemp(name), tmp_path_factory.getbasetemp())

    return make


def _containers_module() -> ModuleType:
    try:
        return importlib.import_module("tests.support.containers")
    except ModuleNotFoundError as exc:
        pytest.fail(
            f"--stack=containers: cannot import tests.support.containers (start(workdir), stop()): {exc}"
        )


@pytest.fixture(scope="session")
def spark_workers() -> int:
    """How many Spark workers the session's local stack runs: none (Spark's local mode); tests/cluster
    overrides it. One stack per session, so a session never mixes the cluster suite with another."""
    return 0


@pytest.fixture(scope="session")
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    new_stack_home: Callable[[str], Path],
    spark_workers: int,
) -> Iterator[dict[str, str]]:
    """Start one stack for the session, export its variables, yield them, stop it at the end.

    Containers need a Docker Engine (one is started as root when none runs, and stopped at the end) and
    the images' base (BASE_IMAGE, else scripts/images.sh): tests/support/engine.py, as in tests/compose."""
    with contextlib.ExitStack() as cleanup:
        patch = cleanup.enter_context(pytest.MonkeyPatch.context())
        patch.setenv("JDK_JAVA_OPTIONS", os.environ.get("JDK_JAVA_OPTIONS", TEST_JVM_OPTIONS))
        if request.config.getoption("--stack") == "containers":
            if spark_workers:
                pytest.fail("a Spark cluster runs on the local stack only (--stack=local)")
            from tests.support import engine

            containers = _containers_module()
            cleanup.enter_context(engine.running(tmp_path_factory.getbasetemp() / "dockerd.log"))
            patch.setenv("BASE_IMAGE", engine.base_image(os.environ))
            env = containers.start(tmp_path_factory.mktemp("containers"))
            cleanup.callback(containers.stop)
        else:
            from stack import lifecycle

            home = new_stack_home("stack")
            env = lifecycle.up(home, spark_workers=spark_workers)
            cleanup.callback(lifecycle.down, home)
        for key, value in env.items():
            patch.setenv(key, value)
        yield env


@dataclass(frozen=True)
class Services:
    """Stop and start one service of the session's stack by name, local processes or containers alike."""

    stop: Callable[[str], None]
    start: Callable[[str], None]


@pytest.fixture(scope="session")
def services(request: pytest.FixtureRequest, stack: dict[str, str]) -> Services:
    if request.config.getoption("--stack") == "containers":
        containers = _containers_module()
        return Services(containers.stop_service, containers.start_service)
    from stack import lifecycle

    home = Path(stack["STREAMFOLD_HOME"])
    return Services(
        functools.partial(lifecycle.stop_service, home), functools.partial(lifecycle.start_service, home)
    )
