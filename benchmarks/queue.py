"""Benchmark of the silo's timer queue: enqueue then drain N jobs, and a thundering herd.

    python -m benchmarks.queue [--jobs 1000000] [--herd 60000,250000,1000000] [--quick]

1. Enqueue and drain: N jobs spread over an hour, pushed then drained. Prints enqueue, drain and
   pair rates and the bytes each queued job costs the queue (tracemalloc, items allocated before
   measuring so only the queue's own structures count), side by side with the queue before issue
   15 and a bare ``heapq`` of the same tuples — the floor any Python priority queue pays.
2. Thundering herd: N jobs due at one instant, or within one second, pushed while the head is
   peeked and popped — 1,000 pushes, ``next_due``, ``pop_due(limit=5)``, again, as a silo loading
   a shard while its fire loop runs — then drained 500 at a time (the fire loop's ``max_batch``).
   Reports µs per job for the push phase and for the drain, the p99 and max latency of the
   ``next_due``/``pop_due`` calls, and the queue's bytes per job, for today's queue and the queue
   before issue 15 (``benchmarks.queue_before``) in the same run; "bulk" rows push everything
   before the first look, the most favourable order, as a floor. The garbage collector is off
   while timing (the queue's tuples hold no cycles); the baseline's push phase stops after
   ``--baseline-budget`` seconds and then reports a lower bound.

Writes queue.json, queue.png and queue-herd.png (where: ``benchmarks.report``; into benchmarks/results/ with ``--publish``).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from benchmarks.queue_before import ResortingJobQueue
from benchmarks.report import Report, add_publish_flag, machine_info, percentiles, report_for
from cluster.runtime.queue import JobQueue

GOAL_PAIRS_PER_S = 300_000
GOAL_BYTES_PER_JOB = 300
# No quadratic step: a job in a herd of the largest size costs at most this many times what it
# costs in the smallest (sorting alone grows ~1.5x from 60k to 1M here, as the CPU caches miss).
GOAL_HERD_GROWTH = 2.0

HERD_SIZES = (60_000, 250_000, 1_000_000)
QUICK_HERD_SIZES = (5_000, 20_000)
HERD_SHAPES = {"one instant": 0, "one second": 1_000_000}  # spread of the due times (µs)
PUSH_BATCH = 1_000  # pushes between two looks at the head
POPS_PER_LOOK = 5
DRAIN_LIMIT = 500  # ClusterOptions.max_batch's default
BASE_US = 1_800_000_000_000_000


class _Queue(Protocol):
    def push(self, key: str, due: int, item: str) -> None: ...
    def next_due(self) -> int | None: ...
    def pop_due(self, now: int | None = None, limit: int | None = None) -> list[tuple[int, str, str]]: ...
    def __len__(self) -> int: ...


QueueFactory = Callable[..., _Queue]
QUEUES: dict[str, QueueFactory] = {"timeshard JobQueue": JobQueue, "before issue 15": ResortingJobQueue}


def _workload(n: int, seed: int = 7) -> tuple[list[str], list[int]]:
    rng = random.Random(seed)
    keys = [f"{i:032x}" for i in range(n)]  # uuid4().hex-sized ids, as jobs carry
    dues = [BASE_US + rng.randrange(3_600_000_000) for _ in range(n)]
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


def measure_queue(factory: QueueFactory, keys: list[str], dues: list[int]) -> dict[str, float]:
    n = len(keys)
    q = factory()
    push = q.push
    t0 = time.perf_counter()
    for key, due in zip(keys, dues, strict=True):
        push(key, due, key)
    t1 = time.perf_counter()
    drained = q.pop_due(now=max(dues))
    t2 = time.perf_counter()
    assert len(drained) == n and len(q) == 0

    def build() -> _Queue:
        q2 = factory()
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


def herd_workload(n: int, spread_us: int, seed: int = 11) -> tuple[list[str], list[int], int]:
    """``n`` random 32-hex ids (as uuid4().hex) due within ``spread_us`` of one instant, and "now"."""
    rng = random.Random(seed)
    keys = [f"{rng.getrandbits(128):032x}" for _ in range(n)]
    dues = [BASE_US + rng.randrange(spread_us) for _ in range(n)] if spread_us else [BASE_US] * n
    return keys, dues, BASE_US + spread_us


def measure_herd(factory: QueueFactory, keys: list[str], dues: list[int], now: int, *, interleave: bool,
                 budget_s: float | None = None) -> dict[str, Any]:
    """Push the herd (looking at the head between batches if ``interleave``), then drain it all."""
    n = len(keys)
    q = factory(clock=lambda: now)
    push, next_due, pop_due = q.push, q.next_due, q.pop_due
    peeks: list[float] = []  # seconds per next_due call
    pops: list[float] = []  # seconds per pop_due call
    popped = pushed = 0
    stopped = False
    gc.collect()
    gc.disable()
    try:
        started = time.perf_counter()
        for start in range(0, n, PUSH_BATCH):
            for key, due in zip(keys[start:start + PUSH_BATCH], dues[start:start + PUSH_BATCH], strict=True):
                push(key, due, key)
            pushed = min(n, start + PUSH_BATCH)
            if interleave:
                t = time.perf_counter()
                next_due()
                t1 = time.perf_counter()
                popped += len(pop_due(now, POPS_PER_LOOK))
                t2 = time.perf_counter()
                peeks.append(t1 - t)
                pops.append(t2 - t1)
                if budget_s is not None and t2 - started > budget_s and pushed < n:
                    stopped = True
                    break
        pushing = time.perf_counter() - started
        draining = 0.0
        if not stopped:
            while True:
                t = time.perf_counter()
                batch = pop_due(now, DRAIN_LIMIT)
                elapsed = time.perf_counter() - t
                draining += elapsed
                pops.append(elapsed)
                if not batch:
                    break
                popped += len(batch)
            assert popped == n and len(q) == 0, (popped, n, len(q))
    finally:
        gc.enable()
    return {
        "jobs": n, "pushed": pushed, "stopped": stopped, "interleave": interleave,
        "push_us_per_job": pushing / pushed * 1e6,
        "drain_us_per_job": None if stopped else draining / n * 1e6,
        "total_us_per_job": None if stopped else (pushing + draining) / n * 1e6,
        "seconds": pushing + draining,
        # What the fire loop waits on: each look at the head, each batch taken (up to 500 jobs).
        "next_due_us": percentiles([t * 1e6 for t in peeks]),
        "pop_due_us": percentiles([t * 1e6 for t in pops]),
    }


def herd_bytes_per_job(factory: QueueFactory, keys: list[str], dues: list[int], now: int) -> float:
    """The queue's own bytes per job after an interleaved push phase (items allocated before)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    q = factory(clock=lambda: now)
    for start in range(0, len(keys), PUSH_BATCH):
        for key, due in zip(keys[start:start + PUSH_BATCH], dues[start:start + PUSH_BATCH], strict=True):
            q.push(key, due, key)
        q.next_due()
        q.pop_due(now, POPS_PER_LOOK)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    held = len(q)
    del q
    return (after - before) / held


