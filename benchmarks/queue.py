"""Benchmark of the silo's timer queue: enqueue then drain N jobs.

    python -m benchmarks.queue [--jobs 1000000] [--quick]

Prints enqueue, drain and pair rates and the bytes each queued job costs the queue (tracemalloc,
items allocated before measuring so only the queue's own structures count), side by side with a
bare ``heapq`` of the same tuples — the floor any Python priority queue pays — and writes
benchmarks/results/queue.json and queue.png.
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import time
import tracemalloc
from collections.abc import Callable

from benchmarks.report import Report, machine_info
from cluster.runtime.queue import JobQueue

GOAL_PAIRS_PER_S = 300_000
GOAL_BYTES_PER_JOB = 300


def _workload(n: int, seed: int = 7) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    base = 1_800_000_000_000_000
    keys = [f"{i:032x}" for i in range(n)]  # uuid4().hex-sized ids, as jobs carry
    dues = [base + rng.randrange(3_600_000_000) for _ in range(n)]
    return keys, dues


def _bytes_per_job(build: Callable[[], object], n: int) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = build()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return (after - before) / n


def measure_timeshard(keys: list[str], dues: list[int]) -> dict[str, float]:
    n = len(keys)
    q: JobQueue[str] = JobQueue()
    push = q.push
    t0 = time.perf_counter()
    for key, due in zip(keys, dues, strict=True):
        push(key, due, key)
    t1 = time.perf_counter()
    drained = q.pop_due(now=max(dues))
    t2 = time.perf_counter()
    assert len(drained) == n and len(q) == 0

    def build() -> JobQueue[str]:
        q2: JobQueue[str] = JobQueue()
        for key, due in zip(keys, dues, strict=True):
            q2.push(key, due, key)
        return q2

    return {
        "enqueue_per_s": n / (t1 - t0),
        "drain_per_s": n / (t2 - t1),
        "pairs_per_s": n / (t2 - t0),
        "bytes_per_job": _bytes_per_job(build, n),
    }


def measure_bare_heapq(keys: list[str], dues: list[int]) -> dict[str, float]:
    """The floor: heapq of (due, key) with no cancel index and no wake-up."""
    n = len(keys)
    heap: list[tuple[int, str]] = []
    push, pop = heapq.heappush, heapq.heappop
    t0 = time.perf_counter()
    for key, due in zip(keys, dues, strict=True):
        push(heap, (due, key))
    t1 = time.perf_counter()
    out = [pop(heap) for _ in range(n)]
    t2 = time.perf_counter()
    assert len(out) == n

    def build() -> list[tuple[int, str]]:
        h: list[tuple[int, str]] = []
        for key, due in zip(keys, dues, strict=True):
            push(h, (due, key))
        return h

    return {
        "enqueue_per_s": n / (t1 - t0),
        "drain_per_s": n / (t2 - t1),
        "pairs_per_s": n / (t2 - t0),
        "bytes_per_job": _bytes_per_job(build, n),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.queue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs to enqueue and drain (default 1,000,000)")
    parser.add_argument("--quick", action="store_true", help="100,000 jobs, for the test suite")
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else args.jobs

    report = Report("queue", quick=args.quick)
    report.progress(f"building a workload of {n:,} jobs")
    keys, dues = _workload(n)
    report.progress("timeshard JobQueue: enqueue, drain, tracemalloc")
    ours = measure_timeshard(keys, dues)
    report.progress("bare heapq baseline")
    floor = measure_bare_heapq(keys, dues)

    report.data.update({"jobs": n, "timeshard": ours, "bare_heapq": floor, "machine": machine_info()})
    report.goal("pairs_per_s", ours["pairs_per_s"], GOAL_PAIRS_PER_S, higher_is_better=True)
    report.goal("bytes_per_job", ours["bytes_per_job"], GOAL_BYTES_PER_JOB, higher_is_better=False)
    rows = [
        (name, f"{r['enqueue_per_s']:,.0f}", f"{r['drain_per_s']:,.0f}", f"{r['pairs_per_s']:,.0f}", f"{r['bytes_per_job']:.0f}")
        for name, r in (("timeshard JobQueue", ours), ("bare heapq (floor)", floor))
    ]
    report.table(["queue", "enqueue/s", "drain/s", "pairs/s", "bytes/job"], rows)
    report.bars(
        f"Timer queue: enqueue + drain of {n:,} jobs",
        panels=[
            ("pairs/s (higher is better)", {"timeshard": ours["pairs_per_s"], "bare heapq": floor["pairs_per_s"]}, GOAL_PAIRS_PER_S),
            ("bytes per queued job (lower is better)", {"timeshard": ours["bytes_per_job"], "bare heapq": floor["bytes_per_job"]}, GOAL_BYTES_PER_JOB),
        ],
    )
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
