"""Registry buckets handed over to a joining silo, with puts racing it (issue 25 point 5).

In-process silos (``tests.named.bucket_cluster``: the runtime's roles with the named-jobs hooks,
no Ray): silo ``a`` takes every registry bucket and ``--names`` names; ``b`` joins; once ``a``'s
buckets settled (``SETTLE_ROUNDS`` adoption intervals, on the harness's manual clock) ``a``'s
maintenance round hands its excess over while ``--callers`` callers overwrite names throughout.
Prints JSON: the placement before and after, how long the release took and when the joiner held
its share (from the round's start), and the puts' errors and latencies over the whole run.

    python -m benchmarks.named_handover --store memory,file --names 10000 --callers 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from cluster.named.bucket import BUCKETS
from cluster.runtime.logowner import SETTLE_ROUNDS
from cluster.runtime.membership import parse_owner
from storage import list_logs
from tests.named.bucket_cluster import BUCKET_OPTIONS, TARGET, Cluster

DUE = "24h"  # nothing fires during the run
AFTER_S = 0.5  # puts before and after the hand-over


async def placement(c: Cluster) -> list[int]:
    """How many buckets each owner's log names it, most first."""
    owners = Counter((parse_owner(h.metadata.get("owner", "")) or ("nobody",))[0]
                     for h in await list_logs(c.store, "registry/"))
    return sorted(owners.values(), reverse=True)


async def run(kind: str, names: int, callers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        c = await Cluster.start(kind, Path(tmp), ("a",))
        jobs = c.jobs()
        for first in range(0, names, 1000):
            await jobs.put_many([{"name": f"n{i:07d}", "target": TARGET, "due_time": DUE}
                                 for i in range(first, min(names, first + 1000))])
        await c.add("b")
        await c.maintain()
        result: dict[str, Any] = {"store": kind, "names": names, "callers": callers,
                                  "placement_at_join": await placement(c)}
        c.clock.advance(SETTLE_ROUNDS * BUCKET_OPTIONS.adoption_interval.total_seconds())
        for parts in c.parts.values():
            parts.lease.renew(parts.clock.monotonic())
        latencies: list[float] = []
        errors: Counter[str] = Counter()
        stop = asyncio.Event()

        async def caller(k: int) -> None:
            i = k
            while not stop.is_set():
                began = time.perf_counter()
                try:
                    await jobs.put(f"n{i % names:07d}", target=TARGET, due_time=DUE, overwrite=True)
                except Exception as exc:
                    errors[type(exc).__name__] += 1
                latencies.append(time.perf_counter() - began)
                i += callers

        running = [asyncio.create_task(caller(k)) for k in range(callers)]
        await asyncio.sleep(AFTER_S)
        began = time.perf_counter()
        await c.hooks["a"].maintain()
        handing = c.hooks["a"]._handing
        result["released"] = 0 if handing is None else await handing
        result["released_ms"] = round((time.perf_counter() - began) * 1000, 1)
        b = c.hooks["b"].buckets
        assert b is not None
        while len(b.held) < BUCKETS // 2:  # noqa: ASYNC110 (polled: nothing signals a take)
            await asyncio.sleep(0.001)
        result["joiner_held_its_share_ms"] = round((time.perf_counter() - began) * 1000, 1)
        await asyncio.sleep(AFTER_S)
        stop.set()
        await asyncio.gather(*running)
        result["placement_after"] = await placement(c)
        q = statistics.quantiles(latencies, n=100)
        result["puts"] = {"count": len(latencies), "errors": dict(errors), "p50_ms": round(q[49] * 1000, 1),
                          "p99_ms": round(q[98] * 1000, 1), "max_ms": round(max(latencies) * 1000, 1)}
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory,file", help="memory, file, or both (comma list)")
    parser.add_argument("--names", type=int, default=10_000)
    parser.add_argument("--callers", type=int, default=64)
    args = parser.parse_args()
    for kind in args.store.split(","):
        print(json.dumps(asyncio.run(run(kind, args.names, args.callers))))


if __name__ == "__main__":
    main()
