"""Creating named jobs beside creating plain ones, on one cluster, in one run.

    RAY_ADDRESS=local python -m benchmarks.named_put [--jobs 5000] [--silos 2] [--store file,azure] [--phases]

Per store, one fresh cluster (``--silos``) measures, in this order, every job due days ahead
(dormant: this is the write path, ``benchmarks.named_fire`` measures firing):

- **plain**: ``schedule_job`` from ``--callers`` concurrent callers, and ``schedule_jobs`` in
  batches of 1,000: the rates a named put is held against;
- **put**: ``client.jobs.put`` of ``--jobs`` new names from ``--callers`` concurrent callers;
- **put_many**: ``client.jobs.put_many`` of ``--jobs`` other new names, 1,000 a call (skipped
  where the client has none);
- **overwrite**: ``put(..., overwrite=True)`` of ``--overwrites`` of the names put above, from
  ``--callers`` callers (each cancels the generation it replaces, in a dormant shard).

``--registry`` names where the names are kept: ``buckets`` (the default: puts go to their bucket's
owner) or ``entries`` (one entry per name, written by the caller); ``--phases`` times only the
per-name path's rounds, so it measures something only with ``--registry entries``.

``--phases`` adds, per measure, where a put's time went: the write path's rounds timed step by
step in this process (read the entries, schedule the jobs, point the entries, retire what they
replace), each step's share of the round, and how many puts a round carried. With ``--callers``
callers waiting on their puts, a round carries them all, so puts/s is about callers / round time.

Prints one JSON object; writes nothing outside its scratch folder.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks.cluster import BATCH, bench_env, bucket_placement, far_future, in_batches, rate, running_cluster, specs
from cluster import Target
from cluster.client import Client
from cluster.model.options import NAMED_REGISTRIES, NAMED_REGISTRY_ALIASES, ClusterOptions
from cluster.named.writes import PutWriter

TARGET = Target.actor("bench-named-put-nobody", "nowhere")  # never fires: every job is days ahead
#: The write path's steps (``PutWriter`` methods), in the order a round takes them.
STEPS = ("_read", "_schedule", "_cancel_named", "_point", "_retire")


@contextlib.contextmanager
def phases(out: dict[str, Any]) -> Iterator[None]:
    """Time each step of every ``PutWriter`` round made inside; fill ``out`` on the way out."""
    spent: defaultdict[str, float] = defaultdict(float)
    calls: Counter[str] = Counter()
    sizes: list[int] = []

    def timed(step: str, method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def run(self: PutWriter, *args: Any) -> Any:
            if step == "_round":
                sizes.append(len(args[0]))
            started = time.perf_counter()
            try:
                return await method(self, *args)
            finally:
                spent[step] += time.perf_counter() - started
                calls[step] += 1
        return run

    saved = {step: getattr(PutWriter, step) for step in (*STEPS, "_round")}
    for step, method in saved.items():
        setattr(PutWriter, step, timed(step, method))
    try:
        yield
    finally:
        for step, method in saved.items():
            setattr(PutWriter, step, method)
        rounds = spent["_round"] or 1e-9
        out["rounds"] = calls["_round"]
        out["puts_per_round"] = round(sum(sizes) / max(len(sizes), 1), 1)
        out["round_ms"] = round(1000 * rounds / max(calls["_round"], 1), 1)
        out["steps"] = {step.strip("_"): {"ms_per_round": round(1000 * spent[step] / max(calls["_round"], 1), 1),
                                          "share": round(spent[step] / rounds, 3)} for step in STEPS}


async def plain(client: Client, n: int, callers: int) -> dict[str, Any]:
    await in_batches(client, specs([TARGET], far_future(BATCH)))  # warm: shards open, pools filled
    dues = far_future(n)

    async def caller(k: int) -> None:
        for due in dues[k::callers]:
            await client.schedule_job(TARGET, due=due)

    started = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(callers)))
    single = rate(n, time.perf_counter() - started)
    started = time.perf_counter()
    await in_batches(client, specs([TARGET], far_future(n)))
    return {"schedule_job_per_s": single, "schedule_jobs_per_s": rate(n, time.perf_counter() - started)}


async def puts(client: Client, names: Sequence[str], due: datetime, callers: int, overwrite: bool) -> float:
    async def caller(k: int) -> None:
        for name in names[k::callers]:
            await client.jobs.put(name, target=TARGET, due_time=due, overwrite=overwrite)

    started = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(callers)))
    return rate(len(names), time.perf_counter() - started)


async def put_many(client: Client, names: Sequence[str], due: datetime) -> float | None:
    bulk = getattr(client.jobs, "put_many", None)
    if bulk is None:
        return None
    started = time.perf_counter()
    for i in range(0, len(names), BATCH):
        await bulk([{"name": name, "target": TARGET, "due_time": due} for name in names[i:i + BATCH]])
    return rate(len(names), time.perf_counter() - started)


async def profiled(measure: Awaitable[Any], profile: dict[str, Any] | None) -> Any:
    """Await ``measure``, its rounds timed into ``profile`` (None: not timed)."""
    if profile is None:
        return await measure
    with phases(profile):
        return await measure


async def settled_placement(store_url: str, silos: int, limit_s: float = 20.0) -> list[int]:
    """The registry buckets' placement once every silo holds its share (a silo above it hands the
    excess over once its buckets settled, ~4 s after start), or as it is after ``limit_s``: a
    figure taken before that measures one silo doing every bucket's work, not the steady state."""
    deadline = time.monotonic() + limit_s
    while True:
        placement = await bucket_placement(store_url)
        if (len(placement) >= silos and placement[0] - placement[-1] <= 1) or time.monotonic() > deadline:
            return placement
        await asyncio.sleep(0.25)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with bench_env(args.store) as env:
        for kind in args.store:
            with running_cluster(env, kind, args.silos, ClusterOptions(named_registry=args.registry)) as cluster:
                client = cluster.client()
                due = datetime.now(timezone.utc) + timedelta(days=2)
                await client.jobs.put("warm", target=TARGET, due_time=due)
                settled = await settled_placement(cluster.store_url, args.silos) if args.registry == "buckets" else None
                result: dict[str, Any] = {"silos": args.silos, "jobs": args.jobs, "callers": args.callers,
                                          "registry": args.registry}
                if settled is not None:
                    result["placement_before"] = settled
                result["plain"] = await plain(client, args.jobs, args.callers)
                names = [f"put-{i:07d}" for i in range(args.jobs)]
                profile: dict[str, dict[str, Any]] = {"put": {}, "put_many": {}, "overwrite": {}}
                timed = args.phases
                result["put_per_s"] = await profiled(puts(client, names, due, args.callers, overwrite=False),
                                                     profile["put"] if timed else None)
                result["put_many_per_s"] = await profiled(
                    put_many(client, [f"bulk-{i:07d}" for i in range(args.jobs)], due), profile["put_many"] if timed else None)
                result["overwrite_per_s"] = await profiled(
                    puts(client, names[:args.overwrites], due + timedelta(hours=1), args.callers, overwrite=True),
                    profile["overwrite"] if timed else None)
                if args.phases:
                    result["phases"] = profile
                result["put_over_schedule_job"] = result["put_per_s"] / max(result["plain"]["schedule_job_per_s"], 1e-9)
                result["bucket_placement"] = await bucket_placement(cluster.store_url)
                results[kind] = result
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.named_put", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--overwrites", type=int, default=1_000)
    parser.add_argument("--silos", type=int, default=2)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--store", default=["file"], type=lambda s: s.split(","), help="file,azure (default file)")
    parser.add_argument("--phases", action="store_true", help="also time each step of the write path's rounds")
    parser.add_argument("--registry", default=ClusterOptions().named_registry,
                        choices=(*NAMED_REGISTRIES, *NAMED_REGISTRY_ALIASES),
                        help="where names are kept (ClusterOptions.named_registry): buckets (the default) or "
                             "entries (issue 25's per-name path)")
    args = parser.parse_args(argv)
    if args.phases and ClusterOptions(named_registry=args.registry).named_buckets:
        parser.error("--phases times the per-name path's rounds (PutWriter): use it with --registry entries")
    print(json.dumps(asyncio.run(main_async(args)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
