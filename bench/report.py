"""Results: rich tables on the console, bench/results/<date>.json, and the same tables as Markdown."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import cluster
from bench.latency import GRACE_S, SEGMENTS

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# The offered load the three-table path's latency is measured at (bench/run.py three_tables_path), beside
# the main run's window at the same load.
TABLES_RATE = 5_000.0


def machine() -> dict[str, Any]:
    mem_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if "MemTotal" in line
    )
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        platform.processor(),
    )
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "cpu": cpu,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "java": java[0] if java else None,
    }


def rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}x"


def seconds(value: float | None) -> str:
    """A latency percentile; None means it fell on a sample never seen within GRACE_S."""
    return f"> {GRACE_S:.0f} s" if value is None else f"{value:.2f} s"


def duration(value: float | None) -> str:
    """A duration measured once; "-" where the results do not have it."""
    return "-" if value is None else f"{value:.1f} s"


# Everything measured on the main run's input: a label, and where its figures are in the results.
# bench.kstreams.VARIANTS: the users table of each.
VARIANTS = {
    "lean": "GlobalKTable, typed records, region + 1 repartitioned",
    "global": "GlobalKTable",
    "table": "KTable, max.task.idle.ms",
}
KSTREAMS = "Kafka Streams (the seed's leftJoin, exactly-once v2, to Kafka only)"
CONTENDERS = (
    ("streamfold (temporal join, Spark + RocksDB state)", ("streamfold",)),
    ("streamfold in real-time mode (run --mode realtime; every click in the topic)", ("realtime",)),
    (KSTREAMS, ("kstreams",)),
    ("naive: PostgreSQL lookup per click", ("naive",)),
    ("limit: Spark Kafka read + click parser -> noop", ("spark", "parse")),
    ("limit: Spark Kafka read -> noop", ("spark", "read")),
    ("limit: confluent-kafka consumer, no processing", ("raw",)),
)


def contenders(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, figures) of every contender the run measured, streamfold first."""
    found = []
    for label, keys in CONTENDERS:
        if keys == ("kstreams",) and results.get("kstreams_variants"):
            found += [
                (f"{label}: {VARIANTS.get(r['variant'], r['variant'])}", r)
                for r in results["kstreams_variants"]
            ]
            continue
        entry: Any = results
        for key in keys:
            entry = entry.get(key) if isinstance(entry, dict) else None
        if entry:
            found.append((label, entry))
    return found


def throughput_rows(results: dict[str, Any]) -> list[list[str]]:
    """One row per contender on the same input: clicks, seconds, clicks/s, and streamfold's ratio to it."""
    sf = results.get("streamfold", {}).get("clicks_per_s")
    return [
        [
            name,
            f"{r['clicks']:,}",
            f"{r['seconds']:.1f}",
            rate(r["clicks_per_s"]),
            ratio(sf, r["clicks_per_s"]),
        ]
        for name, r in contenders(results)
    ]


def headline_rows(results: dict[str, Any]) -> list[list[str]]:
    """streamfold beside Kafka Streams, figure by figure, and the ratio streamfold / Kafka Streams."""
    sf, ks = results.get("streamfold") or {}, results.get("kstreams") or {}
    if not sf or not ks:
        return []

    def row(label: str, a: float | None, b: float | None, show: Any = rate) -> list[str]:
        return [label, show(a), show(b), ratio(a, b)]

    rows = [
        row("clicks/s from start (launch -> all outputs visible)", *_both(sf, ks, "clicks_per_s_from_start")),
        row("clicks/s steady (first click read -> all outputs visible)", *_both(sf, ks, "clicks_per_s")),
        row("launch -> first click read", *_both(sf, ks, "launch_to_first_read_s"), duration),
        row("launch -> first output visible", *_both(sf, ks, "launch_to_first_output_s"), duration),
    ]
    ks_windows = {w["target_rate"]: w for w in ks.get("latency", [])}
    for w in results.get("latency", []):
        if (k := ks_windows.get(w["target_rate"])) is None:
            continue
        for q in (50, 99):
            label = f"click p{q} at {w['target_rate']:,.0f} clicks/s offered"
            rows.append(row(label, w["click_latency"][f"p{q}_s"], k["click_latency"][f"p{q}_s"], seconds))
    # streamfold's job goes on to the latency windows: its peak up to the throughput run's last commit.
    sf_memory = sf.get("memory_to_last_commit") or sf.get("memory") or {}
    rss = (sf_memory.get("peak_total_rss_mib"), (ks.get("memory") or {}).get("peak_total_rss_mib"))
    rows.append(row("peak RSS, MiB (its processes, throughput run)", *rss, str))
    cpu = _both(sf, ks, "cpu_us_per_click")
    rows.append(row("CPU µs per click (its processes, launch -> end)", *cpu, str))
    unknown = [c.get("unknown_region_clicks") for c in (sf, ks)]
    rows.append(["clicks enriched UNKNOWN although their user existed", *(rate(u) for u in unknown), "-"])
    return rows


