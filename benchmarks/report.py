"""What every benchmark shares: progress lines, a table, goals, JSON and a PNG in one place.

A run writes ``<name>.json`` and ``<name>*.png`` into a scratch folder: ``$TIMESHARD_BENCH_DIR``
when set, else ``$TMPDIR/timeshard-bench`` (``$TMPDIR/timeshard-bench-quick`` for a ``--quick``
run, whose figures are indicative only). Only ``--publish`` writes into the committed
``benchmarks/results/`` (the figures docs/benchmarks.md and docs/deploy.md are made from), and a
quick run is never published: a run someone tried locally never replaces them by accident.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

#: The published figures, committed; only a run with ``--publish`` writes here.
DEFAULT_RESULTS_DIR = Path(__file__).parent / "results"
SCRATCH_RESULTS_DIR = Path(tempfile.gettempdir()) / "timeshard-bench"
QUICK_RESULTS_DIR = Path(tempfile.gettempdir()) / "timeshard-bench-quick"


class NotPublishable(ValueError):
    """A run asked to write the published figures that may not: a quick one, or one without ``--publish``."""


def results_dir(*, quick: bool, publish: bool = False) -> Path:
    """Where a run writes: the published folder with ``publish``; else ``$TIMESHARD_BENCH_DIR``
    when set, else a scratch folder (one for quick runs, one for full ones).

    A quick run's small sizes give indicative figures only; written into the committed
    ``benchmarks/results/`` they replaced the published ones (and broke ``tests/test_sizing.py``).
    """
    if publish:
        if quick:
            raise NotPublishable("--publish: a --quick run's figures are indicative only and are never published")
        return DEFAULT_RESULTS_DIR
    given = os.environ.get("TIMESHARD_BENCH_DIR")
    if given and Path(given).resolve() == DEFAULT_RESULTS_DIR.resolve():
        raise NotPublishable(f"TIMESHARD_BENCH_DIR names the published results ({DEFAULT_RESULTS_DIR}): "
                             "only a full run with --publish writes there")
    if given:
        return Path(given)
    return QUICK_RESULTS_DIR if quick else SCRATCH_RESULTS_DIR


def add_publish_flag(parser: argparse.ArgumentParser) -> None:
    """``--publish``, the one way a benchmark writes into ``benchmarks/results/``."""
    parser.add_argument("--publish", action="store_true",
                        help="write the figures into benchmarks/results/ (the published ones; never with --quick); "
                             "default: $TIMESHARD_BENCH_DIR, else a scratch folder under $TMPDIR")


def report_for(name: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> Report:
    """The run's ``Report``; a usage error (exit 2) before anything runs if it may not write where asked."""
    try:
        results_dir(quick=args.quick, publish=args.publish)
    except NotPublishable as exc:
        parser.error(str(exc))
    return Report(name, quick=args.quick, publish=args.publish)


def machine_info() -> dict[str, Any]:
    """CPU count, memory, Python and library versions: what a reader needs to trust a figure."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        info["cpu"] = None
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_kib"] = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    for package in ("ray", "azure-storage-blob", "msgpack", "croniter", "apscheduler", "sqlalchemy"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    return info


# A published figure drawn beside measured ones: (label, value). Never a measurement of ours.
Reference = tuple[str, float]
# A bar panel: (title, {bar: value}, goal or None[, published references]).
Panel = (tuple[str, Mapping[str, float], float | None]
         | tuple[str, Mapping[str, float], float | None, Sequence[Reference]])
PUBLISHED = "published, not measured"


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p90, p99 and max of ``values`` (nearest rank) plus their count; zeros when empty."""
    ordered = sorted(values)
    if not ordered:
        return {"count": 0, "p50": 0.0, "p90": 0.0, "p99": 0.0, "max": 0.0}

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    return {"count": len(ordered), "p50": rank(0.50), "p90": rank(0.90), "p99": rank(0.99), "max": ordered[-1]}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _draw_references(ax: Any, references: Sequence[Reference], *, vertical: bool = False) -> None:
    for i, (label, value) in enumerate(references):
        style = {"color": "#805ad5", "linestyle": ":", "linewidth": 1.5, "label": f"{label} ({PUBLISHED})"}
        if i:
            style["color"] = ["#d69e2e", "#38a169", "#dd6b20"][(i - 1) % 3]
        (ax.axvline if vertical else ax.axhline)(value, **style)


