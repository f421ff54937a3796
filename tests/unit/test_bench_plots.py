"""The benchmark's charts (bench/plots.py), drawn from the committed full run, from an older run's results
(before the runs kept their latency quantiles) and from partial results."""

from __future__ import annotations

import copy
import json
import math
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import plots, report
from bench.latency import Observations, quantiles, summary

ROOT = Path(__file__).resolve().parents[2]
# bench/results keeps the latest full run only; an older full run stays here as a fixture of known figures.
LATEST_RUN = max((ROOT / "bench" / "results").glob("*.json"))
FULL_RUN = ROOT / "tests" / "unit" / "data" / "bench-run-2026-11-23T154009Z.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) of a PNG file; fails unless it starts like one."""
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, f"{path} is not a PNG"
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def assert_charts(paths: list[Path], names: list[str]) -> None:
    """`paths` are the charts `names` of one results file, each a PNG of a plausible size."""
    assert paths, "no charts"
    stem = paths[0].name.removesuffix(f"-{names[0]}.png")
    assert [p.name for p in paths] == [f"{stem}-{n}.png" for n in names]
    for path in paths:
        assert path.exists()
        assert 10_000 < path.stat().st_size < 200_000, f"{path.name}: {path.stat().st_size} bytes"
        width, height = png_size(path)
        assert (width, height) in ((800, 500), (800, 600)), f"{path.name}: {width}x{height}"


@pytest.fixture
def full_run() -> dict[str, Any]:
    return json.loads(FULL_RUN.read_text())


@pytest.mark.parametrize("run", [FULL_RUN, LATEST_RUN], ids=["older", "latest"])
def test_a_full_run_gives_three_charts_beside_its_json(tmp_path: Path, run: Path) -> None:
    target = tmp_path / run.name
    paths = plots.write_charts(json.loads(run.read_text()), target)
    assert [p.parent for p in paths] == [tmp_path] * 3
    assert [p.name for p in paths] == [
        f"{run.stem}-throughput.png",
        f"{run.stem}-latency.png",
        f"{run.stem}-latency-cdf.png",
    ]
    assert_charts(paths, ["throughput", "latency", "latency-cdf"])


def test_the_committed_charts_are_there_and_small() -> None:
    for name in ("throughput", "latency", "latency-cdf"):
        path = LATEST_RUN.with_name(f"{LATEST_RUN.stem}-{name}.png")
        png_size(path)
        assert path.stat().st_size < 100_000
        assert f"]({path.name})" in LATEST_RUN.with_suffix(".md").read_text()


def test_titles_name_the_run_and_the_machine(full_run: dict) -> None:
    text = plots.title(full_run, "Throughput against users")
    assert "run 2026-11-23T15:40:09+00:00: make bench" in text
    assert "2 cores, AMD EPYC, 23.5 GiB RAM" in text


def test_every_contender_is_placed_at_the_users_of_the_main_input(full_run: dict) -> None:
    points = plots.contender_points(full_run)
    # That run predates the Kafka Streams contender and the real-time mode.
    assert [label for label, _ in points] == [
        label for label, keys in report.CONTENDERS if keys not in (("kstreams",), ("realtime",))
    ]
    assert {p.users for _, p in points} == {100_000}
    assert points[1][1].clicks_per_s == 4016  # naive
    steps = plots.scaling_points(full_run)
    assert [(p.users, p.clicks_per_s, unknown) for p, unknown in steps] == [
        (10_000, 3180, 0),
        (100_000, 1518, 0),
        (1_000_000, 380, 42_033),
    ]


def test_a_load_above_the_measured_throughput_is_not_sustained(full_run: dict) -> None:
    limit = plots.capacity(full_run)
    reasons = [plots.unsustained(w, "w", limit) for w in full_run["latency"]]
    assert reasons == [None, None, "offered above the measured throughput"]
    late = {**full_run["latency"][0], "kept_up": False}
    assert plots.unsustained(late, "w", limit) == "clicks unseen 60 s after the load"


