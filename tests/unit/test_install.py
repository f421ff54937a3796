"""`pip install` of streamfold into a fresh venv gives a working `streamfold` command, run from outside any
checkout: its commands, its version, the default pipeline file, and a clear error naming the jars
`make setup` builds when they are missing (about 15 s).

The wheel is built from a copy of pyproject.toml and the packages it lists, with this venv's setuptools and
no index, so nothing downloads. The fresh venv gets streamfold from that wheel only; its dependencies come
from this venv's site-packages through a .pth file (pip would otherwise fetch them from PyPI), so a
separate test holds every import of the installed packages to pyproject's dependencies.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]
PACKAGES = sorted({name.split(".")[0] for name in PYPROJECT["tool"]["setuptools"]["packages"]})
# Files the commands read at run time besides Python modules (pyproject's package-data).
DATA_FILES = [
    "common/streamfold.yaml",
    "pipeline/log4j2.properties",
    "stack/kinesalite_preload.js",
    "db/migrations/script.py.mako",
    *(str(p.relative_to(REPO)) for p in sorted((REPO / "connectors").glob("*.json"))),
    *(str(p.relative_to(REPO)) for p in sorted((REPO / "db" / "migrations" / "versions").glob("*.py"))),
]


def run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def pip(python: Path, *args: str | Path, cwd: Path) -> None:
    done = run([python, "-m", "pip", "--disable-pip-version-check", "-q", *args, "--no-index"], cwd)
    assert done.returncode == 0, done.stdout + done.stderr


def copy_sources(target: Path) -> Path:
    """pyproject.toml and the top-level folders of the packages it lists, nothing else of the checkout."""
    target.mkdir()
    shutil.copy(REPO / "pyproject.toml", target)
    for top in PACKAGES:
        shutil.copytree(REPO / top, target / top, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("install")
    wheels = root / "wheels"
    pip(Path(sys.executable), "wheel", "--no-deps", "--no-build-isolation", "-w", wheels,
        copy_sources(root / "src"), cwd=root)  # fmt: skip
    venv = root / "venv"
    done = run([sys.executable, "-m", "venv", venv], root)
    assert done.returncode == 0, done.stderr
    python = venv / "bin" / "python"
    pip(python, "install", "--no-deps", *wheels.glob("streamfold-*.whl"), cwd=root)
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], root)
    (Path(purelib.stdout.strip()) / "dev-venv-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n"
    )
    return venv


def clean_env(home: Path) -> dict[str, str]:
    """No STREAMFOLD_* of this session (no jars folder, no stack), no PYTHONPATH into the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMFOLD_") and k != "PYTHONPATH"}
    return {**env, "STREAMFOLD_HOME": str(home)}


def test_the_packages_and_their_data_come_from_the_install(venv: Path, tmp_path: Path) -> None:
    code = "import common, db, pipeline, streamfold; print(pipeline.__file__)"
    done = run([venv / "bin" / "python", "-c", code], tmp_path, clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    installed = Path(done.stdout.strip()).parents[1]
    assert installed.is_relative_to(venv), f"pipeline imported from {installed}, not the fresh venv"
    missing = [name for name in DATA_FILES if not (installed / name).is_file()]
    assert not missing, f"not installed: {missing}"
    assert not (installed / "bench").exists() and not (installed / "tests").exists()


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules(package: Path) -> dict[str, str]:
    """Top-level module -> a file of the package that imports it (absolute imports only)."""
    found: dict[str, str] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO)))
    return found


def test_every_import_of_the_installed_packages_is_installed_with_them() -> None:
    """A module the installed code imports is the standard library's, one of the packages pyproject
    installs, or a distribution pyproject declares (its name as pip knows it)."""
    declared = {canonical(re.match(r"[A-Za-z0-9_.-]+", d)[0]) for d in PYPROJECT["project"]["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    undeclared = []
    for package in PACKAGES:
        for module, where in imported_modules(REPO / package).items():
            if module in sys.stdlib_module_names or module in PACKAGES:
                continue
            names = {canonical(d) for d in distributions.get(module, [module])}
            if not names & declared:
                undeclared.append(
                    f"{module} ({where}): not a dependency in pyproject.toml nor an installed package"
                )
    assert not undeclared, "\n".join(undeclared)


def test_the_command_runs_and_prints_its_version(venv: Path, tmp_path: Path) -> None:
    streamfold = venv / "bin" / "streamfold"
    done = run([streamfold, "--version"], tmp_path, clean_env(tmp_path))
    assert (done.returncode, done.stdout) == (0, f"streamfold {VERSION}\n"), done.stderr
    done = run([streamfold, "--help"], tmp_path, clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    for command in ("setup", "run", "status", "query", "topic", "stack", "generate"):
        assert f" {command} " in done.stdout


def test_run_without_the_jars_names_them_and_make_setup(venv: Path, tmp_path: Path) -> None:
    env = {
        **clean_env(tmp_path),
        "STREAMFOLD_PG_DSN": "postgresql://nobody@127.0.0.1:1/none",
        "STREAMFOLD_KAFKA_BOOTSTRAP": "127.0.0.1:1",
        "STREAMFOLD_CONNECT_URL": "http://127.0.0.1:1",
    }
    done = run([venv / "bin" / "streamfold", "run", "--once"], tmp_path, env)
    assert done.returncode == 1
    message = " ".join(done.stderr.split())
    assert message.startswith("error: the Spark job's jars are not in"), message
    for jar in ("streamfold-join.jar", "spark-sql-kafka-0-10_*.jar", "postgresql-*.jar"):
        assert jar in message
    assert "`make setup`" in message and "STREAMFOLD_JARS" in message
    assert "Traceback" not in done.stderr
