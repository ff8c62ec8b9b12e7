"""What a drill concludes from what it saw: lost, early, duplicate, two-owner and zombie fires,
failover times, and a timeline plot — from the recorder's executions and the store as watched.

Every verdict is judged against what the client was told or what the store holds, never against
what a silo says it did: "early" against the due time of the job as acknowledged, a duplicate
against the shard log's outcomes, a superseded owner against the owner of record in the store.

Kept apart from the drills themselves (``drill``, ``node_drill``) so the verdicts are tested on
hand-made records without Ray (``tests/drills/test_drill_analysis.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from cluster.cli.drill_observer import Observer
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions

#: A re-run whose earlier run's outcome the log cannot place (its append was read in the same
#: poll as a change of owner, and holds no outcome of a job only one owner ran) is explained
#: only if that earlier run started at the handler at most this long before its owner was hit.
#: Measured under the drills' own load (``DrillReport.durable_s``: handler start to the outcome
#: first read in the log, an upper bound that includes up to one observer poll), 2 cores shared:
#: 100 jobs/s, file store p99 0.16–0.24 s, max 0.24–0.35 s; Azurite p99 0.38–0.60 s, max
#: 0.62–0.74 s; a 30 s storm at 200 jobs/s, file p99 0.21 s, max 0.43 s; Azurite p99 0.54 s, max
#: 1.13 s. 1.5 s is above the slowest seen with a third to spare: a run begun earlier than that
#: had its outcome durable before the kill, and running it again needs the log to say otherwise.
IN_FLIGHT_S = 1.5
#: A call that reached the handler at most this long after its silo was killed or stopped may
#: have been sent before it, when the recorder cannot say when it was sent (a batch sent ahead
#: says; one due on arrival does not). Each run justifies it by its own measured delivery
#: (``DrillReport.delivery_s``, silo send to handler arrival of batches sent ahead), and the
#: batches it excuses are no more than the hits: a killed silo had at most the one pass of
#: jobs due on arrival on its way (a call proven sent before the hit needs no window).
DELIVERY_S = 0.5
#: An append a killed silo had sent lands at most this long after the kill (the file store
#: writes before the call returns; Azurite answers an append in milliseconds): an append the
#: observer found absent from a read begun later than that was not the killed silo's.
LANDED_S = 0.5
#: Seconds a peer takes to claim a shard, replay it and fire its first due job, at most.
CLAIM_S = 0.5
#: A restart storm must still acknowledge at least this share of the jobs offered during it: two
#: of three silos are up at any moment, and the client routes around the one being killed.
STORM_ACK_FLOOR = 0.5
#: ... and at least this many jobs a second of storm. A call that meets a killed silo waits until
#: that silo is proven dead before it settles (seconds, chained when the next kill comes first), so
#: one caller alone acknowledged 4–20 jobs/s in the 10 s storms measured; the drill runs three.
STORM_ACK_RATE = 5.0


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
    #: When its process was seen to have stopped, where that comes after ``at`` (``ray.kill``
    #: ends it a moment after it is sent): what it sent until then was sent by a running silo.
    ended: float | None = None

    @property
    def stopped(self) -> float:
        return self.at if self.ended is None else max(self.at, self.ended)


@dataclass
class StormLoad:
    """What the schedule calls made during a storm were told: acknowledged, in doubt (the jobs
    may fire), refused (nothing written), or anything else (a failure the client does not promise)."""

    duration: float = 0.0  # seconds the storm's load ran
    offered: int = 0
    acknowledged: int = 0
    in_doubt: dict[str, float] = field(default_factory=dict)  # job id -> the due time asked for
    refused: int = 0  # jobs of calls refused outright
    unexpected: list[str] = field(default_factory=list)
    calls: list[tuple[float, float, str]] = field(default_factory=list)  # (sent, seconds to answer, answer)

    @property
    def ok(self) -> bool:
        return (not self.unexpected and self.acknowledged >= STORM_ACK_FLOOR * self.offered
                and self.acknowledged >= STORM_ACK_RATE * self.duration)


@dataclass
class DrillReport:
    jobs: int
    executions: int
    lost: int
    early: int
    duplicates: int
    explained_duplicates: int
    #: per shard a killed silo held with jobs due, seconds from the kill to that shard's first fire by another owner
    failover_s: list[float] = field(default_factory=list)
    failover_bound_s: float = 0.0
    unmeasured_kills: list[str] = field(default_factory=list)  # "<owner> <shard>" nobody took over
    zombie_fires: int = 0
    two_owner_fires: int = 0
    paused_declared_dead_s: float | None = None  # pause -> its row seen dead; None: never
    #: acknowledged jobs in the paused silo's shards due while it was stopped: what it must not fire once fenced
    paused_jobs_due: int = 0
    silo_faults: list[str] = field(default_factory=list)
    storm: bool = False
    schedule_errors: int = 0
    observer_errors: int = 0
    observer_error_examples: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    lost_jobs: list[tuple[str, str | None, float]] = field(default_factory=list)  # (id, shard, due), first 100
    #: per job: (shard, 0, 0), then its runs as (owner, started, due)
    unexplained_duplicates: list[list[tuple[str, float, float]]] = field(default_factory=list)
    two_owner_examples: list[tuple[str, str, str, float, float]] = field(default_factory=list)  # job, shard, owner, started, superseded
    zombie_examples: list[tuple[str, str, float]] = field(default_factory=list)  # job, owner, started
    early_examples: list[tuple[str, float, float]] = field(default_factory=list)  # job, started, due as acknowledged
    #: Each shard's owners as seen in the store, (first seen, owner), and each silo's rows
    #: (first seen, incarnation, status): what a failed check is diagnosed from.
    shard_owners: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    member_rows: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)
    readings: list[tuple[float, float]] = field(default_factory=list)  # the observer's (begun, answered)
    #: Re-runs explained because the log holds no outcome of the run before, and those explained
    #: only by the in-flight window (the log could not place that outcome).
    explained_by_log: int = 0
    explained_by_window: int = 0
    window_margins: list[float] = field(default_factory=list)  # each window explanation: hit minus the earlier run's start
    #: Handler start to outcome first read in the log, seconds, for jobs run once: what
    #: ``IN_FLIGHT_S`` is justified by.
    durable_s: list[float] = field(default_factory=list)
    #: Distinct appends of no proven writer that the window took as a hit incarnation's (shard,
    #: offset): only a read across a change of owner leaves one, and a hit changes the owner of
    #: each shard it held once.
    window_appends: list[tuple[str, int]] = field(default_factory=list)
    #: Silo send to handler arrival, seconds, per batch sent ahead: what ``DELIVERY_S`` is justified by.
    delivery_s: list[float] = field(default_factory=list)
    #: Batches (owner, arrival minus the hit, jobs) that reached the handler after their silo was
    #: hit, taken as sent before it only because ``DELIVERY_S`` allows it (no measured send).
    delivery_excused: list[tuple[str, float, int]] = field(default_factory=list)
    unacknowledged_fires: list[str] = field(default_factory=list)  # jobs neither acknowledged nor in doubt
    storm_load: StormLoad | None = None
    #: per kill, the worst lateness (s, first start minus the due time the client was told) of the
    #: jobs due within the failover bound after it that had not run at the kill (any silo's)
    late_after_kill_s: list[float] = field(default_factory=list)

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
    def hits(self) -> list[Event]:
        return [e for e in self.events if e.kind in ("kill", "pause")]

    @property
    def in_flight_window_ok(self) -> bool:
        """The in-flight window excused nothing, or this run's own measurements justify it: every
        outcome it read became durable within ``IN_FLIGHT_S``, and the appends it could not place
        are no more than the shards the hits changed the owner of."""
        if not self.explained_by_window:
            return True
        return (bool(self.durable_s) and max(self.durable_s) < IN_FLIGHT_S
                and len(self.window_appends) <= sum(len(e.shards) for e in self.hits))

    @property
    def delivery_window_ok(self) -> bool:
        """The delivery window excused nothing, or no more batches than there were hits, and every
        batch this run measured reached its handler within ``DELIVERY_S`` of being sent."""
        if not self.delivery_excused:
            return True
        return (bool(self.delivery_s) and max(self.delivery_s) <= DELIVERY_S
                and len(self.delivery_excused) <= len(self.hits))

    @property
    def pause_ok(self) -> bool:
        return not any(e.kind == "pause" for e in self.events) or (
            self.paused_declared_dead_s is not None and self.paused_jobs_due > 0)

    @property
    def ok(self) -> bool:
        """Nothing lost or early; duplicates only of runs whose outcome the log does not hold at a
        kill or pause; one owner firing per shard at every moment; failover within its bound; no
        silo exceptions; the store watched without an error; a storm acknowledged its floor; the
        windows that excuse a re-run or a late arrival justified by this run's measurements."""
        return (self.lost == 0 and self.early == 0 and self.other_duplicates == 0 and self.zombie_fires == 0
                and self.two_owner_fires == 0 and self.failover_ok and self.pause_ok and not self.silo_faults
                and self.observer_errors == 0 and not self.unacknowledged_fires
                and self.in_flight_window_ok and self.delivery_window_ok
                and (self.storm_load is None or self.storm_load.ok))

    def table(self) -> str:
        kills = sum(e.kind == "kill" for e in self.events)
        failover = f"{_quantiles(self.failover_s)} over {len(self.failover_s)} shards of {kills} kills"
        if not self.storm:
            failover += f" (bound {self.failover_bound_s:.1f} s" + (
                f"; {len(self.unmeasured_kills)} shards never taken over)" if self.unmeasured_kills else ")")
        rows = [
            ("jobs acknowledged", self.jobs),
            ("executions", self.executions),
            ("kills", kills),
            ("pauses", sum(e.kind == "pause" for e in self.events)),
            ("lost", self.lost),
            ("early (vs due as acknowledged)", self.early),
            ("duplicates", f"{self.duplicates} ({self.explained_by_log} with the earlier outcome absent from the log, "
                           f"{self.explained_by_window} in flight within {IN_FLIGHT_S:.1f} s of a kill, "
                           f"{self.other_duplicates} unexplained)"),
            ("start to outcome durable p50/p99/max", _quantiles(self.durable_s, (0.5, 0.99, 1.0))
             + f" (in-flight window {IN_FLIGHT_S:.1f} s; {len(self.window_appends)} appends it placed)"),
            ("silo send to handler p50/p99/max", _quantiles(self.delivery_s, (0.5, 0.99, 1.0))
             + f" (delivery window {DELIVERY_S:.1f} s; {len(self.delivery_excused)} batches it excused"
             + f" in {len(self.hits)} hits)"),
            ("fires by a superseded shard owner", self.two_owner_fires),
            ("failover per shard p50 / max", failover),
            ("fires after a kill or declared death", self.zombie_fires),
            ("fires of jobs never acknowledged", len(self.unacknowledged_fires)),
            ("store watcher errors", self.observer_errors),
        ]
        if any(e.kind == "pause" for e in self.events):
            dead = self.paused_declared_dead_s
            rows.append(("paused silo declared dead after", "never" if dead is None else f"{dead:.2f} s"))
            rows.append(("its jobs due while it was stopped", self.paused_jobs_due))
        rows.append(("silo unhandled exceptions", len(self.silo_faults)))
        if self.storm_load is not None:
            load = self.storm_load
            rows.append(("jobs offered during the storm", f"{load.offered}: {load.acknowledged} acknowledged "
                         f"(floors {STORM_ACK_FLOOR:.0%}, {STORM_ACK_RATE:.0f}/s over {load.duration:.0f} s), {len(load.in_doubt)} in doubt, {load.refused} refused, "
                         f"{len(load.unexpected)} unexpected errors"))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["other_duplicates"] = self.other_duplicates
        out["in_flight_window_ok"] = self.in_flight_window_ok
        out["delivery_window_ok"] = self.delivery_window_ok
        return out


