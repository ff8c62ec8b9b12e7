"""Whole-cluster recovery, measured in one process: fresh silos on a store whose silos all died.

    python -m benchmarks.recovery [--jobs 100000] [--silos 3] [--store file|azurite] [--out FILE]

Phase one writes ``--jobs`` one-shot jobs, all overdue, into the shards of ``--silos`` silos
that joined and then vanished without a word (no release, no leave: as when a Ray cluster is
lost with every node). Phase two starts as many fresh ``Silo``s under the same ids, as a restart
does, and times: every silo ready (joined, first adoption round), the first job fired, the last
job's outcome durable. The old incarnations' lease must run out before their shards are
adopted (nothing proves them stopped), then each adopter replays its shards and fires.

All silos share this process's one event loop, so their replays run one after another rather
than side by side on their own cores: the figure is an upper bound for a cluster of that many
machines. The transport answers every attempt at once (no handler work), as benchmarks/firing.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from benchmarks._azurite import Azurite
from benchmarks.firing import NoopTransport
from cluster.model.clock import SYSTEM_CLOCK
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us, pack, timedelta_to_us, us_to_datetime
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.roles import wire
from cluster.runtime.shardlog import add_op, window_of
from cluster.runtime.silo import Silo
from storage import Store, open_store
from storage.urls import CONNECTION_STRING_ENV

OPTIONS = ClusterOptions()
BATCH = 5_000


async def write_old_cluster(stores: list[Store], jobs: int) -> None:
    """``jobs`` overdue one-shot jobs, spread over the silos' shards; the silos then vanish."""
    due_us = SYSTEM_CLOCK.now_us() - 1_000_000
    due = us_to_datetime(due_us)
    window = window_of(due_us, timedelta_to_us(OPTIONS.shard_duration))
    target = Target.actor("recovery-bench")
    for index, store in enumerate(stores):
        parts = wire(str(index), store, OPTIONS, clock=SYSTEM_CLOCK, transport=NoopTransport(),
                     metrics=SiloMetrics(str(index)), rng=random.Random(index))
        await parts.heartbeat.join()
        await parts.skew.sample()
        mine = range(index, jobs, len(stores))
        for start in range(0, len(mine), BATCH):
            ops = []
            for _ in mine[start:start + BATCH]:
                job = ScheduledJob.create(target, due=due, now=due - timedelta(seconds=1))
                ops.append(add_op(job.id, datetime_to_us(job.due), pack(job.to_wire())))
            await parts.shards.write_to_window(window, ops)


async def recover(stores: list[Store], jobs: int) -> dict[str, float]:
    """Start fresh silos under the old ids; seconds to ready, every old shard adopted and loaded
    (replayed), the first fire and the last outcome."""
    started = time.monotonic()
    silos = [Silo(str(i), "unused://", OPTIONS, "recovery", hooks=lambda _store, _view: [], transport=NoopTransport(),
                  clock=SYSTEM_CLOCK, store=store) for i, store in enumerate(stores)]
    await asyncio.gather(*(silo.ready() for silo in silos))
    ready = time.monotonic() - started
    first: float | None = None
    loaded: float | None = None
    shards = len(stores)  # the old silos wrote one shard each
    while True:
        held = [shard for silo in silos for shard in silo._r.shards]
        if loaded is None and len(held) >= shards and all(shard.loaded for shard in held):
            loaded = time.monotonic() - started
        done = sum(silo.metrics.succeeded.value for silo in silos)
        if first is None and any(silo.metrics.fired.value > 0 for silo in silos):
            first = time.monotonic() - started
        if done >= jobs and not any(silo._r.runs.inflight for silo in silos):
            break
        await asyncio.sleep(0.01)
    last = time.monotonic() - started
    for silo in silos:
        await silo.stop()
    return {"ready_s": ready, "all_loaded_s": loaded or last, "first_fire_s": first or last, "all_fired_s": last}


async def run(jobs: int, silos: int, kind: str, scratch: Path) -> dict[str, Any]:
    azurite = Azurite(location=scratch / "azurite").start() if kind == "azurite" else None
    try:
        if azurite is not None:
            url, env = f"azure://recovery-{int(time.time())}", {CONNECTION_STRING_ENV: azurite.connection_string}
        else:
            url, env = f"file://{scratch / 'store'}", {}
        old = [open_store(url, environ=env) for _ in range(silos)]
        began = time.monotonic()
        await write_old_cluster(old, jobs)
        written = time.monotonic() - began
        for store in old:
            await store.close()
        fresh = [open_store(url, environ=env) for _ in range(silos)]
        times = await recover(fresh, jobs)
        return {"store": kind, "jobs": jobs, "silos": silos, "write_s": written, **times,
                "lease_s": OPTIONS.firing_lease.total_seconds(),
                "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    finally:
        if azurite is not None:
            azurite.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--silos", type=int, default=3)
    parser.add_argument("--store", choices=("file", "azurite"), default="file")
    parser.add_argument("--out", type=Path, help="append the result as a JSON line to this file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="timeshard-recovery-") as scratch:
        result = asyncio.run(run(args.jobs, args.silos, args.store, Path(scratch)))
    line = json.dumps(result, sort_keys=True)
    print(line)
    if args.out is not None:
        with args.out.open("a") as out:
            out.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
