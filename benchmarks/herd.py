"""Benchmark of a thundering herd through a real cluster: N jobs due at the same instant.

    python -m benchmarks.herd [--quick] [--store file|azure] [--sizes 100000,1000000]

Starts a cluster of 3 silos and 2 counting handler actors (1 and 1 with ``--quick``), schedules N jobs due at one instant
(``schedule_jobs``, 1,000 per call, all added before it comes), then waits for every
execution. Per size: throughput from the first execution to the last, lateness (handler start -
due) p50/p99/max, the firing rate over time, and the wall time per job. The largest size against
the smallest, per job, shows whether there is a quadratic step (goal: at most
``GOAL_HERD_GROWTH`` times, as for the in-process queue).

Beside it, measured in the same run: the in-process timer queue's herd of the largest size (the
same due times pushed into ``JobQueue`` 1,000 at a time between peeks and pops, then drained: the
ceiling of the silo's queue alone, ``benchmarks.queue``). Writes herd.json and
herd*.png (where: ``benchmarks.report``; into benchmarks/results/ with ``--publish``); the suite runs it as ``herd``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks.cluster import (
    BenchEnv,
    bench_env,
    handlers,
    rate,
    running_cluster,
    schedule_range,
    take_all,
    wait_count,
)
from benchmarks.queue import GOAL_HERD_GROWTH, measure_herd
from benchmarks.report import Report, add_publish_flag, machine_info, percentiles, report_for
from cluster.runtime.queue import JobQueue

SIZES = (100_000, 1_000_000)
QUICK_SIZES = (1_000, 4_000)
SILOS = 3
# Every job of a herd is due at the same instant: the hardest case of "due in the same second",
# and the one whose first-to-last time is all the cluster's work (a spread would set a floor of it).
SPREAD_US = 0
WARM_JOBS = 20_000


def spread_us(i: int) -> int:
    """Job ``i``'s offset from the herd's instant (a fixed scatter within ``SPREAD_US``, if any)."""
    return i * 7_919 % SPREAD_US if SPREAD_US else 0


def firing_rate(starts: Sequence[float], origin: float, bins: int = 40) -> list[tuple[float, float]]:
    """``(seconds after origin, jobs/s)`` per bin over the executions ``starts`` (epoch seconds)."""
    if not starts:
        return []
    first, last = min(starts), max(starts)
    width = max((last - first) / bins, 0.05)
    counts: dict[int, int] = {}
    for s in starts:
        k = int((s - first) / width)
        counts[k] = counts.get(k, 0) + 1
    return [(first - origin + (k + 0.5) * width, counts.get(k, 0) / width) for k in range(max(counts) + 1)]


def growth(per_size: dict[str, dict[str, Any]]) -> float | None:
    """Wall time per job of the largest herd over that of the smallest (1 = linear)."""
    sizes = sorted(per_size, key=int)
    if len(sizes) < 2:
        return None
    small, large = per_size[sizes[0]], per_size[sizes[-1]]
    return large["us_per_job"] / small["us_per_job"] if small["us_per_job"] else None


async def one_herd(client: Any, hs: Sequence[tuple[Any, Any]], n: int, schedule_rate: float,
                   report: Report) -> dict[str, Any]:
    """``n`` jobs due at one instant; every execution awaited."""
    await take_all(hs)
    targets = [t for t, _ in hs]
    lead = 1.0 + 1.6 * n / max(schedule_rate, 1_000)
    due = datetime.now(timezone.utc) + timedelta(seconds=lead)
    report.progress(f"herd: scheduling {n:,} jobs due at one instant, {lead:.0f} s from now")
    seconds = await schedule_range(client, 0, n, lambda i: {"target": targets[i % len(targets)],
                                                             "due": due + timedelta(microseconds=spread_us(i))})
    added = time.time()
    late_adds = max(0.0, added - due.timestamp())
    if late_adds:
        report.progress(f"herd: the last add landed {late_adds:.1f} s after the herd was due")
    ran = await wait_count(hs, n, timeout=max(0.0, due.timestamp() - time.time()) + 60 + n / 2_000)
    runs = await take_all(hs)
    starts = sorted(s for _, _, s in runs)
    spread = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    origin = due.timestamp()
    result: dict[str, Any] = {
        "jobs": n, "executed": ran, "schedule_per_s": rate(n, seconds), "late_adds_s": late_adds,
        "per_s": rate(len(starts) - 1, spread), "first_to_last_s": spread,
        "due_to_last_s": starts[-1] - origin if starts else None,
        "us_per_job": spread / max(len(starts) - 1, 1) * 1e6,
        "lateness_ms": percentiles([(s - d) * 1e3 for _, d, s in runs]),
        "rate_over_time": firing_rate(starts, origin),
    }
    del runs, starts
    late = result["lateness_ms"]
    report.progress(f"herd: {n:,} jobs ran at {result['per_s']:,.0f}/s, lateness p50 {late['p50'] / 1e3:.2f} s, "
                    f"p99 {late['p99'] / 1e3:.2f} s")
    return result


def in_process_queue(n: int) -> dict[str, Any]:
    """The silo's timer queue alone, in this process: the herd of ``n`` pushed, peeked and drained."""
    rng = random.Random(11)
    keys = [f"{rng.getrandbits(128):032x}" for _ in range(n)]
    base = 1_800_000_000_000_000
    dues = [base + spread_us(i) for i in range(n)]
    r = measure_herd(JobQueue, keys, dues, base + SPREAD_US, interleave=True)
    return {"jobs": n, "us_per_job": r["total_us_per_job"], "per_s": 1e6 / r["total_us_per_job"]}


