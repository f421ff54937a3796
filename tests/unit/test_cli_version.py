"""`streamfold --version`: the version pyproject.toml sets (installed metadata, or the file itself)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from typer.testing import CliRunner

from streamfold import cli

REPO = Path(__file__).resolve().parents[2]
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_version_prints_pyprojects_and_needs_no_stack() -> None:
    result = CliRunner().invoke(cli.app, ["--version"], env={"STREAMFOLD_HOME": "/nonexistent"})
    assert (result.exit_code, result.output) == (0, f"streamfold {VERSION}\n")


def test_without_install_metadata_the_version_comes_from_pyproject(tmp_path: Path) -> None:
    assert cli.PYPROJECT == REPO / "pyproject.toml"
    assert cli.pyproject_version(cli.PYPROJECT) == VERSION
    assert cli.pyproject_version(tmp_path / "absent.toml") is None
    (tmp_path / "other.toml").write_text('[project]\nname = "other"\n')
    assert cli.pyproject_version(tmp_path / "other.toml") is None
