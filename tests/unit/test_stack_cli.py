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


def test_start_stop_restart_take_the_launchers_services() -> None:
    assert [service.value for service in cli.StackService] == list(lifecycle.SERVICES)


def test_an_unknown_service_is_a_usage_error(empty_home: Path) -> None:
    code, output = stack("start", "zookeeper")
    assert code == 2 and "zookeeper" in output
    assert not empty_home.exists()


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
