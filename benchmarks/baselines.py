"""Baselines measured beside timeshard: the floor for lateness and a durable Python peer.

    python -m benchmarks.baselines [--quick]

- a non-durable asyncio timer in a Ray actor (``loop.call_later`` per job): the lateness floor
  of any Python scheduler on this machine — no storage, no Ray call per job;
- APScheduler 3 with its SQLAlchemy job store on SQLite (a durable peer a Python user would
  pick): scheduling throughput (``add_job``), lateness at a steady 1,000 jobs/s, and process RSS
  per stored job. Needs ``pip install 'apscheduler<4' sqlalchemy`` (the ``bench`` extra).

The no-op Ray call rate, the third baseline, is measured by ``benchmarks.cluster``. Writes
baselines.json and baselines*.png (where: ``benchmarks.report``; into benchmarks/results/ with ``--publish``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import ray

from benchmarks.cluster import STEADY_RATE, BenchEnv, TimerFloor, bench_env, rate, timer_floor

__all__ = ["TimerFloor", "apscheduler", "run", "timer_floor"]
from benchmarks.memory import rss_bytes
from benchmarks.report import Report, add_publish_flag, machine_info, percentiles, report_for


def noop() -> None:
    """The job APScheduler runs: nothing (stored in SQLite by its import path)."""


# By path, not by object: run as ``python -m benchmarks.baselines`` the function would be stored
# as ``__main__:noop``, which the scheduler's process cannot resolve.
_NOOP_REF = "benchmarks.baselines:noop"


def steady_dues(seconds: float, lead: float) -> list[float]:
    start = time.time() + lead
    return [start + i / STEADY_RATE for i in range(int(seconds * STEADY_RATE))]


class APSchedulerPeer:
    """APScheduler 3 (BackgroundScheduler, SQLAlchemy job store on SQLite) in its own process."""

    def __init__(self, db_path: str) -> None:
        from apscheduler.events import EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
        from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
        from apscheduler.schedulers.background import BackgroundScheduler

        self._ran: list[float] = []
        self._missed = 0
        self._missed_code = EVENT_JOB_MISSED
        # misfire_grace_time=None: run late jobs however late, as timeshard does, so lateness
        # is measured rather than hidden by skipped jobs.
        self._scheduler = BackgroundScheduler(
            jobstores={"default": SQLAlchemyJobStore(url=f"sqlite:///{db_path}")},
            job_defaults={"misfire_grace_time": None, "coalesce": False},
            timezone="UTC",
        )
        self._scheduler.add_listener(self._on_event, EVENT_JOB_EXECUTED | EVENT_JOB_MISSED)
        self._scheduler.start()

    def _on_event(self, event: Any) -> None:
        # EXECUTED is sent right after the no-op job returns: its time is the job's start.
        if event.code == self._missed_code:
            self._missed += 1
        else:
            self._ran.append((time.time() - event.scheduled_run_time.timestamp()) * 1e3)

    def rss(self) -> int:
        return rss_bytes()

    def add(self, dues: Sequence[float]) -> float:
        """Add one date job per due time (epoch seconds), one durable insert each; returns seconds."""
        started = time.perf_counter()
        for due in dues:
            self._scheduler.add_job(_NOOP_REF, "date", run_date=datetime.fromtimestamp(due, timezone.utc))
        return time.perf_counter() - started

    def count(self) -> int:
        return len(self._ran) + self._missed

    def take(self) -> tuple[list[float], int]:
        ran, missed, self._ran, self._missed = self._ran, self._missed, [], 0
        return ran, missed

    def stop(self) -> None:
        self._scheduler.shutdown(wait=False)


async def apscheduler(env: BenchEnv, n_dormant: int, steady_s: float, report: Report) -> tuple[dict[str, Any], list[float]]:
    """Scheduling rate and bytes per stored job (jobs a day away), then lateness at 1,000/s."""
    peer = ray.remote(APSchedulerPeer).options(num_cpus=0).remote(str(Path(env.scratch) / "apscheduler.sqlite"))
    try:
        far = time.time() + 86_400
        await peer.add.remote([far + i for i in range(200)])  # warm: tables, caches, code paths
        before = await peer.rss.remote()
        report.progress(f"apscheduler: adding {n_dormant:,} jobs a day away")
        seconds = await peer.add.remote([far + 200 + i for i in range(n_dormant)])
        after = await peer.rss.remote()
        schedule_rate = rate(n_dormant, seconds)
        n = int(steady_s * STEADY_RATE)
        lead = 2.0 + 1.3 * n / max(schedule_rate, 1.0)
        report.progress(f"apscheduler: {n:,} jobs at {STEADY_RATE:,}/s (adding them takes ~{lead:.0f} s)")
        dues = steady_dues(steady_s, lead)
        add_s = await peer.add.remote(dues)
        deadline = dues[-1] + 60
        while await peer.count.remote() < n and time.time() < deadline:  # noqa: ASYNC110  polls a remote actor: no local Event
            await asyncio.sleep(0.5)
        lateness, missed = await peer.take.remote()
        await peer.stop.remote()
    finally:
        ray.kill(peer)
    late_adds = max(0.0, add_s - lead)
    return {"schedule_per_s": schedule_rate, "scheduled": n_dormant, "bytes_per_job": (after - before) / n_dormant,
            "rss_before": before, "rss_after": after,
            "lateness": {"jobs": n, "executed": len(lateness), "missed": missed, "adds_late_by_s": late_adds,
                         **percentiles(lateness)}}, lateness


async def run(env: BenchEnv, quick: bool, report: Report) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Every baseline; returns figures and the lateness samples (ms) for CDFs."""
    steady_s = 1.0 if quick else 10.0
    report.progress(f"asyncio timer floor: {STEADY_RATE:,} jobs/s for {steady_s:g} s")
    floor, floor_samples = await timer_floor(steady_s)
    aps, aps_samples = await apscheduler(env, 200 if quick else 10_000, 0.3 if quick else 10.0, report)
    return {"asyncio_timer": floor, "apscheduler": aps}, {"asyncio timer (floor)": floor_samples,
                                                           "APScheduler 3 + SQLite": aps_samples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.baselines", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small runs, for the test suite")
    add_publish_flag(parser)
    args = parser.parse_args(argv)
    report = report_for("baselines", parser, args)

    async def go() -> tuple[dict[str, Any], dict[str, list[float]]]:
        with bench_env([]) as env:
            return await run(env, args.quick, report)

    results, samples = asyncio.run(go())
    floor, aps = results["asyncio_timer"], results["apscheduler"]
    report.table(["baseline", "schedule/s", "late p50 ms", "p99 ms", "max ms", "bytes/job"], [
        ["asyncio timer (floor)", "", f"{floor['p50']:.2f}", f"{floor['p99']:.2f}", f"{floor['max']:.2f}", ""],
        ["APScheduler 3 + SQLite", f"{aps['schedule_per_s']:,.0f}", f"{aps['lateness']['p50']:.1f}",
         f"{aps['lateness']['p99']:.1f}", f"{aps['lateness']['max']:.1f}", f"{aps['bytes_per_job']:,.0f}"],
    ])
    report.cdf(f"baseline lateness at {STEADY_RATE:,} jobs/s", samples)
    report.data.update({"machine": machine_info(), "results": results})
    return report.finish()


if __name__ == "__main__":
    raise SystemExit(main())
