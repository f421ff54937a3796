"""The session's Spark standalone cluster as its master and workers report it (their web UIs' /json).

What the cluster tests (tests/cluster) use to prove a job ran on the cluster, not in local mode, and to find
a worker's executor of an application.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from stack import spark
from stack.home import existing_stack


def master(home: Path) -> dict[str, Any]:
    stack = existing_stack(home)
    assert stack is not None, f"no stack in {home}"
    state = spark.cluster_state(stack, timeout=10)
    assert state is not None, "the Spark master does not answer"
    return state


def apps(home: Path) -> list[dict[str, Any]]:
    """Every application the master knows, running or completed."""
    state = master(home)
    return [*state["activeapps"], *state["completedapps"]]


def app_ids(home: Path) -> set[str]:
    return {app["id"] for app in apps(home)}


def active_app(home: Path, name: str) -> dict[str, Any] | None:
    """The running application of that name, if the master lists one."""
    return next((a for a in master(home)["activeapps"] if a["name"] == name), None)


def finished(home: Path, app_id: str) -> bool:
    return any(a["id"] == app_id for a in master(home)["completedapps"])


def worker_port(home: Path, name: str) -> int:
    """The RPC port of the stack's worker `name` (spark-worker-N): how the master names it."""
    stack = existing_stack(home)
    assert stack is not None
    port = spark.SparkWorker(stack, int(name.rsplit("-", 1)[1])).rpc_port()
    assert port is not None, f"{name} has no port on record"
    return port


def executors(home: Path, app_id: str, running_only: bool = False) -> dict[int, list[dict[str, Any]]]:
    """Per live worker (by RPC port), the executors it runs (or ran, unless running_only) for the app."""
    found = {}
    for worker in master(home)["workers"]:
        if worker["state"] != "ALIVE":
            continue
        with urllib.request.urlopen(worker["webuiaddress"] + "/json/", timeout=10) as response:  # noqa: S310
            state = json.load(response)
        ran = state["executors"] + ([] if running_only else state["finishedexecutors"])
        found[worker["port"]] = [e for e in ran if e["appid"] == app_id]
    return found


def executor_ids(home: Path, app_id: str, running_only: bool = False) -> dict[int, list[int]]:
    return {port: [e["id"] for e in ran] for port, ran in executors(home, app_id, running_only).items()}


def running_executor(home: Path, app_id: str, worker: str) -> dict[str, Any] | None:
    """The application's executor running on the stack's worker `worker` (spark-worker-N), if any."""
    running = executors(home, app_id, running_only=True).get(worker_port(home, worker), [])
    return running[0] if running else None


def ran_on_every_worker(home: Path, before: set[str], name: str) -> dict[str, Any]:
    """The one application named `name` the master got since `before` (app ids), after asserting that
    every live worker ran an executor for it: the job used the cluster, not Spark's local mode."""
    new = [a for a in apps(home) if a["id"] not in before]
    assert [a["name"] for a in new] == [name], f"expected one new application {name!r} on the master: {new}"
    (app,) = new
    per_worker = executors(home, app["id"])
    assert len(per_worker) >= 2 and all(per_worker.values()), f"executors of {app['id']}: {per_worker}"
    return app
