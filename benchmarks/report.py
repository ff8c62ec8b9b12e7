"""What every benchmark shares: progress lines, a table, goals, JSON and a PNG in one place.

Results land in ``benchmarks/results/<name>.json`` and ``<name>.png`` (override the folder with
``TIMESHARD_BENCH_DIR``), so a run leaves figures people can compare and a picture of them.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(os.environ.get("TIMESHARD_BENCH_DIR", Path(__file__).parent / "results"))


def machine_info() -> dict[str, Any]:
    """CPU count, memory, Python and library versions: what a reader needs to trust a figure."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/meminfo") as f:
            info["mem_total_kib"] = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    for package in ("ray", "azure-storage-blob", "msgpack", "croniter"):
        try:
            info[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            info[package] = None
    return info


class Report:
    """Collects one benchmark's figures, prints them as they come, and writes JSON + PNG."""

    def __init__(self, name: str, *, quick: bool = False) -> None:
        self.name = name
        self.quick = quick
        self.started = time.perf_counter()
        self.data: dict[str, Any] = {"benchmark": name, "quick": quick, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.goals: list[dict[str, Any]] = []

    def progress(self, message: str) -> None:
        """A status line with elapsed time, so a long run shows it is alive."""
        print(f"[{self.name} {time.perf_counter() - self.started:6.1f}s] {message}", file=sys.stderr, flush=True)

    def goal(self, figure: str, value: float, target: float, *, higher_is_better: bool) -> bool:
        met = value >= target if higher_is_better else value <= target
        self.goals.append({"figure": figure, "value": value, "goal": target, "higher_is_better": higher_is_better, "met": met})
        return met

    def table(self, header: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
        line = "  ".join("{:<%d}" % w if i == 0 else "{:>%d}" % w for i, w in enumerate(widths))
        print(line.format(*header))
        print("  ".join("-" * w for w in widths))
        for row in rows:
            print(line.format(*row))

    def bars(self, title: str, panels: Sequence[tuple[str, Mapping[str, float], float | None]]) -> Path | None:
        """One bar panel per comparison, with the goal as a dashed line; saved as <name>.png."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.progress("matplotlib is not installed: no PNG (pip install timeshard[bench])")
            return None
        fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 4), squeeze=False)
        for ax, (label, values, goal) in zip(axes[0], panels):
            names = list(values)
            ax.bar(names, [values[n] for n in names], color=["#2b6cb0"] + ["#a0aec0"] * (len(names) - 1))
            if goal is not None:
                ax.axhline(goal, color="#c53030", linestyle="--", label=f"goal {goal:,.0f}")
                ax.legend(loc="best")
            ax.set_title(label, fontsize=10)
            for i, n in enumerate(names):
                ax.annotate(f"{values[n]:,.0f}", (i, values[n]), ha="center", va="bottom", fontsize=9)
        fig.suptitle(title)
        fig.tight_layout()
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{self.name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        self.data["png"] = str(path)
        return path

    def finish(self) -> int:
        """Print the goals, write the JSON; exit status 0 (missed goals are reported, not fatal)."""
        self.data["goals"] = self.goals
        self.data["seconds"] = round(time.perf_counter() - self.started, 2)
        for g in self.goals:
            sign = ">=" if g["higher_is_better"] else "<="
            print(f"goal {g['figure']} {sign} {g['goal']:,}: {g['value']:,.1f} -> {'met' if g['met'] else 'MISSED'}")
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        path = RESULTS_DIR / f"{self.name}.json"
        path.write_text(json.dumps(self.data, indent=2, default=str) + "\n")
        print(f"results: {path}" + (f" and {self.data['png']}" if "png" in self.data else ""))
        return 0
