"""The benchmark's own arithmetic and parsing (the measurements themselves need `make bench`)."""

import json
import math
import os
import re
import subprocess
import sys
import time
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path

from bench import cluster, cpu, job, kstreams, latency, procmem, profile, report, tables_path
from bench.latency import Observations, percentile, summary
from bench.naive import STAGING_COLUMNS, pg_array, user_click
from common import pipeline_file as pf
from common import plan
from streamfold import generate
from tests.support.records import RELEASE_FIELDS, USER_CLICKS_FIELDS


def test_percentile_is_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile([], 50) is None


def test_percentile_falling_on_an_unseen_sample_is_unknown():
    values = [1.0] * 98 + [math.inf] * 2
    assert percentile(values, 95) == 1.0
    assert percentile(values, 99) is None


def test_summary_counts_censored_samples_and_names_some():
    observed = Observations()
    observed.add("a", 10.0)
    observed.add("b", 10.0)
    observed.mark({"a": 12.5})
    result = summary(observed)
    assert (result["samples"], result["censored"], result["censored_examples"]) == (2, 1, ["b"])
    assert result["max_s"] == 2.5


def test_resolved_origin_replaces_the_placeholder():
    observed = Observations()
    observed.add("User_1@100.0", 100.0)
    observed.resolve("User_1@100.0", 100.2, 103.2)
    assert observed.latencies() == [3.0]


def test_pg_array_quotes_like_the_sink():
    assert pg_array(["News", 'say "hi"', "back\\slash"]) == '{"News","say \\"hi\\"","back\\\\slash"}'
    assert pg_array(None) is None


def test_naive_user_clicks_carry_the_fields_of_streamfolds_user_clicks():
    # The naive baseline looks the profile up as it reads a click: it waits for no CDC progress, so it has no
    # release to record.
    fields = set(USER_CLICKS_FIELDS) - set(RELEASE_FIELDS)
    assert set(json.loads(user_click(dict.fromkeys(STAGING_COLUMNS)))) == fields


def test_profile_fold_attributes_samples_to_the_innermost_process():
    lines = [
        'process 1:"python -m bench.job_runner p";process 2:"java x";process 3:"python -m pyspark.daemon"'
        ";main (worker.py:1);get (state.py:2) 30",
        'process 1:"python -m bench.job_runner p";call (sinks.py:5) 10',
    ]
    folded = profile.fold(lines)
    assert folded["python workers"]["samples"] == 30
    assert folded["python workers"]["top_self"] == [("get (state.py:2)", 100.0)]
    assert folded["driver"]["top_inclusive"] == [("call (sinks.py:5)", 100.0)]


def test_descendants_include_children_with_their_roles():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        tree = procmem.descendants(os.getpid())
        assert child.pid in tree
        assert procmem.role(child.pid, tree[child.pid], root=1) == "workers"
        assert procmem.role(child.pid, "java", root=1) == "jvm"
        # A child the JVM is spawning shares its memory until exec, named after the spawning thread.
        assert procmem.role(child.pid, "Executor task l", root=1) is None
    finally:
        child.kill()
        child.wait()


def test_sampler_reads_rss_every_sample_and_pss_less_often():
    with procmem.Sampler(os.getpid(), interval_s=0.05, pss_every_s=0.2) as sampler:
        time.sleep(0.5)
    peaks = sampler.peaks
    assert sampler.pss_every == 4 and peaks.samples >= 5
    assert peaks.rss_mib["driver"] > 0 and 0 < peaks.total_pss_mib <= peaks.total_rss_mib
    peaks.add({"driver": 10 * 1024 * 1024}, None)  # a sample without PSS leaves the PSS peak alone
    assert peaks.total_rss_mib == 10 * 1024 and peaks.total_pss_mib < 10 * 1024


