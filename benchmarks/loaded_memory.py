"""In-process benchmark of a loaded shard's memory per job, and of replay speed.

    python -m benchmarks.loaded_memory [--sizes 100000,250000,500000,1000000] [--json PATH]

No Ray, no silo: for each size a fresh subprocess writes a shard log of N realistic ADD
records (packed ``ScheduledJob``s to one actor target, 32-hex ids) into an in-memory store,
reads and folds it as ``Shard.load`` does, and queues the live jobs into a ``JobQueue`` as
``Loading.queue_loaded`` does. What the folded state and the queue hold is measured after a
collection, with the encoded log still held (so it is in the baseline, not the slope):

- ``traced``: bytes tracemalloc sees allocated (a second fold and queue, traced);
- ``rss``: growth of the resident set over the same step (the allocator's view);
- ``replay_records_per_s``: read + fold of the log, untraced, best of two.

The per-job figure is the least-squares slope over the sizes; the intercept is reported apart.
``breakdown`` cross-checks the slope against ``sys.getsizeof`` sums of what the state holds.
``--path written`` measures jobs scheduled into a shard that is already loaded instead (each
applied and queued alone, as a silo does for a window within the lookahead); no replay then.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

GOAL_BYTES_PER_JOB = 150


def rss_bytes() -> int:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def least_squares(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(slope, intercept) of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def _records(n: int) -> list[list[Any]]:
    """N ADD records of distinct realistic jobs, due within the next hour."""
    from cluster.model.jobs import ScheduledJob, Target, new_job_id
    from cluster.model.wire import datetime_to_us, pack
    from cluster.runtime.shardlog import add_op

    now = datetime.now(timezone.utc)
    template = ScheduledJob.create(Target.actor("bench-memory-target", "bench"), due=now + timedelta(minutes=5), now=now)
    wire = template.to_wire()
    base = datetime_to_us(template.due)
    ops = []
    for i in range(n):
        job_id = new_job_id()
        wire[1], wire[4] = job_id, base + i
        ops.append(add_op(job_id, base + i, pack(wire)))
    return ops


class _Owner:
    """Stands for the in-memory shard an entry belongs to."""

    unreadable: dict[str, str] = {}
    lost = False


def _queue_loaded(queue: Any, state: Any) -> None:
    """Queue every live job as ``Loading.queue_loaded`` does for a healthy shard."""
    from array import array
    from operator import itemgetter

    from cluster.runtime.shardlog import DUE, QUEUED

    live = state.live
    keys, dues, entries = [], array("q"), []
    for job_id, entry in live.items():
        keys.append(job_id)
        dues.append(entry[DUE])
        entries.append(entry)
    queue.push_bulk(keys, dues, entries, live.get, itemgetter(DUE), owner=state.owner, slot=QUEUED)


async def _fold(store: Any) -> tuple[Any, Any, float]:
    from cluster.runtime.queue import JobQueue
    from cluster.runtime.shardlog import ShardState
    from storage import read_log

    started = time.perf_counter()
    decoded = (await read_log(store, "shards/x")).decoded
    state = ShardState(owner=_Owner()).replay_log(decoded)
    seconds = time.perf_counter() - started
    del decoded
    queue: Any = JobQueue(clock=lambda: 0)
    _queue_loaded(queue, state)
    return state, queue, seconds


def breakdown(state: Any, queue: Any) -> dict[str, float]:
    """Bytes per job by kind of object, from ``sys.getsizeof`` of what the state and queue hold."""
    seen: set[int] = set()
    sizes: dict[str, int] = {}

    def count(kind: str, obj: Any) -> None:
        if id(obj) in seen:
            return
        seen.add(id(obj))
        sizes[kind] = sizes.get(kind, 0) + sys.getsizeof(obj)

    live = state.live
    count("state.live dict", live)
    for job_id, entry in live.items():
        count("id str", job_id)
        if type(entry) is list:
            count("entry list", entry)
            for value in entry:
                if type(value) is int and not -5 <= value <= 256:
                    count("entry ints", value)
                elif type(value) is bytes:
                    count("packed job bytes", value)
    for name in getattr(queue, "__slots__", ()):
        value = getattr(queue, name, None)
        if isinstance(value, dict):
            count(f"queue.{name} dict", value)
            for v in value.values():
                if isinstance(v, tuple):
                    count("queue tuples", v)
                elif isinstance(v, list):
                    count(f"queue.{name} lists", v)
    for *_, bulk in getattr(queue, "_bulks", ()):
        count("queue bulk columns", bulk.keys)
        count("queue bulk columns", bulk.items)
        count("queue bulk columns", bulk.dues)
        count("queue bulk columns", bulk)
    for arrivals in getattr(queue, "_arrivals", {}).values():
        for item in arrivals:
            if isinstance(item, tuple):
                count("queue tuples", item)
    n = max(1, len(live))
    return {kind: size / n for kind, size in sorted(sizes.items(), key=lambda kv: -kv[1])}


def _written(ops: list[list[Any]]) -> tuple[Any, Any]:
    """Jobs scheduled into a shard already loaded, in calls of 1,000: applied as ``Shard.write``
    does, and queued as ``Scheduling._queue_new`` does (a bulk per call)."""
    from array import array
    from operator import itemgetter

    from cluster.runtime.queue import JobQueue
    from cluster.runtime.shardlog import DUE, QUEUED, ShardState

    state = ShardState(owner=_Owner())
    queue: Any = JobQueue(clock=lambda: 0)
    for start in range(0, len(ops), 1_000):
        chunk = ops[start:start + 1_000]
        touched, _ = state.apply_undoably(chunk)
        entries = [entry for entry in touched if entry is not None]  # an ADD always makes one
        queue.push_bulk([op[1] for op in chunk], array("q", [entry[DUE] for entry in entries]), entries,
                        state.live.get, itemgetter(DUE), owner=state.owner, slot=QUEUED, disjoint_only=True)
    return state, queue


def _measure_written(n: int) -> dict[str, Any]:
    _written(_records(1_000))  # warm-up: imports, caches
    gc.collect()
    rss_before = rss_bytes()
    state, queue = _written(_records(n))  # as received from clients: every id, packed job and time new
    gc.collect()
    rss = rss_bytes() - rss_before
    parts = breakdown(state, queue)
    del state, queue
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    state, queue = _written(_records(n))
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return {"jobs": n, "traced": traced, "rss": rss, "replay_seconds": 0.0, "replay_records_per_s": 0.0,
            "breakdown": parts}


async def _measure(n: int) -> dict[str, Any]:
    from storage import LogWriter
    from storage.memory import MemoryStore

    store = MemoryStore()
    writer = await LogWriter.create(store, "shards/x", {})
    ops = _records(n)
    for start in range(0, n, 20_000):
        await writer.append_many(ops[start:start + 20_000])
    del ops
    best = float("inf")
    for _ in range(2):  # warm-up fold, then the measured ones
        state, queue, seconds = await _fold(store)
        best = min(best, seconds)
        del state, queue
    gc.collect()
    rss_before = rss_bytes()
    state, queue, seconds = await _fold(store)
    best = min(best, seconds)
    gc.collect()
    rss_after = rss_bytes()
    parts = breakdown(state, queue)
    del state, queue
    gc.collect()
    tracemalloc.start()
    state, queue, _ = await _fold(store)
    gc.collect()
    traced, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(queue) == n
    return {"jobs": n, "traced": traced, "rss": rss_after - rss_before, "replay_seconds": best,
            "replay_records_per_s": n / best, "breakdown": parts}


def run(sizes: Sequence[int], path: str = "loaded") -> dict[str, Any]:
    points = []
    for n in sizes:
        out = subprocess.run([sys.executable, "-m", "benchmarks.loaded_memory", "--one", str(n), "--path", path],
                             check=True, capture_output=True, text=True)
        point = json.loads(out.stdout)
        points.append(point)
        print(f"{n:>9,} jobs: traced {point['traced'] / n:7.1f} B/job, rss {point['rss'] / n:7.1f} B/job, "
              f"replay {point['replay_records_per_s']:,.0f} records/s", file=sys.stderr)
    xs = [p["jobs"] for p in points]
    result: dict[str, Any] = {"points": points}
    for key in ("traced", "rss"):
        slope, intercept = least_squares(xs, [p[key] for p in points])
        result[key] = {"bytes_per_job": slope, "intercept_bytes": intercept}
    result["breakdown"] = points[-1]["breakdown"]
    result["goal_bytes_per_job"] = GOAL_BYTES_PER_JOB
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.loaded_memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,250000,500000,1000000")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process
    parser.add_argument("--path", choices=["loaded", "written"], default="loaded",
                        help="loaded: a dormant shard's log replayed and queued (default); written: jobs "
                             "scheduled into a shard already loaded, each queued alone")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args(argv)
    if args.one:
        point = asyncio.run(_measure(args.one)) if args.path == "loaded" else _measure_written(args.one)
        print(json.dumps(point))
        return 0
    result = run([int(s) for s in args.sizes.split(",")], args.path)
    for key in ("traced", "rss"):
        print(f"{key}: slope {result[key]['bytes_per_job']:.1f} B/job, intercept "
              f"{result[key]['intercept_bytes'] / 2**20:.2f} MiB")
    print("breakdown (sys.getsizeof, B/job at the largest size):")
    for kind, size in result["breakdown"].items():
        print(f"  {kind:<28} {size:7.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