class Report:
    """Collects one benchmark's figures, prints them as they come, and writes JSON + PNG."""

    def __init__(self, name: str, *, quick: bool = False, publish: bool = False) -> None:
        self.name = name
        self.quick = quick
        self.publish = publish
        self.started = time.perf_counter()
        self.data: dict[str, Any] = {"benchmark": name, "quick": quick, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.goals: list[dict[str, Any]] = []

    @property
    def results_dir(self) -> Path:
        """This run's output folder (see :func:`results_dir`)."""
        return results_dir(quick=self.quick, publish=self.publish)

    def progress(self, message: str) -> None:
        """A status line with elapsed time, so a long run shows it is alive."""
        print(f"[{self.name} {time.perf_counter() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)

    def goal(self, figure: str, value: float, target: float, *, higher_is_better: bool) -> bool:
        met = value >= target if higher_is_better else value <= target
        self.goals.append({"figure": figure, "value": value, "goal": target, "higher_is_better": higher_is_better, "met": met})
        return met

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
        line = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
        print(line.format(*header))
        print("  ".join("-" * w for w in widths))
        for row in rows:
            print(line.format(*row))

    def bars(self, title: str, panels: Sequence[Panel], *, suffix: str = "", log: bool = False) -> Path | None:
        """One bar panel per comparison, with the goal as a dashed line; saved as <name>[-suffix].png.

        A panel may carry published figures as a 4th element; they are drawn as dotted lines
        labelled "published, not measured", never as bars.
        """
        plt = _pyplot()
        if plt is None:
            self.progress("matplotlib is not installed: no PNG (pip install timeshard[bench])")
            return None
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4.2), squeeze=False)
        for ax, panel in zip(axes[0], panels, strict=True):
            label, values, goal = panel[0], panel[1], panel[2]
            references: Sequence[Reference] = panel[3] if len(panel) > 3 else ()  # type: ignore[misc]
            names = list(values)
            ax.bar(names, [values[n] for n in names], color=["#2b6cb0"] + ["#a0aec0"] * (len(names) - 1))
            if goal is not None:
                ax.axhline(goal, color="#c53030", linestyle="--", label=f"goal {goal:,.0f}")
            _draw_references(ax, references)
            if goal is not None or references:
                ax.legend(loc="best", fontsize=7)
            if log:
                ax.set_yscale("log")
            ax.set_title(label, fontsize=10)
            ax.tick_params(axis="x", labelsize=8, labelrotation=15)
            for i, n in enumerate(names):
                ax.annotate(f"{values[n]:,.0f}", (i, values[n]), ha="center", va="bottom", fontsize=9)
        fig.suptitle(title)
        fig.tight_layout()
        return self._save(fig, plt, suffix)

    def cdf(self, title: str, series: Mapping[str, Sequence[float]], *, unit: str = "ms", goal: float | None = None,
            references: Sequence[Reference] = (), suffix: str = "cdf") -> Path | None:
        """Empirical CDFs of several samples on one log-x axis; saved as <name>-<suffix>.png."""
        plt = _pyplot()
        if plt is None:
            return None
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, values in series.items():
            ordered = sorted(max(v, 1e-3) for v in values)  # log axis: clamp zero lateness
            if ordered:
                ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=f"{label} (n={len(ordered):,})")
        if goal is not None:
            ax.axvline(goal, color="#c53030", linestyle="--", label=f"goal p99 {goal:g} {unit}")
        _draw_references(ax, references, vertical=True)
        ax.axhline(0.99, color="#718096", linewidth=0.5)
        ax.set_xscale("log")
        ax.set_xlabel(unit)
        ax.set_ylabel("fraction of jobs")
        ax.set_title(title, fontsize=10)
        ax.legend(loc="lower right", fontsize=7)
        fig.tight_layout()
        return self._save(fig, plt, suffix)

    def lines(self, title: str, panels: Sequence[tuple[str, Mapping[str, Sequence[tuple[float, float]]]]], *,
              xlabel: str, ylabel: str, suffix: str, log: bool = True) -> Path | None:
        """One panel per title, each a line per series of ``(x, y)`` points; saved as <name>-<suffix>.png."""
        plt = _pyplot()
        if plt is None:
            return None
        fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4.2), squeeze=False)
        for ax, (label, series) in zip(axes[0], panels, strict=True):
            for name, points in series.items():
                if points:
                    ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=name)
            if log:
                from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

                ax.set_xscale("log")
                ax.set_yscale("log")
                xs = sorted({x for points in series.values() for x, _ in points})
                ax.set_xticks(xs, [f"{x:,.0f}" for x in xs])
                ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
                ax.yaxis.set_major_formatter(ScalarFormatter())
                for axis in (ax.xaxis, ax.yaxis):
                    axis.set_minor_formatter(NullFormatter())
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.set_title(label, fontsize=10)
            ax.grid(True, which="both", linewidth=0.3)
            ax.legend(loc="best", fontsize=7)
        fig.suptitle(title)
        fig.tight_layout()
        return self._save(fig, plt, suffix)

    def _save(self, fig: Any, plt: Any, suffix: str) -> Path:
        out = self.results_dir
        out.mkdir(parents=True, exist_ok=True)
        path = out / (f"{self.name}-{suffix}.png" if suffix else f"{self.name}.png")
        fig.savefig(path, dpi=110)
        plt.close(fig)
        if not suffix:
            self.data["png"] = str(path)
        self.data.setdefault("pngs", []).append(str(path))
        return path

    def finish(self) -> int:
        """Print the goals, write the JSON; exit status 0 (missed goals are reported, not fatal)."""
        self.data["goals"] = self.goals
        self.data["seconds"] = round(time.perf_counter() - self.started, 2)
        for g in self.goals:
            sign = ">=" if g["higher_is_better"] else "<="
            print(f"goal {g['figure']} {sign} {g['goal']:,}: {g['value']:,.1f} -> {'met' if g['met'] else 'MISSED'}")
        out = self.results_dir
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{self.name}.json"
        path.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        pngs = self.data.get("pngs", [])
        print(f"results: {path}" + (f" and {', '.join(pngs)}" if pngs else ""))
        if not self.publish:
            kind = "quick run: indicative figures" if self.quick else "not published"
            print(f"{kind}, kept in {out} (not benchmarks/results/: only a full run with --publish writes there; "
                  "TIMESHARD_BENCH_DIR chooses another folder)")
        return 0
