"""A pipeline file cannot take the machine down: an alias bomb, a huge file or a huge list is one error line
from `streamfold check`, in a process whose peak memory stays small (common/pipeline_file.py,
MAX_FILE_BYTES, MAX_NODES). Each file runs through the real CLI in a child process; its peak RSS comes
from the kernel (getrusage RUSAGE_CHILDREN, in a small launcher). The child's address space is capped so
that a file the bounds miss fails it, not the machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common import pipeline_file as pf

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEXT = (ROOT / pf.DEFAULT_FILE).read_text()
# Generous: the interpreter with typer, rich and pydantic takes well under this; an expanded bomb, gigabytes.
MAX_RSS_MIB = 250
ADDRESS_SPACE_CAP = 3 * 1024**3
# A deadline for a child the bounds miss (without them the 1.2M-item list ran for minutes), not a timing.
DEADLINE_S = 300


def alias_bomb(levels: int = 9, indent: str = "") -> str:
    """The billion-laughs shape: each level a list of nine aliases of the level below."""
    lines = [f'{indent}l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        items = ", ".join([f"*l{level - 1}"] * 9)
        lines.append(f"{indent}l{level}: &l{level} [{items}]")
    return "\n".join(lines) + "\n"


def with_sample_values(values: str) -> str:
    """The default file with `values` (indented already) first in its sample.values."""
    head, values_line, rest = DEFAULT_TEXT.partition("\n  values:\n")
    assert values_line, "the default file has sample.values"
    return f"{head}{values_line}{values}{rest}"


CASES = {
    "nine-level alias bomb": (alias_bomb(), "anchors and aliases"),
    "alias bomb in sample.values": (with_sample_values(alias_bomb(indent="    ")), "anchors and aliases"),
    "10 MB file": (with_sample_values("    extra: [" + ", ".join(["Region_1"] * 1_000_000) + "]\n"), "1 MiB"),
    "1.2M-item list": (with_sample_values("    extra:\n" + "    - R\n" * 1_200_000), "1 MiB"),
    "300k-item list under 1 MiB": (
        with_sample_values("    extra: [" + ",".join(["1"] * 300_000) + "]\n"),
        f"over {pf.MAX_NODES:,} values",
    ),
}


# Runs the command in a grandchild and prints its exit code and peak RSS (KiB): a child forked from this
# large test process starts with its peak, a grandchild of a small launcher with the launcher's.
LAUNCHER = """
import resource, subprocess, sys
cap, deadline = int(sys.argv[1]), float(sys.argv[2])
def limit():
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
try:
    child = subprocess.run(sys.argv[3:], preexec_fn=limit, stdout=subprocess.DEVNULL, timeout=deadline)
    code = child.returncode
except subprocess.TimeoutExpired:
    code = "timeout"
print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def check_in_child(path: Path) -> tuple[int | str, str, int]:
    """`streamfold --pipeline PATH check` in a child: its exit code, stderr and peak RSS in MiB."""
    command = [sys.executable, "-m", "streamfold", "--pipeline", str(path), "check"]
    result = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(ADDRESS_SPACE_CAP), str(DEADLINE_S), *command],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S + 60,
        env={**os.environ, "COLUMNS": "400"},
    )
    code, peak_kib = result.stdout.split()
    return int(code) if code.lstrip("-").isdigit() else code, result.stderr, int(peak_kib) // 1024


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_file_is_one_line_in_a_few_mb(case: str, tmp_path: Path):
    text, reason = CASES[case]
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    code, stderr, peak_mib = check_in_child(path)
    assert code == 2, stderr[-2000:]
    assert stderr.startswith(f"error: {path}"), stderr[-2000:]
    assert len(stderr.strip().splitlines()) == 1, stderr[-2000:]
    assert reason in stderr
    assert peak_mib < MAX_RSS_MIB


def test_the_bounds_leave_room_for_real_files():
    """The default file and a long sample list are far inside both bounds."""
    regions = ", ".join(f"Region_{n}" for n in range(1000))
    assert pf.parse(with_sample_values(f"    extra: [{regions}]\n")).sample.values["extra"][999] == (
        "Region_999"
    )


def test_an_anchor_is_refused_at_its_line():
    text = DEFAULT_TEXT.replace("profile:", "profile: &p", 1)
    line = next(n for n, row in enumerate(text.splitlines(), 1) if "&p" in row)
    with pytest.raises(pf.PipelineFileError, match=rf"^p\.yaml:{line}: YAML anchors and aliases"):
        pf.parse(text, "p.yaml")