async def run(env: BenchEnv, kind: str, quick: bool, report: Report, sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """Every herd size on one cluster over ``kind``, and the in-process queue beside the largest."""
    sizes = sorted(sizes or (QUICK_SIZES if quick else SIZES))
    report.progress(f"herd: in-process timer queue, {sizes[-1]:,} jobs due at one instant")
    queue = in_process_queue(sizes[-1])
    # Quick: one silo and one handler, so that a test run starts two actors rather than five.
    silos, handler_count = (1, 1) if quick else (SILOS, 2)
    result: dict[str, Any] = {"store": kind, "silos": silos, "handlers": handler_count, "sizes": sizes, "queue": queue,
                              "herds": {}}
    with running_cluster(env, kind, silos) as cluster, handlers(handler_count) as hs:
        client = cluster.client()
        far = datetime.now(timezone.utc) + timedelta(days=2)
        warm = 2_000 if quick else WARM_JOBS
        seconds = await schedule_range(client, 0, warm, lambda i: {"target": hs[0][0], "due": far})
        result["warm_schedule_per_s"] = rate(warm, seconds)
        for n in sizes:
            result["herds"][str(n)] = await one_herd(client, hs, n, result["warm_schedule_per_s"], report)
    result["growth"] = growth(result["herds"])
    largest = result["herds"][str(sizes[-1])]
    result.update({"jobs": sizes[-1], "per_s": largest["per_s"], "lateness_ms": largest["lateness_ms"]})
    return result


def draw(report: Report, herd: dict[str, Any], suffix: str = "rate") -> None:
    """Firing rate over time per size, and the throughput beside the in-process queue's."""
    series = {f"{int(n):,} jobs": [(t, r) for t, r in h["rate_over_time"]] for n, h in herd["herds"].items()}
    report.lines(f"thundering herd through {herd['silos']} silos ({herd['store']}): executions per second",
                 [("jobs/s against seconds after the due instant", series)],
                 xlabel="seconds after due", ylabel="jobs/s", suffix=suffix, log=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.herd", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"herds of {QUICK_SIZES[0]:,} and {QUICK_SIZES[1]:,}")
    parser.add_argument("--store", default="file", choices=["file", "azure"])
    parser.add_argument("--sizes", default=None, type=lambda s: [int(float(x)) for x in s.split(",")],
                        help="herd sizes, comma-separated (default 100000,1000000)")
    add_publish_flag(parser)
    args = parser.parse_args(argv)
    report = report_for("herd", parser, args)

    async def go() -> dict[str, Any]:
        with bench_env([args.store]) as env:
            return await run(env, args.store, args.quick, report, args.sizes)

    herd = asyncio.run(go())
    report.table(["jobs", "jobs/s", "µs/job", "late p50 s", "p99 s", "max s", "scheduled/s"], [
        [f"{int(n):,}", f"{h['per_s']:,.0f}", f"{h['us_per_job']:,.1f}", f"{h['lateness_ms']['p50'] / 1e3:.2f}",
         f"{h['lateness_ms']['p99'] / 1e3:.2f}", f"{h['lateness_ms']['max'] / 1e3:.2f}", f"{h['schedule_per_s']:,.0f}"]
        for n, h in herd["herds"].items()])
    print(f"in-process JobQueue, {herd['queue']['jobs']:,} jobs: {herd['queue']['per_s']:,.0f} jobs/s")
    if herd["growth"] is not None:
        report.goal("herd: µs per job, largest over smallest", herd["growth"], GOAL_HERD_GROWTH, higher_is_better=False)
    draw(report, herd)
    report.data.update({"machine": machine_info(), "results": herd})
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