# connectors/debezium-postgres.json's heartbeat.interval.ms: how long CDC progress can lag a quiet table,
# which a real-time join waits for and Kafka Streams (which joins by processing order) does not.
HEARTBEAT_S = 0.2
RSS_TARGET_MIB = 2048


def met(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "no")


def at_most(value: float | None, limit: float | None) -> bool | None:
    """value ≤ limit; a percentile beyond the grace time (None) is not; no limit (None): unknown."""
    if limit is None:
        return None
    return value is not None and value <= limit


def peak_rss(side: dict[str, Any]) -> float | None:
    """The peak up to the throughput run's last commit where measured (the job goes on to the latency
    windows), else the whole run's."""
    return (side.get("memory_to_last_commit") or side.get("memory") or {}).get("peak_total_rss_mib")


def realtime_rows(results: dict[str, Any]) -> list[list[str]]:
    """The real-time mode beside the micro-batch mode and the fastest Kafka Streams, against its targets."""
    rt, mb, ks = (results.get(k) or {} for k in ("realtime", "streamfold", "kstreams"))
    if not rt:
        return []
    sides = (mb, rt, ks)
    rt_rate, mb_rate = rt.get("clicks_per_s_from_start"), mb.get("clicks_per_s_from_start")
    ks_first = ks.get("launch_to_first_output_s")
    first_limit = None if ks_first is None else ks_first + 2
    rows = [
        [
            "clicks/s from launch",
            *(rate(s.get("clicks_per_s_from_start")) for s in sides),
            "real-time ≥ 0.5x micro-batch",
            met(None if not rt_rate or not mb_rate else rt_rate >= 0.5 * mb_rate),
        ],
        [
            "launch -> first output visible",
            *(duration(s.get("launch_to_first_output_s")) for s in sides),
            "≤ Kafka Streams + 2 s, each mode",
            met(
                at_most(
                    max(rt["launch_to_first_output_s"], mb.get("launch_to_first_output_s", 0)), first_limit
                )
            ),
        ],
        *latency_target_rows(rt, results.get("latency") or [], ks.get("latency") or []),
        [
            "peak RSS, MiB (throughput run)",
            *(rate(peak_rss(s)) for s in sides),
            f"real-time ≤ {RSS_TARGET_MIB}",
            met(at_most(peak_rss(rt), RSS_TARGET_MIB)),
        ],
    ]
    return rows


def pct(window: dict[str, Any] | None, kind: str, q: int) -> float | None:
    """A window's percentile (kind: click_latency or profile_latency); None without the window."""
    return window[kind][f"p{q}_s"] if window else None


def latency_target_rows(
    rt: dict[str, Any], mb_windows: list[dict[str, Any]], ks_windows: list[dict[str, Any]]
) -> list[list[str]]:
    """Per offered load: click p50 and p99, profile p99, each mode's and Kafka Streams'."""
    mb_at = {w["target_rate"]: w for w in mb_windows}
    ks_at = {w["target_rate"]: w for w in ks_windows}
    rows = []
    for w in rt.get("latency") or []:
        at = w["target_rate"]
        mb, ks = mb_at.get(at), ks_at.get(at)
        ks_p99 = pct(ks, "click_latency", 99)
        p99_limit = None if ks_p99 is None else min(ks_p99 + HEARTBEAT_S, 0.5)
        for label, kind, q, sides, target, limit in (
            ("click p50", "click_latency", 50, (mb, w, ks), "≤ 0.15 s", 0.15),
            (
                "click p99",
                "click_latency",
                99,
                (mb, w, ks),
                f"≤ Kafka Streams + {HEARTBEAT_S} s, ≤ 0.5 s",
                p99_limit,
            ),
            (
                "profile change -> first joined click p99",
                "profile_latency",
                99,
                (mb, w, None),
                "≤ 0.5 s",
                0.5,
            ),
        ):
            shown = [seconds(pct(side, kind, q)) if side else "-" for side in sides]
            rows.append([f"{label} at {at:,.0f}/s", *shown, target, met(at_most(pct(w, kind, q), limit))])
    return rows