def _quantiles(values: list[float], at: Iterable[float] = (0.5, 1.0)) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    return " / ".join(f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))]:.2f} s" for q in at)


def _sent(record: Mapping[str, Any]) -> float:
    """When the silo's call reached the handler (the recorder notes it; else when the job started)."""
    return float(record.get("received", record["started"]))


def _sent_by_silo(record: Mapping[str, Any]) -> float | None:
    """When the silo sent the call, as the recorder measured it (batches sent ahead), else None."""
    sent = record.get("sent")
    return None if sent is None else float(sent)


def _on_its_way(record: Mapping[str, Any], hit: Event) -> str | None:
    """Whether ``record``'s call had left its silo when ``hit`` stopped it: "arrived" at the
    handler by then; "sent" before it, as measured; "window": arrived within ``DELIVERY_S`` after
    it, sent when is not known; None: sent after it, or arrived later than any call on its way."""
    stopped = hit.stopped
    arrived = _sent(record)
    if arrived <= stopped:
        return "arrived"
    if arrived > stopped + DELIVERY_S:
        return None
    sent = _sent_by_silo(record)
    if sent is None:
        return "window"
    return "sent" if sent <= stopped else None


def _delivery_times(records: list[dict[str, Any]]) -> list[float]:
    """Silo send to handler arrival, per batch sent ahead (one batch: one owner, one arrival)."""
    batches = {(owner_of(r), _sent(r)): _sent(r) - sent for r in records if (sent := _sent_by_silo(r)) is not None}
    return sorted(round(v, 4) for v in batches.values())


