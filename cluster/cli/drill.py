"""Failover drills: load, kill silos at random, optionally pause one, then count from the records.

A drill schedules jobs due over the next seconds into a recording handler that writes every
execution durably (JSON lines, fsynced), SIGKILLs silo worker processes at random moments (Ray
restarts them as new incarnations; their shards are adopted), optionally SIGSTOPs one silo past
the suspicion timeout and resumes it, and then checks:

- lost = 0: every acknowledged job executed at least once;
- early = 0: no execution started before the time it was due;
- duplicates, each explained by an attempt that was in flight when its silo was killed or paused;
- failover time: kill -> first execution of a job from the killed incarnation's shards;
- zombie fires = 0: the paused silo fired nothing after it was declared dead.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import ray

from cluster._cluster import Cluster
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ClusterOptions
from cluster.model.wire import resolve_code_path

RECORDER = "handlers.builtin:Recorder"  # by path: cluster code never imports handlers
DRILL_OPTIONS = ClusterOptions(
    shard_duration="4s",
    lookahead="2s",
    heartbeat_interval="250ms",
    suspicion_timeout="1500ms",
    adoption_interval="250ms",
    staging_interval="250ms",
    handler_timeout="10s",
    poison_forgiveness="3s",
)


@dataclass
class Event:
    kind: str  # "kill" | "pause" | "resume"
    at: float  # wall clock, seconds
    silo: str
    owner: str  # the incarnation hit, "<silo>#<n>"
    shards: list[str] = field(default_factory=list)  # what it owned when hit


@dataclass
class DrillReport:
    jobs: int
    executions: int
    lost: int
    early: int
    duplicates: int
    explained_duplicates: int
    failover_s: list[float] = field(default_factory=list)
    zombie_fires: int = 0
    events: list[Event] = field(default_factory=list)
    lost_jobs: list[tuple[str, str | None, float]] = field(default_factory=list)  # (id, shard, due), first 100
    unexplained_duplicates: list[list[tuple[str, float, float]]] = field(default_factory=list)  # runs (owner, started, due)

    @property
    def ok(self) -> bool:
        """Nothing lost, nothing early, nothing fired by a silo after it was declared dead.

        Duplicates are at-least-once delivery at work and are reported, not failed on.
        """
        return self.lost == 0 and self.early == 0 and self.zombie_fires == 0

    def table(self) -> str:
        p50 = statistics.median(self.failover_s) if self.failover_s else float("nan")
        worst = max(self.failover_s, default=float("nan"))
        rows = [
            ("jobs acknowledged", self.jobs),
            ("executions", self.executions),
            ("kills", sum(e.kind == "kill" for e in self.events)),
            ("pauses", sum(e.kind == "pause" for e in self.events)),
            ("lost", self.lost),
            ("early", self.early),
            ("duplicates", f"{self.duplicates} ({self.explained_duplicates} re-runs of attempts in flight at a kill or pause, "
                           f"{self.duplicates - self.explained_duplicates} other)"),
            ("failover p50 / max", f"{p50:.2f} s / {worst:.2f} s over {len(self.failover_s)} kills"),
            ("paused silo's fires after it was declared dead", self.zombie_fires),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def _victim(cluster: Cluster, silo_id: str) -> tuple[int, str, list[str]]:
    """The silo's worker pid, incarnation and the shards it owns right now."""
    status = ray.get(cluster.silos[cluster.silo_ids.index(silo_id)].status.remote(), timeout=60)
    return status["pid"], status["owner"], [s["name"] for s in status["shards"]]


