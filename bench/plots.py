"""Charts of a bench run, written beside its JSON as <stamp>-throughput.png, -latency.png, -latency-cdf.png.

throughput:  clicks/s against the number of users: streamfold's cost-growth steps and its main run, and
             each baseline at the user count of the input it was measured on (the main run's).
latency:     click (and profile) latency percentiles against the offered load; loads that were not
             sustained (sampled clicks unseen within GRACE_S, or offered above the throughput streamfold
             reached in the same run) have hollow markers, the loads above that throughput are shaded.
latency-cdf: the distribution of the sampled click latencies per offered load: from the 1% quantiles
             (quantiles_s) where the run kept them, otherwise only through the percentiles it recorded.
A section missing from the run (--skip-scaling, --latency-seconds 0, --skip-naive, ...) means fewer
points or charts, never an error; results of another shape raise ResultsError.

`python -m bench.plots bench/results/<stamp>.json` (re)draws the charts of a results file and links them
from its .md.
"""

from __future__ import annotations

import itertools
import json
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter

from bench import report
from bench.latency import GRACE_S

DPI = 100
SIZE_IN = (8.0, 5.0)
PERCENTILE_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_s$")
COLORS = ("tab:blue", "tab:orange", "tab:red", "tab:purple", "tab:brown", "tab:olive")
BASELINE_MARKERS = ("X", "s", "D", "v", "P")
LEGEND_BELOW: dict[str, Any] = {
    "fontsize": 7,
    "loc": "upper center",
    "bbox_to_anchor": (0.5, -0.13),
    "ncol": 2,
    "frameon": False,
}
TALL_IN = (SIZE_IN[0], SIZE_IN[1] + 1)  # room for a legend below the axes


class ResultsError(ValueError):
    """The input is not a bench.run results dict (the message says what is wrong, and where)."""


# ---------------------------------------------------------------- reading the results


def load(path: Path) -> dict[str, Any]:
    try:
        results = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read bench results: {exc}") from exc
    return checked(results, str(path))


def checked(results: Any, where: str = "results") -> dict[str, Any]:
    if not isinstance(results, dict):
        raise ResultsError(f"{where}: bench results are a JSON object, not {type(results).__name__}")
    return results


def field(entry: Any, key: str, where: str) -> Any:
    if not isinstance(entry, dict) or key not in entry:
        raise ResultsError(f"{where}: no {key!r} (is this a bench.run results file?)")
    return entry[key]


def number(entry: Any, key: str, where: str) -> float:
    value = field(entry, key, where)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ResultsError(f"{where}: {key!r} is {value!r}, not a number")
    return float(value)


def optional_number(entry: Any, key: str, where: str) -> float | None:
    return None if field(entry, key, where) is None else number(entry, key, where)


def section(results: dict[str, Any], key: str) -> list[Any]:
    """A list section of the results; [] when the run skipped it."""
    value = results.get(key) or []
    if not isinstance(value, list):
        raise ResultsError(f"results[{key!r}] is a {type(value).__name__}, not a list")
    return value


def title(results: dict[str, Any], what: str) -> str:
    """What the chart shows, the run's date and command, and the machine it ran on."""
    run = f"run {results.get('date', '(no date)')}"
    if command := results.get("command"):
        run += f": {command}"
    machine = results.get("machine") or {}
    facts = [
        f"{machine['cores']} cores" if machine.get("cores") else "",
        str(machine.get("cpu") or ""),
        f"{machine['memory_gib']} GiB RAM" if machine.get("memory_gib") else "",
        f"Python {machine['python']}" if machine.get("python") else "",
        str(machine.get("java") or "").replace("openjdk version", "OpenJDK").replace('"', ""),
    ]
    lines = [
        what,
        *textwrap.wrap(run, 100, max_lines=2, placeholder=" ...", break_on_hyphens=False),
        ", ".join(f for f in facts if f),
    ]
    return "\n".join(line for line in lines if line)


# ---------------------------------------------------------------- throughput against users


@dataclass(frozen=True)
class Point:
    users: float
    clicks_per_s: float
    clicks: float


def main_users(results: dict[str, Any]) -> float | None:
    """The users of the main run's input, which every baseline read too."""
    for entry in (results.get("streamfold"), results.get("params")):
        if isinstance(entry, dict) and entry.get("users"):
            return number(entry, "users", "main run")
    return None


