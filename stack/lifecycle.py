"""The stack's lifecycle: up and down, start, stop, restart or kill one service, status, env lines.

What `streamfold stack …` (streamfold/cli.py) and the tests call.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from stack.connect import Connect
from stack.home import (
    Stack,
    StackError,
    existing_stack,
    make_private,
    open_stack,
    port_free,
    private_files,
    resolve_home,
    write_private,
)
from stack.kafka import Kafka
from stack.kinesis import Kinesis
from stack.postgres import Postgres
from stack.prerequisites import check_prerequisites
from stack.processes import wait_gone
from stack.registry import Registry
from stack.service import Service
from stack.spark import (
    SparkMaster,
    SparkWorker,
    check_worker_count,
    configure_workers,
    configured_workers,
    spark_home_ok,
)
from stack.spark import environment as spark_environment

SERVICES = ("postgres", "kafka", "connect", "kinesis", "registry")
# Services started together, then waited for; Connect needs a healthy broker, a Spark worker the master.
START_WAVES = (("postgres", "kafka", "kinesis", "registry", "spark-master"), ("connect", "spark-worker"))
WORKER = re.compile(r"spark-worker-([1-9]\d*)")
CLUSTER_NAME = re.compile(r"spark-master|spark-worker-[1-9]\d*")

console = Console(stderr=True, highlight=False, soft_wrap=True)


SERVICE_CLASSES: dict[str, type[Service]] = {
    "postgres": Postgres,
    "kafka": Kafka,
    "connect": Connect,
    "kinesis": Kinesis,
    "registry": Registry,
}


def service_names(stack: Stack) -> list[str]:
    """The stack's services: the five, then the Spark cluster's master and workers when it has one."""
    workers = configured_workers(stack)
    cluster = ["spark-master", *(f"spark-worker-{i}" for i in range(1, workers + 1))] if workers else []
    return [*SERVICES, *cluster]


def service(stack: Stack, name: str) -> Service:
    if name in SERVICE_CLASSES:
        return SERVICE_CLASSES[name](stack)
    if CLUSTER_NAME.fullmatch(name) and (name in service_names(stack) or _leftover(stack, name)):
        worker = WORKER.fullmatch(name)
        return SparkWorker(stack, int(worker[1])) if worker else SparkMaster(stack)
    raise StackError(f"unknown service {name!r}: one of {', '.join(service_names(stack))}")


def _leftover(stack: Stack, name: str) -> bool:
    """A cluster service with a pid file, though no longer configured (stopped by the next up or down)."""
    return stack.path("pids", f"{name}.pid").exists()


def check_name(name: str) -> None:
    """Before anything is created or stopped: a name no stack could have is an error."""
    if name not in SERVICES and not CLUSTER_NAME.fullmatch(name):
        raise StackError(
            f"unknown service {name!r}: one of {', '.join(SERVICES)}, spark-master, spark-worker-N"
        )


def depends_on(name: str) -> tuple[str, ...]:
    if name == "connect":
        return ("kafka",)
    return ("spark-master",) if WORKER.fullmatch(name) else ()


def _waves(stack: Stack) -> list[list[str]]:
    """START_WAVES for this stack: "spark-worker" stands for every worker, and no cluster, no Spark."""
    names = service_names(stack)
    expand = {"spark-worker": [n for n in names if WORKER.fullmatch(n)]}
    return [[m for n in wave for m in expand.get(n, [n]) if m in names] for wave in START_WAVES]


def _busy_ports(svc: Service) -> list[tuple[str, int]]:
    """The service's ports (name, number) that something holds."""
    ports = [(name, svc.stack.ports[name]) for name in svc.port_names]
    return [(name, port) for name, port in ports if not port_free(port)]


def _check_ports(services: Sequence[Service]) -> None:
    for svc in services:
        for port_name, port in _busy_ports(svc):
            raise StackError(f"port {port} needed by {port_name} is already in use")


def _wait_ports_free(svc: Service, timeout: float) -> None:
    """A killed JVM's group leader can be a zombie (gone, for wait_gone) before its last threads have
    exited and closed its sockets: a restart straight after the kill once found the port still bound."""
    deadline = time.monotonic() + timeout
    while _busy_ports(svc) and time.monotonic() < deadline:
        time.sleep(0.2)


def _wait_healthy(svc: Service, started: float) -> None:
    deadline = started + svc.health_timeout
    while not svc.healthy():
        if svc.pid() is None:
            raise StackError(f"{svc.name} exited during start-up; last lines of {svc.log}:\n{svc.log_tail()}")
        if time.monotonic() > deadline:
            raise StackError(
                f"{svc.name} not healthy after {svc.health_timeout:.0f}s; last lines of {svc.log}:\n"
                f"{svc.log_tail()}"
            )
        time.sleep(0.25)
    svc.after_healthy()
    took = time.monotonic() - started
    console.print(f"[green]up[/] {svc.name:<14} {svc.endpoint():<28} pid {svc.pid()}  ({took:.1f}s)")