async def run_drill(
    cluster: Cluster,
    out_dir: Path,
    *,
    kills: int = 3,
    pause: bool = False,
    rate: float = 200.0,
    seed: int | None = None,
    progress: bool = True,
) -> DrillReport:
    """Drive a drill against a running ``cluster``; records and a timeline go to ``out_dir``."""
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240  one local mkdir before the drill starts
    records_path = out_dir / "executions.jsonl"
    records_path.unlink(missing_ok=True)
    recorder_cls = ray.remote(resolve_code_path(RECORDER))
    name = f"drill-recorder-{os.getpid()}-{rng.randrange(1 << 30)}"
    recorder = recorder_cls.options(name=name, namespace=cluster.namespace, num_cpus=0).remote(str(records_path))
    await recorder.executions.remote()

    suspicion = cluster.options.suspicion_timeout.total_seconds()
    gap = suspicion + 1.5  # let each failover finish before the next kill
    span = 3.0 + kills * gap + (2 * suspicion + 3 if pause else 0) + 2.0
    client = cluster.client()
    start = datetime.now(timezone.utc) + timedelta(seconds=1.5)
    count = int(rate * span)
    target = Target.actor(name, cluster.namespace)
    specs = [{"target": target, "due": start + timedelta(seconds=span * k / count), "data": {"k": k}} for k in range(count)]
    batches = max(len(cluster.silo_ids) * 2, -(-count // 1000))
    jobs: list[ScheduledJob] = []
    for b in range(batches):  # strided, so every silo (batches go round-robin) holds jobs due all along
        jobs += await client.schedule_jobs(specs[b::batches])
    _say(progress, f"drill: {count} jobs acknowledged, due over {span:.0f} s; {kills} kills" + (", 1 pause" if pause else ""))

    events: list[Event] = []
    await asyncio.sleep(2.0)
    for n in range(kills):
        await asyncio.sleep(rng.uniform(0.2, 1.0))
        silo = rng.choice(cluster.silo_ids)
        pid, owner, shards = _victim(cluster, silo)
        os.kill(pid, signal.SIGKILL)
        events.append(Event("kill", time.time(), silo, owner, shards))
        _say(progress, f"drill: kill {n + 1}/{kills}: silo {silo} ({owner}, pid {pid})")
        await asyncio.sleep(gap)
    if pause:
        silo = rng.choice(cluster.silo_ids)
        pid, owner, shards = _victim(cluster, silo)
        os.kill(pid, signal.SIGSTOP)
        events.append(Event("pause", time.time(), silo, owner, shards))
        _say(progress, f"drill: pause silo {silo} ({owner}) for {2 * suspicion:.1f} s")
        await asyncio.sleep(2 * suspicion + 1.0)
        os.kill(pid, signal.SIGCONT)
        events.append(Event("resume", time.time(), silo, owner, shards))

    deadline = start.timestamp() + span + 20
    expected = {j.id for j in jobs}
    while time.time() < deadline:
        seen = {r["job_id"] for r in _read(records_path)}
        if expected <= seen:
            break
        await asyncio.sleep(0.5)
    await asyncio.sleep(1.0)  # stragglers: duplicates still in flight
    ray.kill(recorder)
    report = analyse(jobs, _read(records_path), events, cluster.options)
    timeline(report, _read(records_path), out_dir / "drill-timeline.png")
    (out_dir / "drill.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


def _say(progress: bool, line: str) -> None:
    if progress:
        print(line, file=sys.stderr, flush=True)


def _read(path: Path) -> list[dict[str, Any]]:
    out = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a torn last line
    return out


def analyse(jobs: list[ScheduledJob], records: list[dict[str, Any]], events: list[Event],
            options: ClusterOptions) -> DrillReport:
    """Count lost, early, duplicate and zombie fires, and failover times, from the records."""
    due = {j.id: j.due.timestamp() for j in jobs}
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        runs.setdefault(r["job_id"], []).append(r)
    lost = sum(1 for j in due if j not in runs)
    early = sum(1 for r in records if r["started"] < r["scheduled_for"])
    duplicates = sum(len(v) - 1 for v in runs.values())
    # A duplicate is explained when an earlier run of the job was by an incarnation that was then
    # killed or paused: its outcome was not durable, so the adopter ran the job again.
    hit = {e.owner for e in events}
    doubled = [v for v in runs.values() if len(v) > 1]
    unexplained = [
        [(r["run_id"].rpartition("@")[2], round(r["started"], 3), round(r["scheduled_for"], 3)) for r in v]
        for v in doubled if not any(r["run_id"].rpartition("@")[2] in hit for r in v[:-1])
    ]
    explained = sum(len(v) - 1 for v in doubled) - sum(len(v) - 1 for v in unexplained)
    shard_of = {j.id: j.shard for j in jobs}
    failover = []
    for e in (e for e in events if e.kind == "kill"):
        owned = set(e.shards)
        after = [r["started"] for r in records if r["started"] > e.at and shard_of.get(r["job_id"]) in owned
                 and not r["run_id"].endswith("@" + e.owner)]
        if after:
            failover.append(round(min(after) - e.at, 3))
    # A paused silo fires nothing while stopped, and after it resumes it must learn that it was
    # declared dead before firing again: any run by it started later than the calls it had
    # already sent when it stopped (0.5 s) is a zombie fire.
    zombie = 0
    for pause in (e for e in events if e.kind == "pause"):
        zombie += sum(1 for r in records if r["run_id"].endswith("@" + pause.owner) and r["started"] > pause.at + 0.5)
    lost_jobs = [(j.id, j.shard, j.due.timestamp()) for j in jobs if j.id not in runs][:100]
    return DrillReport(len(due), len(records), lost, early, duplicates, explained, failover, zombie, events, lost_jobs,
                       unexplained[:50])


def timeline(report: DrillReport, records: list[dict[str, Any]], path: Path) -> Path | None:
    """Executions over time, one colour per silo incarnation, kills and pauses marked."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not records:
        return None
    t0 = min(r["started"] for r in records)
    owners = sorted({r["run_id"].rpartition("@")[2] for r in records})
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for owner in owners:
        xs = [r["started"] - t0 for r in records if r["run_id"].endswith("@" + owner)]
        lateness = [1000 * (r["started"] - r["scheduled_for"]) for r in records if r["run_id"].endswith("@" + owner)]
        ax.scatter(xs, lateness, s=4, label=f"fired by {owner}")
    for e in report.events:
        ax.axvline(e.at - t0, color={"kill": "#c53030", "pause": "#dd6b20", "resume": "#38a169"}[e.kind], linestyle="--", linewidth=1)
        ax.annotate(f"{e.kind} {e.owner}", (e.at - t0, ax.get_ylim()[1] * 0.9), rotation=90, fontsize=7, va="top")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("seconds since the first execution")
    ax.set_ylabel("lateness (ms, start - due)")
    p50 = statistics.median(report.failover_s) if report.failover_s else float("nan")
    ax.set_title(f"drill: {report.jobs} jobs, lost {report.lost}, early {report.early}, duplicates {report.duplicates}, "
                 f"failover p50 {p50:.2f} s")
    ax.legend(fontsize=7, markerscale=3, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_drill_command(args: Any) -> int:
    """``timeshard drill``: start a cluster, run the drill, print the table, exit 1 on loss."""
    ray.init(namespace="timeshard-drill", include_dashboard=False, log_to_driver=False, configure_logging=False)
    store = args.store
    if store.startswith("file://") and Path(store[7:]).exists():
        import shutil

        shutil.rmtree(store[7:])
    cluster = Cluster.start(store, silos=args.silos, namespace="timeshard-drill", options=DRILL_OPTIONS)
    try:
        report = asyncio.run(run_drill(cluster, Path(args.out), kills=args.kills, pause=args.pause,
                                       rate=args.rate, seed=args.seed))
    finally:
        cluster.shutdown(graceful=False)
        ray.shutdown()
    print("drill results")
    print(report.table())
    print(f"timeline: {Path(args.out) / 'drill-timeline.png'}; figures: {Path(args.out) / 'drill.json'}")
    print("result: " + ("OK" if report.ok else "FAILED"))
    return 0 if report.ok else 1
