"""The cluster suite (`make test-cluster`): its session's local stack runs a Spark standalone cluster of
WORKERS one-core workers (`stack up --spark-workers 2`), so every job a sandbox starts submits to it
(STREAMFOLD_SPARK_MASTER, exported with the stack's variables).

The stack is the session's: run this suite in a session of its own, never with tests/e2e (whose tests would
otherwise run on the cluster, or these in local mode).
"""

from __future__ import annotations

from pathlib import Path

import pytest

# The end-to-end suite's fixtures (the schema, snapshot users and connector; a connection), on this stack.
from tests.e2e.conftest import pg, settings, streamfold_setup  # noqa: F401

WORKERS = 2
SUITE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def spark_workers() -> int:
    return WORKERS


@pytest.fixture(scope="session")
def home(stack: dict[str, str]) -> Path:
    """The session stack's home: its master, workers and their logs (not a sandbox's home)."""
    return Path(stack["STREAMFOLD_HOME"])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if SUITE in item.path.parents]
    others = [item for item in items if SUITE not in item.path.parents and "stack" in item.fixturenames]
    if ours and others:
        raise pytest.UsageError(
            "tests/cluster starts the session's stack with a Spark cluster: run it in its own session "
            f"(`make test-cluster`), not with {others[0].nodeid}"
        )
