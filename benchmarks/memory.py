"""Benchmark of a silo's memory: bytes per job as a slope, dormant and loaded.

    python -m benchmarks.memory [--quick] [--store file|azure] [--dormant 1e6,...] [--loaded 1e5,...]

One silo per kind of job (so every job lands in it). RSS at small counts is dominated by fixed
costs — pools, caches, the allocator's high-water mark — so a single "RSS after minus RSS before,
divided by the jobs" overstates the cost per job. Instead:

1. warm up to a plateau: schedule rounds of throw-away jobs (due two days away: durable, never
   held) until the silo's RSS, read after a collection, stops growing;
2. add jobs up to each of four or more sizes; at each, ask the silo to ``gc.collect()`` and read
   its RSS from /proc/<pid>/status;
3. report the least-squares slope (bytes per job: what the goal is about), the intercept (MiB: the
   fixed cost) and R², apart.

Cross-check, at every size and in the silo itself: objects the collector tracks, pymalloc blocks
allocated (``sys.getallocatedblocks()``, which counts strings, bytes and ints too) and the bytes of
the tracked objects (``sys.getsizeof``), each as a slope per job — no ``tracemalloc``, whose own
bookkeeping would swell the RSS measured. The silo runs these through Ray's ``__ray_call__``; the
silo needs no debug method.

- dormant: jobs due two days away, beyond the lookahead — written to shard logs, nothing held
  per job (goal: slope <= 10 B per job, i.e. about 0);
- loaded: jobs due within the lookahead — folded into live entries and queued (goal: slope
  <= 150 B per job, over 100k–1M jobs in the full run).

Quick sizes (tens of thousands) are indicative only. Writes memory.json and
memory.png (where: ``benchmarks.report``; into benchmarks/results/ with ``--publish``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks.cluster import BenchEnv, bench_env, rate, running_cluster, schedule_range, silo_pid
from benchmarks.report import Report, add_publish_flag, machine_info, report_for
from cluster import ClusterOptions, Target
from cluster.client import Client

GOAL_DORMANT_BYTES_PER_JOB = 10
GOAL_LOADED_BYTES_PER_JOB = 150
_TARGET = Target.actor("bench-memory-target", "bench")  # never fires: the cluster stops first

DORMANT_SIZES = (1_000_000, 2_500_000, 5_000_000, 7_500_000, 10_000_000)
LOADED_SIZES = (100_000, 250_000, 500_000, 750_000, 1_000_000)
QUICK_DORMANT_SIZES = (5_000, 10_000, 15_000, 20_000)
QUICK_LOADED_SIZES = (2_500, 5_000, 7_500, 10_000)
LOADED_LOOKAHEAD = "30m"
LOADED_DUE_IN = timedelta(minutes=20)  # within the lookahead, and late enough that nothing fires during a full run
DORMANT_DUE_IN = timedelta(days=2)
DORMANT_SPREAD_S = 86_400  # dormant jobs spread over a day: many shards, as real ones would be
PLATEAU_BYTES = 512 * 1024  # a warm-up round that grew RSS less than this: the plateau is reached
MAX_WARM_ROUNDS = 8


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of ``pid`` (default: this process), from /proc/<pid>/status."""
    with open(f"/proc/{pid or os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


@dataclass(frozen=True)
class Fit:
    """A least-squares line ``y = slope * x + intercept`` and how well it fits (R², 1 = exactly)."""

    slope: float
    intercept: float
    r2: float


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> Fit:
    """The least-squares line through ``(xs, ys)``; needs two or more distinct ``xs``."""
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys: must have the same length (got {len(xs)} and {len(ys)})")
    n = len(xs)
    mx, my = sum(xs) / max(n, 1), sum(ys) / max(n, 1)
    sxx = sum((x - mx) ** 2 for x in xs)
    if n < 2 or sxx == 0:
        raise ValueError(f"xs: need two or more distinct values (got {list(xs)})")
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    slope = sxy / sxx
    intercept = my - slope * mx
    ss_tot = sum((y - my) ** 2 for y in ys)
    ss_res = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
    return Fit(slope, intercept, 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0)


# -- run inside the silo, through Ray's __ray_call__ (the first argument is the silo) ---------------


def _collected_rss(_silo: object) -> int:
    """Collect every generation, then the process's RSS."""
    gc.collect()
    return rss_bytes()


def _census(_silo: object) -> dict[str, Any]:
    """Objects the collector tracks (and their bytes) and pymalloc blocks in use, after a collection."""
    gc.collect()
    objects = gc.get_objects()
    by_type = Counter(type(o).__name__ for o in objects)
    size = sum(map(sys.getsizeof, objects))
    count = len(objects)
    del objects
    return {"objects": count, "object_bytes": size, "blocks": sys.getallocatedblocks(),
            "top_types": dict(by_type.most_common(12))}


# -- the measurement ----------------------------------------------------------------------------


async def schedule_count(client: Client, start: int, stop: int, due_of: Callable[[int], datetime]) -> float:
    """Schedule jobs ``start`` .. ``stop - 1`` at ``due_of(i)`` for a target that never runs; returns seconds."""
    return await schedule_range(client, start, stop, lambda i: {"target": _TARGET, "due": due_of(i)})


def _per_job(points: Sequence[dict[str, Any]], key: str) -> float:
    return fit_line([p["jobs"] for p in points], [p[key] for p in points]).slope


async def measure(env: BenchEnv, kind: str, sizes: Sequence[int], due_of: Callable[[int], datetime],
                  warm_of: Callable[[int], datetime], options: ClusterOptions, warm_round: int, label: str,
                  report: Report) -> dict[str, Any]:
    """Warm up to a plateau, then RSS (after a collection) and a census at every size; the slope.

    Warm-up jobs are due at ``warm_of(i)``: dormant ones, spread like the dormant jobs measured,
    so the shards those open are open before the first size (their cost is fixed, not per job).
    """
    sizes = sorted(sizes)
    with running_cluster(env, kind, 1, options) as cluster:
        client = cluster.client()
        handle = cluster.silos[0]
        pid = silo_pid(cluster, cluster.silo_ids[0])
        warm: list[int] = [await handle.__ray_call__.remote(_collected_rss)]
        for r in range(MAX_WARM_ROUNDS):
            await schedule_count(client, r * warm_round, (r + 1) * warm_round, warm_of)
            warm.append(await handle.__ray_call__.remote(_collected_rss))
            if r >= 1 and warm[-1] - warm[-2] < PLATEAU_BYTES:
                break
        report.progress(f"memory {label}: plateau after {len(warm) - 1} warm-up rounds of {warm_round:,} "
                        f"jobs, RSS {warm[-1] / 2**20:,.1f} MiB")
        points: list[dict[str, Any]] = []
        scheduled_s = 0.0
        done = 0
        for n in sizes:
            scheduled_s += await schedule_count(client, done, n, due_of)
            done = n
            rss = await handle.__ray_call__.remote(_collected_rss)
            census = await handle.__ray_call__.remote(_census)
            points.append({"jobs": n, "rss": rss, **census})
            report.progress(f"memory {label}: {n:,} jobs, RSS {rss / 2**20:,.1f} MiB, "
                            f"{census['objects']:,} tracked objects, {census['blocks']:,} blocks "
                            f"({rate(n, scheduled_s):,.0f} jobs/s scheduled)")
        assert silo_pid(cluster, cluster.silo_ids[0]) == pid, "the silo restarted during the measurement"
    fit = fit_line([p["jobs"] for p in points], [p["rss"] for p in points])
    return {
        "store": kind, "sizes": list(sizes), "jobs": sizes[-1], "warm_round": warm_round, "warm_rss": warm,
        "points": points, "fit": asdict(fit),
        "bytes_per_job": fit.slope, "intercept_mb": fit.intercept / 2**20, "r2": fit.r2,
        "mb_per_million": fit.slope * 1e6 / 2**20,
        # The fitted RSS of a silo holding no jobs of this kind (what sizing starts from).
        "rss_before": fit.intercept,
        "objects_per_job": _per_job(points, "objects"), "blocks_per_job": _per_job(points, "blocks"),
        "object_bytes_per_job": _per_job(points, "object_bytes"),
        "schedule_per_s": rate(sizes[-1], scheduled_s),
    }


async def run(env: BenchEnv, kind: str, quick: bool, report: Report, *, dormant_sizes: Sequence[int] | None = None,
              loaded_sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """Dormant and loaded slopes, each in its own silo over ``kind``."""
    dormant_sizes = dormant_sizes or (QUICK_DORMANT_SIZES if quick else DORMANT_SIZES)
    loaded_sizes = loaded_sizes or (QUICK_LOADED_SIZES if quick else LOADED_SIZES)
    warm_round = 2_000 if quick else 20_000
    now = datetime.now(timezone.utc)
    dormant_base = now + DORMANT_DUE_IN
    step_us = DORMANT_SPREAD_S * 1_000_000 // max(dormant_sizes)

    def dormant_due(i: int) -> datetime:
        return dormant_base + timedelta(microseconds=i % max(dormant_sizes) * step_us)

    def warm_due(i: int) -> datetime:  # scattered over the dormant jobs' whole day: every shard opened
        return dormant_due(i * 7_919)

    report.progress(f"memory ({kind}): dormant jobs (due in 2 days, beyond the lookahead) at "
                    f"{', '.join(f'{n:,}' for n in sorted(dormant_sizes))}")
    dormant = await measure(env, kind, dormant_sizes, dormant_due, warm_due, ClusterOptions(), warm_round,
                            "dormant", report)
    loaded_base = datetime.now(timezone.utc) + LOADED_DUE_IN  # from now: the dormant part may have taken minutes
    report.progress(f"memory ({kind}): loaded jobs (due in {LOADED_DUE_IN.seconds // 60} minutes, within a "
                    f"{LOADED_LOOKAHEAD} lookahead) at {', '.join(f'{n:,}' for n in sorted(loaded_sizes))}")
    loaded = await measure(env, kind, loaded_sizes, lambda i: loaded_base + timedelta(microseconds=i), warm_due,
                           ClusterOptions(lookahead=LOADED_LOOKAHEAD), warm_round, "loaded", report)
    return {"store": kind, "quick": quick, "dormant": dormant, "loaded": loaded}


def summary(name: str, m: dict[str, Any]) -> str:
    """One line: slope, intercept and R², beside the census slopes that cross-check it."""
    return (f"{name}: {m['bytes_per_job']:,.1f} B/job RSS slope over {m['sizes'][0]:,}–{m['jobs']:,} jobs "
            f"(R² {m['r2']:.3f}), intercept {m['intercept_mb']:,.1f} MiB; census per job: "
            f"{_tiny(m['objects_per_job']):.2f} tracked objects, {_tiny(m['object_bytes_per_job'], 0):,.0f} B in "
            f"them, {_tiny(m['blocks_per_job']):.2f} pymalloc blocks")


def _tiny(value: float, digits: int = 2) -> float:
    return 0.0 if round(value, digits) == 0 else value  # printed without a "-0.00"


def goals(result: dict[str, Any], report: Report) -> None:
    report.goal("dormant jobs: silo RSS slope, bytes per job", result["dormant"]["bytes_per_job"],
                GOAL_DORMANT_BYTES_PER_JOB, higher_is_better=False)
    report.goal("loaded jobs: silo RSS slope, bytes per job", result["loaded"]["bytes_per_job"], GOAL_LOADED_BYTES_PER_JOB,
                higher_is_better=False)


def draw(report: Report, result: dict[str, Any], suffix: str = "") -> None:
    """RSS (MiB) against jobs, measured points and the fitted line, one panel per kind."""
    panels = []
    for name in ("dormant", "loaded"):
        m = result[name]
        xs = [p["jobs"] for p in m["points"]]
        series = {
            "RSS after gc (measured)": [(x, p["rss"] / 2**20) for x, p in zip(xs, m["points"], strict=True)],
            f"fit: {m['bytes_per_job']:,.1f} B/job + {m['intercept_mb']:,.0f} MiB (R² {m['r2']:.3f})":
                [(x, (m["fit"]["slope"] * x + m["fit"]["intercept"]) / 2**20) for x in (0, *xs)],
        }
        goal = GOAL_DORMANT_BYTES_PER_JOB if name == "dormant" else GOAL_LOADED_BYTES_PER_JOB
        series[f"goal slope {goal} B/job"] = [(x, (goal * x + m["fit"]["intercept"]) / 2**20) for x in (0, xs[-1])]
        panels.append((f"{name} jobs ({m['store']})", series))
    report.lines("silo RSS after a collection against jobs held" + (" (quick: indicative)" if result.get("quick") else ""),
                 panels, xlabel="jobs", ylabel="MiB", suffix=suffix or "slope", log=False)


def sizes_arg(text: str) -> tuple[int, ...]:
    sizes = tuple(sorted(int(float(s)) for s in text.split(",") if s))
    if len(sizes) < 2 or len(set(sizes)) != len(sizes) or sizes[0] <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: two or more distinct positive job counts, comma-separated")
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tens of thousands of jobs: indicative only")
    parser.add_argument("--store", default="file", choices=["file", "azure"])
    parser.add_argument("--dormant", type=sizes_arg, default=None, help="dormant sizes (default 1M,2.5M,5M,7.5M,10M)")
    parser.add_argument("--loaded", type=sizes_arg, default=None, help="loaded sizes (default 100k,250k,500k,750k,1M)")
    add_publish_flag(parser)
    args = parser.parse_args(argv)
    report = report_for("memory", parser, args)

    async def go() -> dict[str, Any]:
        with bench_env([args.store]) as env:
            return await run(env, args.store, args.quick, report, dormant_sizes=args.dormant, loaded_sizes=args.loaded)

    result = asyncio.run(go())
    report.table(["jobs", "sizes", "B/job (slope)", "intercept MiB", "R²", "objects/job", "blocks/job"], [
        [name, f"{r['sizes'][0]:,}–{r['jobs']:,}", f"{r['bytes_per_job']:,.1f}", f"{r['intercept_mb']:,.1f}",
         f"{r['r2']:.3f}", f"{r['objects_per_job']:.2f}", f"{r['blocks_per_job']:.2f}"]
        for name, r in (("dormant", result["dormant"]), ("loaded", result["loaded"]))])
    for name in ("dormant", "loaded"):
        print(summary(name, result[name]))
    goals(result, report)
    draw(report, result)
    report.data.update({"machine": machine_info(), "results": result})
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