def progress_event(batch: int, clicks: int, cdc: int, **durations: int) -> dict:
    return {
        "name": "clicks-kafka",
        "batchId": batch,
        "numInputRows": clicks + cdc,
        "durationMs": durations,
        "sources": [
            {"description": "KafkaV2[Subscribe[clicks]]", "numInputRows": clicks},
            {
                "description": "KafkaV2[Subscribe[cdc.public.users,__debezium-heartbeat.cdc]]",
                "numInputRows": cdc,
            },
        ],
    }


def test_clicks_read_counts_only_the_clicks_source():
    assert job.clicks_read(progress_event(0, 7, 5)) == 7


def test_duration_totals_sum_each_phase():
    events = [progress_event(0, 1, 0, addBatch=5, walCommit=1), progress_event(1, 1, 0, addBatch=7)]
    assert job.duration_totals(events) == {"addBatch": 12, "walCommit": 1}


def test_markdown_has_the_throughput_ratios():
    results = {
        "streamfold": {"clicks": 100, "seconds": 10.0, "clicks_per_s": 10},
        "naive": {"clicks": 100, "seconds": 5.0, "clicks_per_s": 20},
    }
    text = report.markdown(results)
    assert "| naive: PostgreSQL lookup per click | 100 | 5.0 | 20 | 0.50x |" in text
    assert "streamfold/naive: 0.50" in text


def test_markdown_has_the_kinesis_path_beside_the_kafka_path():
    results = {
        "streamfold": {"clicks": 100, "seconds": 10.0, "clicks_per_s": 10},
        "kinesis": {
            "put": {"clicks": 100, "seconds": 3.0, "put_seconds": 2.0, "puts_per_s": 50},
            "clicks": 100,
            "seconds": 20.0,
            "clicks_per_s": 5,
            "jvm_us_per_click": 30.5,
            "python_us_per_click": 12.0,
            "unknown_region_clicks": 0,
        },
    }
    assert "| 100 | 3.0 | 2.0 | 50 | 20.0 | 5 | 0.50x | 30.5 | 12.0 | 0 |" in report.markdown(results)


def window(rate: float, p50: float, p99: float) -> dict:
    latency = {"p50_s": p50, "p95_s": p99, "p99_s": p99, "samples": 10}
    return {
        "target_rate": rate,
        "sent_rate": rate,
        "committed_rate": rate,
        "kept_up": True,
        "click_latency": latency,
        "profile_latency": latency,
    }


def memory(rss_mib: int) -> dict:
    return {"peak_rss_mib": {"jvm": rss_mib}, "peak_total_rss_mib": rss_mib, "peak_total_pss_mib": rss_mib}


def test_the_headline_is_streamfold_beside_kafka_streams_with_their_ratio():
    results = {
        "streamfold": {
            "clicks": 100,
            "seconds": 10.0,
            "clicks_per_s": 10,
            "clicks_per_s_from_start": 5,
            "launch_to_first_read_s": 4.5,
            "launch_to_first_output_s": 27.0,
            "cpu_us_per_click": 30.0,
            "unknown_region_clicks": 0,
            "memory_to_last_commit": memory(1000),
            "memory": memory(2000),
        },
        "latency": [window(5000, 0.5, 1.0), window(20000, 0.6, 1.2)],
        "kstreams": {
            "variant": "global",
            "clicks": 100,
            "seconds": 4.0,
            "clicks_per_s": 25,
            "clicks_per_s_from_start": 20,
            "launch_to_first_read_s": 3.0,
            "cpu_us_per_click": 15.0,
            "unknown_region_clicks": 0,
            "enriched_records": 100,
            "counted_clicks": 100,
            "memory": memory(500),
            "latency": [window(20000, 0.1, 0.4)],
        },
    }
    text = report.markdown(results)
    assert text.startswith("**Headline: streamfold / Kafka Streams")
    assert "| clicks/s from start (launch -> all outputs visible) | 5 | 20 | 0.25x |" in text
    assert "| clicks/s steady (first click read -> all outputs visible) | 10 | 25 | 0.40x |" in text
    assert "| launch -> first click read | 4.5 s | 3.0 s | 1.50x |" in text
    assert "| launch -> first output visible | 27.0 s | - | - |" in text  # results without the figure
    assert "| click p99 at 20,000 clicks/s offered | 1.20 s | 0.40 s | 3.00x |" in text
    assert "click p99 at 5,000" not in text  # Kafka Streams had no window at that load
    assert "| peak RSS, MiB (its processes, throughput run) | 1000 | 500 | 2.00x |" in text
    assert "| CPU µs per click (its processes, launch -> end) | 30.0 | 15.0 | 2.00x |" in text
    assert "streamfold/Kafka Streams (users in a GlobalKTable): 0.40 steady, 0.25x from start" in text


