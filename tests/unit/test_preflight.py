"""What `streamfold run` refuses in a file, `check` and `setup` refuse first (pipeline/preflight.py and the
file's own validation), with exit status 2 and before any service is asked: a refused `setup` applies
nothing, so the installation stays as the old file left it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from common import config
from common import pipeline_file as pf
from pipeline import preflight

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEXT = (ROOT / pf.DEFAULT_FILE).read_text()

CASES = {
    "jsonb event field as aggregate key": (
        DEFAULT_TEXT.replace("  fields:\n", "  fields:\n    meta: jsonb\n", 1).replace(
            "\naggregates:\n", "\naggregates:\n  - name: by_meta\n    group_by: {meta: meta}\n", 1
        ),
        "cannot group by a jsonb column",
    ),
    "integer if_missing out of range": (
        DEFAULT_TEXT.replace(
            "  columns:\n", "  columns:\n    age: {type: integer, if_missing: 99999999999}\n"
        ),
        "profile.columns.age.if_missing: 99999999999 is not a value of type integer",
    ),
    "a further table in join.mode latest": (
        DEFAULT_TEXT.replace(
            "\nevents:\n",
            "\ntables:\n  region:\n    table: public.regions\n    key: id\n    columns: {name: text}\n"
            "    join_on: profile.regionid\n\nevents:\n",
            1,
        ).replace("mode: event_time ", "mode: latest ", 1),
        "join.mode: join.mode latest joins the profile table only",
    ),
    "no version retention": (
        DEFAULT_TEXT.replace("version_retention: 7d", "version_retention: 0ms", 1),
        "join.version_retention: Input should be greater than 0",
    ),
}


def _without_services(home: Path) -> dict[str, str]:
    """No endpoint set and an empty home: a command that reached for a service would fail otherwise."""
    env = {k: v for k, v in os.environ.items() if k not in config.ENDPOINT_VARS}
    return {**env, "STREAMFOLD_HOME": str(home), "COLUMNS": "400"}


@pytest.mark.parametrize("command", ["check", "setup"])
@pytest.mark.parametrize("case", list(CASES))
def test_check_and_setup_refuse_what_run_refuses(case: str, command: str, tmp_path: Path):
    text, reason = CASES[case]
    path = tmp_path / "p.yaml"
    path.write_text(text)
    result = subprocess.run(
        [sys.executable, "-m", "streamfold", "--pipeline", str(path), command],
        capture_output=True,
        text=True,
        timeout=300,
        env=_without_services(tmp_path / "home"),
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith(f"error: {path}") and reason in result.stderr, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1


def test_run_refuses_with_the_same_check(tmp_path: Path):
    """job.run calls preflight.check_plan before the installation is asked: the same function, the same
    message."""
    text, reason = CASES["integer if_missing out of range"]
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(pf.PipelineFileError, match=reason):
        preflight.check_plan(pf.load(path))


def test_avro_events_pass_the_plan_check():
    """The job reads Avro events (pipeline/events.py's Registry): run, check and setup take such a file."""
    avro = DEFAULT_TEXT.replace("  kafka_topic: clicks\n", "  kafka_topic: clicks\n  format: avro\n", 1)
    pipeline = pf.parse(avro)
    assert pipeline.events.format == "avro"
    preflight.check_plan(pipeline)
