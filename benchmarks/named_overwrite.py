"""Overwriting and deleting jobs of a dormant shard, measured at the silo (in-process, no Ray).

    python -m benchmarks.named_overwrite [--jobs 100000] [--overwrite 10000] [--callers 64]
                                         [--stores file,memory,azure]

What a named job's ``put(overwrite=True)`` and ``delete`` cost the silo that owns the window
they live in: ``--jobs`` one-shot jobs due in one window a day ahead (a nightly batch: beyond the
lookahead, so the shard is dormant and nothing of it is in memory) are scheduled through the
silo's own schedule path in calls of 1,000. Then, from ``--callers`` concurrent callers:

- **overwrite**: ``--overwrite`` of them are replaced, each as a put does at the silo: a schedule
  call of one new job into the same window, then the cancel of the old one;
- **delete**: ``--overwrite`` others are cancelled alone, as ``delete`` does.

Each phase reports its rate and the cancel latency (p50/p99). The result is checked before it is
reported: every cancel answered "cancelled", and the log, read back whole, holds exactly the jobs
that should be live. The path measured is the silo's (``Scheduling.schedule``,
``Cancelling.cancel``); the registry write of a put is ``benchmarks.named_fire``'s to measure.
Prints one JSON object; writes nothing but its scratch store (deleted).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from benchmarks._azurite import Azurite, AzuriteUnavailable
from benchmarks.report import percentiles
from cluster.model.ahead import Ahead
from cluster.model.attempt import Attempt, Outcome
from cluster.model.clock import SYSTEM_CLOCK
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us, pack
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.roles import Roles, wire
from cluster.runtime.shardlog import ShardState
from cluster.runtime.transport import Ping, TargetAbsent
from storage import Store, open_store, read_log
from storage.urls import CONNECTION_STRING_ENV

GOAL_OVERWRITES_PER_S = 2_000
BATCH = 1_000


class NoTransport:
    """Nothing is due during the run: a silo that never reaches another actor."""

    def node_id(self) -> str:
        return ""

    def exited(self, node: str, pid: int) -> bool:
        return False

    async def resolve(self, target: Target) -> Any:
        raise TargetAbsent(target.name)

    def waits(self, handle: Any) -> bool:
        return False

    async def deliver(self, target: Target, handle: Any, attempts: Sequence[Attempt], timeout: float,
                      lease_end: float, ahead: Ahead | None = None, stops: Any = None) -> list[Outcome]:
        raise AssertionError("nothing is due during the benchmark")

    async def withdraw(self, handle: Any, run_ids: Sequence[str], lease_end: float, timeout: float) -> list[str] | None:
        return None

    async def ping(self, silo_id: str, timeout: float) -> Ping:
        return Ping.UNKNOWN

    def notify_adopt(self, silo_ids: Iterable[str]) -> None:
        pass


@asynccontextmanager
async def opened(kind: str, scratch: Path) -> AsyncIterator[Store]:
    if kind == "azure":
        with Azurite() as azurite:
            env = {CONNECTION_STRING_ENV: azurite.connection_string}
            async with open_store(f"azure://overwrite-{int(time.time())}", environ=env) as store:
                yield store
        return
    url = "memory://" if kind == "memory" else f"file://{scratch / 'store'}"
    async with open_store(url) as store:
        yield store


def nightly(n: int, due: datetime, now: datetime) -> list[tuple[str, int, bytes]]:
    """``n`` schedule items of distinct one-shot jobs due at ``due`` (what ``Silo.schedule`` takes)."""
    template = ScheduledJob.create(Target.actor("nightly-report", "bench"), due=due, now=now)
    wire_form = template.to_wire()
    items = []
    for _ in range(n):
        job_id = new_job_id()
        wire_form[1] = job_id
        items.append((job_id, datetime_to_us(due), pack(wire_form)))
    return items


async def in_callers(callers: int, work: Sequence[Any], one: Any) -> tuple[float, list[float]]:
    """Run ``one(item)`` for every item from ``callers`` concurrent tasks; (seconds, cancel latencies)."""
    queue = list(reversed(work))
    latencies: list[float] = []

    async def caller() -> None:
        while queue:
            latencies.append(await one(queue.pop()))

    start = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return time.perf_counter() - start, latencies


async def run(kind: str, jobs: int, overwrite: int, callers: int, scratch: Path) -> dict[str, Any]:
    async with opened(kind, scratch) as store:
        roles: Roles = wire("0", store, ClusterOptions(), clock=SYSTEM_CLOCK, transport=NoTransport(),
                            metrics=SiloMetrics("0"), rng=random.Random(0))
        await roles.heartbeat.join()
        await roles.skew.sample()
        now = datetime.now(timezone.utc)
        due = (now + timedelta(days=1)).replace(minute=0, second=0, microsecond=0)
        items = nightly(jobs, due, now)
        start = time.perf_counter()
        shards = set()
        for i in range(0, jobs, BATCH):
            shards.update(await roles.scheduling.schedule(items[i:i + BATCH]))
        load_s = time.perf_counter() - start
        (shard,) = shards
        assert not roles.shards.get(shard).loaded, "the window is a day ahead: its shard must be dormant"
        picked = random.Random(1).sample(range(jobs), 2 * overwrite)
        replaced, deleted = [items[i] for i in picked[:overwrite]], [items[i] for i in picked[overwrite:]]
        news = nightly(overwrite, due, now)
        answers: list[str] = []

        async def cancel(job_id: str) -> float:
            began = time.perf_counter()
            answer, _ = await roles.cancelling.cancel(shard, job_id)
            answers.append(answer)
            return time.perf_counter() - began

        async def put(pair: tuple[tuple[str, int, bytes], tuple[str, int, bytes]]) -> float:
            old, new = pair
            (where,) = await roles.scheduling.schedule([new])
            assert where == shard
            return await cancel(old[0])

        async def delete(old: tuple[str, int, bytes]) -> float:
            return await cancel(old[0])

        overwrite_s, overwrite_lat = await in_callers(callers, list(zip(replaced, news, strict=True)), put)
        delete_s, delete_lat = await in_callers(callers, deleted, delete)
        assert answers == ["cancelled"] * len(answers), {a: answers.count(a) for a in set(answers)}
        live = ShardState().replay((await read_log(store, shard)).records()).live
        expected = ({item[0] for item in items} - {item[0] for item in replaced + deleted}) | {n[0] for n in news}
        assert set(live) == expected, "the log does not hold what the cancels answered"
        return {
            "store": kind, "jobs": jobs, "callers": callers, "load_s": round(load_s, 2),
            "overwrite": {"n": overwrite, "s": round(overwrite_s, 2), "per_s": round(overwrite / overwrite_s),
                          "cancel_latency_s": percentiles(overwrite_lat)},
            "delete": {"n": overwrite, "s": round(delete_s, 2), "per_s": round(overwrite / delete_s),
                       "cancel_latency_s": percentiles(delete_lat)},
            "goal_overwrites_per_s": GOAL_OVERWRITES_PER_S,
        }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--overwrite", type=int, default=10_000)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--stores", default="file,memory")
    args = parser.parse_args(argv)
    if 2 * args.overwrite > args.jobs:
        parser.error("--overwrite: at most half of --jobs (the deletes take others)")
    results = []
    for kind in args.stores.split(","):
        with tempfile.TemporaryDirectory(prefix="named-overwrite-") as scratch:
            try:
                results.append(asyncio.run(run(kind, args.jobs, args.overwrite, args.callers, Path(scratch))))
            except AzuriteUnavailable as exc:
                results.append({"store": kind, "skipped": str(exc)})
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
