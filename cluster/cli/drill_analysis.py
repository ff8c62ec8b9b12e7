"""What a drill concludes from what it saw: lost, early, duplicate, two-owner and zombie fires,
failover times, and a timeline plot — from the recorder's executions and the store as watched.

Kept apart from the drills themselves (``drill``, ``node_drill``) so the verdicts are tested on
hand-made records without Ray (``tests/drills/test_drill_analysis.py``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from cluster.runtime.membership import DEAD, MEMBER_PREFIX, Member
from cluster.runtime.shardlog import SHARD_PREFIX
from storage import StorageError, Store
from storage.generations import list_logs

#: An attempt counts as in flight at a kill if it started at most this long before it: the
#: recorder returns at once, so what is left is the Ray reply and one outcome append.
IN_FLIGHT_S = 2.0
#: Calls a silo sent just before it was killed or stopped may still start at the handler.
DELIVERY_S = 0.5
OBSERVE_INTERVAL_S = 0.1
#: How long after a fire the observer may take to see that its sender had claimed the shard back.
TAKEN_BACK_S = 0.5
#: Seconds a peer takes to claim a shard, replay it and fire its first due job, at most.
CLAIM_S = 0.5

def failover_bound(options: ClusterOptions) -> float:
    """Seconds from a kill until its silo's due jobs fire elsewhere, at most (the README's claim).

    The slowest path is a silo gone without proof (a lost machine): peers declare it dead once
    they have watched its row unchanged for ``suspicion_timeout``. They see its last heartbeat up
    to one ``heartbeat_interval`` after it landed and look again every interval; claiming,
    loading and firing take the rest (``CLAIM_S``). A killed process Ray saw exit is faster.
    """
    return options.suspicion_timeout.total_seconds() + 2 * options.heartbeat_interval.total_seconds() + CLAIM_S


@dataclass
class Event:
    kind: str  # "kill" | "pause" | "resume"
    at: float  # wall clock, seconds
    silo: str
    owner: str  # the incarnation hit, "<silo>#<n>"
    shards: list[str] = field(default_factory=list)  # what it owned when hit


@dataclass
class Observer:
    """Who owns each shard and each silo's row, as seen in the store, with the time first seen."""

    store: Store
    shard_owners: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    rows: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)  # silo -> (t, incarnation, status)
    errors: int = 0

    async def run(self) -> None:
        while True:
            await self.observe()
            await asyncio.sleep(OBSERVE_INTERVAL_S)

    async def observe(self) -> None:
        try:
            heads = await list_logs(self.store, SHARD_PREFIX)
            members = await self.store.list(MEMBER_PREFIX)
        except StorageError:
            self.errors += 1
            return
        now = time.time()
        for head in heads:
            history = self.shard_owners.setdefault(head.base, [])
            owner = head.metadata.get("owner", "")
            if not history or history[-1][1] != owner:
                history.append((now, owner))
        for info in members:
            row = Member.from_metadata(info.metadata, info.etag)
            seen = self.rows.setdefault(row.silo_id, [])
            if not seen or seen[-1][1:] != (row.incarnation, row.status):
                seen.append((now, row.incarnation, row.status))

    def declared_dead_at(self, owner: str) -> float | None:
        """When ``owner``'s row was first seen dead or taken by a later incarnation."""
        silo, _, incarnation = owner.rpartition("#")
        for at, inc, status in self.rows.get(silo, []):
            if inc > int(incarnation) or (inc == int(incarnation) and status == DEAD):
                return at
        return None

    def superseded_at(self, shard: str, owner: str, sent: float) -> float | None:
        """When the store showed another owner of ``shard`` before ``owner`` sent a fire at
        ``sent``, with ``owner`` not seen taking it back by then; None if it held the shard.

        A shard handed over and adopted back has its owner twice in its history. Observation
        lags the store by at most ``OBSERVE_INTERVAL_S`` (plus a listing), so a claim back is
        looked for up to ``TAKEN_BACK_S`` after the fire: the check can miss fires, never invent one.
        """
        history = self.shard_owners.get(shard, [])
        if not any(o == owner for _, o in history):
            return None  # never seen owning it: too short to observe
        other = None
        for at, o in history:
            if at > sent + TAKEN_BACK_S:
                break
            if o != owner and at < sent and other is None:
                other = at
            elif o == owner and other is not None:
                other = None  # taken back (before the fire, or within observation lag after it)
        return other