def test_the_realtime_mode_is_beside_the_micro_batch_mode_and_kafka_streams_against_its_targets():
    results = {
        "streamfold": {
            "clicks_per_s_from_start": 100,
            "launch_to_first_output_s": 12.0,
            "memory": memory(1900),
        },
        "latency": [window(5000, 0.7, 1.1)],
        "realtime": {
            "clicks": 300,
            "seconds": 5.0,
            "clicks_per_s": 60,
            "clicks_per_s_from_start": 40,
            "launch_to_first_output_s": 8.0,
            "memory_to_last_commit": memory(2100),
            "latency": [window(5000, 0.1, 0.35), window(20000, 0.2, 0.6)],
        },
        "kstreams": {
            "launch_to_first_output_s": 7.0,
            "memory": memory(900),
            "latency": [window(5000, 0.1, 0.2)],
        },
    }
    rows = {row[0]: row[1:] for row in report.realtime_rows(results)}
    assert rows["clicks/s from launch"] == ["100", "40", "-", "real-time ≥ 0.5x micro-batch", "no"]
    assert rows["launch -> first output visible"][-1] == "no"  # the micro-batch mode's 12 s > 7 s + 2 s
    assert rows["click p50 at 5,000/s"] == ["0.70 s", "0.10 s", "0.10 s", "≤ 0.15 s", "yes"]
    assert rows["click p99 at 5,000/s"][:3] == ["1.10 s", "0.35 s", "0.20 s"]
    assert rows["click p99 at 5,000/s"][-1] == "yes"  # 0.35 ≤ 0.2 + 0.2
    assert rows["click p99 at 20,000/s"] == ["-", "0.60 s", "-", rows["click p99 at 5,000/s"][3], "-"]
    assert rows["profile change -> first joined click p99 at 20,000/s"][-1] == "no"
    assert rows["peak RSS, MiB (throughput run)"] == ["1,900", "2,100", "900", "real-time ≤ 2048", "no"]


def test_every_kafka_streams_variant_is_a_row_and_the_faster_is_the_baseline():
    lean = {"variant": "lean", "clicks": 100, "seconds": 4.0, "clicks_per_s": 25}
    idiomatic = {"variant": "global", "clicks": 100, "seconds": 5.0, "clicks_per_s": 20}
    results = {
        "streamfold": {"clicks": 100, "seconds": 5.0, "clicks_per_s": 20},
        "kstreams": lean,
        "kstreams_variants": [lean, idiomatic],
    }
    rows = {row[0]: row[3:] for row in report.throughput_rows(results)}
    assert rows[f"{report.KSTREAMS}: {report.VARIANTS['lean']}"] == ["25", "0.80x"]
    assert rows[f"{report.KSTREAMS}: GlobalKTable"] == ["20", "1.00x"]