def scaling_points(results: dict[str, Any]) -> list[tuple[Point, float | None]]:
    """streamfold's cost-growth steps, fewest users first, each with its clicks enriched UNKNOWN."""
    points = []
    for i, step in enumerate(section(results, "scaling")):
        where = f"scaling[{i}]"
        point = Point(
            number(step, "users", where), number(step, "clicks_per_s", where), number(step, "clicks", where)
        )
        points.append((point, step.get("unknown_region_clicks")))
    return sorted(points, key=lambda p: p[0].users)


def contender_points(results: dict[str, Any]) -> list[tuple[str, Point]]:
    """streamfold's main run and each baseline, all on the main run's input."""
    users = main_users(results)
    if users is None:
        return []
    return [
        (label, Point(users, number(entry, "clicks_per_s", label), number(entry, "clicks", label)))
        for label, entry in report.contenders(results)
    ]


def thousands(value: float, _pos: int = 0) -> str:
    return f"{value:,.0f}"


def spans_decades(values: list[float]) -> bool:
    positive = [v for v in values if v > 0]
    return len(positive) > 1 and max(positive) / min(positive) >= 10


def log_scale_if_wide(ax: Axes, xs: list[float], ys: list[float] | None = None) -> None:
    """Log axes where the values span a decade or more, with plain (not 10^n) tick labels."""
    for axis, values, set_scale in ((ax.xaxis, xs, ax.set_xscale), (ax.yaxis, ys or [], ax.set_yscale)):
        if spans_decades(values):
            set_scale("log")
        if values:
            axis.set_major_formatter(FuncFormatter(thousands))


