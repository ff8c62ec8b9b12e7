"""Named jobs beside plain ones, for the suite: what a Dapr Jobs API or reminder user compares.

    python -m benchmarks.suite named [--quick] [--publish]

Per store (file, Azurite), one fresh cluster of 3 silos and two counting handlers measures, in
one run: ``client.jobs.put`` from 64 concurrent callers and ``put_many`` (1,000 a call) beside
``schedule_job`` and ``schedule_jobs`` on the same cluster; ``put(..., overwrite=True)`` of names
in a dormant shard; and jobs due at one instant, plain then named, into the same handlers (the
named fire rate's ratio to the plain one is taken within the run). Then, per store, a scope of
100,000 and of 1,000,000 names (2,000 with ``--quick``) in registry buckets, where a cluster keeps
them by default (two in-process silos, no Ray): ``NamedJobs.list_page(limit=50)`` first and 90%
deep, ``count()`` of the scope and of a prefix, and the dashboard's first page of Named jobs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from benchmarks import _bucket_names, named_fire, named_listing, named_put
from benchmarks.cluster import BenchEnv, handlers, running_cluster
from benchmarks.report import Report
from storage import open_store

CALLERS = 64
GOAL_FIRE_OVER_PLAIN = 0.5
GOAL_PUT_PER_S = {"file": 5_000, "azure": 3_000}
GOAL_PUT_MANY_PER_S = 20_000
GOAL_LIST_PAGE_MS = 20  # at 1,000,000 names
GOAL_COUNT_MS = 100  # at 1,000,000 names
GOAL_PAGE_MS = 300  # the dashboard's first page at 100,000 names

Row = Callable[..., None]


async def on_cluster(env: BenchEnv, kind: str, quick: bool, report: Report) -> dict[str, Any]:
    """Put, put_many, overwrite and firing, named beside plain, on one fresh cluster."""
    jobs, overwrites = (300, 100) if quick else (5_000, 1_000)
    out: dict[str, Any] = {"jobs": jobs, "callers": CALLERS}
    with running_cluster(env, kind, 3) as cluster, handlers(2) as hs:
        client = cluster.client()
        due = datetime.now(timezone.utc) + timedelta(days=2)  # dormant: this measures writes, not firing
        await client.jobs.put("warm", target=named_put.TARGET, due_time=due)
        report.progress(f"named ({kind}): {jobs:,} puts x{CALLERS}, put_many, {overwrites:,} overwrites")
        out["plain_create"] = await named_put.plain(client, jobs, CALLERS)
        names = [f"put-{i:07d}" for i in range(jobs)]
        out["put_per_s"] = await named_put.puts(client, names, due, CALLERS, overwrite=False)
        out["put_many_per_s"] = await named_put.put_many(client, [f"bulk-{i:07d}" for i in range(jobs)], due)
        out["overwrite_per_s"] = await named_put.puts(client, names[:overwrites], due + timedelta(hours=1), CALLERS,
                                                      overwrite=True)
        report.progress(f"named ({kind}): put {out['put_per_s']:,.0f}/s, put_many {out['put_many_per_s'] or 0:,.0f}/s; "
                        f"{jobs:,} due at one instant, plain then named")
        out["fire_plain"] = await named_fire.plain(client, hs, jobs)
        # Every put must return before the burst is due: allow for half the rate just measured.
        out["fire_named"] = await named_fire.named(client, hs, jobs, CALLERS, max(out["put_per_s"] / 2, 50.0))
        out["fire_over_plain"] = out["fire_named"]["per_s"] / max(out["fire_plain"]["per_s"], 1e-9)
        await client.jobs.close()  # the registry store the status polls opened in this loop
    return out


async def listing(env: BenchEnv, kind: str, count: int, report: Report) -> dict[str, float]:
    """Median seconds of each listing call over a scope of ``count`` names where a cluster keeps
    them by default, in registry buckets (two in-process silos owning two each, no Ray)."""
    report.progress(f"named ({kind}): loading a scope of {count:,} names into registry buckets")
    clock = _bucket_names.clock_now()
    url = env.store_url(kind)
    store = _bucket_names.file_store(url.removeprefix("file://"), clock) if kind == "file" else open_store(url)
    try:
        cluster = await _bucket_names.start(store, clock)
        started = time.perf_counter()
        await _bucket_names.load(cluster, count, named_listing.BucketRecords())
        filled = time.perf_counter() - started
        jobs = cluster.jobs()
        figures = await named_listing.measure_named(jobs, count, repeat=3)
        figures.update(await named_listing.measure(jobs, count, repeat=3, old_repeat=0))
    finally:
        await store.close()
    out = {label: statistics.median(runs) for label, runs in figures.items()}
    out["fill_s"] = filled
    return out


async def run(env: BenchEnv, quick: bool, report: Report) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for kind in ("file", "azure"):
        results[kind] = await on_cluster(env, kind, quick, report)
        sizes = (2_000,) if quick else (100_000, 1_000_000)
        results[kind]["listing"] = {str(n): await listing(env, kind, n, report) for n in sizes}
    return results


def rows(named: dict[str, Any], row: Row, cite: str) -> None:
    """The suite table's rows for named jobs: ``row(figure, value, shown, goal, goal_text, higher, baselines, published)``."""
    for kind, r in named.items():
        plain = r["plain_create"]
        row(f"Named jobs, {kind} store: put, {r['callers']} callers (puts/s)", r["put_per_s"], f"{r['put_per_s']:,.0f}",
            GOAL_PUT_PER_S[kind], f">= {GOAL_PUT_PER_S[kind]:,}", True,
            f"schedule_job x{r['callers']} {plain['schedule_job_per_s']:,.0f} (same cluster)", cite)
        if r.get("put_many_per_s"):
            row(f"Named jobs, {kind} store: put_many, 1,000 a call (puts/s)", r["put_many_per_s"],
                f"{r['put_many_per_s']:,.0f}", GOAL_PUT_MANY_PER_S, f">= {GOAL_PUT_MANY_PER_S:,}", True,
                f"schedule_jobs {plain['schedule_jobs_per_s']:,.0f} (same cluster)")
        row(f"Named jobs, {kind} store: overwrite in a dormant shard, {r['callers']} callers (puts/s)",
            r["overwrite_per_s"], f"{r['overwrite_per_s']:,.0f}", None, "—", True, "")
        fire, plain_fire = r["fire_named"], r["fire_plain"]
        row(f"Named jobs, {kind} store: {r['jobs']:,} due at one instant (jobs/s, ratio to plain)",
            r["fire_over_plain"], f"{fire['per_s']:,.0f} ({r['fire_over_plain']:.2f}x plain)", GOAL_FIRE_OVER_PLAIN,
            f">= {GOAL_FIRE_OVER_PLAIN}x plain", True, f"plain jobs {plain_fire['per_s']:,.0f} (same cluster, same run)")
        for size, figures in r.get("listing", {}).items():
            n = int(size)
            page, count = figures["named: list_page(limit=50), first"] * 1e3, figures["named: count()"] * 1e3
            at_goal = n >= 1_000_000
            row(f"Named jobs, {kind} store, {n:,} names: list_page(limit=50) (ms)", page, f"{page:.1f}",
                GOAL_LIST_PAGE_MS if at_goal else None, f"<= {GOAL_LIST_PAGE_MS} at 1,000,000" if at_goal else "—",
                False, f"90% deep {figures['named: list_page(limit=50), deep'] * 1e3:.1f}")
            row(f"Named jobs, {kind} store, {n:,} names: count() (ms)", count, f"{count:.1f}",
                GOAL_COUNT_MS if at_goal else None, f"<= {GOAL_COUNT_MS} at 1,000,000" if at_goal else "—", False,
                f"of a 100-name prefix {figures['named: count(prefix), 100 names'] * 1e3:.1f}")
            ui = figures["paged: first page"] * 1e3
            at_page_goal = n == 100_000
            row(f"Named jobs, {kind} store, {n:,} names: dashboard's first page (ms)", ui, f"{ui:.0f}",
                GOAL_PAGE_MS if at_page_goal else None, f"<= {GOAL_PAGE_MS} at 100,000" if at_page_goal else "—",
                False, "")


def draw(report: Report, named: dict[str, Any]) -> None:
    """Named beside plain: creation and firing rates per store."""
    report.bars("named jobs beside plain ones (same cluster, same run)", [
        ("create, jobs/s", {**{f"{k} put x{CALLERS}": r["put_per_s"] for k, r in named.items()},
                            **{f"{k} schedule_job x{CALLERS}": r["plain_create"]["schedule_job_per_s"]
                               for k, r in named.items()}}, min(GOAL_PUT_PER_S.values())),
        ("due at one instant, jobs/s", {**{f"{k} named": r["fire_named"]["per_s"] for k, r in named.items()},
                                        **{f"{k} plain": r["fire_plain"]["per_s"] for k, r in named.items()}}, None),
    ], suffix="named")
