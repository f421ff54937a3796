"""The stack's Spark cluster (stack/spark.py) as the lifecycle sees it, without starting anything: its
ports, its services and the order they start in, and what `stack env` gains. tests/cluster runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stack import lifecycle, spark
from stack.home import PORT_OFFSETS, StackError, open_stack


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_a_home_made_before_the_cluster_gets_its_ports_in_its_own_block(home: Path) -> None:
    home.mkdir()
    old = {name: 24000 + offset for name, offset in PORT_OFFSETS.items() if not name.startswith("spark")}
    (home / "ports.json").write_text(json.dumps(old))
    ports = open_stack(home).ports
    assert ports == {**old, "spark-master": 24006, "spark-master-ui": 24007}
    assert json.loads((home / "ports.json").read_text()) == ports  # kept, like every other port


def test_without_workers_there_is_no_cluster(home: Path) -> None:
    stack = open_stack(home)
    assert lifecycle.service_names(stack) == list(lifecycle.SERVICES)
    assert spark.environment(stack) == {}
    assert [n for wave in lifecycle._waves(stack) for n in wave if n.startswith("spark")] == []


def test_workers_start_after_their_master_and_stack_env_names_it(home: Path) -> None:
    stack = open_stack(home)
    spark.configure_workers(stack, 3)
    workers = ["spark-worker-1", "spark-worker-2", "spark-worker-3"]
    assert lifecycle.service_names(stack) == [*lifecycle.SERVICES, "spark-master", *workers]
    first, second = lifecycle._waves(stack)
    assert "spark-master" in first and set(workers) <= set(second)
    assert spark.environment(stack) == {
        "STREAMFOLD_SPARK_MASTER": f"spark://127.0.0.1:{stack.ports['spark-master']}"
    }
    assert lifecycle.depends_on("spark-worker-2") == ("spark-master",)
    with pytest.raises(StackError, match="unknown service 'spark-worker-4'"):
        lifecycle.service(stack, "spark-worker-4")


def test_native_and_compose_workers_share_one_command() -> None:
    """One core and one memory size per worker wherever it runs (compose/docker-compose.cluster.yml runs
    the same command: tests/unit/test_compose.py)."""
    cmd = spark.worker_command("spark://m:7077", "w", "/work")
    assert cmd[:3] == ["spark-class", spark.WORKER_CLASS, "spark://m:7077"]
    assert cmd[cmd.index("--cores") + 1] == "1" and cmd[cmd.index("--work-dir") + 1] == "/work"
