"""The real ``cluster.client.Client`` on the simulated silo processes, as Ray would carry its calls.

In a share of seeds (the ``real_client`` kind) the world schedules and cancels through
``Client.submit_jobs`` and ``Client.try_cancel_job``: its routing, its retries naming lost silos
as suspects, its hops after moved jobs and owners, and the errors it raises are the product's.
Only its one Ray call per silo is the simulation's (``SimRay``), failing as Ray fails:

- a process that is dead (killed, or Ray restarting it) fails the call as ``RayActorError``
  does (``SiloLost``: the client cannot tell whether it got there);
- a process killed while the call runs fails it the same way at once, and never answers: a
  killed process returns nothing, whatever its coroutine still computes;
- a paused process takes the call when it resumes, and answers only then;
- a process Ray lost (partitioned) fails the call: one sent since does not reach it, one it was
  running when Ray lost it runs on there, its answer lost;
- ``SiloStopping`` and ``EarlierTryUnsettled`` refuse it (``SiloRefused``), as ``_call_silo`` maps them.

What each call raised is recorded and judged against what it told its caller:

- acknowledged (the jobs came back with shards): every occurrence owed must fire (the world's
  ``owed``);
- ``ScheduleInDoubt``: the jobs of ``may_fire`` may fire or not (counted, not owed); every other
  job of the call is not scheduled;
- either, after a try was lost: a job the retry wrote again once its earlier try had run and
  left no record where a retry looks may run once more (README), never two copies at once;
- any other error (``ClusterUnavailable``, a storage error, ...): the call is all or nothing
  (README, "Schedule calls and retries"), so none of its jobs may ever start;
- no answer within ``CALL_TIMEOUT_S`` (the caller gave up): in doubt, counted.

Everything random here is drawn from ``random.Random(f"client/{seed}")``: a seed that does not
draw the real client draws what it drew before this existed.
"""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from collections.abc import Awaitable, Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from cluster.client import Client
from cluster.model.errors import EarlierTryUnsettled, ScheduleInDoubt, SiloStopping
from cluster.model.jobs import ScheduledJob
from cluster.model.policies import FailurePolicy
from cluster.model.routing import SiloLost, SiloRefused
from cluster.model.wire import timedelta_to_us, us_to_datetime
from cluster.runtime.shardlog import (
    ADD,
    SHARD_PREFIX,
    SNAPSHOT,
    ShardState,
    creator_of,
    format_window,
    landed_ids,
    window_of,
)
from storage import NotFound
from storage.generations import list_logs, read_log
from storage.records import decode
from tests.runtime.harness import job
from tests.sim.loop import EPOCH_US, true_now_us

if TYPE_CHECKING:
    from tests.sim.world import Process, Spec, World

#: The share of seeds whose client is ``cluster.client.Client`` (with the ``real_client`` kind on).
CLIENT_SHARE = 0.5
#: How long the simulated caller waits for a ``Client`` call before it gives up on it (in doubt).
#: Long enough for the client's own retries (about 35 s, README) to end in an answer mostly.
CALL_TIMEOUT_S = 60.0
#: More hops than any job's chain in a run has (its repeats), so a cycle cannot hang a check.
MAX_CHAIN_HOPS = 1000

T = TypeVar("T")


class ScheduleTry:
    """One try of a schedule call, as it reached its silo: the shard logs a retry's search read
    are told apart by the try that read them, not by the silo, which runs other calls at once
    (seed 275005: another call's search read the log 14 ms after the retry was sent, while it
    still held the earlier try's records; the retry's own search read it once a rotation had
    compacted them away, and rightly added the job again, yet was judged by the other read)."""

    def __init__(self) -> None:
        self.running = True

    async def run(self, call: Awaitable[T]) -> T:
        """Run ``call`` as this try's work: it and the tasks it starts read for this try."""
        _RUNNING_TRY.set(self)  # the task's own context: its caller's stays as it was
        try:
            return await call
        finally:
            self.running = False  # a task it started that outlives it reads for no call


_RUNNING_TRY: ContextVar[ScheduleTry | None] = ContextVar("schedule_try", default=None)


