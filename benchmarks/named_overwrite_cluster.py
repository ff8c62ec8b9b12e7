"""Overwriting named jobs of one dormant window, end to end on a cluster: issue 25's goal shape.

    RAY_ADDRESS=local python -m benchmarks.named_overwrite_cluster [--jobs 100000] [--overwrites 10000]
                                                                   [--reps 1] [--silos 2] [--store file,azure]
                                                                   [--joined]

Per store, one fresh cluster (``--silos``, registry buckets, the default; measured once every silo
holds its share of them) holds ``--jobs`` named
jobs put with ``put_many`` (1,000 a call), all due at one instant two days ahead: one window,
beyond the lookahead, so its shard is dormant (a nightly batch). Then ``--overwrites`` of them are
replaced with ``client.jobs.put(..., overwrite=True)`` from ``--callers`` concurrent callers, due
in the same window: each put returns once its name points at the new generation and the old
generation's job is cancelled in its shard (the fence's promise).

Where the replaced generations' jobs are cancelled is the point measured: the bucket's owner
cancels them in its own shards before it answers the put (``OwnerCalls._retire_here``), so an
overwrite is one call; the caller cancels only what the owner could not confirm. ``--joined``
loads the jobs on one silo and adds the others before the overwrites: the buckets handed over
keep their jobs in the first silo's shards, where their new owners cancel them through that
silo, one call per round of puts. ``--reps`` repeats the measure on names not overwritten before.

The result is checked before it is reported: every put answered, and the window's shard logs,
read back whole, hold every current generation and none of the replaced ones. Prints one JSON
object; writes nothing outside its scratch folder.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks.cluster import BATCH, bench_env, bucket_placement, rate, running_cluster
from benchmarks.named_put import settled_placement
from benchmarks.report import percentiles
from cluster import Target
from cluster.client import Client
from cluster.model.options import ClusterOptions
from cluster.runtime.shardlog import SHARD_PREFIX, ShardState
from storage import list_logs, open_store, read_log

TARGET = Target.actor("bench-named-overwrite-nobody", "nowhere")  # never fires: due days ahead
GOAL_OVERWRITES_PER_S = 2_000


async def load(client: Client, names: Sequence[str], due: datetime) -> tuple[dict[str, str], float]:
    """Put ``names`` with ``put_many``; each name's job id, and the rate."""
    ids: dict[str, str] = {}
    started = time.perf_counter()
    for i in range(0, len(names), BATCH):
        for job in await client.jobs.put_many([{"name": n, "target": TARGET, "due_time": due}
                                                for n in names[i:i + BATCH]]):
            ids[job.name] = job.job.id
    return ids, rate(len(names), time.perf_counter() - started)


async def overwrite(client: Client, names: Sequence[str], due: datetime, callers: int,
                    ids: dict[str, str]) -> dict[str, Any]:
    """Overwrite ``names`` from ``callers`` callers; ``ids`` takes the new generations' job ids."""
    latencies: list[float] = []

    async def caller(k: int) -> None:
        for name in names[k::callers]:
            began = time.perf_counter()
            job = await client.jobs.put(name, target=TARGET, due_time=due, overwrite=True)
            latencies.append(time.perf_counter() - began)
            ids[name] = job.job.id

    started = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(callers)))
    seconds = time.perf_counter() - started
    return {"n": len(names), "s": round(seconds, 2), "per_s": round(rate(len(names), seconds)),
            "latency_s": percentiles(latencies)}


async def live_in_window(store_url: str, due: datetime) -> set[str]:
    """The jobs live in the shard logs of ``due``'s window, each log read whole."""
    live: set[str] = set()
    async with open_store(store_url) as store:
        for head in await list_logs(store, SHARD_PREFIX):
            start = int(head.metadata.get("window_start", "-1"))
            if start >= 0 and start <= int(due.timestamp() * 1_000_000) < start + 3_600_000_000:
                live |= set(ShardState().replay((await read_log(store, head.base)).records()).live)
    return live


async def one_store(args: argparse.Namespace, env: Any, kind: str) -> dict[str, Any]:
    with running_cluster(env, kind, 1 if args.joined else args.silos, ClusterOptions()) as cluster:
        client = cluster.client()
        if not args.joined:
            placement = await settled_placement(cluster.store_url, args.silos)
        hour = (datetime.now(timezone.utc) + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)
        due = hour + timedelta(minutes=30)  # one instant mid-window: overwrites stay in its window
        await client.jobs.put("warm", target=TARGET, due_time=due)
        names = [f"nightly-{i:07d}" for i in range(args.jobs)]
        ids, loaded = await load(client, names, due)
        first = dict(ids)
        if args.joined:
            await asyncio.to_thread(cluster.scale, args.silos)
            placement = await settled_placement(cluster.store_url, args.silos)
        result: dict[str, Any] = {"silos": args.silos, "jobs": args.jobs, "callers": args.callers,
                                  "joined": args.joined, "put_many_per_s": round(loaded),
                                  "placement_before": placement, "reps": []}
        cursor = 0
        for _ in range(args.reps):
            chosen = names[cursor:cursor + args.overwrites]
            cursor += args.overwrites
            result["reps"].append(await overwrite(client, chosen, due, args.callers, ids))
        found = await live_in_window(cluster.store_url, due)
        replaced = {first[n] for n in names[:cursor]}
        assert not (replaced & found), f"{len(replaced & found)} replaced generations still live in their shard"
        missing = set(ids.values()) - found
        assert not missing, f"{len(missing)} current generations missing from the window's logs"
        result["checked"] = {"live_in_window": len(found), "replaced": len(replaced)}
        result["goal_overwrites_per_s"] = GOAL_OVERWRITES_PER_S
        result["bucket_placement"] = await bucket_placement(cluster.store_url)
        return result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with bench_env(args.store) as env:
        for kind in args.store:
            results[kind] = await one_store(args, env, kind)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.named_overwrite_cluster",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--overwrites", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--silos", type=int, default=2)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--store", default=["file"], type=lambda s: s.split(","), help="file,azure (default file)")
    parser.add_argument("--joined", action="store_true",
                        help="load on one silo, then add the others: buckets handed over, their jobs left behind")
    args = parser.parse_args(argv)
    if args.reps * args.overwrites > args.jobs:
        parser.error("--reps x --overwrites must not exceed --jobs: each overwrite takes a name not overwritten yet")
    print(json.dumps(asyncio.run(main_async(args)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
