"""Named jobs kept in registry buckets (``named_registry="buckets"``, the default) for the listing benchmark.

Two in-process silos (the runtime's roles with the named-jobs hooks, as ``tests.named.bucket_cluster``
wires them, calls between them direct, no Ray) share the benchmark's store; they create the
registry buckets and own two each. Names are loaded straight into the buckets their owners
hold: each bucket's ``PUT`` records appended through its owner's fenced writer, 5,000 names a
round (``HeldBucket.write``, the append a put round makes, applied to the owner's memory as a
put applies it), every entry pointing at a stand-in shard. Listing and counting read only the
owners' memory, so no shard is written: a million names load in a minute or two, where a
million puts would first schedule a million jobs.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from cluster.model.wire import datetime_to_us
from cluster.named.api import NamedJobs
from cluster.named.bucket import PUT, bucket_of
from cluster.named.buckets import HeldBucket
from storage import FileStore, Store
from tests.named.bucket_cluster import Cluster, ManualTimeFileStore
from tests.runtime.harness import ManualClock

SILOS = ("a", "b")
LOAD_ROUND = 5000


def clock_now() -> ManualClock:
    return ManualClock(datetime_to_us(datetime.now(timezone.utc)))


async def start(store: Store, clock: ManualClock, silos: tuple[str, ...] = SILOS, *,
                take_all: bool = False) -> Cluster:
    """Silos ``silos`` on ``store`` holding every registry bucket between them (``take_all``: the
    first takes every one, whatever its fair share among the silos the membership still lists)."""
    cluster = Cluster(store, clock)
    for silo in silos:
        await cluster.add(silo)
    if take_all:
        first = cluster.hooks[silos[0]].buckets
        assert first is not None
        await first.take(limit=first.count)
    await cluster.maintain()
    await cluster.maintain()  # the second silo takes its fair share once the first holds its own
    held = held_buckets(cluster)
    assert held and all(n in held for n in range(max(held) + 1)), sorted(held)
    return cluster


def file_store(root: str, clock: ManualClock) -> FileStore:
    return ManualTimeFileStore(root, clock)


def held_buckets(cluster: Cluster) -> dict[int, HeldBucket]:
    """Every registry bucket a silo of ``cluster`` holds, by number."""
    out: dict[int, HeldBucket] = {}
    for hooks in cluster.hooks.values():
        assert hooks.buckets is not None, "the cluster keeps names in per-name entries, not buckets"
        out.update(hooks.buckets.held)
    return out


async def load(cluster: Cluster, count: int, record: Callable[[int], tuple[str, dict[str, str]]]) -> None:
    """``count`` names (``record(i)``: key and entry metadata) into their owners' buckets, with a progress line."""
    held = held_buckets(cluster)
    started = time.perf_counter()
    for first in range(0, count, LOAD_ROUND):
        rounds: dict[int, list[list[Any]]] = {}
        for i in range(first, min(count, first + LOAD_ROUND)):
            key, metadata = record(i)
            rounds.setdefault(bucket_of(key, len(held)), []).append([PUT, key, metadata])
        await asyncio.gather(*(held[number].write(records) for number, records in rounds.items()))
        done = min(count, first + LOAD_ROUND)
        if done % max(LOAD_ROUND, count // 20) < LOAD_ROUND or done == count:
            rate = done / (time.perf_counter() - started)
            print(f"\r  loading buckets: {done}/{count} names ({rate:.0f}/s)", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    print(f"  loaded {count} names into {len(held)} buckets in {time.perf_counter() - started:.1f} s", flush=True)


def jobs_of(cluster: Cluster) -> NamedJobs:
    """``client.jobs`` of a client calling the silos of ``cluster``."""
    return cluster.jobs()
