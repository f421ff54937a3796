"""A really short `bench.run` end to end: its charts appear beside its JSON and its report links them.

bench.run starts (and stops) a stack of its own in a fresh STREAMFOLD_HOME, so this test gives it one under
pytest's temp dir, and a results dir there too: bench/results is left alone.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.sources import FIRST_BATCH_MAX_RECORDS
from stack import lifecycle

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SHORT_RUN = [
    "--clicks", "30000",  # more than the first batch takes (pipeline/sources.py)
    "--users", "1000",
    "--skip-scaling",
    "--skip-naive",
    "--skip-limits",
    "--skip-cluster",  # no chart of its own, and minutes more (bench/cluster.py)
    "--skip-tables",  # no chart of its own; a second pipeline's setup and run (bench/tables_path.py)
    "--low-rates", "200",
    "--rate", "500",
    "--latency-seconds", "5",
]  # fmt: skip


def test_a_short_bench_run_writes_its_charts_beside_its_json(
    tmp_path: Path, new_stack_home: Callable[[str], Path]
) -> None:
    home, results_dir = new_stack_home("bench-stack"), tmp_path / "results"
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.run",
                *SHORT_RUN,
                "--home",
                str(home),
                "--results-dir",
                str(results_dir),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=900,  # streamfold, Kafka Streams, then the Kinesis source, on the same short input
        )
    finally:
        lifecycle.down(home)  # bench.run stops it itself, unless it was killed
    assert done.returncode == 0, done.stderr[-3000:]
    (json_path,) = results_dir.glob("*.json")
    results = json.loads(json_path.read_text())
    assert "error" not in results
    assert [w["target_rate"] for w in results["latency"]] == [200.0, 500.0]
    assert all(len(w["click_latency"]["quantiles_s"]) == 101 for w in results["latency"])
    # Kafka Streams beside it, on the same clicks: a GlobalKTable joins none of them before its user.
    ks = results["kstreams"]
    assert (ks["enriched_records"], ks["counted_clicks"], ks["unknown_region_clicks"]) == (30_000, 30_000, 0)
    assert [w["target_rate"] for w in ks["latency"]] == [200.0, 500.0]
    # The job started on a backlog: its first batch took the first cap, the batches after it the rest.
    read = [b["clicks_read"] for b in results["streamfold"]["batch_table"] if b["clicks_read"]]
    assert len(read) >= 2 and 0 < read[0] <= FIRST_BATCH_MAX_RECORDS and sum(read) == 30_000, read
    for side in (results["streamfold"], ks):  # the first output comes after the first click read
        assert 0 < side["launch_to_first_read_s"] <= side["launch_to_first_output_s"], side
    # Both kept up with these loads: every sampled click was seen, the windows' first ones too.
    for window in [*results["latency"], *ks["latency"]]:
        assert (window["kept_up"], window["click_latency"]["censored"]) == (True, 0), window
    assert (
        "| clicks/s steady (first click read -> all outputs visible) |"
        in json_path.with_suffix(".md").read_text()
    )
    # The same clicks through Kinesis: every one put, every one joined with its user.
    k = results["kinesis"]
    assert (k["put"]["clicks"], k["clicks"], k["unknown_region_clicks"]) == (30_000, 30_000, 0)
    assert 0 < k["put"]["put_seconds"] <= k["put"]["seconds"], k["put"]

    charts = [
        json_path.with_name(f"{json_path.stem}-{name}.png")
        for name in ("throughput", "latency", "latency-cdf")
    ]
    assert sorted(p.name for p in results_dir.iterdir()) == sorted(
        [json_path.name, json_path.with_suffix(".md").name, *(c.name for c in charts)]
    )
    for chart in charts:
        assert chart.read_bytes()[:8] == PNG_MAGIC
        assert chart.stat().st_size > 10_000
        assert f"]({chart.name})" in json_path.with_suffix(".md").read_text()
    assert done.stderr.count(" chart: ") == len(charts)  # bench.run says where they are (lines may wrap)