@dataclass
class DrillReport:
    jobs: int
    executions: int
    lost: int
    early: int
    duplicates: int
    explained_duplicates: int
    failover_s: list[float] = field(default_factory=list)
    failover_bound_s: float = 0.0
    unmeasured_kills: list[str] = field(default_factory=list)  # killed owners whose jobs nobody took over
    zombie_fires: int = 0
    two_owner_fires: int = 0
    paused_declared_dead_s: float | None = None  # pause -> its row seen dead; None: never
    silo_faults: list[str] = field(default_factory=list)
    storm: bool = False
    schedule_errors: int = 0
    observer_errors: int = 0
    events: list[Event] = field(default_factory=list)
    lost_jobs: list[tuple[str, str | None, float]] = field(default_factory=list)  # (id, shard, due), first 100
    #: per job: (shard, 0, 0), then its runs as (owner, started, due)
    unexplained_duplicates: list[list[tuple[str, float, float]]] = field(default_factory=list)
    two_owner_examples: list[tuple[str, str, str, float, float]] = field(default_factory=list)  # job, shard, owner, started, superseded
    zombie_examples: list[tuple[str, str, float]] = field(default_factory=list)  # job, owner, started
    #: Each shard's owners as seen in the store, (first seen, owner), and each silo's rows
    #: (first seen, incarnation, status): what a failed check is diagnosed from.
    shard_owners: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    member_rows: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)

    def history_of(self, shard: str | None) -> list[tuple[float, str]]:
        return self.shard_owners.get(shard or "", [])

    @property
    def other_duplicates(self) -> int:
        return self.duplicates - self.explained_duplicates

    @property
    def failover_ok(self) -> bool:
        if self.storm:
            return True
        return not self.unmeasured_kills and all(f <= self.failover_bound_s for f in self.failover_s)

    @property
    def pause_ok(self) -> bool:
        return not any(e.kind == "pause" for e in self.events) or self.paused_declared_dead_s is not None

    @property
    def ok(self) -> bool:
        """Nothing lost or early; duplicates only from attempts in flight at a kill or pause; one
        owner firing per shard at every moment; failover within its bound; no silo exceptions."""
        return (self.lost == 0 and self.early == 0 and self.other_duplicates == 0 and self.zombie_fires == 0
                and self.two_owner_fires == 0 and self.failover_ok and self.pause_ok and not self.silo_faults)

    def table(self) -> str:
        p50 = statistics.median(self.failover_s) if self.failover_s else float("nan")
        worst = max(self.failover_s, default=float("nan"))
        kills = sum(e.kind == "kill" for e in self.events)
        failover = f"{p50:.2f} s / {worst:.2f} s over {len(self.failover_s)} of {kills} kills"
        if not self.storm:
            failover += f" (bound {self.failover_bound_s:.1f} s" + (
                f"; {len(self.unmeasured_kills)} kills never taken over)" if self.unmeasured_kills else ")")
        rows = [
            ("jobs acknowledged", self.jobs),
            ("executions", self.executions),
            ("kills", kills),
            ("pauses", sum(e.kind == "pause" for e in self.events)),
            ("lost", self.lost),
            ("early", self.early),
            ("duplicates", f"{self.duplicates} ({self.explained_duplicates} re-runs of attempts in flight at a kill or pause, "
                           f"{self.other_duplicates} other)"),
            ("fires by a superseded shard owner", self.two_owner_fires),
            ("failover p50 / max", failover),
            ("fires after a kill or declared death", self.zombie_fires),
        ]
        if any(e.kind == "pause" for e in self.events):
            dead = self.paused_declared_dead_s
            rows.append(("paused silo declared dead after", "never" if dead is None else f"{dead:.2f} s"))
        rows.append(("silo unhandled exceptions", len(self.silo_faults)))
        if self.storm:
            rows.append(("schedule calls refused during the storm", self.schedule_errors))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["other_duplicates"] = self.other_duplicates
        return out

def _sent(record: Mapping[str, Any]) -> float:
    """When the silo's call reached the handler (the recorder notes it; else when the job started)."""
    return float(record.get("received", record["started"]))


def _owner(record: Mapping[str, Any]) -> str:
    return str(record["run_id"]).rpartition("@")[2]