def running_try() -> ScheduleTry | None:
    """The schedule try whose work the running task does, while that try runs."""
    attempt = _RUNNING_TRY.get()
    return attempt if attempt is not None and attempt.running else None


class SimRay:
    """The ``SiloCall`` of a real ``Client`` in the simulation: one call to one silo process."""

    def __init__(self, world: World, rng: random.Random | None = None, *, ends_superseded: bool = False) -> None:
        self._world = world
        self._rng = rng if rng is not None else world.client_rng  # another user's calls draw from their own
        # Whether a silo superseded by a newer process of itself fails the calls it took, as its
        # process ends on Ray. Off for the real client's seeds, found before it was modelled: a
        # call into such a silo never answers there, and the caller gives up (``CALL_TIMEOUT_S``).
        self._ends_superseded = ends_superseded
        # Jobs a cancel call reached and then lost its answer on (killed, partitioned): it may
        # have cancelled them, so the client's retry may rightly find them "absent".
        self.cancel_maybe_acted: set[str] = set()
        self.schedule_maybe_acted: set[str] = set()  # the same, for jobs of schedule calls
        # Job id -> its due (µs) as a schedule call carried it, and the suspects its retries named.
        self.schedule_due: dict[str, int] = {}
        self.schedule_suspects: dict[str, set[str]] = defaultdict(set)
        # Job id -> when its latest try was sent (true µs), and to which silo; and that try, once
        # it reached the silo (what it read there is its own: ``_compacted_before``).
        self.schedule_sent: dict[str, tuple[int, str]] = {}
        self.schedule_try: dict[str, ScheduleTry] = {}

    async def __call__(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        if method == "schedule":
            for item in args[0]:
                self.schedule_due[item[0]] = item[1]
                self.schedule_suspects[item[0]].update(args[1] if len(args) > 1 else ())
                self.schedule_sent[item[0]] = (true_now_us(self._world.loop), silo_id)
        self._world.say(f"ray: {_call_text(method, args)} to {silo_id}")
        try:
            answer = await self._call(silo_id, method, args)
        except (SiloLost, SiloRefused) as exc:
            self._world.note(f"ray: {_call_text(method, args)} on {silo_id}: {type(exc).__name__} ({exc})")
            raise
        except Exception as exc:
            self._world.note(f"ray: {_call_text(method, args)} on {silo_id} raised {type(exc).__name__}")
            raise
        self._world.note(f"ray: {_call_text(method, args)} on {silo_id}: {answer}")
        return answer

    async def _call(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        world = self._world
        proc = world.procs.get(silo_id)
        if proc is None:
            raise SiloRefused(f"silo {silo_id} is not registered")
        if proc.silo is None or proc.state == "dead":
            raise SiloLost(f"silo {silo_id} is dead or restarting (RayActorError)")
        epoch, silo = proc.epoch, proc.silo
        rng = self._rng
        if world.faults.latency:
            await asyncio.sleep(rng.random() * 0.05)
        await self._taken(proc, epoch, method)
        if proc.partitioned:
            raise SiloLost(f"silo {silo_id}: Ray lost its node; {method} did not reach it")
        if self._ends_superseded and proc.superseded.is_set():
            raise SiloLost(f"silo {silo_id}: its process ended, a newer one joined (RayActorError)")
        call = getattr(silo, method)(*args)
        attempt: ScheduleTry | None = None
        if method == "schedule":
            attempt = ScheduleTry()
            self.schedule_try.update(dict.fromkeys((item[0] for item in args[0]), attempt))
            call = attempt.run(call)
        sent_us = true_now_us(world.loop)
        task = asyncio.ensure_future(call)
        ends = [asyncio.ensure_future(proc.died.wait())]
        if self._ends_superseded:
            ends.append(asyncio.ensure_future(proc.superseded.wait()))
        try:
            await asyncio.wait({task, *ends}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for end in ends:
                end.cancel()
        if not task.done():
            # Killed mid-call (or ended): its coroutine runs on, but nothing comes back.
            self._dropped(method, args, task, sent_us, attempt)
            raise SiloLost(f"silo {silo_id} was killed during {method}")
        try:
            await self._taken(proc, epoch, method)  # a paused process answers at resume
        except SiloLost:
            self._dropped(method, args, task, sent_us, attempt)
            raise
        if proc.partitioned:
            self._dropped(method, args, task, sent_us, attempt)
            raise SiloLost(f"silo {silo_id}: Ray lost its node during {method}; it may have acted")
        try:
            return task.result()
        except (SiloStopping, EarlierTryUnsettled) as exc:
            raise SiloRefused(f"silo {silo_id}: {exc}", getattr(exc, "settles", None)) from exc

    def _dropped(self, method: str, args: tuple[Any, ...], task: asyncio.Future[Any], sent_us: int,
                 attempt: ScheduleTry | None) -> None:
        """A try whose answer its caller never gets: it may have acted, and a schedule try goes on.

        Where such a try still lands is judged as a call in doubt naming that shard, once it
        lands: the call's own end judged only where its jobs had fired by then (seed 469680,
        every kind: the try at s0, cut off by a partition, found j20 and j22 compacted away in
        the shard their earlier try ran from, rightly wrote them again into s0.3 after the call
        had ended in doubt, and their one more run from there was called a duplicate)."""
        self._maybe_acted(method, args)
        if method != "schedule":
            task.add_done_callback(_drop)
            return
        ids = [item[0] for item in args[0]]
        task.add_done_callback(lambda done: self._world.spawn(self._landed_unanswered(ids, done, sent_us, attempt)))

    async def _landed_unanswered(self, ids: Sequence[str], task: asyncio.Future[Any], sent_us: int,
                                 attempt: ScheduleTry | None) -> None:
        if task.cancelled() or task.exception() is not None:
            return  # failed: nothing of it landed, or its take-back failed as its log says
        for job_id, shard in zip(ids, task.result(), strict=True):
            if shard:
                await earlier_try(self._world, self, job_id, shard, acknowledged=False, sent_us=sent_us,
                                  attempt=attempt)

    def _maybe_acted(self, method: str, args: tuple[Any, ...]) -> None:
        if method == "cancel":
            self.cancel_maybe_acted.add(args[1])
        elif method == "schedule":
            self.schedule_maybe_acted.update(item[0] for item in args[0])

    @staticmethod
    async def _taken(proc: Process, epoch: int, method: str) -> None:
        """Return once ``proc`` of ``epoch`` runs; ``SiloLost`` if it is killed first."""
        while proc.state == "paused" and proc.epoch == epoch:
            died = asyncio.ensure_future(proc.died.wait())
            resumed = asyncio.ensure_future(proc.resumed.wait())
            try:
                await asyncio.wait({died, resumed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                died.cancel()
                resumed.cancel()
        if not proc.alive(epoch):
            raise SiloLost(f"silo {proc.silo_id} was killed during {method}")


def _call_text(method: str, args: tuple[Any, ...]) -> str:
    """A call for the trace: a schedule call by its job ids (suspects, settled), others as they are."""
    if method == "schedule":
        suspects = f", suspects {args[1]}" if len(args) > 1 else ""
        settled = f", settled {args[2]}" if len(args) > 2 else ""
        return f"schedule({[item[0] for item in args[0]]}{suspects}{settled})"
    return f"{method}{args}"


def _drop(task: asyncio.Future[Any]) -> None:
    """Retrieve a dropped answer's exception, so the loop does not report it as never retrieved."""
    if task.done() and not task.cancelled():
        task.exception()


class SimClient:
    """The world's client side when it is ``cluster.client.Client``; what each call told its caller."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.ray = SimRay(world)
        self.client = Client("sim", list(world.procs), world.options, call_silo=self.ray,
                             start=world.client_rng.randrange(len(world.procs)))
        world.clients.append(self.client)
        self.jobs: dict[str, ScheduledJob] = {}  # acknowledged: as the client returned them
        # Job id -> (when the call raised, what): the call said these were not scheduled.
        self.not_scheduled: dict[str, tuple[int, str]] = {}
        self.in_doubt: set[str] = set()  # may fire or not: ScheduleInDoubt, or the caller gave up
        self.calls = 0  # calls in progress: the run does not end before their answers are judged

    @classmethod
    def draw(cls, world: World) -> SimClient | None:
        """The real client for a share of seeds (drawn from the world's ``client_rng``)."""
        if world.faults.real_client and world.client_rng.random() < CLIENT_SHARE:
            return cls(world)
        return None

    async def schedule(self, specs: Sequence[Spec]) -> None:
        self.calls += 1
        try:
            await self._schedule(specs)
        finally:
            self.calls -= 1

    async def _schedule(self, specs: Sequence[Spec]) -> None:
        world = self._world
        now = us_to_datetime(true_now_us(world.loop))
        jobs = []
        for spec in specs:
            world.specs[spec.id] = spec
            policy = FailurePolicy.constant("1s", max_retries=3) if spec.fail_first else None
            if spec.period_s:
                jobs.append(job(due=us_to_datetime(spec.due_us), now=now, job_id=spec.id,
                                schedule=f"@every {spec.period_s}s", repeats=spec.repeats, misfire="fire_all",
                                failure_policy=policy))
            else:
                jobs.append(job(due=us_to_datetime(spec.due_us), now=now, job_id=spec.id, failure_policy=policy))
        ids = [s.id for s in specs]
        task = asyncio.ensure_future(self.client.submit_jobs(jobs))
        done, _ = await asyncio.wait({task}, timeout=CALL_TIMEOUT_S)
        if not done:
            self.in_doubt.update(ids)
            world.stats["client: schedule without an answer"] += 1
            world.note(f"client schedule {ids}: no answer within {CALL_TIMEOUT_S} s (in doubt)")
            await self._answered_late(task)
            return
        try:
            scheduled = task.result()
        except ScheduleInDoubt as exc:
            may_fire = exc.may_fire
            self.in_doubt.update(i for i in ids if i in may_fire)
            self._refused(sorted(set(ids) - set(may_fire)), f"ScheduleInDoubt without them: {exc}")
            world.stats["client: schedule in doubt"] += 1
            world.note(f"client schedule {ids}: ScheduleInDoubt, may fire {sorted(may_fire)}")
            await judge_in_doubt(self._world, self.ray, may_fire)
            return
        except Exception as exc:
            self._refused(ids, f"{type(exc).__name__}: {exc}")
            world.stats["client: schedule failed"] += 1
            world.note(f"client schedule {ids}: not scheduled ({type(exc).__name__}: {exc})")
            return
        for scheduled_job in scheduled:
            assert scheduled_job.shard is not None
            self.jobs[scheduled_job.id] = scheduled_job
            world.acked[scheduled_job.id] = scheduled_job.shard
            if scheduled_job.id in self.ray.schedule_maybe_acted:
                await earlier_try(world, self.ray, scheduled_job.id, scheduled_job.shard)
        world.stats["acked"] += len(scheduled)
        world.stats["client: acked"] += len(scheduled)  # what its allowance of jobs in doubt is a share of
        world.note(f"client schedule {ids}: acknowledged in {sorted({j.shard or '' for j in scheduled})}")

    async def _answered_late(self, task: asyncio.Future[list[Any]]) -> None:
        """The call its caller gave up on goes on (the client's retries); where it lands, a retry
        may have added a job again whose earlier try ran to its end: judged as a call in doubt
        (seed 282950: a retry 67 s after the first try, its shard kept by ``retry_window`` and
        rotated since, wrote j13 again beside the run it had; its answer was dropped unjudged)."""
        try:
            scheduled = await task
        except Exception:
            return  # failed: nothing of it landed, or its take-back failed as a ScheduleInDoubt says
        self._world.note(f"client schedule {[j.id for j in scheduled]}: answered after its caller gave up")
        for scheduled_job in scheduled:
            if scheduled_job.shard is not None and scheduled_job.id in self.ray.schedule_maybe_acted:
                await earlier_try(self._world, self.ray, scheduled_job.id, scheduled_job.shard, acknowledged=False)

    def _refused(self, ids: Sequence[str], why: str) -> None:
        now_us = true_now_us(self._world.loop)
        for job_id in ids:
            self.not_scheduled.setdefault(job_id, (now_us, why))

    async def cancel(self, job_id: str) -> None:
        """Cancel through ``Client.try_cancel_job``: True is a cancel that must hold; False ("already
        gone") leaves the job owed, unless a try of a cancel of it was lost after reaching a silo."""
        self.calls += 1
        try:
            await self._cancel(job_id)
        finally:
            self.calls -= 1

    async def _cancel(self, job_id: str) -> None:
        world = self._world
        sent_us = true_now_us(world.loop)
        task = asyncio.ensure_future(self.client.try_cancel_job(self.jobs[job_id]))
        done, _ = await asyncio.wait({task}, timeout=CALL_TIMEOUT_S)
        if not done:
            task.add_done_callback(_drop)
            world.cancel_unknown.add(job_id)
            world.stats["client: cancel without an answer"] += 1
            world.note(f"client cancel {job_id}: no answer within {CALL_TIMEOUT_S} s")
            return
        try:
            cancelled = task.result()
        except Exception as exc:
            world.cancel_unknown.add(job_id)  # it may have landed
            world.stats["client: cancel failed"] += 1
            world.note(f"client cancel {job_id}: raised {type(exc).__name__}: {exc}")
            return
        world.note(f"client cancel {job_id}: {cancelled}")
        if not cancelled and job_id in self.ray.cancel_maybe_acted:
            # "Already gone": perhaps by a try of this call, or of another cancel of this job, whose
            # answer was lost.
            world.cancel_unknown.add(job_id)
            world.stats["client: cancel False after a try in doubt"] += 1
        if cancelled:
            world.stats["client: cancelled"] += 1
            world.stats["cancels answered cancelled"] += 1  # what the activity floor counts, either client
            world.cancel_returned(job_id, sent_us)

    def final_checks(self) -> None:
        """Nothing of a call that said "not scheduled" ever started."""
        world = self._world
        told: set[str] = set()
        for d in world.deliveries:
            refused = self.not_scheduled.get(d.job_id)
            if refused is not None and d.job_id not in told and d.job_id not in world.exempted:
                told.add(d.job_id)
                at_us, why = refused
                world.violate(f"not scheduled, yet fired: {d.job_id}#{d.occurrence} started at "
                              f"{d.at_us - EPOCH_US} µs; its schedule call raised at {at_us - EPOCH_US} µs "
                              f"({why})")
        world.stats["client: in doubt"] = len(self.in_doubt)
        world.stats["client: in doubt, fired"] = len(self.in_doubt & {d.job_id for d in world.deliveries})


async def judge_in_doubt(world: World, ray: SimRay, may_fire: Mapping[str, str | None]) -> None:
    """A schedule call that ended in ``ScheduleInDoubt``: a retry's batch in doubt may have landed
    as an acknowledged one does, so each job a try may have acted on is judged by the same rule
    (``earlier_try``). A job the error names no shard for (a retry lost after it reached its
    silo, then the call gave up) is judged at each shard its first occurrence fired from: only
    the retry's copy can be excused there, since at the earlier try's shard the retry's own copy
    is still recorded where a retry looks (seed 328498, every kind: a trigger's first try ran in
    s2.1-000002 and a claim rewrote that log without it; the retry at s0, lost after it wrote,
    found nothing and wrote the run again, the one more run docs/failover.md allows; the call
    ended in doubt with no shard, and the named caller judged no in-doubt call at all)."""
    for job_id, shard in sorted(may_fire.items()):
        if job_id not in ray.schedule_maybe_acted:
            continue
        shards = [shard] if shard is not None else sorted(
            {d.shard for d in world.deliveries if d.job_id == job_id and d.occurrence == 1})
        for copy in shards:
            await earlier_try(world, ray, job_id, copy, acknowledged=False)


async def earlier_try(world: World, ray: SimRay, job_id: str, shard: str, *, acknowledged: bool = True,
                      sent_us: int | None = None, attempt: ScheduleTry | None = None) -> None:
    """A job acknowledged by a call that lost a try after it reached a silo, whose first
    occurrence ran from another shard before the acknowledgement: the retry did not find
    that try, so it must have left no live copy (README: one more run, never two live copies),
    nor any record in the shards a retry reads (else it had to answer that shard). Then its
    runs from the retry's copy are excused; otherwise they are judged as any runs are.

    Not ``acknowledged``: the call ended in doubt, naming ``shard`` for the job, where a
    retry's batch may have landed and stayed (its take-back failed): the same rule, but a
    live copy elsewhere is no violation yet, as the batch may not have landed (seed 56728:
    the earlier try's chain had run out and its shards were deleted as drained; a retry
    wrote the jobs again, could not take them back, and they ran again)."""
    # Its first occurrence fires from the shard it was added to (adoption keeps the shard):
    # fired from another, it was added twice; or from this one, by a try that ran to its end
    # before a rotation compacted it away, and only then the retry looked.
    if sent_us is None:  # the call's latest try, unless the one judged is named
        sent_us, _ = ray.schedule_sent.get(job_id, (0, ""))
        attempt = ray.schedule_try.get(job_id)
    if not any(d.job_id == job_id and d.occurrence == 1 and d.shard != shard for d in world.deliveries) and (
            not _compacted_before(world, job_id, shard, sent_us, attempt)):
        return
    live = [head.base for head in await list_logs(world.store, SHARD_PREFIX) if head.base != shard
            and job_id in ShardState().replay(await _records(world, head.base) or ()).live]
    if await _moved_in_only(world, job_id, shard):
        # The retry answered a shard the earlier try's chain moved through (found there by a
        # later occurrence's ADD: its first shard drained and deleted) and wrote nothing: its
        # first occurrence rightly fired elsewhere, and a cancel follows the moves from here.
        # Judged by what the client was told: that chain must lead on to every live copy (seed
        # 207672: j7 answered in the shard of its second occurrence, live in its third's).
        chain = await _chain_from(world, job_id, shard)
        stray = [base for base in live if base not in chain]
        if stray and acknowledged:
            world.violate(f"two chains: {job_id} acknowledged in {shard}, its chain on to {chain[1:]}, "
                          f"while it is live in {stray}")
        world.stats["client: answered where its earlier try's chain moved through"] += 1
        return
    if live:
        if acknowledged:
            world.violate(f"two chains: {job_id} acknowledged in {shard} while its earlier try is live in {live}")
        return
    kept = await _where_a_retry_looks(world, ray, job_id, shard)
    if kept:
        # The retry had to find it there: no excuse, its runs are judged as runs.
        world.note(f"client schedule: {job_id}'s earlier try ran; its record is still in {kept}, not excused")
        return
    world.added_again.add(job_id)
    world.chain_sent[job_id] = sent_us
    world.chain_shard[job_id] = shard
    told = "added again" if acknowledged else "in doubt"
    world.stats[f"client: {told} after its earlier try ran"] += 1
    world.note(f"client schedule: {job_id}'s earlier try ran and left no live copy; {told} in {shard}")


async def _records(world: World, base: str) -> list[list[Any]] | None:
    """The records of shard ``base`` now; None once its log is gone. A judge runs while silos go
    on, and a drained shard is deleted at any time after its ``retry_window``: one job's shard
    read as gone raised ``NotFound`` out of the judging of a late answer, and its other jobs
    were never judged (seed 1111935: j21, added again as docs/failover.md allows, was then
    called a duplicate and a second chain)."""
    try:
        return list((await read_log(world.store, base)).records())
    except NotFound:
        return None


def _next_hop(world: World, job_id: str, shard: str) -> str | None:
    """Where ``job_id``'s chain went on from ``shard`` (its log gone), by the ADDs as they landed:
    the shard that took its next occurrence after the last one added to ``shard``."""
    here = [occ for (base, added, occ) in world.add_landed if base == shard and added == job_id]
    if not here:
        return None
    after = [(at_us, base) for (base, added, occ), at_us in world.add_landed.items()
             if added == job_id and occ == max(here) + 1 and base != shard]
    return min(after)[1] if after else None


async def _moved_in_only(world: World, job_id: str, shard: str) -> bool:
    """Whether ``shard``'s log holds ``job_id`` only as moved in: an ADD of a later occurrence,
    and no first occurrence, which is all a schedule call (a retry too) ever writes."""
    records = await _records(world, shard)
    occurrences: list[int] = []
    if records is None:
        # Drained and deleted since the retry answered it (seed 1111935, every kind: j20's chain
        # moved on from s3.1-000001 and ended; its holder deleted it as the answer travelled):
        # judged by the ADDs that landed there, as they landed.
        occurrences = [occ for (base, added, occ) in world.add_landed if base == shard and added == job_id]
    for op in records or ():
        if op[0] == ADD and op[1] == job_id:
            occurrences.append(op[4])  # [ADD, id, due_us, job, occurrence, ...]
        elif op[0] == SNAPSHOT:
            occurrences += [entry[3] for entry in op[1] if entry[0] == job_id]  # [id, due_us, job, occurrence, ...]
    return bool(occurrences) and min(occurrences) > 1


async def _chain_from(world: World, job_id: str, shard: str) -> list[str]:
    """The shards ``job_id``'s chain runs through from ``shard`` on, by the moves their logs
    record, to the one that holds it live or where it ended (a shard is not deleted while one
    that moved jobs into it exists, so each hop is there to read)."""
    chain = [shard]
    while len(chain) <= MAX_CHAIN_HOPS:
        records = await _records(world, chain[-1])
        if records is None:  # drained and deleted: on to the shard its next occurrence's ADD landed in
            moved_to = _next_hop(world, job_id, chain[-1])
            if moved_to is None or moved_to in chain:
                break
            chain.append(moved_to)
            continue
        state = ShardState().replay(records)
        moved_to = state.moved.get(job_id)
        if job_id in state.live or not moved_to or moved_to in chain:
            break
        chain.append(moved_to)
    return chain


def _compacted_before(world: World, job_id: str, shard: str, sent_us: int, retry: ScheduleTry | None) -> bool:
    """Whether ``job_id``'s earlier try ran in ``shard`` to its end and was compacted away there
    before the retry that wrote it again looked (docs/failover.md: such a job is added again, one
    more run): every occurrence the earlier try ran there ended durably (no live copy left), and
    the retry's own first read of that log, its search's, held no record of the job. A read that
    held one, the retry had to answer with (seed 83235 with torn logs: the retry wrote into the
    very shard its earlier try had run from, rotated meanwhile). Only the retry's own: another
    call on its silo reads the same log at its own time (``ScheduleTry``)."""
    earlier = {d.occurrence for d in world.deliveries if d.job_id == job_id and d.shard == shard and d.sent_us < sent_us}
    if 1 not in earlier:
        return False
    # An occurrence ends by its outcome's REMOVE or, one of a recurring job, by the ADD of the
    # next occurrence there, which replaces it (seed 150465: j9#1 ended so, and its chain's end
    # was compacted away before the retry looked, yet the retry's copy was judged a duplicate).
    ended = [world.outcome_landed.get((job_id, occurrence), world.add_landed.get((shard, job_id, occurrence + 1)))
             for occurrence in sorted(earlier)]
    if None in ended:
        return False
    reads = [(at_us, data) for at_us, reader, data in world.shard_reads.get(shard, ()) if reader is retry]
    if retry is None or not reads:
        return False
    at_us, data = reads[0]
    return max(t for t in ended if t is not None) < at_us and not landed_ids(decode(data).records(), {job_id})


async def _where_a_retry_looks(world: World, ray: SimRay, job_id: str, shard: str) -> list[str]:
    """The shards besides ``shard`` that still record ``job_id`` (an ADD not taken back) where a
    retry looks for its earlier try: those its suspects created for the job's first window."""
    suspects = ray.schedule_suspects.get(job_id, set())
    window = window_of(ray.schedule_due[job_id], timedelta_to_us(world.options.shard_duration))
    kept = []
    for head in await list_logs(world.store, f"{SHARD_PREFIX}{format_window(window)}-"):
        creator = creator_of(head.base)
        if head.base != shard and creator is not None and creator[0] in suspects and landed_ids(
                await _records(world, head.base) or (), {job_id}):
            kept.append(head.base)
    return kept


def client_rng(seed: int) -> random.Random:
    """The generator of everything the real client's seeds draw."""
    return random.Random(f"client/{seed}")
