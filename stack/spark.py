"""A Spark standalone cluster from pyspark's own distribution: one master and N workers on loopback.

`streamfold stack up --spark-workers N` starts them beside the other services, and `stack env` then exports
STREAMFOLD_SPARK_MASTER, which `streamfold run` takes as its master (docs/contracts.md). Every worker offers
WORKER_CORES core and WORKER_MEMORY, so N workers of one core each split a machine the way a cluster of N
one-core machines would. The compose cluster file (compose/docker-compose.cluster.yml) runs the same two
commands, master_command and worker_command (tests/unit/test_compose.py holds them equal).

Executors are the workers' children: they run this checkout's venv (the driver's PYSPARK_PYTHON) and find
the Kinesis endpoint and its credentials in the worker's environment, as the compose workers do.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

import pyspark

from stack.home import AWS_ENV, Stack, StackError
from stack.prerequisites import java_binary
from stack.service import Service

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
WORKER_CORES = 1
WORKER_MEMORY = "3g"  # an executor's heap (pipeline/spark.py CLUSTER) plus room
MAX_WORKERS = 16
# Finished applications' folders (jars, logs) are removed after a day, checked every hour.
WORKER_OPTS = "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.appDataTtl=86400"


def master_command(host: str, port: int, ui_port: int) -> list[str]:
    return ["spark-class", MASTER_CLASS, "--host", host, "--port", str(port), "--webui-port", str(ui_port)]


def worker_command(master_url: str, host: str, work_dir: str, port: int = 0, ui_port: int = 0) -> list[str]:
    return [
        "spark-class", WORKER_CLASS, master_url, "--host", host, "--port", str(port),
        "--webui-port", str(ui_port), "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
        "--work-dir", work_dir,
    ]  # fmt: skip


def worker_names(count: int) -> list[str]:
    return [f"spark-worker-{i}" for i in range(1, count + 1)]


def master_url(stack: Stack) -> str:
    return f"spark://127.0.0.1:{stack.ports['spark-master']}"


def cluster_state(stack: Stack, timeout: float = 3.0) -> dict | None:
    """The master's own view (its web UI's /json): workers, applications; None when it does not answer."""
    url = f"http://127.0.0.1:{stack.ports['spark-master-ui']}/json/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback, our port
            return json.load(response)
    except (OSError, ValueError):
        return None


def _env(stack: Stack) -> dict[str, str]:
    return {
        "SPARK_HOME": str(SPARK_HOME),
        "JAVA_HOME": str(Path(java_binary()).resolve().parents[1]),
        "SPARK_LOG_DIR": str(stack.path("logs")),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        **_private_temp(stack.path("tmp")),
    }


def _private_temp(folder: Path) -> dict[str, str]:
    """Temporary files of the daemon, and of the executors and Python workers it starts (they inherit its
    environment), in the home's private tmp/ rather than /tmp; its Spark local dirs (shuffle files) too."""
    return {
        "SPARK_LOCAL_DIRS": str(folder),
        "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={folder}",
        "TMPDIR": str(folder),
    }


class SparkMaster(Service):
    name = "spark-master"
    port_names = ("spark-master", "spark-master-ui")
    health_timeout = 60.0

    @property
    def marker(self) -> str:
        return f"--port {self.stack.ports['spark-master']}"

    def endpoint(self) -> str:
        return master_url(self.stack)

    def launch(self) -> None:
        ports = self.stack.ports
        cmd = master_command("127.0.0.1", ports["spark-master"], ports["spark-master-ui"])
        self._spawn_recorded([str(SPARK_HOME / "bin" / cmd[0]), *cmd[1:]], self.log, _env(self.stack))

    def healthy(self) -> bool:
        state = cluster_state(self.stack)
        return state is not None and state.get("status") == "ALIVE"


class SparkWorker(Service):
    """Worker `index` (1..N). Its RPC port is picked free at launch and kept beside its pid (pid file's
    second field): the master lists workers by host and port, which is how the health check finds it."""

    health_timeout = 60.0

    def __init__(self, stack: Stack, index: int) -> None:
        super().__init__(stack)
        self.index = index
        self.name = f"spark-worker-{index}"

    @property
    def work_dir(self) -> Path:
        return self.stack.path("data", self.name)

    @property
    def marker(self) -> str:
        return str(self.work_dir)

    def rpc_port(self) -> int | None:
        try:
            return int(self.pid_file.read_text().split()[1])
        except (OSError, ValueError, IndexError):
            return None

    def endpoint(self) -> str:
        port = self.rpc_port()
        return f"127.0.0.1:{port}" if port else "-"

    def prepare(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)

    def launch(self) -> None:
        port = _free_port()
        cmd = worker_command(master_url(self.stack), "127.0.0.1", str(self.work_dir), port)
        env = {
            **_env(self.stack),
            "SPARK_WORKER_OPTS": WORKER_OPTS,
            # What executors' code reads (common/config.py): the Kinesis endpoint and its credentials,
            # and the home whose stack.env holds the rest. No database password: the driver hands the
            # sink its DSN.
            "STREAMFOLD_HOME": str(self.stack.home),
            "STREAMFOLD_KINESIS_ENDPOINT": f"http://127.0.0.1:{self.stack.ports['kinesis']}",
            **AWS_ENV,
        }
        self._spawn_recorded([str(SPARK_HOME / "bin" / cmd[0]), *cmd[1:]], self.log, env)
        self.pid_file.write_text(f"{self.pid_file.read_text().strip()} {port}\n")

    def healthy(self) -> bool:
        state = cluster_state(self.stack)
        port = self.rpc_port()
        workers = (state or {}).get("workers", [])
        return any(w.get("port") == port and w.get("state") == "ALIVE" for w in workers)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def configured_workers(stack: Stack) -> int:
    """How many workers this stack runs (stack up --spark-workers N persists it; 0: no cluster)."""
    try:
        return int(json.loads(stack.path("spark.json").read_text())["workers"])
    except (OSError, ValueError, KeyError):
        return 0


def check_worker_count(count: int) -> None:
    if not 0 <= count <= MAX_WORKERS:
        raise StackError(f"--spark-workers {count}: expected 0 to {MAX_WORKERS}")


def configure_workers(stack: Stack, count: int) -> None:
    check_worker_count(count)
    stack.path("spark.json").write_text(json.dumps({"workers": count}) + "\n")


def environment(stack: Stack) -> dict[str, str]:
    """What `stack env` adds for a cluster: the master `streamfold run` submits to."""
    return {"STREAMFOLD_SPARK_MASTER": master_url(stack)} if configured_workers(stack) else {}


def spark_home_ok() -> None:
    if not os.access(SPARK_HOME / "bin" / "spark-class", os.X_OK):
        raise StackError(f"{SPARK_HOME}/bin/spark-class is missing or not executable: reinstall pyspark")