def throughput_figure(results: dict[str, Any]) -> Figure | None:
    scaling = scaling_points(results)
    contenders = contender_points(results)
    if not scaling and not contenders:
        return None
    fig = Figure(figsize=TALL_IN)
    ax = fig.add_subplot()
    if scaling:
        xs = [p.users for p, _ in scaling]
        ys = [p.clicks_per_s for p, _ in scaling]
        clicks = ", ".join(sorted({f"{p.clicks:,.0f}" for p, _ in scaling}))
        # A step with catch_up folded its users' change events before its clicks arrived; older results
        # measured the clicks on a fresh state.
        state = "after the CDC catch-up" if section(results, "scaling")[0].get("catch_up") else "fresh state"
        ax.plot(xs, ys, "o-", color=COLORS[0], label=f"streamfold, cost growth ({clicks} clicks, {state})")
        for point, unknown in scaling:
            note = f"{point.clicks_per_s:,.0f}/s"
            if unknown:
                note += f"\n({unknown:,} clicks UNKNOWN)"
            ax.annotate(
                note,
                (point.users, point.clicks_per_s),
                textcoords="offset points",
                xytext=(6, -12),
                fontsize=7,
                color=COLORS[0],
            )
    markers = itertools.cycle(BASELINE_MARKERS)  # more contenders than markers: they repeat
    for label, point in contenders:
        is_sf = label == report.CONTENDERS[0][0]
        ax.plot(
            [point.users],
            [point.clicks_per_s],
            "*" if is_sf else next(markers),
            markersize=13 if is_sf else 8,
            color=COLORS[0] if is_sf else "dimgray",
            markerfacecolor=COLORS[0] if is_sf else "white",
            linestyle="none",
            label=f"{'streamfold, main run' if is_sf else label} ({point.clicks:,.0f} clicks)",
        )
        ax.annotate(
            f"{point.clicks_per_s:,.0f}/s",
            (point.users, point.clicks_per_s),
            textcoords="offset points",
            xytext=(8, 2),
            fontsize=7,
        )
    all_points = [p for p, _ in scaling] + [p for _, p in contenders]
    log_scale_if_wide(ax, [p.users for p in all_points], [p.clicks_per_s for p in all_points])
    ax.margins(x=0.12, y=0.12)
    if ax.get_yscale() == "linear":
        ax.set_ylim(0, max(p.clicks_per_s for p in all_points) * 1.15)  # a linear axis starts at zero
    ax.set_xlabel("users (profiles in the input)")
    ax.set_ylabel("throughput (clicks/s)")
    ax.set_title(title(results, "Throughput against users"), fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(**LEGEND_BELOW)
    return fig


# ---------------------------------------------------------------- latency against offered load


def percentile_keys(latency: Any, where: str) -> list[str]:
    """The pNN_s keys of a latency summary, lowest percentile first."""
    if not isinstance(latency, dict):
        raise ResultsError(f"{where}: not a latency summary: {latency!r}")
    keys = [k for k in latency if PERCENTILE_KEY.match(k)]
    return sorted(keys, key=lambda k: float(PERCENTILE_KEY.match(k).group(1)))  # type: ignore[union-attr]


def capacity(results: dict[str, Any]) -> float | None:
    """The throughput streamfold reached on the preloaded input of the same run."""
    main = results.get("streamfold")
    return number(main, "clicks_per_s", "streamfold") if isinstance(main, dict) and main else None


def unsustained(window: dict[str, Any], where: str, limit: float | None) -> str | None:
    """Why a load was not sustained; None if every sampled click was seen within GRACE_S (kept_up) and the
    load was no faster than the throughput streamfold reached in the same run."""
    if not field(window, "kept_up", where):
        return f"clicks unseen {GRACE_S:.0f} s after the load"
    if limit is not None and number(window, "sent_rate", where) > limit:
        return "offered above the measured throughput"
    return None


def plot_percentiles(
    ax: Axes, rates: list[float], windows: list[dict[str, Any]], kind: str, ok: list[bool]
) -> bool:
    """One line per percentile of `kind` (click/profile latency); censored values drawn at GRACE_S.
    Returns whether any value was censored."""
    censored = False
    style = "-" if kind == "click" else "--"
    for color, key in zip(
        COLORS, percentile_keys(windows[0][f"{kind}_latency"], f"latency[0].{kind}"), strict=False
    ):
        values = [
            optional_number(w[f"{kind}_latency"], key, f"latency[{i}].{kind}") for i, w in enumerate(windows)
        ]
        ys = [GRACE_S if v is None else v for v in values]
        label = f"{kind} {key.removesuffix('_s')}"
        ax.plot(rates, ys, style, color=color, label=label, alpha=0.8 if kind == "click" else 0.5)
        for x, y, v, good in zip(rates, ys, values, ok, strict=True):
            censored |= v is None
            ax.plot(
                [x],
                [y],
                "^" if v is None else "o",
                color=color,
                linestyle="none",
                markerfacecolor=color if good else "white",
                markersize=7 if kind == "click" else 5,
            )
    return censored


def latency_figure(results: dict[str, Any]) -> Figure | None:
    windows = section(results, "latency")
    if not windows:
        return None
    where = [f"latency[{i}]" for i in range(len(windows))]
    for w, at in zip(windows, where, strict=True):
        field(w, "click_latency", at)
    order = sorted(range(len(windows)), key=lambda i: number(windows[i], "target_rate", where[i]))
    windows, where = [windows[i] for i in order], [where[i] for i in order]
    rates = [number(w, "target_rate", at) for w, at in zip(windows, where, strict=True)]
    limit = capacity(results)
    reasons = [unsustained(w, at, limit) for w, at in zip(windows, where, strict=True)]
    ok = [reason is None for reason in reasons]
    fig = Figure(figsize=TALL_IN)
    ax = fig.add_subplot()
    censored = plot_percentiles(ax, rates, windows, "click", ok)
    if all(isinstance(w.get("profile_latency"), dict) for w in windows):
        censored |= plot_percentiles(ax, rates, windows, "profile", ok)
    log_scale_if_wide(ax, rates)
    handles, labels = ax.get_legend_handles_labels()
    if limit is not None and max(rates) > limit:
        span = ax.axvspan(limit, max(rates) * 1.1, color="gray", alpha=0.12)
        handles.append(span)
        labels.append(f"offered above streamfold's measured throughput ({limit:,.0f}/s)")
    if not all(ok):
        handles.append(Line2D([], [], marker="o", color="gray", markerfacecolor="white", linestyle="none"))
        why = "; ".join(dict.fromkeys(r for r in reasons if r))
        labels.append(f"hollow: load not sustained ({why})")
    if censored:
        handles.append(Line2D([], [], marker="^", color="gray", linestyle="none"))
        labels.append(f"> {GRACE_S:.0f} s (not seen within the grace period)")
    ax.set_xlabel("offered load (clicks/s)")
    ax.set_ylabel("latency (s)")
    ax.set_ylim(bottom=0)
    ax.set_title(
        title(results, "Latency: click appended -> row visible in PostgreSQL (dashed: profile change)"),
        fontsize=9,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(handles, labels, **LEGEND_BELOW)
    return fig


# ---------------------------------------------------------------- latency CDF per offered load


def cdf_from_quantiles(quantiles: list[Any], where: str) -> tuple[list[float], list[float]]:
    """(latency, fraction) steps of the 1% quantiles, up to the last one seen (censored ones are None)."""
    if len(quantiles) != 101:
        raise ResultsError(f"{where}: quantiles_s has {len(quantiles)} values, not 101")
    pairs = [(float(v), q / 100) for q, v in enumerate(quantiles) if v is not None]
    return [x for x, _ in pairs], [y for _, y in pairs]


def cdf_from_percentiles(latency: dict[str, Any], where: str) -> tuple[list[float], list[float]]:
    """(latency, fraction) at each recorded percentile and the maximum: all an older run kept."""
    pairs = []
    for key in percentile_keys(latency, where):
        value = optional_number(latency, key, where)
        if value is not None:
            pairs.append((value, float(PERCENTILE_KEY.match(key).group(1)) / 100))  # type: ignore[union-attr]
    if latency.get("max_s") is not None and not latency.get("censored"):
        pairs.append((number(latency, "max_s", where), 1.0))
    return [x for x, _ in pairs], [y for _, y in pairs]


def cdf_figure(results: dict[str, Any]) -> Figure | None:
    windows = [w for w in section(results, "latency") if field(w, "click_latency", "latency").get("samples")]
    if not windows:
        return None
    windows = sorted(windows, key=lambda w: number(w, "target_rate", "latency"))
    fig = Figure(figsize=SIZE_IN)
    ax = fig.add_subplot()
    approximate = False
    for i, window in enumerate(windows):
        where = f"latency[{i}].click_latency"
        latency = window["click_latency"]
        samples = number(latency, "samples", where)
        label = f"{number(window, 'target_rate', where):,.0f} clicks/s offered ({samples:,.0f} samples"
        if latency.get("censored"):
            label += f", {latency['censored']:,} not seen within {GRACE_S:.0f} s"
        color = COLORS[i % len(COLORS)]
        if latency.get("quantiles_s"):
            xs, ys = cdf_from_quantiles(latency["quantiles_s"], where)
            ax.step(xs, ys, where="post", color=color, label=label + ")")
        else:
            approximate = True
            xs, ys = cdf_from_percentiles(latency, where)
            keys = "/".join(k.removesuffix("_s") for k in percentile_keys(latency, where))
            ax.plot(xs, ys, "o--", color=color, label=f"{label}; only {keys}/max recorded)")
    ax.set_xlabel("click latency (s): appended to Kafka -> row visible in PostgreSQL")
    ax.set_ylabel("fraction of sampled clicks")
    ax.set_ylim(0, 1.02)
    ax.set_xlim(left=0)
    what = "Click latency CDF per offered load"
    if approximate:
        what += " (dashed: drawn through percentiles only, not the samples)"
    ax.set_title(title(results, what), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


# ---------------------------------------------------------------- files


CHARTS: tuple[tuple[str, Callable[[dict[str, Any]], Figure | None]], ...] = (
    ("throughput", throughput_figure),
    ("latency", latency_figure),
    ("latency-cdf", cdf_figure),
)


def write_charts(results: dict[str, Any], json_path: Path, dpi: int = DPI) -> list[Path]:
    """Draw every chart the results have data for; PNGs beside `json_path`. Returns their paths."""
    results = checked(results, str(json_path))
    written = []
    for name, draw in CHARTS:
        fig = draw(results)
        if fig is None:
            continue
        fig.tight_layout()
        path = json_path.with_name(f"{json_path.stem}-{name}.png")
        FigureCanvasAgg(fig)  # the Agg renderer, whatever backend pyplot would pick
        fig.savefig(path, format="png", dpi=dpi, metadata={"Software": None})
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: python -m bench.plots bench/results/<stamp>.json [...]", file=sys.stderr)
        return 2
    for arg in argv:
        path = Path(arg)
        try:
            charts = write_charts(load(path), path)
        except ResultsError as exc:
            print(f"bench.plots: {exc}", file=sys.stderr)
            return 1
        if path.with_suffix(".md").exists():
            report.link_charts(path.with_suffix(".md"), charts)
        for chart in charts:
            print(chart)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
