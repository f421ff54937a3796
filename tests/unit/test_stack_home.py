"""A stack's home is its owner's only (stack/home.py): what open_stack creates, and make_private for a home
an older version left readable by all."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from stack import home as stack_home
from stack.home import make_private, open_stack, private_files


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.parametrize("apart", [False, True])
def test_a_new_home_is_its_owners_only(tmp_path, monkeypatch, apart):
    monkeypatch.setattr(stack_home, "postgres_runs_apart", lambda: apart)
    home = tmp_path / "home"
    with private_files():
        stack = open_stack(home)
        (home / "logs" / "kafka.log").write_text("a failing row\n")
    passes = 0o711 if apart else 0o700
    assert {name: mode(home / name) for name in (".", "data", "logs")} == dict.fromkeys(
        (".", "data", "logs"), passes
    )
    assert {mode(home / name) for name in ("conf", "pids", "run")} == {0o700}
    assert {mode(home / name) for name in ("ports.json", "secrets.json", "logs/kafka.log")} == {0o600}
    assert stack.ports and stack.secrets


def test_make_private_takes_group_and_other_bits_off_an_old_home(tmp_path, monkeypatch):
    monkeypatch.setattr(stack_home, "postgres_runs_apart", lambda: True)
    home = tmp_path / "home"
    for folder in ("logs", "data/kinesis", "checkpoints/clicks-kafka/state/0"):
        (home / folder).mkdir(parents=True)
    files = {
        "logs/postgres.log": 0o644,
        "ports.json": 0o644,
        "run.lock": 0o664,
        "data/kinesis/data.json": 0o640,
    }
    for name, file_mode in files.items():
        (home / name).write_text("x")
        (home / name).chmod(file_mode)
    (home / "checkpoints/clicks-kafka/state/0/1.changelog").write_text("state")
    (home / "bin").symlink_to("/usr/bin")  # left alone: chmod would follow it to /usr/bin
    for folder, dirs, _ in os.walk(home):
        for name in [".", *dirs]:
            (Path(folder) / name).chmod(0o755)
    usr_bin = mode(Path("/usr/bin"))

    changed = make_private(home)

    assert home / "logs" / "postgres.log" in changed and home / "bin" not in changed
    for folder, dirs, names in os.walk(home):
        for path in (Path(folder, name) for name in dirs if not Path(folder, name).is_symlink()):
            assert mode(path) == (0o711 if path in (home / "data", home / "logs") else 0o700), path
        for path in (Path(folder, name) for name in names):
            assert mode(path) & 0o077 == 0, f"{oct(mode(path))} {path}"
    assert mode(home) == 0o711 and mode(home / "ports.json") == 0o600 and mode(home / "run.lock") == 0o600
    assert mode(home / "checkpoints/clicks-kafka/state/0") == 0o700
    assert mode(Path("/usr/bin")) == usr_bin
    assert make_private(home) == []  # nothing left to change


def test_make_private_skips_a_file_removed_while_the_home_is_walked(tmp_path, monkeypatch):
    """A running PostgreSQL drops its temporary relations' files at any moment: the walk lists one, then
    it is gone before its mode is read."""
    monkeypatch.setattr(stack_home, "postgres_runs_apart", lambda: True)
    home = tmp_path / "home"
    (home / "data/postgres/base").mkdir(parents=True)
    temporary = home / "data/postgres/base/t8_16901"
    temporary.write_text("x")
    (home / "ports.json").write_text("{}")
    (home / "ports.json").chmod(0o644)
    listed = stack_home.paths_under

    def listed_then_removed(folder: Path) -> list[Path]:
        paths = listed(folder)
        temporary.unlink()
        return paths

    monkeypatch.setattr(stack_home, "paths_under", listed_then_removed)

    changed = make_private(home)

    assert home / "ports.json" in changed and temporary not in changed
    assert mode(home / "ports.json") == 0o600