def owner_of(record: Mapping[str, Any]) -> str:
    return str(record["run_id"]).rpartition("@")[2]


def acknowledged_due(job: ScheduledJob) -> float:
    """The due time the client was told for ``job``'s one occurrence: what "early" is judged by.

    Drills schedule one-shot jobs; a recurring one would need its schedule's occurrences, computed
    apart from the code under test, which no drill has yet: refuse rather than judge it wrongly.
    """
    if getattr(job, "schedule", None) is not None:
        raise ValueError(f"job {job.id}: drills judge one-shot jobs only; this one has a schedule")
    return job.due.timestamp()


@dataclass
class _Outcomes:
    """A job's outcomes in its shard log: who appended each (None: the store cannot say)."""

    writers: list[str] = field(default_factory=list)  # the owners proven to have appended one
    unplaced: list[tuple[float, str, int]] = field(default_factory=list)  # outcomes of no proven writer: (after, shard, offset)
    removes: int = 0
    unproven: bool = False  # its shard's history was not read whole

    def maybe_by(self, hit: Event) -> list[tuple[str, int]] | None:
        """The appends of no proven writer that may be the one ``hit``'s incarnation appended this
        outcome in, or None if none may: a killed one appends nothing that a read begun
        ``LANDED_S`` after its kill did not find. A shard not read whole: any ([])."""
        found = [(shard, offset) for after, shard, offset in self.unplaced if hit.kind != "kill" or after <= hit.stopped + LANDED_S]
        return found if found or self.unproven else None


