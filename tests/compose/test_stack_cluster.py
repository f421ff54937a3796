"""docker-compose.cluster.yml: the job's driver in `pipeline`, its executors on `spark-worker` under
`spark-master`, with the same totals as an independent computation over the inputs."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from tests.compose.conftest import SERVICES, Compose, assert_project_gone, phase, running_stack
from tests.compose.test_stack import GENERATE_CLICKS, GENERATE_USERS, README, wait_for_totals

CLUSTER_UP = "docker compose -f docker-compose.yml -f docker-compose.cluster.yml up -d --build"
CLUSTER_SERVICES = (*SERVICES, "spark-master", "spark-worker")


@pytest.fixture(scope="module")
def cluster(images: Compose) -> Iterator[Compose]:
    assert CLUSTER_UP in README
    # Every later command (run --rm setup, down) sees both files, as the README's up line does.
    env = {**images.env, "COMPOSE_FILE": "docker-compose.yml:docker-compose.cluster.yml"}
    compose = dataclasses.replace(images, env=env)
    up = CLUSTER_UP.split()[2:]  # docker compose
    yield from running_stack(compose, up, CLUSTER_SERVICES, "cluster")
    images.timings.update(compose.timings)


def master_state(compose: Compose) -> dict:
    out = compose.run(
        "exec", "-T", "spark-master", "python", "-c",
        "import urllib.request; print(urllib.request.urlopen('http://localhost:8080/json/').read().decode())",
    ).stdout  # fmt: skip
    return dict(json.loads(out))


def test_the_job_runs_on_the_cluster_with_the_same_totals(cluster: Compose) -> None:
    state = master_state(cluster)
    assert [w["state"] for w in state["workers"]] == ["ALIVE"]
    (app,) = state["activeapps"]
    assert app["name"].startswith("streamfold-kafka"), app
    s = cluster.settings()
    host_env = {
        "STREAMFOLD_KAFKA_BOOTSTRAP": f"127.0.0.1:{s['KAFKA_HOST_PORT']}",
        "admin_dsn": (
            f"postgresql://streamfold:{s['STREAMFOLD_PG_PASSWORD']}@127.0.0.1:{s['POSTGRES_HOST_PORT']}/streamfold"
        ),
    }
    cluster.shell(GENERATE_USERS)
    cluster.shell(GENERATE_CLICKS)
    want = wait_for_totals(host_env, kinesis=False, timeout_s=420)
    assert len(want.rows) == 10_000
    # The executors ran on the worker: it reports the application's executor.
    worker = cluster.run(
        "exec", "-T", "spark-worker", "python", "-c",
        "import urllib.request; print(urllib.request.urlopen('http://localhost:8081/json/').read().decode())",
    ).stdout  # fmt: skip
    executors = json.loads(worker)["executors"]
    assert [e["appid"] for e in executors] == [app["id"]], executors
    phase("10,000 clicks joined on the Spark cluster, totals checked")


def test_cluster_down_v_leaves_nothing(cluster: Compose) -> None:
    cluster.run("down", "-v", timeout=300)
    assert_project_gone(cluster)
