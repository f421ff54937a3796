"""The docs say what the code does, checked without a stack (well under a second).

- Every place in the code that cites README.md or a docs/ file by section names a heading that exists.
- Every relative link in README.md, CHANGELOG.md and docs/ (its subfolders too) points to a file, and a
  heading, that exist.
- docs/contracts.md names every `streamfold` command and option, make target, environment variable,
  topic, table and column, role, `streamfold run --conf` key and `status --json` section the code defines.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer.main

from common import config, names
from db import tables
from pipeline.join_config import JoinConfig, parse_duration_ms
from streamfold.cli import app

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CHANGELOG = REPO / "CHANGELOG.md"
DOCS = REPO / "docs"
CONTRACTS = DOCS / "contracts.md"

# The files whose comments cite the docs, and where they are not.
CODE_SUFFIXES = {".py", ".java", ".sh", ".toml", ".yml", ".yaml", ".properties", ".mako", ".cfg"}
CODE_NAMES = {"Makefile", "Dockerfile", ".env"}
NOT_CODE = {".git", ".venv", "lib", "node_modules", "target", "build", ".streamfold", ".streamfold-bench"}
NOT_CODE_ANYWHERE = {"__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", "node_modules"}

# README "Querying", README.md, "Benchmark", docs/guarantees.md "Totals", README: "Run natively", a bare file,
# docs/decisions/one-streaming-query.md.
CITATION = re.compile(r"""(?<![\w/.-])(README(?:\.md)?|docs/[\w./-]+\.md)(?:[ ,:]+"([^"\n]+)")?""")
# A comment wrapped between a file and its section: the next line's comment marker is not part of it.
WRAPPED = re.compile(r"[ \t]*\n[ \t]*(?:#+|//+|\*+)?[ \t]*")
ENV_NAME = re.compile(r"\b(?:STREAMFOLD|AWS)_[A-Z0-9_]*[A-Z0-9]\b")
PROJECT_VAR = re.compile(r"\bSTREAMFOLD_[A-Z0-9_]*[A-Z0-9]\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")


# --- reading the code --------------------------------------------------------------------------------


def code_files() -> Iterator[Path]:
    for folder, dirs, files in os.walk(REPO):
        here = Path(folder)
        top = here == REPO
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in NOT_CODE_ANYWHERE
            and not (top and d in NOT_CODE)
            and here / d != REPO / "bench" / "results"
        )
        for name in sorted(files):
            path = here / name
            if path.suffix in CODE_SUFFIXES or name in CODE_NAMES:
                yield path


@cache
def code() -> dict[Path, str]:
    return {path: path.read_text(errors="replace") for path in code_files()}


def constants(path: Path) -> dict[str, Any]:
    """A module's top-level NAME = literal assignments, a name standing for an earlier one's value."""
    values: dict[str, Any] = {}
    for node in ast.parse(path.read_text()).body:
        value = getattr(node, "value", None)
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        for target in targets:
            if not isinstance(target, ast.Name) or value is None:
                continue
            if isinstance(value, ast.Name) and value.id in values:
                values[target.id] = values[value.id]
                continue
            with contextlib.suppress(ValueError, TypeError, SyntaxError):  # not a literal
                values[target.id] = ast.literal_eval(value)
    return values


# --- reading Markdown ---------------------------------------------------------------------------------


def plain(text: str) -> str:
    return text.replace("`", "").strip()


@cache
def headings(path: Path) -> list[tuple[int, int, str]]:
    """(line number, level, text) of every heading outside fenced code."""
    found, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines()):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"(#{1,6})\s+(.+?)\s*$", line)):
            found.append((number, len(match[1]), match[2]))
    return found


def section(path: Path, title: str) -> str:
    """The text under a heading (`title` as written, backticks optional), up to the next heading of its
    level or above."""
    lines = path.read_text().splitlines()
    marks = headings(path)
    for i, (number, level, text) in enumerate(marks):
        if plain(text) == plain(title):
            end = next((n for n, lv, _ in marks[i + 1 :] if lv <= level), len(lines))
            return "\n".join(lines[number + 1 : end])
    raise AssertionError(f"{path.relative_to(REPO)} has no heading {title!r}")


