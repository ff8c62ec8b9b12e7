"""``timeshard demo``: the main job, end to end, in about a minute.

Three silos on the embedded file store; a recording handler activated as a grain; one-shot jobs
spread over ``--seconds``, a cron every 2 s, a job that fails twice and then succeeds under
back-off, one cancelled job; half-way, one silo's process is killed (Ray restarts it and the
silos adopt its shards). A live status line, then a summary: fired, on time, retried, lost.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import ray

from cluster._cluster import Cluster
from cluster.cli.job_text import NICENESS_ADVICE, niced
from cluster.model.jobs import Target
from cluster.model.options import ClusterOptions
from cluster.model.policies import FailurePolicy

NAMESPACE = "timeshard-demo"
HANDLER = "handlers.builtin:Recorder"  # activated by path: cluster code never imports handlers
ON_TIME_S = 0.1
OPTIONS = ClusterOptions(
    shard_duration="10s",
    lookahead="5s",
    heartbeat_interval="500ms",
    suspicion_timeout="3s",
    adoption_interval="500ms",
)


def _wipe_file_store(url: str) -> None:
    # Demo data only: a fresh store per run, so jobs of an earlier run do not fire into this one.
    if url.startswith("file://"):
        path = Path(url[len("file://"):])
        if path.exists():
            shutil.rmtree(path)


def run_demo(args: argparse.Namespace) -> int:
    _wipe_file_store(args.store)
    print(f"timeshard demo: starting Ray and 3 silos on {args.store} ...", flush=True)
    cluster = Cluster.start(args.store, silos=3, namespace=NAMESPACE, options=OPTIONS)  # and Ray, if none runs
    try:
        above = sorted({niced(s) for s in cluster.status()} - {0})
        if above:
            print(f"NICED: silos run at niceness {', '.join(map(str, above))}: {NICENESS_ADVICE}", flush=True)
        return asyncio.run(_drive(cluster, args))
    finally:
        cluster.shutdown(graceful=True, timeout=10)
        ray.shutdown()


class _Plan:
    def __init__(self, start: datetime, seconds: float, jobs: int) -> None:
        self.start = start
        self.seconds = seconds
        self.one_shots = jobs
        self.cron_fires = max(1, int(seconds // 2))
        self.flaky_fails = 2


async def _drive(cluster: Cluster, args: argparse.Namespace) -> int:
    client = cluster.client()
    target = Target.grain(HANDLER, f"demo-{os.getpid()}")
    plan = _Plan(datetime.now(timezone.utc) + timedelta(seconds=2), args.seconds, args.jobs)

    t = time.perf_counter()
    one_shots = await client.schedule_jobs([
        {"target": target, "name": f"reminder-{i}", "due": plan.start + timedelta(seconds=args.seconds * i / args.jobs)}
        for i in range(args.jobs)
    ])
    batch_s = time.perf_counter() - t
    cron = await client.schedule_job(target, "every-2s", schedule="*/2 * * * * *", repeats=plan.cron_fires)
    flaky = await client.schedule_job(
        target, "flaky", due=plan.start + timedelta(seconds=1), data={"fail_attempts": plan.flaky_fails},
        failure_policy=FailurePolicy.backoff(base_delay="1s", max_delay="4s", max_retries=5),
    )
    cancelled = await client.schedule_job(target, "cancelled", due=plan.start + timedelta(seconds=3))
    assert await client.try_cancel_job(cancelled)
    print(f"scheduled {args.jobs} one-shot jobs in one batch ({args.jobs / batch_s:,.0f} jobs/s), "
          f"a cron '*/2 * * * * *' x{plan.cron_fires}, a job failing {plan.flaky_fails}x under back-off, "
          f"and cancelled one", flush=True)

    crash_at = time.monotonic() + 2 + args.seconds / 2
    crashed: str | None = None
    deadline = time.monotonic() + 2 + args.seconds + 25
    records: list[dict[str, Any]] = []
    grain = None
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        if grain is None:
            grain = _find_actor(target.name)
        if grain is not None:
            records = await grain.executions.remote()
        if crashed is None and not args.no_crash and time.monotonic() >= crash_at:
            crashed = _crash_a_silo(cluster, "1")
        _status_line(plan, records, one_shots, cron.id, flaky.id, crashed)
        if _finished(plan, records, one_shots, cron.id, flaky.id):
            break
    print(file=sys.stderr, flush=True)
    return _summary(plan, records, one_shots, cron.id, flaky.id, cancelled.id, crashed)


def _find_actor(name: str) -> Any:
    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


def _crash_a_silo(cluster: Cluster, silo_id: str) -> str:
    handle = cluster.silos[cluster.silo_ids.index(silo_id)]
    pid = ray.get(handle.ready.remote(), timeout=30)["pid"]
    os.kill(pid, signal.SIGKILL)
    print(f"\nkilled silo {silo_id} (pid {pid}) with SIGKILL; Ray restarts it, the others adopt its shards", flush=True)
    return silo_id


def _split(records: list[dict[str, Any]], one_shots: list, cron_id: str, flaky_id: str) -> tuple[set, list, list]:
    ids = {j.id for j in one_shots}
    fired = {r["job_id"] for r in records if r["job_id"] in ids}
    cron = [r for r in records if r["job_id"] == cron_id]
    flaky = [r for r in records if r["job_id"] == flaky_id]
    return fired, cron, flaky


def _finished(plan: _Plan, records: list, one_shots: list, cron_id: str, flaky_id: str) -> bool:
    fired, cron, flaky = _split(records, one_shots, cron_id, flaky_id)
    cron_done = len({r["occurrence"] for r in cron}) >= plan.cron_fires
    return len(fired) == plan.one_shots and cron_done and any(r["outcome"] == "succeeded" for r in flaky)


def _status_line(plan: _Plan, records: list, one_shots: list, cron_id: str, flaky_id: str, crashed: str | None) -> None:
    fired, cron, flaky = _split(records, one_shots, cron_id, flaky_id)
    elapsed = (datetime.now(timezone.utc) - plan.start).total_seconds()
    tty = sys.stderr.isatty()
    if not tty and int(elapsed * 2) % 10:
        return  # piped: a line every 5 s rather than a redrawn one every 0.5 s
    flaky_state = "ok" if any(r["outcome"] == "succeeded" for r in flaky) else "waiting"
    line = (f"[{elapsed:5.1f}s] one-shot {len(fired):>4}/{plan.one_shots}  cron {len(cron):>2}/{plan.cron_fires}  "
            f"flaky attempts {len(flaky)} ({flaky_state})  executions {len(records)}"
            + (f"  silo {crashed} killed" if crashed else ""))
    if tty:
        print("\r" + line.ljust(100), end="", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def _summary(plan: _Plan, records: list, one_shots: list, cron_id: str, flaky_id: str, cancelled_id: str,
             crashed: str | None) -> int:
    fired, cron, flaky = _split(records, one_shots, cron_id, flaky_id)
    lateness = [r["started"] - r["scheduled_for"] for r in records]
    early = sum(1 for x in lateness if x < 0)
    lost = plan.one_shots - len(fired) + max(0, plan.cron_fires - len({r["occurrence"] for r in cron}))
    flaky_ok = any(r["outcome"] == "succeeded" for r in flaky)
    duplicates = len([r for r in records if r["job_id"] in {j.id for j in one_shots}]) - len(fired)
    on_time = sum(1 for x in lateness if 0 <= x <= ON_TIME_S)
    quantiles = statistics.quantiles(lateness, n=100) if len(lateness) >= 2 else [0.0] * 99
    rows = [
        ("one-shot jobs fired", f"{len(fired)}/{plan.one_shots}"),
        ("cron occurrences", f"{len({r['occurrence'] for r in cron})}/{plan.cron_fires}"),
        ("flaky job", f"{len(flaky)} attempts, dequeue_count {[r['dequeue_count'] for r in flaky]}, "
                      + ("succeeded" if flaky_ok else "NOT succeeded")),
        ("retried", str(sum(1 for r in records if r["dequeue_count"] > 1))),
        ("cancelled job fired", str(sum(1 for r in records if r["job_id"] == cancelled_id))),
        ("executions", str(len(records))),
        (f"on time (<= {ON_TIME_S * 1000:.0f} ms late)", f"{on_time}/{len(records)}"),
        ("lateness p50 / p99 / max", f"{quantiles[49] * 1000:.1f} / {quantiles[98] * 1000:.1f} / "
                                     f"{max(lateness, default=0) * 1000:.1f} ms"),
        ("duplicates (at-least-once)", str(duplicates)),
        ("silo crashed", f"silo {crashed} (SIGKILL), its jobs fired late by the failover" if crashed else "no"),
        ("early", str(early)),
        ("lost", str(lost)),
    ]
    width = max(len(k) for k, _ in rows)
    print("summary")
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")
    ok = lost == 0 and early == 0 and flaky_ok
    print("result: " + ("OK — nothing lost, nothing early" if ok else "FAILED"))
    return 0 if ok else 1