def analyse(jobs: list[ScheduledJob], records: list[dict[str, Any]], events: list[Event],
            options: ClusterOptions, observer: Observer | None = None, *, storm: bool = False) -> DrillReport:
    """Count lost, early, duplicate, two-owner and zombie fires, and failover times, from the records."""
    due = {j.id: j.due.timestamp() for j in jobs}
    shard_of = {j.id: j.shard for j in jobs}
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: r["started"]):
        runs.setdefault(r["job_id"], []).append(r)
    lost = sum(1 for j in due if j not in runs)
    early = sum(1 for r in records if r["started"] < r["scheduled_for"])
    duplicates = sum(len(v) - 1 for v in runs.values())

    # A re-run is explained by an earlier run of the same job that was in flight when its own
    # incarnation was killed or paused, and it started after that moment. One in-flight attempt
    # explains one re-run: a second would mean two silos took the job over.
    hits = [e for e in events if e.kind in ("kill", "pause")]

    def in_flight_at(run: Mapping[str, Any]) -> Event | None:
        return next((e for e in hits if e.owner == _owner(run) and e.at - IN_FLIGHT_S <= _sent(run) <= e.at + DELIVERY_S),
                    None)

    unexplained = []
    explained = 0
    for v in runs.values():
        used: set[int] = set()
        bad = False
        for i in range(1, len(v)):
            cause = next((j for j in range(i) if j not in used and (e := in_flight_at(v[j])) is not None
                          and v[i]["started"] > e.at), None)
            if cause is None:
                bad = True
            else:
                used.add(cause)
                explained += 1
        if bad:
            unexplained.append([(str(shard_of.get(v[0]["job_id"])), 0.0, 0.0)]
                               + [(_owner(r), round(r["started"], 3), round(r["scheduled_for"], 3)) for r in v])

    # Two owners at one moment: a fire by an incarnation after the store showed another owner of
    # the job's shard. Observation lags the store by at most OBSERVE_INTERVAL_S, so this can
    # only miss fires, never invent one.
    two_owner: list[tuple[str, str, str, float, float]] = []
    if observer is not None:
        for r in records:
            shard = shard_of.get(r["job_id"])
            superseded = observer.superseded_at(shard, _owner(r), _sent(r)) if shard else None
            if superseded is not None:
                two_owner.append((r["job_id"], str(shard), _owner(r), round(r["started"], 3), round(superseded, 3)))

    # A killed incarnation fires nothing after the calls it had sent; a paused one nothing after
    # it was declared dead.
    zombie: list[tuple[str, str, float]] = []
    paused_dead: float | None = None
    for e in hits:
        after = e.at + DELIVERY_S
        if e.kind == "pause":
            dead = observer.declared_dead_at(e.owner) if observer is not None else None
            paused_dead = None if dead is None else round(dead - e.at, 3)
            after = dead if dead is not None else float("inf")
        zombie += [(r["job_id"], e.owner, round(r["started"], 3)) for r in records
                   if _owner(r) == e.owner and _sent(r) > after]

    failover, unmeasured = [], []
    for e in (e for e in events if e.kind == "kill"):
        owned = set(e.shards)
        pending = [j for j, s in shard_of.items() if s in owned and due[j] > e.at]
        if not pending:
            continue  # nothing of its was left to take over
        takeovers = [r["started"] for r in records if r["started"] > e.at and shard_of.get(r["job_id"]) in owned
                     and _owner(r) != e.owner]
        if takeovers:
            failover.append(round(min(takeovers) - e.at, 3))
        else:
            unmeasured.append(e.owner)
    lost_jobs = [(j.id, j.shard, j.due.timestamp()) for j in jobs if j.id not in runs][:100]
    return DrillReport(len(due), len(records), lost, early, duplicates, explained, failover, failover_bound(options),
                       unmeasured, len(zombie), len(two_owner), paused_dead, storm=storm,
                       observer_errors=observer.errors if observer else 0, events=events, lost_jobs=lost_jobs,
                       unexplained_duplicates=unexplained[:50], two_owner_examples=two_owner[:50],
                       zombie_examples=zombie[:50], shard_owners=observer.shard_owners if observer else {},
                       member_rows=observer.rows if observer else {})

def timeline(report: DrillReport, jobs: list[ScheduledJob], records: list[dict[str, Any]], path: Path) -> Path | None:
    """Executions over time, one colour per silo incarnation, kills and pauses marked; below, jobs
    due vs fired so far (a gap that stays open is loss)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not records:
        return None
    t0 = min(r["started"] for r in records)
    owners = sorted({_owner(r) for r in records})
    fig, (ax, below) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for owner in owners:
        mine = [r for r in records if _owner(r) == owner]
        ax.scatter([r["started"] - t0 for r in mine], [1000 * (r["started"] - r["scheduled_for"]) for r in mine], s=4,
                   label=f"fired by {owner}")
    colours = {"kill": "#c53030", "pause": "#dd6b20", "resume": "#38a169"}
    for e in report.events:
        for axis in (ax, below):
            axis.axvline(e.at - t0, color=colours[e.kind], linestyle="--", linewidth=0.8)
        if len(report.events) <= 40:
            ax.annotate(f"{e.kind} {e.owner}", (e.at - t0, 1), rotation=90, fontsize=6, va="bottom")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("lateness (ms, start - due)")
    p50 = statistics.median(report.failover_s) if report.failover_s else float("nan")
    kind = "restart storm" if report.storm else "drill"
    ax.set_title(f"{kind}: {report.jobs} jobs, lost {report.lost}, early {report.early}, duplicates {report.duplicates} "
                 f"({report.other_duplicates} other), superseded-owner fires {report.two_owner_fires}, failover p50 {p50:.2f} s")
    ax.legend(fontsize=6, markerscale=3, loc="upper left", ncol=max(1, len(owners) // 12))
    due_times = sorted(j.due.timestamp() - t0 for j in jobs)
    first = sorted({r["job_id"]: r["started"] for r in reversed(sorted(records, key=lambda r: r["started"]))}.values())
    below.plot(due_times, range(1, len(due_times) + 1), label="jobs due", color="#4a5568", linewidth=1)
    below.plot([t - t0 for t in first], range(1, len(first) + 1), label="jobs fired (first run)", color="#3182ce", linewidth=1)
    below.set_xlabel("seconds since the first execution")
    below.set_ylabel("jobs")
    below.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
