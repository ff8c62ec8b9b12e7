"""Failover drills on real Ray: load, kill silos (or storm them with kills), pause one, then count.

A drill schedules jobs due over the next seconds into a recording handler that writes every
execution durably (JSON lines, fsynced), SIGKILLs silo worker processes (Ray restarts them as new
incarnations; their shards are adopted), optionally SIGSTOPs one silo past the suspicion timeout
and resumes it. Meanwhile it watches the store itself: every 100 ms it reads who owns each shard
and each silo's membership row, and keeps every change with the time it was seen. Then it checks,
with the cluster's default options:

- lost = 0: every acknowledged job executed at least once;
- early = 0: no execution started before the time it was due;
- early = 0 is judged against the due time the client was told (the acknowledged job), never
  the silo's own idea of when the occurrence was scheduled;
- every duplicate is a re-run of an attempt whose silo was killed or paused after sending it and
  whose outcome the shard log does not hold (the observer reads every append with the owner of
  record then, and once more after the drill); where the log cannot say who appended an outcome,
  the attempt must have reached the handler within ``IN_FLIGHT_S`` (measured) of the hit. Each
  such attempt explains one re-run, no more;
- two-owner fires = 0: no execution sent by an incarnation when the store's owner of record of
  that job's shard was another (the readings on both sides of the send), at any moment;
- zombie fires = 0: nothing fired by a killed incarnation after its kill, nor by a paused one after
  it was seen declared dead; and the paused silo is declared dead and rejoins;
- failover, per shard: every shard a killed silo held with jobs falling due is fired from by
  another silo, within ``failover_bound`` (storms excepted: kills come faster than failover);
- no silo logged an unhandled exception (read from the Ray worker logs, killed incarnations too),
  and the observer read the store without an error.

A storm (``storm_s``) kills a random silo every 1–2 s for that long while new jobs keep coming,
and prints a status line every second. Every schedule call made during it is classified:
acknowledged, in doubt (``ScheduleInDoubt``: its jobs may fire, judged by the due time asked
for), refused (``ClusterUnavailable``: nothing written, so none of it may fire), or unexpected,
which fails the drill; so does acknowledging less than ``STORM_ACK_FLOOR`` of the jobs offered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster._cluster import Cluster, start_or_join_ray
from cluster.cli.drill_analysis import (
    DrillReport,
    Event,
    StormLoad,
    analyse,
    failover_bound,
)
from cluster.cli.drill_observer import Observer
from cluster.cli.drill_timeline import timeline
from cluster.cli.silologs import SiloLogWatch
from cluster.client import Client
from cluster.model.errors import ClusterUnavailable, ScheduleInDoubt
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ClusterOptions
from cluster.model.wire import resolve_code_path
from storage import open_store

RECORDER = "handlers.builtin:Recorder"  # by path: cluster code never imports handlers
#: Drills run with the defaults a user gets: options that hide failures (a short poison
#: forgiveness, say) would make the drill prove less than the README says.
DRILL_OPTIONS = ClusterOptions()
DEFAULT_OUT = "benchmarks/results/scratch/drill"  # not tracked (.gitignore)


#: How a drill hits a silo: (cluster, silo id, events, progress, label); what it returns is not used.
Hit = Callable[[Cluster, str, list[Event], bool, str], Awaitable[object]]
#: What a drill does after its hits while the load goes on: (cluster, events, progress).
Then = Callable[[Cluster, list[Event], bool], Awaitable[None]]


async def _victim(cluster: Cluster, silo_id: str, timeout: float = 60) -> tuple[int, str, list[str]]:
    """The silo's worker pid, incarnation and the shards it owns right now."""
    handle = cluster.handles()[silo_id]
    status = await asyncio.wait_for(asyncio.wrap_future(handle.status.remote().future()), timeout)
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
    storm_s: float = 0.0,
    storm_kills: int = 0,
    hit: Hit | None = None,
    then: Then | None = None,
    then_span: float = 0.0,
) -> DrillReport:
    """Drive a drill against a running ``cluster``; records and a timeline go to ``out_dir``.

    With ``storm_s`` > 0 a random silo is killed every 1–2 s for that long (``kills`` is ignored)
    while new jobs keep being scheduled, and on until ``storm_kills`` kills were made (a host slow
    to restart silos would otherwise storm with fewer kills; at most ``STORM_STRETCH`` times
    ``storm_s``). ``hit`` replaces the SIGKILL of a silo (a whole node lost,
    say); ``then`` runs after the hits while jobs keep falling due for ``then_span`` more seconds.
    """
    rng = random.Random(seed)
    out_dir.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240  one local mkdir before the drill starts
    records_path = out_dir / "executions.jsonl"
    records_path.unlink(missing_ok=True)
    watch = SiloLogWatch()
    recorder_cls = ray.remote(resolve_code_path(RECORDER))
    name = f"drill-recorder-{os.getpid()}-{rng.randrange(1 << 30)}"
    # On the driver's node: the drill's instrument must outlive any node the drill takes away.
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    recorder = recorder_cls.options(name=name, namespace=cluster.namespace, num_cpus=0,
                                    scheduling_strategy=here).remote(str(records_path))
    await recorder.executions.remote()
    observer = Observer(open_store(cluster.store_url))

    suspicion = cluster.options.suspicion_timeout.total_seconds()
    bound = failover_bound(cluster.options)
    gap = bound + 1.5  # let each failover finish before the next kill
    span = 3.0 + storm_s + 5.0 if storm_s else 3.0 + kills * gap + (2 * suspicion + 3 if pause else 0) + 2.0
    span += then_span
    client = cluster.client()
    start = datetime.now(timezone.utc) + timedelta(seconds=1.5)
    count = int(rate * span)
    target = Target.actor(name, cluster.namespace)
    jobs = await _schedule_spread(cluster, client, target, start, span, count)
    what = f"a {storm_s:.0f} s restart storm" if storm_s else f"{kills} kills" + (", 1 pause" if pause else "")
    _say(progress, f"drill: {count} jobs acknowledged, due over {span:.0f} s; {what}; options: defaults"
         if cluster.options == ClusterOptions() else f"drill: {count} jobs due over {span:.0f} s; {what}")

    events: list[Event] = []
    storm_load = StormLoad() if storm_s else None
    observing = asyncio.create_task(observer.run())
    reporting = asyncio.create_task(_status_lines(progress, records_path, jobs, events, observer, time.time()))
    try:
        await asyncio.sleep(2.0)
        if storm_s:
            assert storm_load is not None
            stormed = asyncio.Event()
            began = time.time()
            loading = asyncio.gather(*(_keep_scheduling(client, target, jobs, storm_load, stormed, n)
                                       for n in range(STORM_CALLERS)))
            try:
                await _storm(cluster, rng, events, storm_s, storm_kills, progress)
            finally:
                stormed.set()
                storm_load.duration = time.time() - began
                (loaded,) = await asyncio.gather(loading, return_exceptions=True)  # awaited even if the storm failed
            if isinstance(loaded, BaseException):
                raise loaded
        else:
            for n in range(kills):
                await asyncio.sleep(rng.uniform(0.2, 1.0))
                await (hit or _kill)(cluster, rng.choice(cluster.silo_ids), events, progress, f"kill {n + 1}/{kills}")
                await asyncio.sleep(gap)
        if then is not None:
            await then(cluster, events, progress)
        if pause:
            silo = rng.choice(cluster.silo_ids)
            # Only a live peer can declare the paused silo dead: the killed ones must be back (a
            # loaded host restarts a silo in tens of seconds). Jobs fall due all through the pause
            # however long that took: the paused silo holds some, which it must not fire once fenced.
            await _all_up(cluster, PAUSE_PEERS_WAIT_S, progress)
            hold = 2 * suspicion + 1.0
            jobs += await _schedule_spread(cluster, client, target, datetime.now(timezone.utc) + timedelta(seconds=0.5),
                                           hold + 2.0, int(rate * (hold + 2.0)), first=len(jobs))
            pid, owner, shards = await _victim(cluster, silo)
            os.kill(pid, signal.SIGSTOP)
            events.append(Event("pause", time.time(), silo, owner, shards))
            _say(progress, f"drill: pause silo {silo} ({owner}) for {hold:.1f} s, "
                           f"and on until its peers declare it dead")
            try:
                await asyncio.sleep(hold)
                with contextlib.suppress(TimeoutError):  # never declared: the report says so
                    await asyncio.wait_for(observer.until_declared_dead(owner), PAUSE_HOLD_S)
            finally:
                # The keeper may have replaced it already: a silo its peers declared dead that
                # does not answer is, to it, one lost with its node.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            events.append(Event("resume", time.time(), silo, owner, shards))

        last_due = max(j.due.timestamp() for j in jobs)
        deadline = last_due + max(20.0, 2 * bound + 10)
        expected = {j.id for j in jobs}
        while time.time() < deadline:
            seen = {r["job_id"] for r in _read(records_path)}
            if expected <= seen:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(1.0)  # stragglers: duplicates still in flight
    finally:
        observing.cancel()
        reporting.cancel()
        await asyncio.gather(observing, reporting, return_exceptions=True)
        await observer.finish()  # the logs read to their end: every outcome appended is seen
        await observer.store.close()
        ray.kill(recorder)
    await asyncio.sleep(0.5)  # let killed workers' last stderr lines land before reading them
    records = _read(records_path)
    report = analyse(jobs, records, events, cluster.options, observer, storm=bool(storm_s),
                     in_doubt=storm_load.in_doubt if storm_load else None)
    report.silo_faults = watch.faults()
    report.storm_load = storm_load
    report.schedule_errors = storm_load.offered - storm_load.acknowledged if storm_load else 0
    timeline(report, jobs, records, out_dir / "drill-timeline.png")
    (out_dir / "drill.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


async def _schedule_spread(cluster: Cluster, client: Client, target: Target, start: datetime, span: float,
                           count: int, first: int = 0) -> list[ScheduledJob]:
    """``count`` jobs due evenly over ``span`` seconds from ``start``, acknowledged, in batches
    strided so that every silo (batches go round-robin) holds jobs due all along."""
    specs = [{"target": target, "due": start + timedelta(seconds=span * k / count), "data": {"k": first + k}}
             for k in range(count)]
    batches = max(len(cluster.silo_ids) * 2, -(-count // 1000))
    jobs: list[ScheduledJob] = []
    for b in range(batches):
        jobs += await client.schedule_jobs(specs[b::batches])
    return jobs


async def _kill(cluster: Cluster, silo: str, events: list[Event], progress: bool, label: str) -> None:
    try:
        pid, owner, shards = await _victim(cluster, silo)
    except Exception as exc:  # a silo that says nothing in a minute is not killed: the report shows one kill fewer
        _say(progress, f"drill: {label}: silo {silo} did not answer ({type(exc).__name__}); skipped")
        return
    _sigkill(silo, (pid, owner, shards), events, progress, label)


def _sigkill(silo: str, victim: tuple[int, str, list[str]], events: list[Event], progress: bool, label: str) -> bool:
    """SIGKILL ``victim`` (pid, incarnation, shards) and record it; False if its process was gone already."""
    pid, owner, shards = victim
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    events.append(Event("kill", time.time(), silo, owner, shards))
    _say(progress, f"drill: {label}: silo {silo} ({owner}, pid {pid}, {len(shards)} shards)")
    return True


async def _storm(cluster: Cluster, rng: random.Random, events: list[Event], storm_s: float, least_kills: int,
                 progress: bool) -> None:
    """Kill a random silo every 1–2 s for ``storm_s`` seconds and until ``least_kills`` kills (Ray
    restarts each).

    The cadence is kept by a schedule, not by sleeping after each kill, and every silo is asked for
    its pid at once: asking them in turn, a second for each one still restarting, and sleeping
    after, a loaded host's storm killed 4 times in 10 s."""
    end = time.time() + storm_s
    stop = time.time() + STORM_STRETCH * storm_s
    due = time.time()
    n = 0
    while due < end or (n < least_kills and due < stop):
        await asyncio.sleep(max(0.0, due - time.time()))
        up = await _silos_up(cluster, timeout=STORM_ASK_S)
        if not up:  # every silo still restarting: the next one up is killed as soon as it answers
            due = time.time() + STORM_RETRY_S
            continue
        silo = rng.choice(sorted(up))
        if not _sigkill(silo, up[silo], events, progress, f"storm kill {n + 1}"):
            due = time.time() + STORM_RETRY_S
            continue
        n += 1
        # Never two kills closer than STORM_MIN_GAP_S, however late this one came.
        due = max(due + rng.uniform(1.0, 2.0), time.time() + STORM_MIN_GAP_S)


async def _silos_up(cluster: Cluster, timeout: float) -> dict[str, tuple[int, str, list[str]]]:
    """The silos that answer within ``timeout``, asked side by side: pid, incarnation, shards."""
    async def ask(silo: str) -> tuple[str, tuple[int, str, list[str]] | None]:
        try:
            return silo, await _victim(cluster, silo, timeout)
        except Exception:  # restarting, or killed a moment ago
            return silo, None
    answers = await asyncio.gather(*(ask(silo) for silo in cluster.silo_ids))
    return {silo: victim for silo, victim in answers if victim is not None}


#: How long a pause waits for every silo to answer first, and how much longer than twice the
#: suspicion timeout a paused silo stays stopped while its peers have not declared it dead.
PAUSE_PEERS_WAIT_S = 90.0
PAUSE_HOLD_S = 30.0


async def _all_up(cluster: Cluster, timeout: float, progress: bool) -> None:
    """Wait up to ``timeout`` until every silo answers, saying how long it took if it was not at once."""
    began = time.time()
    while True:
        up = await _silos_up(cluster, STORM_ASK_S)
        if len(up) == len(cluster.silo_ids) or time.time() - began > timeout:
            break
        await asyncio.sleep(STORM_RETRY_S)
    if (waited := time.time() - began) > 2 * STORM_ASK_S:
        _say(progress, f"drill: {len(up)} of {len(cluster.silo_ids)} silos answering after {waited:.1f} s")


#: How long a storm waits for a silo to say what to kill, how soon it asks again when none was
#: up, and the least time between two kills.
STORM_ASK_S = 1.0
STORM_RETRY_S = 0.25
STORM_MIN_GAP_S = 0.5
#: A storm short of its kills goes on to at most this many times its length.
STORM_STRETCH = 3.0


#: A schedule call during the storm not answered in this long is a failure, not a refusal.
STORM_CALL_TIMEOUT_S = 30.0
#: Callers scheduling side by side during a storm: one call waiting on a killed silo does not
#: stop the load.
STORM_CALLERS = 3


async def _keep_scheduling(client: Any, target: Target, jobs: list[ScheduledJob], load: StormLoad,
                           stormed: asyncio.Event, caller: int = 0) -> None:
    """New jobs until the storm is over, 20 a call, each call's due 1–3 s ahead; what each call was
    told goes into ``load``, and an acknowledged job joins ``jobs``."""
    k = caller
    while not stormed.is_set():
        # One due time a call: a job in doubt is judged by the due time its call asked for.
        due = datetime.now(timezone.utc) + timedelta(seconds=1 + 2 * (k % 8) / 8)
        specs = [{"target": target, "due": due, "data": {"storm": f"{caller}/{20 * k + i}"}} for i in range(20)]
        k += 1
        load.offered += len(specs)
        sent = time.time()
        answer = "acknowledged"
        try:
            acknowledged = await asyncio.wait_for(client.schedule_jobs(specs), timeout=STORM_CALL_TIMEOUT_S)
        except ScheduleInDoubt as exc:
            load.in_doubt.update(dict.fromkeys(exc.may_fire, due.timestamp()))
            answer = "in doubt"
        except ClusterUnavailable:
            load.refused += len(specs)
            answer = "refused"
        except Exception as exc:  # noqa: BLE001  any other answer breaks the client's contract: counted, failing the drill
            load.unexpected.append(repr(exc)[:300])
            answer = type(exc).__name__
        else:
            jobs.extend(acknowledged)
            load.acknowledged += len(acknowledged)
        load.calls.append((round(sent, 3), round(time.time() - sent, 3), answer))
        await asyncio.sleep(0.25)


async def _status_lines(progress: bool, records_path: Path, jobs: list[ScheduledJob], events: list[Event],
                        observer: Observer, t0: float) -> None:
    """Every second: kills so far, fired vs due, overdue and unfired, duplicates, shard owners."""
    if not progress:
        return
    while True:
        await asyncio.sleep(1.0)
        now = time.time()
        records = await asyncio.to_thread(_read, records_path)
        fired: dict[str, int] = {}
        for r in records:
            fired[r["job_id"]] = fired.get(r["job_id"], 0) + 1
        due = [j for j in jobs if j.due.timestamp() <= now]
        overdue = sum(1 for j in due if j.id not in fired and j.due.timestamp() < now - 5)
        owners: dict[str, int] = {}
        for history in observer.shard_owners.values():
            owner = history[-1][1].partition("#")[0] or "-"
            owners[owner] = owners.get(owner, 0) + 1
        _say(True, f"drill t+{now - t0:5.1f}s  kills {sum(e.kind == 'kill' for e in events):3d}  "
                   f"fired {len(fired)}/{len(jobs)} ({len(due)} due)  unfired >5 s overdue {overdue}  "
                   f"duplicates {sum(n - 1 for n in fired.values())}  shards by silo {dict(sorted(owners.items()))}")


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


def run_drill_command(args: Any) -> int:
    """``timeshard drill``: start a cluster, run the drill, print the table, exit 1 on any failed check."""
    start_or_join_ray(namespace="timeshard-drill", include_dashboard=False, log_to_driver=False, configure_logging=False)
    store = args.store
    if store.startswith("file://") and Path(store[7:]).exists():
        import shutil

        shutil.rmtree(store[7:])
    cluster = Cluster.start(store, silos=args.silos, namespace="timeshard-drill", options=DRILL_OPTIONS)
    try:
        report = asyncio.run(run_drill(cluster, Path(args.out), kills=args.kills, pause=args.pause,
                                       rate=args.rate, seed=args.seed, storm_s=args.storm,
                                       storm_kills=args.storm_kills))
    finally:
        cluster.shutdown(graceful=False)
        ray.shutdown()
    print("restart storm results" if args.storm else "drill results")
    print(report.table())
    for fault in report.silo_faults[:10]:
        print(f"  silo exception: {fault}")
    for error in report.observer_error_examples:
        print(f"  store watcher error: {error}")
    for error in (report.storm_load.unexpected[:10] if report.storm_load else []):
        print(f"  unexpected schedule error during the storm: {error}")
    print(f"timeline: {Path(args.out) / 'drill-timeline.png'}; figures: {Path(args.out) / 'drill.json'}")
    print("result: " + ("OK" if report.ok else "FAILED"))
    return 0 if report.ok else 1