def test_kafka_streams_outputs_mark_sampled_clicks_and_profile_versions():
    clicks, profiles = Observations(), Observations()
    clicks.add("kafka:clicks:1:7", 100.0)
    clicks.add("kafka:clicks:2:9", 100.0)
    profiles.add("User_3@100.5", 100.5)
    records = [
        b'{"userid":"User_1","event_id":"kafka:clicks:1:7","user_regionid":"Region_1"}',
        b'{"userid":"User_3","event_id":"kafka:clicks:0:1","user_valid_from":100000}',  # the version before
        b'{"userid":"User_3","event_id":"kafka:clicks:0:2","user_valid_from":100500}',
    ]
    recent: OrderedDict[str, float] = OrderedDict()
    kstreams.observe(records, clicks, profiles, 101.0, recent)
    assert clicks.outstanding() == ["kafka:clicks:2:9"]
    assert profiles.outstanding() == []
    assert profiles.latencies() == [0.5]
    # A record that passed before its delivery report registered the sample is still found.
    clicks.add("kafka:clicks:0:2", 100.5)
    kstreams.observe([], clicks, profiles, 102.0, recent)
    assert clicks.latencies() == [1.0, math.inf, 0.5]
    kstreams.observe([], clicks, profiles, 101.0 + kstreams.RECENT_S + 1, recent)
    assert recent == {}


def test_the_kstreams_module_is_built_against_the_brokers_kafka() -> None:
    root = Path(__file__).resolve().parents[2]
    version = re.compile(r"<kafka.version>([^<]+)</kafka.version>")
    broker = version.findall((root / "pom.xml").read_text())
    assert broker and version.findall((root / "jvm-kstreams" / "pom.xml").read_text()) == broker


def stage(batch: int, tasks: dict[int, int], start_s: float, end_s: float, **metrics: int) -> dict:
    """A completed stage as Spark's REST API lists it (?details=true): its tasks' durations in ms."""
    return {
        "description": f"\nid = q\nrunId = r\nbatch = {batch}",
        "numCompleteTasks": len(tasks),
        "firstTaskLaunchedTime": f"2026-11-26T19:00:{start_s:06.3f}GMT",
        "completionTime": f"2026-11-26T19:00:{end_s:06.3f}GMT",
        "tasks": {
            str(i): {"status": "SUCCESS", "duration": ms, "taskMetrics": {"executorCpuTime": ms * 500_000}}
            for i, ms in tasks.items()
        },  # each task on a CPU half its time
        **metrics,
    }


def test_stages_are_told_apart_by_their_shuffle_and_attributed_to_their_batch():
    read = cluster.stage_summary(stage(3, {0: 100, 1: 300}, 1.0, 1.4, shuffleWriteBytes=10))
    join = cluster.stage_summary(stage(3, {0: 200}, 1.5, 1.7, shuffleReadBytes=10, executorCpuTime=5_000_000))
    assert (read["batch"], read["kind"], read["tasks"], read["task_ms"], read["max_task_ms"]) == (
        3,
        cluster.READ,
        2,
        400,
        300,
    )
    assert join["kind"] == cluster.JOIN and join["cpu_ms"] == 5 and join["max_task_cpu_ms"] == 100
    assert round(join["end_ms"] - join["start_ms"]) == 200
    assert cluster.batch_of({"description": None}) is None


