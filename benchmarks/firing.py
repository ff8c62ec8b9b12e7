"""Silo CPU per fired job, without Ray: due jobs through one silo's roles into a no-op transport.

    python -m benchmarks.firing [--jobs 100000] [--rounds 3] [--profile] [--gc]

Wires one silo (``cluster.runtime.roles.wire``) on a memory store, adds ``--jobs`` one-shot jobs
due in the past to two targets, then runs the real fire loop until every outcome is durable and
prints microseconds of CPU per job. The transport converts attempts and outcomes as
``RayTransport`` does (plain tuples) but calls nothing, so the figure is the silo's own cost:
decode, runs, routing, lateness, outcome bookkeeping and the REMOVE writes. Two hooks that are
interested in no job stand for the named-job and flow hooks every real silo has.
``--profile`` prints cProfile's top entries; ``--gc`` picks the collector settings while firing
(``default``: CPython's; ``tuned``/``frozen``/``both``: ``cluster.runtime.heap``'s; ``off``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import random
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from cluster.model.attempt import Attempt, Outcome
from cluster.model.clock import SYSTEM_CLOCK
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us, pack, timedelta_to_us, us_to_datetime
from cluster.runtime import heap
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.roles import Roles, wire
from cluster.runtime.shardlog import add_op, window_of
from cluster.runtime.transport import Ping
from storage import MemoryStore

OPTIONS = ClusterOptions(group_commit_linger="0s")


class NoopTransport:
    """Answers every attempt as succeeded, converting to and from tuples as Ray's transport does."""

    def node_id(self) -> str:
        return "local"

    def exited(self, node: str, pid: int) -> bool:
        return False

    async def resolve(self, target: Target) -> Any:
        return target

    def waits(self, handle: Any) -> bool:
        return False  # nothing is sent ahead: every job is due already

    async def deliver(self, target: Target, handle: Any, attempts: Sequence[Attempt], timeout: float,
                      lease_end: float, ahead: Any = None, stops: Any = None) -> list[Outcome]:
        wire_attempts: list[tuple[Any, ...]] = [tuple(a) for a in attempts]
        answers = [(run_id, None, None, False, False) for _, run_id, *_ in wire_attempts]
        return [Outcome(*o) for o in answers]

    async def withdraw(self, handle: Any, run_ids: Sequence[str], lease_end: float, timeout: float) -> list[str] | None:
        return []

    async def ping(self, silo_id: str, timeout: float) -> Ping:
        return Ping.UNKNOWN

    def notify_adopt(self, silo_ids: Iterable[str]) -> None:
        pass


class MetadataHook(SiloHooks):
    """Interested in jobs carrying ``mark`` in their metadata, like the named-job and flow hooks."""

    def __init__(self, mark: str) -> None:
        self.mark = mark
        self.metadata_keys = (mark,)

    def interested(self, job: ScheduledJob) -> bool:
        return self.mark in job.metadata


async def loaded_silo(n: int) -> Roles:
    """One joined silo holding ``n`` one-shot jobs, due a second ago, queued."""
    parts = wire("bench", MemoryStore(), OPTIONS, clock=SYSTEM_CLOCK, transport=NoopTransport(),
                 metrics=SiloMetrics("bench"), rng=random.Random(7))
    parts.hooks.extend([MetadataHook("timeshard.named"), MetadataHook("timeshard.flow")])
    await parts.heartbeat.join()
    await parts.skew.sample()
    due_us = SYSTEM_CLOCK.now_us() - 1_000_000
    due = us_to_datetime(due_us)
    targets = [Target.actor("bench-a"), Target.actor("bench-b")]
    duration = timedelta_to_us(OPTIONS.shard_duration)
    for start in range(0, n, 5_000):
        ops = []
        for i in range(start, min(n, start + 5_000)):
            job = ScheduledJob.create(targets[i % 2], due=due, now=due - timedelta(seconds=1))
            ops.append(add_op(job.id, datetime_to_us(job.due), pack(job.to_wire())))
        await parts.shards.write_to_window(window_of(due_us, duration), ops)
    await parts.loading.load_due()
    return parts


async def fire_all(parts: Roles, n: int) -> float:
    """Run the fire loop until ``n`` outcomes are durable; CPU seconds it took."""
    succeeded = parts.metrics.succeeded
    goal = succeeded.value + n
    await parts.heartbeat.beat()  # loading took a while: a fresh lease, kept by the heartbeat as in a silo
    beating = asyncio.create_task(parts.heartbeat.run())
    started = time.process_time()
    task = asyncio.create_task(parts.firing.run())
    while succeeded.value < goal or parts.runs.inflight:  # noqa: ASYNC110
        await asyncio.sleep(0.001)
    took = time.process_time() - started
    task.cancel()
    beating.cancel()
    return took


def set_gc(mode: str) -> None:
    """Collector settings for a round: CPython's, ``cluster.runtime.heap``'s, or none at all."""
    gc.unfreeze()
    gc.set_threshold(700, 10, 10)
    gc.enable()
    if mode in ("tuned", "both"):
        heap.tune()
    if mode in ("frozen", "both"):
        gc.freeze()  # measured for comparison only: silos do not freeze (see cluster.runtime.heap)
    if mode == "off":
        gc.disable()


async def one_round(n: int, profile: bool, gc_mode: str) -> float:
    parts = await loaded_silo(n)
    set_gc(gc_mode)
    queued = len(parts.queue)
    assert queued == n, f"queued {queued} of {n}"
    profiler = cProfile.Profile() if profile else None
    if profiler is not None:
        profiler.enable()
    took = await fire_all(parts, n)
    if profiler is not None:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return took


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.firing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--gc", default="default", choices=("default", "tuned", "frozen", "both", "off"),
                        help="collector settings while firing (loading runs with CPython's)")
    args = parser.parse_args(argv)
    figures = []
    for _ in range(args.rounds):
        set_gc("default")
        took = asyncio.run(one_round(args.jobs, args.profile, args.gc))
        figures.append(took / args.jobs * 1e6)
        print(f"{args.jobs:,} jobs: {took:.3f} s CPU, {figures[-1]:.2f} us/job, gc counts {gc.get_count()}")
        gc.collect()
    print("us/job:", " ".join(f"{f:.2f}" for f in figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