def run_herd(sizes: Sequence[int], budget_s: float, report: Report) -> dict[str, Any]:
    """Every shape and size, each queue interleaved and in bulk, in one run."""
    results: dict[str, Any] = {"sizes": list(sizes), "push_batch": PUSH_BATCH, "pops_per_look": POPS_PER_LOOK,
                               "drain_limit": DRAIN_LIMIT, "baseline_budget_s": budget_s, "shapes": {}}
    for shape, spread in HERD_SHAPES.items():
        per_shape: dict[str, Any] = {}
        results["shapes"][shape] = per_shape
        for n in sizes:
            keys, dues, now = herd_workload(n, spread)
            rows: dict[str, Any] = {}
            per_shape[str(n)] = rows
            for name, factory in QUEUES.items():
                for interleave in (True, False):
                    pattern = "interleaved" if interleave else "bulk"
                    report.progress(f"herd {shape}, {n:,} jobs: {name}, {pattern}")
                    budget = budget_s if factory is ResortingJobQueue else None
                    rows[f"{name}, {pattern}"] = measure_herd(factory, keys, dues, now, interleave=interleave,
                                                              budget_s=budget)
    keys, dues, now = herd_workload(sizes[0], 0)
    results["bytes_per_job"] = {}
    for name, factory in QUEUES.items():
        report.progress(f"herd memory, {sizes[0]:,} jobs: {name} (tracemalloc)")
        results["bytes_per_job"][name] = herd_bytes_per_job(factory, keys, dues, now)
    ours = results["shapes"]["one instant"]
    first, last = ours[str(sizes[0])], ours[str(sizes[-1])]
    results["growth"] = (last["timeshard JobQueue, interleaved"]["total_us_per_job"]
                         / first["timeshard JobQueue, interleaved"]["total_us_per_job"])
    return results


def _us(value: float | None, stopped: bool = False) -> str:
    if value is None:
        return "—"
    return (">= " if stopped else "") + (f"{value:,.2f}" if value < 100 else f"{value:,.0f}")