def test_busy_time_is_the_union_of_overlapping_stages():
    assert cluster.busy_ms([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20


def test_breakdown_splits_a_batch_into_the_drivers_serial_time_and_its_stages():
    stages = [
        cluster.stage_summary(
            stage(1, {0: 300, 1: 300}, 1.0, 1.4, shuffleWriteBytes=1, executorCpuTime=3 * 10**8)
        ),
        cluster.stage_summary(
            stage(1, {0: 200, 1: 100}, 1.5, 1.7, shuffleReadBytes=1, executorCpuTime=15 * 10**7)
        ),
        cluster.stage_summary(stage(9, {0: 1}, 2.0, 2.1)),  # another batch: left out
    ]
    events = [{"batchId": 1, "durationMs": {"triggerExecution": 1000, "queryPlanning": 50, "addBatch": 800}}]
    b = cluster.breakdown(stages, events)
    assert b["stages_wall_ms"] == 600 and b["driver_serial_ms"] == 400
    assert b["driver_phases_ms"] == {"addBatch": 800, "queryPlanning": 50}
    assert b["kinds"][cluster.JOIN]["task_ms"] == 300 and b["kinds"][cluster.READ]["max_tasks"] == 2
    assert [s["batch"] for s in b["stages"]] == [1, 1]
    # W workers: serial 400 ms + each stage over min(W, tasks) slots, never below its longest task; then
    # the same with the tasks' CPU time (half of each task here).
    rows = cluster.projection(b, clicks=1000, workers=(1, 2, 4))
    assert [(r["workers"], r["batch_ms_total"], r["clicks_per_s"]) for r in rows] == [
        (1, 400 + 600 + 300, round(1000 / 1.3)),
        (2, 400 + 300 + 200, round(1000 / 0.9)),
        (4, 400 + 300 + 200, round(1000 / 0.9)),
    ]
    assert [r["cpu_only_batch_ms_total"] for r in rows] == [400 + 300 + 150, 400 + 150 + 100, 400 + 150 + 100]


def test_cpu_usage_names_what_the_groups_left_to_other_processes():
    a = cpu.Sample(100.0, busy_s=50.0, groups={"job": 10.0, "postgres": 1.0})
    b = cpu.Sample(110.0, busy_s=65.0, groups={"job": 20.0, "postgres": 3.0})
    used = cpu.usage(a, b)
    assert used["wall_s"] == 10.0 and used["machine_busy_core_s"] == 15.0
    assert used["core_s"] == {"job": 10.0, "postgres": 2.0, "other": 3.0}


def test_cpu_clock_counts_a_tree_and_an_exact_pid_apart():
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        me = os.getpid()
        with cpu.CpuClock({"me": [me], "tree": [me]}, interval_s=0.1, exact=frozenset({"me"})) as clock:
            time.sleep(1.0)
        used = clock.between(clock.samples[0].at, clock.samples[-1].at)["core_s"]
        assert used["tree"] > 0  # the busy child, below this process (however busy the machine is)
        assert used["me"] < used["tree"]
    finally:
        child.kill()
        child.wait()


def test_a_worker_tree_names_its_daemon_and_its_executors_apart():
    tree = procmem.Tree(7, "cluster daemons", "executor ")
    assert procmem.role(7, "java", 7, tree) == "cluster daemons"
    assert procmem.role(8, "java", 7, tree) == "executor jvm"
    assert procmem.role(9, "python3", 7, tree) == "executor workers"


def test_markdown_has_the_local_vs_cluster_pair_and_names_the_bottleneck():
    stages = [
        cluster.stage_summary(stage(1, {0: 300, 1: 300}, 1.0, 1.4, shuffleWriteBytes=2**20)),
        cluster.stage_summary(stage(1, {0: 2000, 1: 100}, 1.5, 3.5, shuffleReadBytes=2**20)),
    ]
    events = [{"batchId": 1, "durationMs": {"triggerExecution": 5000, "queryPlanning": 50}}]

    def side(mode: str, rate: int) -> dict:
        return {
            "mode": mode,
            "clicks": 1000,
            "seconds": 1000 / rate,
            "clicks_per_s": rate,
            "launch_to_first_read_s": 9.0,
            "batches": 3,
            "loadavg_after": "1.0 1.0 1.0",
            "memory": {"peak_rss_mib": {"driver": 100, "jvm": 900}, "peak_total_rss_mib": 1000}
            | {"peak_total_pss_mib": 950},
            "cpu": {"wall_s": 10.0, "cores": 2, "machine_busy_core_s": 19.0, "machine_busy_share": 0.95}
            | {"core_s": {"executors": 5.0, "postgres": 2.0, "other": 1.5}},
            "breakdown": cluster.breakdown(stages, events),
        }

    pair = {
        "workers": 2,
        "clicks": 1000,
        "order": "local first, then cluster",
        "local": side("local", 200),
        "cluster": side("cluster", 100),
        "cluster_over_local": 0.5,
    }
    pair["projection"] = cluster.projection(pair["cluster"]["breakdown"], 1000, workers=(4,))
    text = report.markdown({"cluster": pair})
    # CPU a click: Spark's processes (here the executors' 5 core-s), the whole stack (+ Postgres' 2)
    assert (
        "| local[*] | 1,000 | 5.0 | 200 | 1.00x | 9.0 | 3 | 5000.0 | 7000.0 | 95% | 1.5 | 1.0 1.0 1.0 |"
        in text
    )
    assert "| cluster, 2 workers | 1,000 | 10.0 | 100 | 0.50x |" in text
    assert "| local[*] | 100 | 900 | - | - | - | - | 1000 | 950 |" in text
    assert "| executors | 5.0 | 5.0 |" in text
    # 2.6 s driver serial (5 s minus 2.4 s of stages) + 0.3 s read at 4 slots + the join's 2 s longest task;
    # CPU time only: the longest tasks on a CPU, 0.15 and 1 s
    assert "| 4 | 4.9 | 204 | 3.8 | 267 |" in text
    assert "- cluster of 2 one-core workers / local[*]: 0.50 (100 against 200 clicks/s" in text
    assert "Spark's processes local 5000.0 µs, cluster 5000.0 µs (1.00x); the tasks' own CPU 0.0" in text
    assert (
        "Postgres (one server, whatever the workers): 2.0 core-s for 1,000 clicks, 2000.0 µs a click" in text
    )
    assert "bottleneck on this machine: its 2 cores (95% busy" in text
    assert "the largest term left is the driver's serial part, 2.6 s of 4.9 s" in text


def test_the_three_table_file_chains_a_table_and_looks_one_up_each_ten_times_smaller(tmp_path: Path):
    p = pf.load(tables_path.pipeline_file(tmp_path))
    joins = plan.joins(p)
    assert [(j.table.table, j.on, generate.table_rows(100_000, n)) for n, j in enumerate(joins)] == [
        (tables_path.PROFILE_TABLE, ("event", "userid"), 100_000),
        (tables_path.PLANS_TABLE, ("profile", tables_path.FOREIGN_KEY), 10_000),
        (tables_path.PAGES_TABLE, ("event", tables_path.LOOKUP_FIELD), 1_000),
    ]
    # The same events as the default file's, and a page each, whose key is a row of the lookup.
    default = pf.load(pf.DEFAULT_PATH)
    assert p.events.kafka_topic == default.events.kafka_topic
    assert set(p.events.fields) == {*default.events.fields, tables_path.LOOKUP_FIELD}
    clicks = list(generate.clicks(generate.ClickSpec(count=200, users=100_000, pipeline=p)))
    assert {c[tables_path.LOOKUP_FIELD] for c in clicks} <= set(range(1, 1_001))
    # Its outputs are its own: it is set up and runs beside the default file on the same stack.
    names = ("cdc_topic", "connector", "slot", "publication", "enriched_table", "enriched_topic")
    assert p.name != default.name
    assert all(getattr(plan.of(p), n) != getattr(plan.of(default), n) for n in names)
    assert not {a.table for a in plan.of(p).aggregates} & {a.table for a in plan.of(default).aggregates}


def test_a_query_of_another_pipeline_file_reads_its_clicks_and_its_own_cdc_topic():
    event = progress_event(0, 7, 5)
    event["name"] = f"{tables_path.NAME}-kafka"
    event["sources"][1] = {
        "description": "KafkaV2[Subscribe[cdc_tables.public.bench_users,__debezium-heartbeat.cdc_tables]]",
        "numInputRows": 5,
        "endOffset": {"cdc_tables.public.bench_users": {"0": 42}},
    }
    assert job.clicks_read(event) == 7
    assert job.cdc_read_to(event, "cdc_tables.public.bench_users") == 42
    assert job.cdc_read_to(event) == 0  # the default file's CDC topic is not among its sources


def test_the_state_of_every_stage_is_summed():
    ops = [{"customMetrics": {"rocksdbSstFileSize": size}} for size in (100, 20, 3)]
    assert job.sst_bytes({"stateOperators": ops}) == 123
    assert job.sst_bytes({"stateOperators": [*ops, {"customMetrics": {}}]}) is None


def test_markdown_has_the_three_table_path_beside_the_one_table_path_with_the_targets():
    at_5000 = [window(1000, 0.5, 0.9), window(5000, 0.6, 1.0)]
    results = {
        "streamfold": {
            "users": 100_000,
            "clicks": 100,
            "seconds": 10.0,
            "clicks_per_s": 10,
            "clicks_per_s_from_start": 8,
            "unknown_region_clicks": 0,
        },
        "latency": at_5000,
        "tables": {
            "clicks": 100,
            "clicks_per_s": 7,
            "clicks_per_s_from_start": 6,
            "rows": {
                "public.bench_users": 100_000,
                "public.bench_plans": 10_000,
                "public.bench_pages": 1_000,
            },
            "state_per_million_rows_mb": 80.04,
            "rows_landed": 100,
            "incomplete_rows": 0,
            "unknown_region_clicks": 0,
            "latency": [window(5000, 0.7, 1.2)],
            "over_one_table": {
                "clicks_per_s": 0.7,
                "clicks_per_s_from_start": 0.75,
                "one_table_state_per_million_rows_mb": 100.0,
                "state_per_million_rows": 0.8,
                "click_p99_at_5000": 1.2,
            },
        },
    }
    text = report.markdown(results)
    assert "| one table (the main run) | 100,000 | 10 | 8 | 100.0 | 1.00 s | - | 0 |" in text
    assert "| 100,000 + 10,000 + 1,000 | 7 | 6 | 80.0 (target ≤ 100) | 1.20 s | 100 of 100 (0) | 0 |" in text
    ratios = "| 0.70x (target ≥ 0.6x) | 0.75x | 0.80x | 1.20x (target ≤ 1.25x) |  |  |"
    assert f"| three tables / one table |  {ratios}" in text


def test_breakdown_counts_the_batches_between_a_clicks_read_and_its_emit() -> None:
    """Two clicks read by batch 1: one emitted by batch 1, one by batch 2 (it waited for CDC progress)."""

    def batch(n: int, at_s: float, end: int, took_ms: int) -> dict:
        stamp = datetime.fromtimestamp(at_s, UTC).isoformat().replace("+00:00", "Z")
        offsets = {"endOffset": {"clicks": {"0": end}}}
        return {
            "batchId": n,
            "timestamp": stamp,
            "durationMs": {"triggerExecution": took_ms},
            "sources": [offsets],
        }

    progress = [batch(0, 100.0, 10, 400), batch(1, 100.5, 20, 600), batch(2, 101.1, 20, 500)]
    observed = Observations()
    for offset in (12, 15):
        observed.add(f"kafka:clicks:0:{offset}", 100.2)
    observed.mark({"kafka:clicks:0:12": 101.2, "kafka:clicks:0:15": 101.8})
    commits = [(1, 1, datetime.fromtimestamp(101.1, UTC)), (2, 1, datetime.fromtimestamp(101.7, UTC))]
    b = latency.breakdown(observed, progress, commits)
    assert b["samples"] == 2
    assert b["emitted_batches_later"] == {"0": 1, "1": 1}
    assert b["batch_s"] == {"p50_s": 0.6, "p99_s": 0.6}, "the batches that read the sampled clicks"
