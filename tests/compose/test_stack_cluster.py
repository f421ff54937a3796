"""docker-compose.cluster.yml: the job's driver in `pipeline`, its executors on `spark-worker-1` and
`spark-worker-2` under `spark-master`, with the same totals as an independent computation over the inputs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest

from stack.spark import worker_names
from tests.compose.conftest import SERVICES, Compose, assert_project_gone, phase, running_stack
from tests.compose.test_stack import GENERATE_CLICKS, GENERATE_USERS, README, client_env, wait_for_totals

CLUSTER_UP = "docker compose -f docker-compose.yml -f docker-compose.cluster.yml up -d --build"
# The native stack's `--spark-workers 2`: two workers of one core (tests/unit/test_compose.py).
WORKERS = tuple(worker_names(2))
CLUSTER_SERVICES = (*SERVICES, "spark-master", *WORKERS)


@pytest.fixture(scope="module")
def cluster(images: Compose) -> Iterator[Compose]:
    assert CLUSTER_UP in README
    # Every later command (run --rm setup, down) sees both files, as the README's up line does.
    env = {**images.env, "COMPOSE_FILE": "docker-compose.yml:docker-compose.cluster.yml"}
    compose = dataclasses.replace(images, env=env)
    up = CLUSTER_UP.split()[2:]  # docker compose
    yield from running_stack(compose, up, CLUSTER_SERVICES, "cluster")
    images.timings.update(compose.timings)


def ui_json(compose: Compose, service: str, url: str) -> Any:
    """A Spark UI's JSON, read inside the service's container (only the master's UI is published)."""
    out = compose.run(
        "exec", "-T", service, "python", "-c",
        f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=10).read().decode())",
    ).stdout  # fmt: skip
    return json.loads(out)


def test_the_job_runs_on_the_cluster_with_the_same_totals(
    cluster: Compose, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = ui_json(cluster, "spark-master", "http://localhost:8080/json/")
    workers = {w["host"]: w for w in state["workers"] if w["state"] == "ALIVE"}
    assert sorted(workers) == list(WORKERS), state["workers"]
    assert [(w["cores"], w["memory"]) for w in workers.values()] == [(1, 3072)] * len(WORKERS)
    (app,) = state["activeapps"]
    assert app["name"].startswith("streamfold-kafka"), app
    # The application holds every worker's core, with pipeline/spark.py's executor memory for the cluster.
    assert app["cores"] == state["cores"] == len(WORKERS) and app["memoryperexecutor"] == 2048, app
    host_env = client_env(cluster, monkeypatch)
    cluster.shell(GENERATE_USERS)
    cluster.shell(GENERATE_CLICKS)
    want = wait_for_totals(host_env, kinesis=False, timeout_s=420)
    assert len(want.rows) == 10_000
    # Each worker runs an executor of the application...
    for name in WORKERS:
        executors = ui_json(cluster, name, "http://localhost:8081/json/")["executors"]
        assert [e["appid"] for e in executors] == [app["id"]], (name, executors)
    # ...and, in the driver's own view, each of those executors ran tasks of the job.
    api = f"http://localhost:4040/api/v1/applications/{app['id']}/executors"
    tasks = {e["hostPort"].split(":")[0]: e["totalTasks"] for e in ui_json(cluster, "pipeline", api)}
    assert set(tasks) == {"pipeline", *WORKERS} and all(tasks[name] > 0 for name in WORKERS), tasks
    phase(f"10,000 clicks joined on the Spark cluster, totals checked; tasks per executor host: {tasks}")


def test_cluster_down_v_leaves_nothing(cluster: Compose) -> None:
    cluster.run("down", "-v", timeout=300)
    assert_project_gone(cluster)
