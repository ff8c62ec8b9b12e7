"""Named jobs beside plain ones on one cluster: jobs due at one instant into a no-op handler.

    python -m benchmarks.named_fire [--jobs 5000] [--silos 2] [--store file] [--callers 64] [--registry buckets] [--phases]

Per store, one fresh cluster (``--silos``, two counting handler actors) runs both, in this order:

- **plain**: ``--jobs`` one-shot jobs due at one instant, scheduled in batches of 1,000 (as
  ``benchmarks.cluster``'s trigger throughput does); the rate from first start to last;
- **named**: ``--jobs`` one-shot jobs put by ``client.jobs.put`` from ``--callers`` concurrent
  callers, all due at one instant far enough ahead for every put to return first; the same rate,
  the put rate on the way, and how long after each sampled job started its registry entry (what
  ``get()`` reads) showed it succeeded: the status delay the README states;
- **steady**: ``--steady-jobs`` named one-shot jobs due at ``--steady-rate`` a second, the same
  status delay for a sample of them (polled every 50 ms).

``--registry`` names where the names are kept: ``buckets`` (the default, silo-owned registry
buckets; status read through ``client.jobs.get``) or ``entries`` (one entry per name; status read
from the entries themselves). ``--phases`` adds, per burst (plain and named) and silo, where
the silo's time went while it fired (``benchmarks.silo_probe``: spans of the firing path and the
buckets' owner side, its process's CPU time, and cProfile's top functions; ``--phases cpu``
leaves cProfile out; either adds ``PROBE_SETTLE_S`` to the burst's status delay, read after
it). ``--steady-jobs 0`` skips the steady run. Prints one JSON object; writes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks import silo_probe
from benchmarks.cluster import (
    bench_env,
    bucket_placement,
    handlers,
    in_batches,
    rate,
    running_cluster,
    specs,
    take_all,
    wait_count,
)
from benchmarks.report import percentiles
from cluster import Cluster, Target
from cluster.client import Client
from cluster.model.options import NAMED_REGISTRIES, NAMED_REGISTRY_ALIASES, ClusterOptions
from cluster.named.registry import entry_key, name_of, read_entry

PROBE_SETTLE_S = 2.0
PROFILE = [True]  # --phases cpu: spans and CPU time only, no cProfile (which slows the silo down)
STATUS_SAMPLE = 40  # names whose status is polled after the burst, besides the last ones to start


def first_to_last(runs: Sequence[tuple[str, float, float]], due: datetime) -> dict[str, Any]:
    starts = sorted(s for _, _, s in runs)
    spread = starts[-1] - starts[0] if len(starts) > 1 else 0.0
    return {"executed": len(starts), "per_s": rate(len(starts) - 1, spread), "first_to_last_s": spread,
            "due_to_first_s": starts[0] - due.timestamp() if starts else None,
            "due_to_last_s": starts[-1] - due.timestamp() if starts else None}


async def probing(cluster: Cluster | None, start: bool, profile: bool = True) -> dict[str, Any]:
    """Start (``start``) or stop ``benchmarks.silo_probe`` in every silo of ``cluster`` (None: not probed)."""
    if cluster is None:
        return {}
    if not start:
        await asyncio.sleep(PROBE_SETTLE_S)  # the burst's outcomes and status changes, still under way
    handles = cluster.handles()
    answers = await asyncio.gather(*(h.__ray_call__.remote(silo_probe.start, profile) if start
                                     else h.__ray_call__.remote(silo_probe.stop) for h in handles.values()))
    return dict(zip(handles, answers, strict=True))


async def plain(client: Client, hs: Sequence[tuple[Target, Any]], n: int,
                probe: Cluster | None = None) -> dict[str, Any]:
    await take_all(hs)
    due = datetime.now(timezone.utc) + timedelta(seconds=3 + n / 5_000)
    await in_batches(client, specs([t for t, _ in hs], [due] * n), callers=2)
    await probing(probe, True, PROFILE[0])
    await wait_count(hs, n, timeout=(due - datetime.now(timezone.utc)).total_seconds() + 120)
    out = first_to_last(await take_all(hs), due)
    if probe is not None:
        out["due"] = due.timestamp()
        out["phases"] = await probing(probe, False)
        out["starts_after_count"] = len(await take_all(hs))  # more than one start of a job, if any
    return out


async def named(client: Client, hs: Sequence[tuple[Target, Any]], n: int, callers: int,
                put_rate: float, probe: Cluster | None = None) -> dict[str, Any]:
    await take_all(hs)
    targets = [t for t, _ in hs]
    lead = 5 + n / put_rate  # every put must return before the jobs are due
    due = datetime.now(timezone.utc) + timedelta(seconds=lead)
    names = [f"burst-{i:06d}" for i in range(n)]
    name_of: dict[str, str] = {}  # job id -> name

    async def caller(k: int) -> None:
        for i in range(k, n, callers):
            job = await client.jobs.put(names[i], target=targets[i % len(targets)], due_time=due)
            name_of[job.job.id] = job.name

    started = time.perf_counter()
    await asyncio.gather(*(caller(k) for k in range(callers)))
    put_s = time.perf_counter() - started
    if datetime.now(timezone.utc) >= due:
        raise RuntimeError(f"puts took {put_s:.1f} s, past the due time; raise the lead")
    await probing(probe, True, PROFILE[0])
    await wait_count(hs, n, timeout=(due - datetime.now(timezone.utc)).total_seconds() + 300)
    runs = await take_all(hs)
    out = first_to_last(runs, due)
    if probe is not None:
        out["due"] = due.timestamp()
        out["phases"] = await probing(probe, False)
        out["starts_after_count"] = len(await take_all(hs))  # more than one start of a job, if any
    out.update({"put_per_s": rate(n, put_s), "callers": callers})
    out["status_delay_ms"] = await status_delay(client, runs, name_of)
    return out


async def status_delay(client: Client, runs: Sequence[tuple[str, float, float]], name_of: dict[str, str]) -> dict[str, Any]:
    """For a sample of the runs (the last ones to start among them): when the name's registry
    entry first showed it succeeded (what ``get()`` reads), less when it started, in ms; polled
    every 100 ms, one read per name, so that the polling itself does not slow the silos down."""
    ordered = sorted(runs, key=lambda r: r[2])
    sample = ordered[-10:] + random.Random(25).sample(ordered, min(STATUS_SAMPLE, len(ordered)))
    started_at = {entry_key("default", "default", name_of[job_id]): s for job_id, _, s in sample if job_id in name_of}
    delays: dict[str, float] = {}
    deadline = time.monotonic() + 60
    while started_at.keys() - delays.keys() and time.monotonic() < deadline:
        waiting = sorted(started_at.keys() - delays.keys())
        found = await succeeded(client, waiting)
        now = time.time()
        for key, done in zip(waiting, found, strict=True):
            if done:
                delays[key] = max(0.0, (now - started_at[key]) * 1e3)
        await asyncio.sleep(0.1)
    out = percentiles(list(delays.values()))
    out["seen"], out["sampled"] = len(delays), len(started_at)
    return out


async def steady(client: Client, hs: Sequence[tuple[Target, Any]], n: int, per_s: float, callers: int,
                 put_rate: float) -> dict[str, Any]:
    """``n`` named one-shot jobs due at a steady ``per_s``: how long after each started its entry showed it succeeded."""
    await take_all(hs)
    targets = [t for t, _ in hs]
    start = datetime.now(timezone.utc) + timedelta(seconds=5 + n / put_rate)
    dues = [start + timedelta(seconds=i / per_s) for i in range(n)]
    keys: dict[str, str] = {}  # job id -> entry key

    async def caller(k: int) -> None:
        for i in range(k, n, callers):
            job = await client.jobs.put(f"steady-{i:06d}", target=targets[i % len(targets)], due_time=dues[i])
            keys[job.job.id] = entry_key("default", "default", job.name)

    await asyncio.gather(*(caller(k) for k in range(callers)))
    sample = sorted(random.Random(25).sample(sorted(keys.values()), min(STATUS_SAMPLE, n)))
    seen: dict[str, float] = {}
    deadline = dues[-1].timestamp() + 60
    while len(seen) < len(sample) and time.time() < deadline:
        waiting = [key for key in sample if key not in seen]
        found = await succeeded(client, waiting)
        now = time.time()
        for key, done in zip(waiting, found, strict=True):
            if done:
                seen[key] = now
        await asyncio.sleep(0.05)
    await wait_count(hs, n, timeout=60)
    started = {keys[job_id]: s for job_id, _, s in await take_all(hs) if job_id in keys}
    out = percentiles([(seen[key] - started[key]) * 1e3 for key in seen if key in started])
    out.update({"jobs": n, "per_s": per_s, "seen": len(seen), "sampled": len(sample)})
    return out


async def succeeded(client: Client, keys: Sequence[str]) -> list[bool]:
    """Whether each name (by registry key) shows an attempt that succeeded, as ``get()`` would:
    its entry read from the store, or (names in registry buckets) ``get`` itself."""
    if client.options.named_buckets:
        found = await asyncio.gather(*(client.jobs.get(name_of(key)) for key in keys))
        return [job is not None and job.status.successful > 0 for job in found]
    store = await client.jobs._store()
    entries = await asyncio.gather(*(read_entry(store, key) for key in keys))
    return [entry is not None and entry.status.successful > 0 for entry in entries]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with bench_env(args.store) as env:
        for kind in args.store:
            options = ClusterOptions(named_registry=args.registry)
            with running_cluster(env, kind, args.silos, options) as cluster, handlers(2) as hs:
                client = cluster.client()
                result: dict[str, Any] = {"silos": args.silos, "jobs": args.jobs, "registry": args.registry}
                probe = cluster if args.phases else None
                PROFILE[0] = args.phases != "cpu"
                result["plain"] = await plain(client, hs, args.jobs, probe)
                result["named"] = await named(client, hs, args.jobs, args.callers, args.put_rate, probe)
                result["named_over_plain"] = result["named"]["per_s"] / max(result["plain"]["per_s"], 1e-9)
                if args.steady_jobs:
                    result["steady_status_delay_ms"] = await steady(client, hs, args.steady_jobs, args.steady_rate,
                                                                    args.callers, args.put_rate)
                result["bucket_placement"] = await bucket_placement(cluster.store_url)
                results[kind] = result
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.named_fire", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--silos", type=int, default=2)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--steady-jobs", type=int, default=1_000)
    parser.add_argument("--put-rate", type=float, default=200.0,
                        help="puts/s to allow for: the jobs are due once all of them can have returned")
    parser.add_argument("--steady-rate", type=float, default=200.0, help="named jobs due per second in the steady run")
    parser.add_argument("--store", default=["file"], type=lambda s: s.split(","), help="file,azure (default file)")
    parser.add_argument("--registry", default=ClusterOptions().named_registry,
                        choices=(*NAMED_REGISTRIES, *NAMED_REGISTRY_ALIASES),
                        help="where names are kept (ClusterOptions.named_registry): buckets (the default) or "
                             "entries (issue 25's per-name path)")
    parser.add_argument("--phases", nargs="?", const="profile", choices=("profile", "cpu"),
                        help="also say where each silo's time went while the bursts fired (benchmarks.silo_probe); "
                             "cpu: spans and CPU time only, without cProfile")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(main_async(args)), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