def test_runs_without_some_sections_give_fewer_charts(tmp_path: Path, full_run: dict) -> None:
    only_throughput = {k: v for k, v in full_run.items() if k not in ("latency", "scaling")}
    only_throughput.update(naive=None, raw=None, spark=None)  # --skip-naive --skip-limits
    assert_charts(plots.write_charts(only_throughput, tmp_path / "a.json"), ["throughput"])

    no_throughput = {"date": "x", "latency": full_run["latency"], "scaling": []}  # a failed main run
    assert_charts(plots.write_charts(no_throughput, tmp_path / "b.json"), ["latency", "latency-cdf"])

    assert plots.write_charts({"date": "x", "latency": [], "scaling": []}, tmp_path / "c.json") == []
    assert plots.write_charts({}, tmp_path / "d.json") == []
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-throughput.png",
        "b-latency-cdf.png",
        "b-latency.png",
    ]


def test_the_cdf_follows_the_kept_quantiles_and_stops_at_censored_ones() -> None:
    observed = Observations()
    for i in range(200):
        observed.add(f"c{i}", 0.0)
        if i < 190:
            observed.mark({f"c{i}": (i + 1) / 10})
    latency = summary(observed)
    xs, ys = plots.cdf_from_quantiles(latency["quantiles_s"], "w")
    assert (xs[0], ys[0]) == (0.1, 0.0)
    assert (xs[-1], ys[-1]) == (19.0, 0.95)  # the last 5% were never seen
    assert xs == sorted(xs)
    with pytest.raises(plots.ResultsError, match="quantiles_s has 3 values, not 101"):
        plots.cdf_from_quantiles([1.0, 2.0, 3.0], "w")


def test_a_run_with_quantiles_draws_them(tmp_path: Path, full_run: dict) -> None:
    run = copy.deepcopy(full_run)
    for window in run["latency"]:
        p50 = window["click_latency"]["p50_s"]
        window["click_latency"]["quantiles_s"] = [round(p50 * (0.5 + q / 100), 3) for q in range(101)]
    assert_charts(plots.write_charts(run, tmp_path / "q.json"), ["throughput", "latency", "latency-cdf"])


def test_latency_quantiles_are_nearest_rank_at_every_percent() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantiles(values) == [1.0, *values]
    assert quantiles([]) == []
    assert quantiles([2.0, math.inf])[49:] == [2.0, 2.0] + [None] * 50


def test_the_cdf_of_an_older_run_goes_through_its_percentiles(full_run: dict) -> None:
    latency = full_run["latency"][0]["click_latency"]
    assert "quantiles_s" not in latency
    assert plots.cdf_from_percentiles(latency, "w") == (
        [6.505, 9.303, 10.013, 10.317],
        [0.5, 0.95, 0.99, 1.0],
    )


@pytest.mark.parametrize(
    ("results", "message"),
    [
        ([1, 2], "bench results are a JSON object, not list"),
        ({"scaling": {"users": 1}}, r"results\['scaling'\] is a dict, not a list"),
        ({"scaling": [{"users": 10, "clicks": 5}]}, r"scaling\[0\]: no 'clicks_per_s'"),
        (
            {"streamfold": {"users": 10, "clicks": 5, "clicks_per_s": "fast"}},
            "'clicks_per_s' is 'fast', not a",
        ),
        ({"latency": [{"target_rate": 1000.0}]}, r"latency\[0\]: no 'click_latency'"),
    ],
)
def test_results_of_another_shape_fail_clearly(tmp_path: Path, results: Any, message: str) -> None:
    with pytest.raises(plots.ResultsError, match=message):
        plots.write_charts(results, tmp_path / "bad.json")
    assert list(tmp_path.iterdir()) == []


def test_regenerating_from_a_file_writes_the_charts_and_links_them_once(tmp_path: Path) -> None:
    target = tmp_path / FULL_RUN.name
    shutil.copy(FULL_RUN, target)
    target.with_suffix(".md").write_text(report.markdown(json.loads(FULL_RUN.read_text())))
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, "-m", "bench.plots", str(target)], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(target.with_name(f"{target.stem}-{n}.png")) for n, _ in plots.CHARTS]
    md = target.with_suffix(".md").read_text()
    assert md.count(report.CHARTS_HEADING) == 1
    assert f"![{target.stem}-latency-cdf]({target.stem}-latency-cdf.png)" in md
    assert md.startswith("**Throughput (same input, clicks per second)**")


def test_regenerating_from_a_bad_file_says_why(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    done = subprocess.run(
        [sys.executable, "-m", "bench.plots", str(bad)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.startswith(f"bench.plots: {bad}: cannot read bench results")
    assert "Traceback" not in done.stderr