def herd_table(herd: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["herd", "jobs", "queue, pattern", "push µs/job", "drain µs/job", "total µs/job", "next_due p99 µs",
              "pop_due p99 µs", "max call ms"]
    rows = []
    for shape, per_shape in herd["shapes"].items():
        for n, per_n in per_shape.items():
            for label, r in per_n.items():
                note = f" (stopped at {r['pushed']:,} after {r['seconds']:.0f} s)" if r["stopped"] else ""
                peek, pop = r["next_due_us"], r["pop_due_us"]
                rows.append([shape, f"{int(n):,}", label + note, _us(r["push_us_per_job"], r["stopped"]),
                             _us(r["drain_us_per_job"]), _us(r["total_us_per_job"]),
                             _us(peek["p99"]) if peek["count"] else "—", _us(pop["p99"]),
                             f"{max(peek['max'], pop['max']) / 1000:,.1f}"])
    return header, rows


def herd_chart(herd: dict[str, Any], report: Report) -> None:
    panels = []
    for shape, per_shape in herd["shapes"].items():
        series: dict[str, list[tuple[float, float]]] = {}
        for n, per_n in per_shape.items():
            for label, r in per_n.items():
                value = r["total_us_per_job"] if not r["stopped"] else r["push_us_per_job"]
                suffix = "" if not r["stopped"] else " (stopped: lower bound)"
                series.setdefault(label + suffix, []).append((int(n), value))
        panels.append((f"{shape}: µs per job, push + drain (lower is better, flat is linear)", series))
    report.lines("Thundering herd: pushes interleaved with peeks and pops of the head", panels,
                 xlabel="jobs in the herd", ylabel="µs per job", suffix="herd")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.queue", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000, help="jobs to enqueue and drain (default 1,000,000)")
    parser.add_argument("--herd", default=",".join(map(str, HERD_SIZES)),
                        help="herd sizes, comma-separated (default 60000,250000,1000000)")
    parser.add_argument("--baseline-budget", type=float, default=300.0,
                        help="seconds the queue before issue 15 may spend on one herd's pushes (default 300)")
    parser.add_argument("--quick", action="store_true", help="100,000 jobs and herds of 5,000 and 20,000, for tests")
    add_publish_flag(parser)
    args = parser.parse_args(argv)
    n = 100_000 if args.quick else args.jobs
    sizes = QUICK_HERD_SIZES if args.quick else tuple(sorted(int(s) for s in args.herd.split(",")))

    report = report_for("queue", parser, args)
    report.progress(f"building a workload of {n:,} jobs")
    keys, dues = _workload(n)
    report.progress("timeshard JobQueue: enqueue, drain, tracemalloc")
    ours = measure_queue(JobQueue, keys, dues)
    report.progress("the queue before issue 15")
    before = measure_queue(ResortingJobQueue, keys, dues)
    report.progress("bare heapq baseline")
    floor = measure_bare_heapq(keys, dues)
    del keys, dues
    herd = run_herd(sizes, args.baseline_budget, report)

    report.data.update({"jobs": n, "timeshard": ours, "before_issue_15": before, "bare_heapq": floor, "herd": herd,
                        "machine": machine_info()})
    report.goal("pairs_per_s", ours["pairs_per_s"], GOAL_PAIRS_PER_S, higher_is_better=True)
    report.goal("bytes_per_job", ours["bytes_per_job"], GOAL_BYTES_PER_JOB, higher_is_better=False)
    report.goal("herd_growth", herd["growth"], GOAL_HERD_GROWTH, higher_is_better=False)
    rows = [
        (name, f"{r['enqueue_per_s']:,.0f}", f"{r['drain_per_s']:,.0f}", f"{r['pairs_per_s']:,.0f}", f"{r['bytes_per_job']:.0f}")
        for name, r in (("timeshard JobQueue", ours), ("before issue 15", before), ("bare heapq (floor)", floor))
    ]
    report.table(["queue", "enqueue/s", "drain/s", "pairs/s", "bytes/job"], rows)
    print()
    report.table(*herd_table(herd))
    print("herd bytes per queued job (tracemalloc, interleaved, "
          f"{sizes[0]:,} jobs): " + ", ".join(f"{k} {v:.0f}" for k, v in herd["bytes_per_job"].items()))
    print(f"herd growth, one instant, {sizes[0]:,} -> {sizes[-1]:,} jobs: {herd['growth']:.2f}x per job")
    report.bars(
        f"Timer queue: enqueue + drain of {n:,} jobs",
        panels=[
            ("pairs/s (higher is better)", {"timeshard": ours["pairs_per_s"], "before issue 15": before["pairs_per_s"],
                                            "bare heapq": floor["pairs_per_s"]}, GOAL_PAIRS_PER_S),
            ("bytes per queued job (lower is better)", {"timeshard": ours["bytes_per_job"],
                                                        "before issue 15": before["bytes_per_job"],
                                                        "bare heapq": floor["bytes_per_job"]}, GOAL_BYTES_PER_JOB),
        ],
    )
    herd_chart(herd, report)
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
