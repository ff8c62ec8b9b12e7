"""Benchmark of a silo's memory: RSS growth per job, dormant and loaded.

    python -m benchmarks.memory [--quick] [--store file|azure]

One silo per measurement (so every job lands in it), its RSS read from /proc/<pid>/status:

- dormant: 1,000,000 jobs due two days away, beyond the lookahead — written to shard logs,
  nothing held per job (goal <= 50 MB of RSS per million);
- loaded: 100,000 jobs due within the lookahead — folded into live entries and queued
  (goal <= 300 B per job).

Writes benchmarks/results/memory.json and memory.png.
"""

from __future__ import annotations

import argparse
import asyncio
import os
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks.cluster import BenchEnv, bench_env, in_batches, running_cluster, silo_pid, specs
from benchmarks.report import Report, machine_info
from cluster import ClusterOptions, Target

GOAL_DORMANT_MB_PER_MILLION = 50
GOAL_LOADED_BYTES_PER_JOB = 300
# Published: Orleans keeps 200-500 B per job in memory; Celery ETA tasks ~11 KB each.
PUBLISHED_BYTES_PER_JOB = [("Orleans durable jobs 200-500 B", 500.0)]
_TARGET = Target.actor("bench-memory-target", "bench")  # never fires: the cluster stops first


def rss_bytes(pid: int | None = None) -> int:
    """Resident set size of ``pid`` (default: this process), from /proc/<pid>/status."""
    with open(f"/proc/{pid or os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


async def _growth(env: BenchEnv, kind: str, n: int, due: datetime, options: ClusterOptions) -> dict[str, Any]:
    with running_cluster(env, kind, 1, options) as cluster:
        client = cluster.client()
        pid = silo_pid(cluster, cluster.silo_ids[0])
        warm = [due - timedelta(seconds=1) + timedelta(microseconds=i) for i in range(2_000)]
        await in_batches(client, specs([_TARGET], warm), callers=4)  # pools, caches, first shard
        await asyncio.sleep(0.5)
        before = rss_bytes(pid)
        dues = [due + timedelta(microseconds=i) for i in range(n)]
        await in_batches(client, specs([_TARGET], dues), callers=4)
        await asyncio.sleep(1.0)
        after = rss_bytes(pid)
    return {"jobs": n, "rss_before": before, "rss_after": after, "bytes_per_job": (after - before) / n,
            "mb_per_million": (after - before) / n * 1e6 / 2**20}


async def run(env: BenchEnv, kind: str, quick: bool, report: Report) -> dict[str, Any]:
    dormant_n, loaded_n = (20_000, 10_000) if quick else (1_000_000, 100_000)
    now = datetime.now(timezone.utc)
    report.progress(f"memory ({kind}): {dormant_n:,} dormant jobs (due in 2 days, beyond the lookahead)")
    dormant = await _growth(env, kind, dormant_n, now + timedelta(days=2), ClusterOptions())
    report.progress(f"memory ({kind}): {loaded_n:,} loaded jobs (due in 5 minutes, within a 10-minute lookahead)")
    loaded = await _growth(env, kind, loaded_n, now + timedelta(minutes=5), ClusterOptions(lookahead="10m"))
    return {"store": kind, "dormant": dormant, "loaded": loaded}


def goals(result: dict[str, Any], report: Report) -> None:
    report.goal("dormant jobs: silo RSS MB per million", result["dormant"]["mb_per_million"],
                GOAL_DORMANT_MB_PER_MILLION, higher_is_better=False)
    report.goal("loaded jobs: silo RSS bytes per job", result["loaded"]["bytes_per_job"], GOAL_LOADED_BYTES_PER_JOB,
                higher_is_better=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20,000 dormant and 10,000 loaded jobs")
    parser.add_argument("--store", default="file", choices=["file", "azure"])
    args = parser.parse_args(argv)
    report = Report("memory", quick=args.quick)

    async def go() -> dict[str, Any]:
        with bench_env([args.store]) as env:
            return await run(env, args.store, args.quick, report)

    result = asyncio.run(go())
    d, lo = result["dormant"], result["loaded"]
    report.table(["jobs", "count", "RSS growth MB", "bytes/job", "MB per million"], [
        [name, f"{r['jobs']:,}", f"{(r['rss_after'] - r['rss_before']) / 2**20:,.1f}", f"{r['bytes_per_job']:,.1f}",
         f"{r['mb_per_million']:,.1f}"] for name, r in (("dormant", d), ("loaded", lo))])
    goals(result, report)
    report.bars("silo memory per job", [
        ("dormant: MB of RSS per million jobs", {"timeshard": d["mb_per_million"]}, GOAL_DORMANT_MB_PER_MILLION),
        ("loaded: bytes of RSS per job", {"timeshard": lo["bytes_per_job"]}, GOAL_LOADED_BYTES_PER_JOB,
         PUBLISHED_BYTES_PER_JOB),
    ])
    report.data.update({"machine": machine_info(), "results": result})
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