def _log_outcomes(observer: Observer | None, runs: Mapping[str, list[dict[str, Any]]]) -> dict[str, _Outcomes]:
    """Each job's outcomes in the log, each with its writer: proved by the store (same owner at
    the reads on both sides), else by the append itself (it holds the outcome of a job that only
    one owner ran, and one append has one writer); else when it landed, for ``maybe_by``."""
    out: dict[str, _Outcomes] = {}
    if observer is None:
        return out
    ran_once = {job: owner_of(v[0]) for job, v in runs.items() if len(v) == 1}
    for a in observer.appends:
        writer = a.writer
        if writer is None:
            owners = {ran_once[j] for j in a.outcomes if j in ran_once}
            writer = owners.pop() if len(owners) == 1 else None
        for job in a.outcomes:
            found = out.setdefault(job, _Outcomes(unproven=a.shard in observer.gaps))
            if writer is None:
                found.unplaced.append((a.after, a.shard, a.offset))
            else:
                found.writers.append(writer)
        for job in a.removes:
            out[job].removes += 1
    return out


def _durable_times(observer: Observer | None, runs: Mapping[str, list[dict[str, Any]]]) -> list[float]:
    """Handler start to the outcome first read in the log, for each job run once."""
    if observer is None:
        return []
    return [round(a.seen - float(runs[job][0]["started"]), 3)
            for a in observer.appends for job in a.removes if len(runs.get(job, ())) == 1]


