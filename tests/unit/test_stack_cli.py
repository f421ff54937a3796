"""`streamfold stack …`, the launcher's one command line: the services it takes, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stack import lifecycle
from streamfold import cli


@pytest.fixture()
def empty_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("STREAMFOLD_HOME", str(home))
    return home


def stack(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli.app, ["stack", *args])
    return result.exit_code, result.output


def test_an_unknown_service_is_an_error_naming_the_services(empty_home: Path) -> None:
    for args in (("start", "zookeeper"), ("stop", "spark-worker-0"), ("restart", "spark-workers")):
        code, output = stack(*args)
        assert code == 1, args
        assert f"unknown service {args[1]!r}: one of {', '.join(lifecycle.SERVICES)}" in output
    assert not empty_home.exists()


def test_a_worker_the_stack_does_not_have_is_refused(empty_home: Path) -> None:
    """spark-worker-N is a service only when the stack runs N workers or more (stack up --spark-workers)."""
    code, output = stack("start", "spark-worker-1")
    assert code == 1 and "unknown service 'spark-worker-1'" in output, output


def test_spark_workers_must_be_a_sensible_count(empty_home: Path) -> None:
    code, output = stack("up", "--spark-workers", "17")
    assert code == 1 and "--spark-workers 17: expected 0 to 16" in output, output


def test_a_stack_error_is_a_one_line_error_and_exit_status_1(empty_home: Path) -> None:
    code, output = stack("env")
    assert code == 1
    assert (
        output.strip()
        == f"error: {empty_home / 'stack.env'} not found: start the stack with `streamfold stack up`"
    )
    code, output = stack("start", "connect")  # before anything runs: Connect needs the broker
    assert (code, output.strip()) == (1, "error: connect needs kafka, which is not running: start it first")


def test_stopping_a_service_of_a_stack_that_never_ran_is_a_no_op(empty_home: Path) -> None:
    assert stack("stop", "kafka") == (0, "stopped kafka\n")
    assert stack("down") == (0, "")