def _both(a: dict[str, Any], b: dict[str, Any], key: str) -> tuple[Any, Any]:
    return a.get(key), b.get(key)


def latency_rows(results: dict[str, Any]) -> list[list[str]]:
    return window_rows(results.get("latency", []))


def kstreams_latency_rows(results: dict[str, Any]) -> list[list[str]]:
    return window_rows((results.get("kstreams") or {}).get("latency", []))


def window_rows(windows: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for w in windows:
        c, p = w["click_latency"], w["profile_latency"]
        rows.append(
            [
                rate(w["target_rate"]),
                rate(w["sent_rate"]),
                rate(w["committed_rate"]),
                "yes" if w["kept_up"] else "no",
                *(seconds(c[f"p{q}_s"]) for q in (50, 95, 99)),
                *(seconds(p[f"p{q}_s"]) for q in (50, 99)),
                f"{c['samples']}/{p['samples']}",
            ]
        )
    return rows


def breakdown_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for w in results.get("latency", []):
        b = w.get("click_latency_breakdown") or {}
        if b.get("samples"):
            parts = [f"{seconds(b[s]['p50_s'])} / {seconds(b[s]['p99_s'])}" for s in SEGMENTS]
            rows.append([rate(w["target_rate"]), *parts, str(b["samples"])])
    return rows


def memory_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for name, entry in (
        ("streamfold job", results.get("streamfold")),
        ("Kafka Streams JVM", results.get("kstreams")),
        ("naive consumer", results.get("naive")),
        ("Spark noop ladder", results.get("spark")),
        ("raw consumer", results.get("raw")),
    ):
        mem = (entry or {}).get("memory")
        if mem:
            per = mem["peak_rss_mib"]
            rows.append(
                [
                    name,
                    str(per.get("driver", "-")),
                    str(per.get("jvm", "-")),
                    str(per.get("workers", "-")),
                    str(mem["peak_total_rss_mib"]),
                    str(mem["peak_total_pss_mib"]),
                ]
            )
    return rows


def catch_up(step: dict[str, Any] | None) -> str:
    """A step's CDC catch-up (older results measured it inside the clicks' time: '-')."""
    if not step:
        return "-"
    return f"{step['seconds']:.1f} s ({rate(step['records_per_s'])}/s)"


def scaling_rows(results: dict[str, Any]) -> list[list[str]]:
    return [
        [
            f"{s['users']:,}",
            f"{s['clicks']:,}",
            f"{s['cdc_records']:,}",
            catch_up(s.get("catch_up")),
            f"{s['seconds']:.1f}",
            rate(s["clicks_per_s"]),
            f"{s['state_sst_mib']:.1f}" if s.get("state_sst_mib") is not None else "-",
            f"{s['state_checkpoint_mib']:.1f}",
            f"{s['state_per_million_users_mib']:.0f}" if s.get("state_per_million_users_mib") else "-",
            str(s["memory"]["peak_total_pss_mib"]),
            f"{s['unknown_region_clicks']:,}" if s.get("unknown_region_clicks") is not None else "-",
        ]
        for s in results.get("scaling", [])
    ]


def pair_sides(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, figures) of the local-vs-cluster pair's two sides, local first."""
    pair = results.get("cluster") or {}
    sides = [
        ("local[*]", pair.get("local")),
        (f"cluster, {pair.get('workers')} workers", pair.get("cluster")),
    ]
    return [(label, side) for label, side in sides if side]


def mib(value: float) -> str:
    return f"{value / 2**20:,.1f}"


def pair_rows(results: dict[str, Any]) -> list[list[str]]:
    local = (results.get("cluster") or {}).get("local", {}).get("clicks_per_s")
    rows = []
    for label, side in pair_sides(results):
        cpu = side.get("cpu") or {}
        per_click = cluster.cpu_per_click(side) if cpu and side.get("breakdown") else {}
        rows.append(
            [
                label,
                f"{side['clicks']:,}",
                f"{side['seconds']:.1f}",
                rate(side["clicks_per_s"]),
                ratio(side["clicks_per_s"], local),
                f"{side['launch_to_first_read_s']:.1f}",
                str(side["batches"]),
                str(per_click.get("spark", "-")),
                str(per_click.get("stack", "-")),
                f"{cpu.get('machine_busy_share', 0):.0%}",
                f"{cpu.get('core_s', {}).get('other', 0):.1f}",
                side.get("loadavg_after", "-"),
            ]
        )
    return rows


# The pair's memory roles (bench.procmem.Tree): the job's tree, and each worker's (daemon, then executor).
PAIR_ROLES = ("driver", "jvm", "workers", "executor jvm", "executor workers", "cluster daemons")


def pair_memory_rows(results: dict[str, Any]) -> list[list[str]]:
    rows = []
    for label, side in pair_sides(results):
        mem = side.get("memory") or {}
        if mem:
            per = mem["peak_rss_mib"]
            rows.append(
                [
                    label,
                    *(str(per.get(role, "-")) for role in PAIR_ROLES),
                    str(mem["peak_total_rss_mib"]),
                    str(mem["peak_total_pss_mib"]),
                ]
            )
    return rows


def pair_time_rows(results: dict[str, Any]) -> list[list[str]]:
    """Per side, the driver's serial time, then each stage kind: how parallel it is and what it cost."""
    rows = []
    for label, side in pair_sides(results):
        b = side.get("breakdown") or {}
        if not b:
            continue
        rows.append(
            [
                label,
                "driver, outside stages (serial)",
                "-",
                "-",
                f"{b['driver_serial_ms'] / 1000:.1f}",
                "-",
                "-",
            ]
            + ["-"]
        )
        for kind, k in b["kinds"].items():
            rows.append(
                [
                    label,
                    kind,
                    f"{k['stages']} / {k['max_tasks']}",
                    f"{k['tasks'] / k['stages']:.1f}",
                    f"{k['wall_ms'] / 1000:.1f}",
                    f"{k['task_ms'] / 1000:.1f}",
                    f"{k['cpu_ms'] / 1000:.1f}",
                    f"{mib(k['shuffle_write_bytes'])} / {mib(k['shuffle_read_bytes'])}",
                ]
            )
    return rows


def pair_cpu_rows(results: dict[str, Any]) -> list[list[str]]:
    sides = pair_sides(results)
    groups: list[str] = []
    for _, side in sides:
        groups += [g for g in (side.get("cpu") or {}).get("core_s", {}) if g not in groups]
    return [
        [group, *(f"{(side.get('cpu') or {}).get('core_s', {}).get(group, 0):.1f}" for _, side in sides)]
        for group in groups
    ]


def projection_rows(results: dict[str, Any]) -> list[list[str]]:
    return [
        [
            str(row["workers"]),
            f"{row['batch_ms_total'] / 1000:.1f}",
            rate(row["clicks_per_s"]),
            f"{row['cpu_only_batch_ms_total'] / 1000:.1f}",
            rate(row["cpu_only_clicks_per_s"]),
        ]
        for row in (results.get("cluster") or {}).get("projection", [])
    ]


def kinesis_rows(results: dict[str, Any]) -> list[list[str]]:
    """The same clicks through Kinesis: the put rate (of the put calls; generating the clicks too), the
    job's clicks/s and its ratio to the Kafka path, and the CPU a click of the JVM and of the python
    processes (the Kinesis reader's)."""
    k, sf = results.get("kinesis") or {}, results.get("streamfold") or {}
    if not k:
        return []
    put = k["put"]
    return [
        [
            f"{k['clicks']:,}",
            f"{put['seconds']:.1f}",
            f"{put.get('put_seconds', put['seconds']):.1f}",  # results before the split timed both together
            rate(put["puts_per_s"]),
            f"{k['seconds']:.1f}",
            rate(k["clicks_per_s"]),
            ratio(k["clicks_per_s"], sf.get("clicks_per_s")),
            str(k["jvm_us_per_click"]),
            str(k["python_us_per_click"]),
            rate(k["unknown_region_clicks"]),
        ]
    ]


def avro_rows(results: dict[str, Any]) -> list[list[str]]:
    """The same clicks as Avro events beside the JSON run: clicks/s, its ratio, the job's CPU a click (from
    its launch, as the main run's) of each."""
    a, sf = results.get("avro") or {}, results.get("streamfold") or {}
    if not a:
        return []
    return [
        [
            f"{a['clicks']:,}",
            f"{a['seconds']:.1f}",
            rate(a["clicks_per_s"]),
            rate(sf.get("clicks_per_s")),
            ratio(a["clicks_per_s"], sf.get("clicks_per_s")),
            str(a["cpu_us_per_click"]),
            str(sf.get("cpu_us_per_click")),
            rate(a["unknown_region_clicks"]),
        ]
    ]


def window_at(windows: list[dict[str, Any]], rate: float = TABLES_RATE) -> dict[str, Any] | None:
    """The latency window at `rate` offered clicks/s, if one was measured."""
    return next((w for w in windows if w["target_rate"] == rate), None)


def tables_rows(results: dict[str, Any]) -> list[list[str]]:
    """The three-table path beside the one-table path (the main run), and the ratio row with the targets:
    clicks/s steady and from start, the join's state on disk per 1,000,000 rows of all the tables, the
    click p99 at 5,000 clicks/s, the rows landed (incomplete ones in brackets), the clicks enriched
    UNKNOWN."""
    t, sf = results.get("tables") or {}, results.get("streamfold") or {}
    if not t:
        return []
    over = t.get("over_one_table") or {}

    def p99(windows: list[dict[str, Any]]) -> str:
        window = window_at(windows)
        return "-" if window is None else seconds(window["click_latency"]["p99_s"])

    def times(value: float | None, target: str = "") -> str:
        shown = "-" if value is None else f"{value:.2f}x"
        return f"{shown} (target {target})" if target else shown

    one_state = over.get("one_table_state_per_million_rows_mb")
    return [
        [
            "one table (the main run)",
            f"{sf['users']:,}" if sf.get("users") else "-",
            rate(sf.get("clicks_per_s")),
            rate(sf.get("clicks_per_s_from_start")),
            "-" if one_state is None else f"{one_state:.1f}",
            p99(results.get("latency") or []),
            "-",
            rate(sf.get("unknown_region_clicks")),
        ],
        [
            "three tables: profile, a chain through its foreign key, a lookup on a click field",
            " + ".join(f"{n:,}" for n in t["rows"].values()),
            rate(t["clicks_per_s"]),
            rate(t["clicks_per_s_from_start"]),
            "-"
            if t.get("state_per_million_rows_mb") is None
            else f"{t['state_per_million_rows_mb']:.1f} (target ≤ 100)",
            p99(t.get("latency") or []),
            f"{t['rows_landed']:,} of {t['clicks']:,} ({t['incomplete_rows']:,})",
            rate(t["unknown_region_clicks"]),
        ],
        [
            "three tables / one table",
            "",
            times(over.get("clicks_per_s"), "≥ 0.6x"),
            times(over.get("clicks_per_s_from_start")),
            times(over.get("state_per_million_rows")),
            times(over.get("click_p99_at_5000"), "≤ 1.25x"),
            "",
            "",
        ],
    ]


LATENCY_HEADER = [
    "offered clicks/s",
    "sent/s",
    "committed/s (window + wait)",
    "kept up",
    "click p50",
    "click p95",
    "click p99",
    "profile p50",
    "profile p99",
    "samples (click/profile)",
]

TABLES = {
    "Headline: streamfold / Kafka Streams, the seed's system (same input and broker, same run)": (
        ["figure", "streamfold", "Kafka Streams", "streamfold / Kafka Streams"],
        headline_rows,
    ),
    "Real-time mode (run --mode realtime) beside the micro-batch mode and the fastest Kafka Streams": (
        ["figure", "micro-batch", "real-time", "Kafka Streams", "target", "met"],
        realtime_rows,
    ),
    "Throughput (same input, clicks per second)": (
        ["contender", "clicks", "seconds", "clicks/s", "streamfold / this"],
        throughput_rows,
    ),
    "Latency at a steady offered load (streamfold: click -> row visible in PostgreSQL)": (
        LATENCY_HEADER,
        latency_rows,
    ),
    "Kafka Streams latency at the same loads (click -> record visible to a read_committed consumer)": (
        LATENCY_HEADER,
        kstreams_latency_rows,
    ),
    "Where a click's latency goes (p50 / p99)": (
        [
            "offered clicks/s",
            "append -> batch that read it",
            "-> batch that emitted it (waiting for CDC progress)",
            "-> the batch's first Postgres commit",
            "-> its own partition's commit (visible)",
            "samples",
        ],
        breakdown_rows,
    ),
    "The Kinesis source (the same clicks, the same job with --source kinesis)": (
        [
            "clicks",
            "generate + put s",
            "put calls s",
            "puts/s (put calls)",
            "job seconds",
            "clicks/s",
            "Kinesis / Kafka path",
            "JVM CPU µs / click",
            "python CPU µs / click (the reader)",
            "clicks enriched UNKNOWN",
        ],
        kinesis_rows,
    ),
    "Avro events (the same clicks, events.format: avro, beside the JSON run)": (
        [
            "clicks",
            "job seconds",
            "Avro clicks/s",
            "JSON clicks/s",
            "Avro / JSON",
            "Avro CPU µs / click",
            "JSON CPU µs / click",
            "clicks enriched UNKNOWN",
        ],
        avro_rows,
    ),
    "Three tables (the same clicks, a page each; one job joins three tables) beside the one-table path": (
        [
            "pipeline",
            "rows of its tables",
            "clicks/s steady",
            "clicks/s from launch",
            "join state (RocksDB files), MB / 1M rows",
            f"click p99 at {TABLES_RATE:,.0f}/s",
            "rows landed of clicks (incomplete)",
            "clicks enriched UNKNOWN",
        ],
        tables_rows,
    ),
    "Peak memory (MiB)": (
        ["process tree", "driver", "JVM", "python workers", "total RSS", "total PSS"],
        memory_rows,
    ),
    "Cost growth with users (fresh checkpoint each step: CDC catch-up, then the clicks)": (
        [
            "users",
            "clicks",
            "CDC records",
            "catch-up (records/s)",
            "clicks seconds",
            "clicks/s",
            "state SST MiB",
            "checkpoint MiB",
            "MiB / 1M users",
            "peak PSS MiB",
            "clicks enriched UNKNOWN",
        ],
        scaling_rows,
    ),
    "Local vs cluster (the same input, one after the other in this run)": (
        [
            "Spark master",
            "clicks",
            "seconds",
            "clicks/s",
            "this / local",
            "launch -> first read s",
            "batches",
            "Spark CPU µs / click",
            "stack CPU µs / click",
            "machine busy",
            "other processes, core-s",
            "loadavg after",
        ],
        pair_rows,
    ),
    "Local vs cluster: peak memory (MiB)": (
        [
            "Spark master",
            "driver python",
            "driver JVM (local: + executor)",
            "driver's python workers",
            "executor JVMs",
            "executors' python workers",
            "master + worker daemons",
            "total RSS",
            "total PSS",
        ],
        pair_memory_rows,
    ),
    "Local vs cluster: where the measured batches' time went": (
        [
            "Spark master",
            "part",
            "stages / most tasks in one",
            "tasks per stage",
            "wall s",
            "task s (summed)",
            "task CPU s",
            "shuffle MiB written / read",
        ],
        pair_time_rows,
    ),
    "Local vs cluster: CPU during the measured span (core-seconds)": (
        ["process group", *("local[*]", "cluster")],
        pair_cpu_rows,
    ),
    "Cluster: batches' time and clicks/s with W one-core workers, from the cluster's stages (a model)": (
        [
            "workers",
            "batches s, tasks as measured",
            "clicks/s",
            "batches s, tasks' CPU time only",
            "clicks/s",
        ],
        projection_rows,
    ),
}


def tables(results: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table that has rows."""
    out = []
    for title, (header, rows_of) in TABLES.items():
        if rows := rows_of(results):
            out.append((title, header, rows))
    return out


def print_tables(results: dict[str, Any], console: Console) -> None:
    for title, header, rows in tables(results):
        table = Table(*header, title=title)
        for row in rows:
            table.add_row(*row)
        console.print(table)
    for line in summary_lines(results):
        console.print(line)


def summary_lines(results: dict[str, Any]) -> list[str]:
    sf = results.get("streamfold", {})
    lines = []
    for key, label in (("naive", "naive"), ("raw", "raw consumer")):
        other = results.get(key, {}).get("clicks_per_s")
        if sf.get("clicks_per_s") and other:
            lines.append(f"streamfold/{label}: {sf['clicks_per_s'] / other:.2f}")
    ks = results.get("kstreams") or {}
    if sf.get("clicks_per_s") and ks.get("clicks_per_s"):
        from_start = ratio(sf.get("clicks_per_s_from_start"), ks.get("clicks_per_s_from_start"))
        lines.append(
            f"streamfold/Kafka Streams (users in a {VARIANTS.get(ks['variant'], ks['variant'])}): "
            f"{sf['clicks_per_s'] / ks['clicks_per_s']:.2f} steady, {from_start} from start"
        )
    if ks:
        lines.append(
            f"Kafka Streams: {ks['enriched_records']:,} enriched records of {ks['clicks']:,} clicks, counts "
            f"summing to {ks['counted_clicks']:,}; clicks enriched UNKNOWN although their user existed: "
            f"{ks['unknown_region_clicks']:,}"
        )
    if sf.get("unknown_region_clicks") is not None:
        lines.append(
            f"streamfold clicks enriched UNKNOWN although their user existed: {sf['unknown_region_clicks']:,}"
        )
    if (results.get("cluster") or {}).get("cluster"):
        lines.extend(cluster.findings(results["cluster"]))
    sized = [s for s in results.get("scaling", []) if s.get("state_per_million_users_mib")]
    biggest = max(sized, key=lambda s: s["users"], default=None)
    if biggest or sf.get("state_per_million_users_mib"):
        users = biggest["users"] if biggest else sf["users"]
        state = biggest["state_per_million_users_mib"] if biggest else sf["state_per_million_users_mib"]
        lines.append(
            f"join state per 1,000,000 users: {state:.0f} MiB "
            f"(RocksDB SST files at {users:,} users, scaled linearly)"
        )
    return lines


def markdown(results: dict[str, Any]) -> str:
    parts = []
    for title, header, rows in tables(results):
        parts.append(f"**{title}**\n")
        parts.append("| " + " | ".join(header) + " |")
        parts.append("|" + "---|" * len(header))
        parts.extend("| " + " | ".join(row) + " |" for row in rows)
        parts.append("")
    parts.extend(f"- {line}" for line in summary_lines(results))
    return "\n".join(parts) + "\n"


def write(results: dict[str, Any], stamp: str, directory: Path = RESULTS_DIR) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stamp}.json"
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    path.with_suffix(".md").write_text(markdown(results))
    return path


CHARTS_HEADING = "**Charts**"


def link_charts(md_path: Path, charts: list[Path]) -> None:
    """(Re)write the report's last section: an image link per chart, relative (the charts sit beside it)."""
    text = md_path.read_text() if md_path.exists() else ""
    text = text.split(f"\n{CHARTS_HEADING}\n", 1)[0].rstrip("\n") + "\n"
    if charts:
        links = "\n".join(f"![{chart.stem}]({chart.name})" for chart in charts)
        text += f"\n{CHARTS_HEADING}\n\n{links}\n"
    md_path.write_text(text)


if __name__ == "__main__":
    # `python -m bench.report bench/results/<date>.json`: the tables as Markdown (for docs/benchmark.md).
    import sys

    print(markdown(json.loads(Path(sys.argv[1]).read_text())), end="")