def analyse(jobs: list[ScheduledJob], records: list[dict[str, Any]], events: list[Event],
            options: ClusterOptions, observer: Observer | None = None, *, storm: bool = False,
            in_doubt: Mapping[str, float] | None = None) -> DrillReport:
    """Count lost, early, duplicate, two-owner and zombie fires, and failover times, from the records.

    ``in_doubt``: jobs of calls that failed with ``ScheduleInDoubt`` (id -> the due time asked
    for): they may fire, not early, and need not.
    """
    due = {j.id: acknowledged_due(j) for j in jobs}
    doubtful = dict(in_doubt or {})
    told = {**doubtful, **due}
    shard_of = {j.id: j.shard for j in jobs}
    runs: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(records, key=lambda r: r["started"]):
        runs.setdefault(r["job_id"], []).append(r)
    lost = sum(1 for j in due if j not in runs)
    early_runs = [r for r in records if r["job_id"] in told and r["started"] < told[r["job_id"]]]
    unacknowledged = sorted({r["job_id"] for r in records if r["job_id"] not in told})
    duplicates = sum(len(v) - 1 for v in runs.values())
    hits = [e for e in events if e.kind in ("kill", "pause")]
    dup = _duplicates(runs, hits, _log_outcomes(observer, runs))
    explained = dup.by_log + len(dup.by_window)
    unexplained_rows = [[(str(shard_of.get(v[0]["job_id"])), 0.0, 0.0)]
                        + [(owner_of(r), round(r["started"], 3), round(told.get(r["job_id"], 0.0), 3)) for r in v]
                        for v in dup.unexplained]
    two_owner = _superseded_fires(records, shard_of, observer)
    zombie, paused_dead = _zombie_fires(records, hits, observer, dup.late_arrivals)
    failover, unmeasured = _failover(jobs, records, events, runs, failover_bound(options))
    late_after_kill = _late_after_kills(jobs, events, runs, failover_bound(options))
    lost_jobs = [(j.id, j.shard, due[j.id]) for j in jobs if j.id not in runs][:100]
    paused_jobs_due = sum(_due_while_paused(jobs, events))
    return DrillReport(len(due), len(records), lost, len(early_runs), duplicates, explained, failover,
                       failover_bound(options), unmeasured, len(zombie), len(two_owner), paused_dead,
                       paused_jobs_due=paused_jobs_due, storm=storm,
                       observer_errors=observer.errors if observer else 0,
                       observer_error_examples=observer.error_examples if observer else [], events=events,
                       lost_jobs=lost_jobs, unexplained_duplicates=unexplained_rows[:50],
                       two_owner_examples=two_owner[:50], zombie_examples=zombie[:50],
                       early_examples=[(r["job_id"], round(r["started"], 3), round(told[r["job_id"]], 3))
                                       for r in early_runs[:50]],
                       shard_owners=observer.shard_owners if observer else {},
                       member_rows=observer.rows if observer else {},
                       readings=[(round(a, 3), round(b, 3)) for a, b in observer.samples] if observer else [],
                       explained_by_log=dup.by_log, explained_by_window=len(dup.by_window),
                       window_margins=dup.by_window, durable_s=_durable_times(observer, runs),
                       window_appends=sorted(dup.window_appends), delivery_s=_delivery_times(records),
                       delivery_excused=_delivery_excused(dup.late_arrivals),
                       unacknowledged_fires=unacknowledged[:100], late_after_kill_s=late_after_kill)