@contextlib.contextmanager
def _stop_on_failure(stack: Stack) -> Iterator[list[str]]:
    """Services started by a failing call are stopped again: nothing half-started is left behind."""
    started: list[str] = []
    try:
        yield started
    except BaseException:
        for name in reversed(started):
            service(stack, name).stop()
        raise


def _start(stack: Stack, waves: Sequence[Sequence[str]]) -> None:
    check_prerequisites([name for wave in waves for name in wave])
    if any(name.startswith("spark-") for wave in waves for name in wave):
        spark_home_ok()
    pending = [service(stack, name) for wave in waves for name in wave]
    _check_ports([svc for svc in pending if svc.pid() is None])
    with _stop_on_failure(stack) as started:
        for wave in waves:
            svcs = [service(stack, name) for name in wave]
            began = time.monotonic()
            for svc in svcs:
                if svc.pid() is None:
                    started.append(svc.name)
                    svc.prepare()
                    svc.launch()
            for svc in svcs:
                _wait_healthy(svc, began)


def up(home: Path, spark_workers: int | None = None) -> dict[str, str]:
    """Start whatever is not running, wait until all is healthy, write stack.env; return the env.
    spark_workers: run a Spark cluster of that many workers (0: none); None keeps the stack's choice."""
    if spark_workers is not None:
        check_worker_count(spark_workers)
    with private_files():
        stack = open_stack(home)
        make_private(stack.home)
        if spark_workers is not None:
            configure_workers(stack, spark_workers)
            _stop_unconfigured(stack)
        _start(stack, _waves(stack))
        env = {**stack.env(), **spark_environment(stack)}
        lines = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
        write_private(stack.path("stack.env"), lines)
    return env


def down(home: Path) -> None:
    """Stop every service this stack started (Connect first: it flushes offsets to Kafka)."""
    stack = existing_stack(home)
    if stack is None:
        return
    cluster = sorted({*_cluster_pid_files(stack), *service_names(stack)} - set(SERVICES), reverse=True)
    for name in [
        *cluster,
        "connect",
        "registry",
        "kinesis",
        "kafka",
        "postgres",
    ]:  # workers before their master
        svc = service(stack, name)
        if svc.pid() is not None:
            svc.stop()
            console.print(f"[yellow]stopped[/] {name}")
        svc.pid_file.unlink(missing_ok=True)


def _cluster_pid_files(stack: Stack) -> list[str]:
    return [p.stem for p in stack.path("pids").glob("spark-*.pid")]


def _stop_unconfigured(stack: Stack) -> None:
    """Workers beyond the configured count, and the master of a stack without a cluster, stop."""
    for name in sorted(set(_cluster_pid_files(stack)) - set(service_names(stack)), reverse=True):
        svc = service(stack, name)
        if svc.pid() is not None:
            console.print(f"[yellow]stopped[/] {name}")
        svc.stop()


def start_service(home: Path, name: str) -> None:
    """Start one service (its dependencies must be up) and wait until it is healthy."""
    check_name(name)
    with private_files():
        stack = open_stack(home)
        service(stack, name)  # a worker the stack does not have is an error before its master is asked for
        for needed in depends_on(name):
            if service(stack, needed).pid() is None:
                raise StackError(f"{name} needs {needed}, which is not running: start it first")
        _start(stack, [[service(stack, name).name]])


def stop_service(home: Path, name: str) -> None:
    check_name(name)
    stack = existing_stack(home)
    if stack is not None:
        service(stack, name).stop()


def restart_service(home: Path, name: str) -> None:
    stop_service(home, name)
    start_service(home, name)


def kill_service(home: Path, name: str) -> None:
    """SIGKILL one service, as a crash would (no graceful shutdown)."""
    check_name(name)
    stack = existing_stack(home)
    if stack is None:
        return
    svc = service(stack, name)
    pid = svc.pid()
    if pid is not None:
        os.killpg(pid, signal.SIGKILL)
        wait_gone(pid, 10)
        _wait_ports_free(svc, 30)


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    endpoint: str
    state: str  # up | unhealthy | down
    pid: int | None

    @property
    def up(self) -> bool:
        return self.state == "up"


def status(home: Path) -> list[ServiceStatus]:
    stack = existing_stack(home)
    if stack is None:
        return [ServiceStatus(name, "-", "down", None) for name in SERVICES]
    rows = []
    for name in service_names(stack):
        svc = service(stack, name)
        pid = svc.pid()
        state = "down" if pid is None else ("up" if svc.healthy() else "unhealthy")
        rows.append(ServiceStatus(name, svc.endpoint(), state, pid))
    return rows


def env_lines(home: Path) -> list[str]:
    path = resolve_home(home) / "stack.env"
    if not path.exists():
        raise StackError(f"{path} not found: start the stack with `streamfold stack up`")
    return path.read_text().splitlines()