def slug(text: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings; a repeated heading gets -1, -2, ... as on GitHub."""
    found, repeats = set(), dict[str, int]()
    for _, _, text in headings(path):
        base = slug(text)
        repeats[base] = repeats.get(base, -1) + 1
        found.add(f"{base}-{repeats[base]}" if repeats[base] else base)
    return found


def rows(text: str) -> dict[str, list[str]]:
    """Table rows by their first cell, backticks removed; cells split at unescaped pipes."""
    found = {}
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            if cells:
                found[plain(cells[0])] = cells
    return found


def documented(text: str, name: str) -> bool:
    return f"`{name}`" in text


# --- citations and links -----------------------------------------------------------------------------


def citations() -> Iterator[tuple[Path, str, str | None]]:
    for path, text in code().items():
        for match in CITATION.finditer(WRAPPED.sub(" ", text)):
            yield path, match[1], match[2]


def test_every_cited_section_exists() -> None:
    found, broken = 0, []
    for path, cited, title in citations():
        target = REPO / ("README.md" if cited.startswith("README") else cited)
        where = f"{path.relative_to(REPO)}: {cited} {title or ''}".strip()
        if not target.is_file():
            broken.append(f"{where}: no such file")
        elif title is not None:
            found += 1
            if plain(title) not in {plain(text) for _, _, text in headings(target)}:
                broken.append(f"{where}: no such heading in {target.relative_to(REPO)}")
    assert not broken, "citations that point nowhere:\n" + "\n".join(broken)
    assert found >= 10, f"only {found} citations with a section found: is the scan still reading the code?"


def test_every_link_in_the_docs_resolves() -> None:
    broken = []
    for page in [README, CHANGELOG, *sorted(DOCS.rglob("*.md"))]:
        fenced = False
        for line in page.read_text().splitlines():
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            for link in [] if fenced else LINK.findall(line):
                if re.match(r"[a-z]+:", link):
                    continue  # http:, https:, mailto:
                file, _, anchor = link.partition("#")
                target = (page.parent / file).resolve() if file else page
                if not target.exists():
                    broken.append(f"{page.relative_to(REPO)}: {link}: no such file")
                elif anchor and target.suffix == ".md" and anchor not in anchors(target):
                    broken.append(f"{page.relative_to(REPO)}: {link}: no such heading")
    assert not broken, "\n".join(broken)


# --- docs/contracts.md --------------------------------------------------------------------------------


def leaf_commands(group: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from leaf_commands(command, (*path, name))
        else:
            yield (*path, name), command


def test_every_streamfold_command_and_option_is_documented() -> None:
    table = rows(section(CONTRACTS, "streamfold"))
    commands = list(leaf_commands(typer.main.get_command(app)))
    assert len(commands) >= 10
    missing = []
    for path, command in commands:
        line = " ".join(("streamfold", *path))
        row = next((cells for first, cells in table.items() if first.split(" <")[0] == line), None)
        if row is None:
            missing.append(f"{line}: no row")
            continue
        text = " ".join(row)
        for param in command.params:
            if param.param_type_name == "argument" and f"<{param.name}>" not in row[0]:
                missing.append(f"{line}: argument <{param.name}>")
            for flag in param.opts if param.param_type_name == "option" else []:
                if flag.startswith("--") and flag not in text:
                    missing.append(f"{line}: option {flag}")
    assert not missing, 'docs/contracts.md "streamfold" lacks:\n' + "\n".join(missing)


def test_every_make_target_is_documented() -> None:
    phony = re.search(r"^\.PHONY:(.*)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    assert phony is not None
    documented_targets = set(rows(section(CONTRACTS, "make")))
    missing = [t for t in phony[1].split() if f"make {t}" not in documented_targets]
    assert not missing, f'docs/contracts.md "make" lacks: {missing}'


def test_every_environment_variable_is_documented() -> None:
    text = section(CONTRACTS, "Environment variables")
    config_py = REPO / "common" / "config.py"
    read_by_config = {
        node.value
        for node in ast.walk(ast.parse(config_py.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and ENV_NAME.fullmatch(node.value)
    }
    assert "STREAMFOLD_PG_DSN" in read_by_config and "AWS_REGION" in read_by_config
    anywhere = {name for source in code().values() for name in PROJECT_VAR.findall(source)}
    missing = sorted(name for name in read_by_config | anywhere if not documented(text, name))
    assert not missing, f'docs/contracts.md "Environment variables" lacks: {missing}'


def test_every_topic_is_documented_with_its_compaction_and_partitions() -> None:
    table = rows(section(CONTRACTS, "Topics"))
    partitions = constants(REPO / "connectors" / "setup.py")
    topics = [
        (names.CDC_USERS_TOPIC, False, partitions["CDC_PARTITIONS"]),
        (names.HEARTBEAT_TOPIC, False, 1),
        *(
            (
                topic,
                compacted,
                partitions["CLICK_PARTITIONS" if topic == names.CLICKS_TOPIC else "OUTPUT_PARTITIONS"],
            )
            for topic, compacted in names.PIPELINE_TOPICS
        ),
    ]
    wrong = []
    for topic, compacted, count in topics:
        row = table.get(topic)
        if row is None:
            wrong.append(f"{topic}: no row")
            continue
        if row[2] != ("compact" if compacted else "delete"):
            wrong.append(f"{topic}: cleanup {row[2]!r}, compacted={compacted} in common/names.py")
        if not row[1].startswith(str(count)):
            wrong.append(f"{topic}: partitions {row[1]!r}, {count} in connectors/setup.py")
    assert not wrong, 'docs/contracts.md "Topics":\n' + "\n".join(wrong)
    assert documented(section(CONTRACTS, "Kinesis stream"), names.CLICKS_STREAM)


def test_every_table_and_column_is_documented() -> None:
    wrong = []
    for table in tables.metadata.sorted_tables:
        name = f"{table.schema}.{table.name}"
        try:
            documented_columns = set(rows(section(CONTRACTS, name)))
        except AssertionError:
            wrong.append(f"{name}: no heading")
            continue
        columns = set(table.columns.keys())
        documented_columns.discard("column")  # the header row
        if documented_columns != columns:
            wrong.append(
                f"{name}: missing {sorted(columns - documented_columns)}, "
                f"not in db/tables.py {sorted(documented_columns - columns)}"
            )
    assert not wrong, 'docs/contracts.md "Tables":\n' + "\n".join(wrong)


def test_every_role_is_documented() -> None:
    table = rows(section(CONTRACTS, "Roles"))
    missing = [r for r in (config.DEBEZIUM_ROLE, config.WRITER_ROLE, config.READER_ROLE) if r not in table]
    assert not missing, f'docs/contracts.md "Roles" lacks: {missing}'


def test_every_run_conf_key_is_documented_with_its_default() -> None:
    table = rows(section(CONTRACTS, "streamfold run --conf"))
    job = constants(REPO / "pipeline" / "job.py")
    documented_keys = {key for key in table if key not in ("key", "spark.*")}
    assert documented_keys == set(job["JOB_KEYS"]), "keys differ from pipeline/job.py JOB_KEYS"
    assert "spark.*" in table
    defaults = JoinConfig()
    assert plain(table["join.mode"][1]) == defaults.mode
    assert parse_duration_ms(plain(table["join.max_wait"][1])) == defaults.max_wait_ms
    assert parse_duration_ms(plain(table["join.version_retention"][1])) == defaults.version_retention_ms
    assert parse_duration_ms(plain(table["trigger.interval"][1])) == parse_duration_ms(job["DEFAULT_TRIGGER"])


def test_every_status_json_section_is_documented() -> None:
    tree = ast.parse((REPO / "streamfold" / "status.py").read_text())
    collect = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "collect")
    returned = next(n.value for n in ast.walk(collect) if isinstance(n, ast.Return))
    assert isinstance(returned, ast.Dict)
    keys = {k.value for k in returned.keys if isinstance(k, ast.Constant)}
    table = rows(section(CONTRACTS, "streamfold status --json"))
    assert set(table) - {"key"} == keys, "sections differ from streamfold/status.py collect()"


@pytest.mark.parametrize("page", ["contracts.md", "join-semantics.md", "guarantees.md"])
def test_the_docs_exist_and_readme_links_them(page: str) -> None:
    assert (DOCS / page).is_file()
    assert f"](docs/{page})" in README.read_text()