@dataclass
class _Duplicates:
    """How a drill's re-runs were explained, and what each window took on trust."""

    by_log: int = 0
    by_window: list[float] = field(default_factory=list)  # per window explanation: hit minus the earlier run's start
    window_appends: set[tuple[str, int]] = field(default_factory=set)  # the unplaced appends taken as the hit's
    late_arrivals: list[tuple[Event, dict[str, Any]]] = field(default_factory=list)  # earlier runs only DELIVERY_S places before their hit
    unexplained: list[list[dict[str, Any]]] = field(default_factory=list)


def _duplicates(runs: Mapping[str, list[dict[str, Any]]], hits: list[Event],
                outcomes: Mapping[str, _Outcomes]) -> _Duplicates:
    """Re-runs explained by the log, by the in-flight window, and the jobs with one unexplained.

    A re-run is explained by an earlier run of the same job whose owner was killed or paused
    after sending it, before the re-run started, and whose outcome the log does not hold: the
    next owner replayed a log in which the job was still due. A job with two removals in its log
    ran again after one was durable, whoever wrote them. Where the log cannot say who appended
    an outcome, the earlier run must have reached the handler within ``IN_FLIGHT_S`` of the hit.
    One earlier run explains one re-run: a second would mean two silos took the job over.
    """
    out = _Duplicates()
    for job, v in runs.items():
        found = outcomes.get(job, _Outcomes())
        used: set[int] = set()
        bad = False
        for i in range(1, len(v)):
            if found.removes > 1 or not _explain(v, i, used, hits, found, out):
                bad = True
        if bad:
            out.unexplained.append(v)
    return out


def _explain(v: list[dict[str, Any]], i: int, used: set[int], hits: list[Event], found: _Outcomes,
             out: _Duplicates) -> bool:
    """Whether re-run ``i`` of ``v`` is explained, counted in ``out`` by how."""
    for c in range(i):
        if c in used:
            continue
        owner = owner_of(v[c])
        hit = next((e for e in hits if e.owner == owner and _on_its_way(v[c], e) and v[i]["started"] > e.at), None)
        if hit is None or owner in found.writers:
            continue  # not in flight at a hit, or its outcome was durable: nobody should have run it again
        appends = found.maybe_by(hit)
        if appends is not None:
            if v[c]["started"] < hit.stopped - IN_FLIGHT_S:
                continue
            out.by_window.append(round(hit.stopped - float(v[c]["started"]), 3))
            out.window_appends.update(appends)
        else:
            out.by_log += 1
        if _on_its_way(v[c], hit) == "window":
            out.late_arrivals.append((hit, v[c]))
        used.add(c)
        return True
    return False


def _delivery_excused(late: list[tuple[Event, dict[str, Any]]]) -> list[tuple[str, float, int]]:
    """The batches the delivery window alone placed before their silo's hit: (owner, arrival
    minus the hit, jobs), one row per batch (one owner, one arrival)."""
    batches: dict[tuple[str, float], tuple[float, set[str]]] = {}
    for hit, r in late:
        key = (hit.owner, _sent(r))
        batches.setdefault(key, (_sent(r) - hit.stopped, set()))[1].add(str(r["run_id"]))
    return [(owner, round(after, 3), len(jobs)) for (owner, _), (after, jobs) in sorted(batches.items())]


def _superseded_fires(records: list[dict[str, Any]], shard_of: Mapping[str, str | None],
                      observer: Observer | None) -> list[tuple[str, str, str, float, float]]:
    """Fires sent by an incarnation when the store's owner of record of the job's shard was another."""
    found: list[tuple[str, str, str, float, float]] = []
    if observer is None:
        return found
    for r in records:
        shard = shard_of.get(r["job_id"])
        superseded = observer.superseded_at(shard, owner_of(r), _sent(r)) if shard else None
        if superseded is not None:
            found.append((r["job_id"], str(shard), owner_of(r), round(r["started"], 3), round(superseded, 3)))
    return found


def _due_while_paused(jobs: list[ScheduledJob], events: list[Event]) -> Iterator[int]:
    """Per pause, the acknowledged jobs in the paused silo's shards due between its pause and resume."""
    for pause in (e for e in events if e.kind == "pause"):
        resume = next((e.at for e in events if e.kind == "resume" and e.owner == pause.owner and e.at >= pause.at), None)
        shards = set(pause.shards)
        yield sum(1 for j in jobs if j.shard in shards and pause.at <= j.due.timestamp() <= (resume or pause.at))


def _zombie_fires(records: list[dict[str, Any]], hits: list[Event], observer: Observer | None,
                  late: list[tuple[Event, dict[str, Any]]]) -> tuple[list[tuple[str, str, float]], float | None]:
    """A killed incarnation fires nothing it sent after its kill; a paused one nothing after it
    was declared dead. A call that arrived after the kill and was placed before it only by the
    delivery window is added to ``late``."""
    zombie: list[tuple[str, str, float]] = []
    paused_dead: float | None = None
    for e in hits:
        mine = [r for r in records if owner_of(r) == e.owner]
        if e.kind == "pause":
            dead = observer.declared_dead_at(e.owner) if observer is not None else None
            paused_dead = None if dead is None else round(dead - e.at, 3)
            after = dead if dead is not None else float("inf")
            zombie += [(r["job_id"], e.owner, round(r["started"], 3)) for r in mine if _sent(r) > after]
            continue
        for r in mine:
            way = _on_its_way(r, e)
            if way is None:
                zombie.append((r["job_id"], e.owner, round(r["started"], 3)))
            elif way == "window":
                late.append((e, r))
    return zombie, paused_dead


def _failover(jobs: list[ScheduledJob], records: list[dict[str, Any]], events: list[Event],
              runs: Mapping[str, list[dict[str, Any]]], bound: float) -> tuple[list[float], list[str]]:
    """Per shard a killed silo held: seconds from the kill to that shard's first fire by another
    owner. A shard counts when a job of it that had not run at the kill fell due within the bound
    after it (one due later measures its due time, not failover)."""
    by_shard: dict[str | None, list[ScheduledJob]] = {}
    for j in jobs:
        by_shard.setdefault(j.shard, []).append(j)
    fires: dict[str | None, list[dict[str, Any]]] = {}
    shard_of = {j.id: j.shard for j in jobs}
    for r in records:
        fires.setdefault(shard_of.get(r["job_id"]), []).append(r)
    failover, unmeasured = [], []
    for e in (e for e in events if e.kind == "kill"):
        for shard in e.shards:
            waiting = [j for j in by_shard.get(shard, []) if acknowledged_due(j) <= e.at + bound
                       and not any(r["started"] <= e.at for r in runs.get(j.id, []))]
            if not waiting:
                continue
            takeovers = [r["started"] for r in fires.get(shard, []) if r["started"] > e.at and owner_of(r) != e.owner]
            if takeovers:
                failover.append(round(min(takeovers) - e.at, 3))
            else:
                unmeasured.append(f"{e.owner} {shard}")
    return failover, unmeasured


def _late_after_kills(jobs: list[ScheduledJob], events: list[Event], runs: Mapping[str, list[dict[str, Any]]],
                      bound: float) -> list[float]:
    """Per kill, the worst lateness of the jobs due in the ``bound`` after it that had not started
    by then, judged by the due time each job's client was told (a job never run counts as lost,
    not here). Kills within a second of each other count as one: what their users saw together."""
    kills = sorted(e.at for e in events if e.kind == "kill")
    worst = []
    for at in (t for i, t in enumerate(kills) if i == 0 or t - kills[i - 1] > 1.0):
        late = [min(r["started"] for r in runs[j.id]) - acknowledged_due(j) for j in jobs
                if at < acknowledged_due(j) <= at + bound and j.id in runs
                and not any(r["started"] <= at for r in runs[j.id])]
        if late:
            worst.append(round(max(late), 3))
    return worst

