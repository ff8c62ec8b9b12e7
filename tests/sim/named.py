"""Named jobs in the simulation (issue 25, deliverable 6): ``client.jobs`` itself — put, overwrite,
delete, trigger, pause and resume — on the simulated silos and store, racing kills, pauses,
partitions and lost answers; on per-name entries, or with the ``buckets`` kind on registry
buckets owned by silos (``tests.sim.buckets``).

In a share of seeds (the ``named`` kind) a caller works a few names through the real
``NamedJobs`` on a real ``cluster.client.Client``. Only two things are the simulation's: the
client's one Ray call per silo (``SimRay``, failing as Ray fails), and its own store, the shared
one seen through the faults a silo's calls meet (latency, errors, writes that land with their
answer lost). Each name has a lane: its calls follow one another, except in a race, two puts of
the name at once. The generation fence, the status recorder and the hooks are the silos' own.

What each call returned, and when, is the truth the checks judge by (never what the registry says):

- nothing acknowledged lost: the job of a name's last put, if it returned, runs every occurrence
  (an overwritten or deleted one owes nothing it had not run by then); a trigger that returned,
  with no put or delete of its name called since, runs;
- the generation fence: once a put or delete returned, no attempt starts of a job whose put (or
  trigger) had ended before that call began, nor, of two puts at once that both returned, of the
  lower generation's: sent after it returned, or started after it while its sender lives;
- nothing of a put that raised ``AlreadyExists`` ever starts;
- nothing starts before the due time its put was given (by the caller's record of the call, not
  the job the library built), nor a triggered run before its trigger was called;
- a job starts only once its name's entry has pointed at it (read from the store as writes land:
  the fence clears a job by that pointer, so a stray copy, or a job whose put never pointed the
  name at it, never runs);
- a get after a put returned, with no delete called since, returns that put's generation and job
  or a newer one, never an older one nor none; after a delete returned, none;
- a pause that returned holds until its resume is sent, and shows in the status it returns; a
  pause or resume without an answer is settled after healing, by resuming until answered.

Everything random here comes from ``random.Random(f"named/{seed}")``, so a seed that does not draw
named jobs draws what it drew before they were simulated. In a seed that does, job ids and the
client's clock come from the seed and the virtual clock (``deterministic``), so it replays.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import sys
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from cluster.client import Client
from cluster.model import ids, times
from cluster.model.errors import AlreadyExists, JobNotFound, ScheduleInDoubt
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.policies import FailurePolicy
from cluster.model.trigger import TRIGGERED_FROM
from cluster.model.wire import datetime_to_us, us_to_datetime
from cluster.named.api import NamedJob, NamedJobs
from cluster.named.bucket import BUCKET_PREFIX
from cluster.named.registry import NAMED_MARK, REGISTRY_PREFIX, name_of
from cluster.runtime.logowner import RELEASED
from storage import LogInfo, Store, Unavailable
from storage.base import Appended, Fetched, LogStat, ServerTime
from tests.sim.buckets import REGISTRY, BucketRay, SimBucketNames, added_named, asked, draws_buckets, pointed_by
from tests.sim.client import SimRay, earlier_try, judge_in_doubt
from tests.sim.loop import EPOCH_US, true_now_us

if TYPE_CHECKING:
    from tests.sim.world import Sent, World

#: The share of seeds (with the ``named`` kind on) whose caller works named jobs.
NAMED_SHARE = 0.25
NAMES = ("a", "b", "c")
# What a lane does next, and how often: a race is two overwriting puts of the name at once.
OPS = ("put", "race", "delete", "trigger", "hold", "get")
WEIGHTS = (40, 10, 14, 14, 12, 10)
P_GET_AFTER = 0.5  # a get right after a put or delete returned
P_CREATE_ONLY = 0.15  # a put without overwrite (AlreadyExists if the name is taken)
SETTLE_TRIES = 8
# Job metadata that carries the simulation's own spec of a job, so that a copy or a triggered
# run of it is judged by what its caller asked, wherever it turns up.
PERIOD, FAIL_FIRST = "sim.period", "sim.fail_first"
TARGET = Target.actor("h", namespace="sim")
# Errors no call should raise: a bug in the code that raised it, not a fault it met.
BUGS = (AssertionError, TypeError, AttributeError, KeyError, IndexError, NameError)


@dataclass
class Call:
    """One call of the caller's and what it was told."""

    n: int
    kind: str  # put, delete, trigger, pause, resume, get
    name: str
    started_us: int
    race: int = 0  # the two puts of one race share a number
    ended_us: int | None = None
    ok: bool = False
    error: BaseException | None = None
    answer: Any = None
    job_id: str | None = None  # put: the job it returned; trigger: the run; pause: the job paused
    generation: int | None = None  # put, get: the generation returned
    asked: Asked | None = None  # put: what its caller passed

    def ended_before(self, at_us: int) -> bool:
        return self.ended_us is not None and self.ended_us < at_us

    def text(self) -> str:
        return f"{self.kind}#{self.n}({self.name})"


@dataclass(frozen=True)
class Asked:
    """What a put's caller passed: its job's due time (true µs), period (s, 0: one-shot) and repeats."""

    due_us: int
    period_s: int
    repeats: int


@dataclass(frozen=True)
class Submitted:
    """A named job the client sent a schedule call for: a generation, or a triggered run of one."""

    name: str
    at_us: int
    triggered_from: str | None  # the generation a triggered run is a run of


class NamedStore(Store):
    """The caller's own view of the shared store: its registry and definition reads and writes."""

    def __init__(self, named: Named) -> None:
        self._named = named

    async def _call(self, method: str, name: str, op: Callable[[], Awaitable[Any]]) -> Any:
        from tests.sim.world import LOST_ANSWER_ERRORS, MAX_LATENCY_S, P_LOST_ANSWER, P_STORE_ERROR, WRITES

        named = self._named
        world, rng = named.world, named.rng
        if world.faults.latency:
            await asyncio.sleep(rng.random() * MAX_LATENCY_S)
        if world.injecting and world.faults.storage_errors and rng.random() < P_STORE_ERROR:
            raise Unavailable(f"injected: {method} {name} failed")
        result = await op()
        if method in WRITES:
            named.landed(name)
            if world.injecting and world.faults.lost_answers and rng.random() < P_LOST_ANSWER:
                error = rng.choice(LOST_ANSWER_ERRORS[method])
                world.note(f"lost answer caller {method} {name} -> {error.__name__}")
                raise error(f"injected: {method} {name} landed, its answer was lost")
        if world.faults.latency:
            await asyncio.sleep(rng.random() * MAX_LATENCY_S)
        return result

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        return await self._call("create", name, lambda: self._named.world.store.create(name, metadata))

    async def list(self, prefix: str = "") -> list[LogInfo]:
        return await self._call("list", prefix, lambda: self._named.world.store.list(prefix))

    async def stat(self, name: str) -> LogStat:
        return await self._call("stat", name, lambda: self._named.world.store.stat(name))

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        return await self._call("set_metadata", name,
                                lambda: self._named.world.store.set_metadata(name, metadata, if_match))

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        return await self._call("append_block", name,
                                lambda: self._named.world.store.append_block(name, payload, if_match))

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        return await self._call("fetch", name, lambda: self._named.world.store.fetch(name, offset))

    async def delete(self, name: str, if_match: str | None) -> None:
        await self._call("delete", name, lambda: self._named.world.store.delete(name, if_match))

    async def server_time(self) -> ServerTime | None:
        return await self._call("server_time", "", self._named.world.store.server_time)


class _Client(Client):
    """The real client; every job it is asked to schedule is noted first (a generation, or a run)."""

    named: Named

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        self.named.submitted(jobs)
        ray = self.named.ray
        try:
            landed = await super().submit_jobs(jobs)
        except ScheduleInDoubt as exc:
            await judge_in_doubt(self.named.world, ray, exc.may_fire)  # as any client's call in doubt
            raise
        for job in landed:
            # Judged as any client's retried call: a retry that found no trace of an earlier try
            # that had already run (its shard deleted as drained) adds it again, one more run as
            # docs/failover.md allows (seed 3330: a trigger's run fired twice, once per chain).
            if job.id in ray.schedule_maybe_acted and job.shard is not None:
                await earlier_try(self.named.world, ray, job.id, job.shard)
        return landed


class _Jobs(NamedJobs):
    """``NamedJobs`` on the caller's simulated store: the one seam, as ``call_silo`` is the client's."""

    def __init__(self, client: Client, store: Store, named: Named) -> None:
        super().__init__(client)
        self._sim_store = store
        self._sim_named = named

    async def _store(self) -> Store:
        return self._sim_store

    async def _writer(self) -> Any:
        loop = id(asyncio.get_running_loop())
        if self._sim_named.buckets and loop not in self._writers:
            writer = SimBucketNames(self._sim_store, self.client, self.client)  # type: ignore[arg-type]
            writer.named = self._sim_named
            self._writers[loop] = writer
        return await super()._writer()


class Named:
    """The caller of a named-jobs seed, what each of its calls was told, and the checks."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self.world = world
        self.rng = rng
        # Names kept in registry buckets (the ``buckets`` kind): the owners' answers may be lost too.
        self.buckets = world.options.named_buckets
        self.ray = BucketRay(world, rng) if self.buckets else SimRay(world, rng, ends_superseded=True)
        self.client = _Client("sim", list(world.procs), world.options, call_silo=self.ray,
                              start=rng.randrange(len(world.procs)))
        world.clients.append(self.client)
        self.client.named = self
        self.client._jobs = _Jobs(self.client, NamedStore(self), self)
        self.calls: dict[str, list[Call]] = defaultdict(list)
        self.jobs: dict[str, Submitted] = {}  # job id -> its schedule call
        self.asked: dict[tuple[str, int, int], int] = {}  # (key, due µs, made µs) of a put at a bucket's owner -> when sent
        self.pointed: set[str] = set()  # job ids a name's entry pointed at, as its writes landed
        # Job id -> [paused at, resume sent at, pause sent at], one per pause that returned.
        self.held: dict[str, list[list[int | None]]] = defaultdict(list)
        self.hold_unknown: set[str] = set()  # names whose pause or resume got no answer
        self.busy: set[str] = set()  # names whose lane has calls under way
        self.running = 0  # calls under way
        self.settling: set[str] = set()
        self.settle_tried: set[str] = set()  # names settled once already, without an answer
        self._n = itertools.count(1)
        self._races = itertools.count(1)

    @classmethod
    def draw(cls, world: World) -> Named | None:
        rng = random.Random(f"named/{world.seed}")
        drawn = world.faults.named and rng.random() < NAMED_SHARE
        if draws_buckets(world):  # a seed whose names live in registry buckets works them
            world.options = replace(world.options, named_registry=REGISTRY)
            world.peer_ray = BucketRay(world, world.registry_rng)
            world.stats["names in registry buckets"] = 1
            return cls(world, rng)
        return cls(world, rng) if drawn else None

    # -- what the client and the store saw ------------------------------------------------

    def submitted(self, jobs: Sequence[ScheduledJob], at_us: int | None = None) -> None:
        """Jobs about to be sent in a schedule call (or asked for ``at_us`` by a put at a bucket's
        owner): each judged, wherever it turns up, by what its caller asked (its due time, period
        and repeats, carried in its metadata)."""
        from tests.sim.world import Spec

        now_us = true_now_us(self.world.loop) if at_us is None else at_us
        for job in jobs:
            key = job.metadata.get(NAMED_MARK)
            if key is None:
                continue
            origin = job.metadata.get(TRIGGERED_FROM)
            submitted = self.jobs[job.id] = Submitted(name_of(key), now_us, origin)
            fail_first = int(job.metadata.get(FAIL_FIRST, "0"))
            if origin:
                # A run now: due when its trigger was called, never before.
                started = [c.started_us for c in self._origins(submitted)]
                self.world.specs[job.id] = Spec(job.id, min(started, default=now_us), fail_first=fail_first)
                continue
            asked = self._asked(submitted, datetime_to_us(job.first_fire))
            self.world.specs[job.id] = Spec(job.id, asked.due_us, period_s=asked.period_s,
                                            repeats=asked.repeats if asked.period_s else 1, fail_first=fail_first)

    def _asked(self, submitted: Submitted, built_us: int) -> Asked:
        """What the put that sent ``submitted`` passed, by the caller's own record of its calls, never
        by the job the library built from it. Of two puts of a race under way, the one whose due
        time the job carries (it picks between what was asked, never sets it), else the earlier due."""
        puts = [c.asked for c in self._origins(submitted) if c.asked is not None]
        if not puts:  # sent outside its calls (counted where it starts): the earliest any put of the name asked
            puts = [c.asked for c in self.calls[submitted.name]
                    if c.asked is not None and c.started_us <= submitted.at_us]
        if not puts:
            return Asked(EPOCH_US, 0, 1)
        return next((a for a in puts if a.due_us == built_us), min(puts, key=lambda a: a.due_us))

    def landed(self, name: str, method: str = "", payload: bytes = b"") -> None:
        """A write to the store landed (the caller's or a silo's): a registry entry's pointer
        noted, or a registry bucket's record pointing a name at a job."""
        if self.buckets:
            for job in added_named(name, method, payload):
                at_us = self.asked.get(asked(job.metadata[NAMED_MARK], job))
                if job.id not in self.jobs and at_us is not None and TRIGGERED_FROM not in job.metadata:
                    self.submitted([job], at_us)  # made by its bucket's owner, under an id of its own
        if self.buckets and method == "set_metadata" and name.startswith(BUCKET_PREFIX):
            released = self.world.store._logs.get(name)
            if released is not None and released.metadata.get("owner") == RELEASED:
                self.world.stats["registry: buckets released"] += 1  # handed over to a peer, or a stop
        if name.startswith(REGISTRY_PREFIX):
            log = self.world.store._logs.get(name)
            job_ids = [] if log is None or "job" not in log.metadata else [log.metadata["job"]]
        else:
            job_ids = pointed_by(name, method, payload)
        for job_id in job_ids:
            if job_id not in self.pointed:
                self.pointed.add(job_id)
                self.world.note(f"named: {name} points at {job_id}")

    # -- the caller -----------------------------------------------------------------------

    async def run(self, until_s: float) -> None:
        loop, rng = self.world.loop, self.rng
        while loop.time() < until_s:
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            free = [name for name in NAMES if name not in self.busy]
            if free:
                name = rng.choice(free)
                self.busy.add(name)
                self.world.spawn(self._lane(name, rng.choices(OPS, WEIGHTS)[0]))

    async def _lane(self, name: str, op: str) -> None:
        try:
            if op == "put":
                await self._put(name)
            elif op == "race":
                race = next(self._races)
                self.world.stats["named: races"] += 1
                await asyncio.gather(self._put(name, race, overwrite=True), self._put(name, race, overwrite=True))
            elif op == "delete":
                call = await self._call("delete", name, lambda: self.client.jobs.delete(name))
                if call.ok:
                    self.world.stats["named: deletes acknowledged" if call.answer else "named: deletes of no job"] += 1
            elif op == "trigger":
                call = await self._call("trigger", name, lambda: self.client.jobs.trigger(name))
                if call.ok:
                    call.job_id = call.answer.id
                    self.world.stats["named: triggers acknowledged"] += 1
            elif op == "hold":
                await self._hold(name)
            if op in ("put", "race", "delete") and self.rng.random() < P_GET_AFTER or op == "get":
                await self._get(name)
        finally:
            self.busy.discard(name)

    async def _put(self, name: str, race: int = 0, *, overwrite: bool | None = None) -> None:
        rng = self.rng
        due_us = true_now_us(self.world.loop) + int(rng.uniform(0.2, 6.0) * 1_000_000)
        recurring = rng.random() < 0.3
        fail_first = rng.choice((0, 0, 1, 2)) if rng.random() < 0.3 else 0
        shape: dict[str, Any] = {"schedule": "@every 2s", "repeats": rng.randint(2, 3)} if recurring else {}
        if overwrite is None:
            overwrite = rng.random() >= P_CREATE_ONLY
        asked = Asked(due_us, 2 if recurring else 0, shape.get("repeats", 1))
        call = await self._call("put", name, lambda: self.client.jobs.put(
            name, target=TARGET, due_time=us_to_datetime(due_us), overwrite=overwrite,
            metadata={PERIOD: "2" if recurring else "0", FAIL_FIRST: str(fail_first)},
            failure_policy=FailurePolicy.constant("1s", max_retries=3) if fail_first else None, **shape),
            race, asked=asked)
        if call.ok:
            found: NamedJob = call.answer
            call.job_id, call.generation = found.job.id, found.generation
            self.world.stats["named: puts acknowledged"] += 1
            if found.generation > 1:
                self.world.stats["named: overwrites acknowledged"] += 1
        elif isinstance(call.error, AlreadyExists):
            self.world.stats["named: puts refused, the name taken"] += 1

    async def _get(self, name: str) -> None:
        call = await self._call("get", name, lambda: self.client.jobs.get(name))
        if call.ok:
            found: NamedJob | None = call.answer
            if found is not None:
                call.job_id, call.generation = found.job.id, found.generation
            self._judge_get(call)

    async def _hold(self, name: str) -> None:
        """Pause the name's job, then resume it a little later."""
        pause = await self._call("pause", name, lambda: self.client.jobs.pause(name, note="sim", by="sim"))
        window: list[int | None] | None = None
        if pause.ok:
            found: NamedJob = pause.answer
            pause.job_id = found.job.id
            self.world.stats["named: pauses acknowledged"] += 1
            if not found.status.paused:
                self.world.violate(f"named: {pause.text()} returned {name}'s job {found.job.id} not paused")
            window = [pause.ended_us, None, pause.started_us]
            self.held[found.job.id].append(window)
        elif not isinstance(pause.error, JobNotFound):
            self.hold_unknown.add(name)  # it may land later, and stay paused: not owed until settled
        await asyncio.sleep(self.rng.uniform(0.2, 4.0))
        if window is not None:
            window[1] = true_now_us(self.world.loop)  # sends are allowed again from here
        resume = await self._call("resume", name, lambda: self.client.jobs.resume(name))
        if resume.ok:
            self.world.stats["named: resumes acknowledged"] += 1
        elif not isinstance(resume.error, JobNotFound):
            self.hold_unknown.add(name)

    async def _call(self, kind: str, name: str, make: Callable[[], Awaitable[Any]], race: int = 0, *,
                    asked: Asked | None = None) -> Call:
        world = self.world
        call = Call(next(self._n), kind, name, true_now_us(world.loop), race, asked=asked)
        self.calls[name].append(call)
        self.running += 1
        try:
            call.answer = await make()
            call.ok = True
        except Exception as exc:
            call.error = exc
            if isinstance(exc, BUGS):
                world.violate(f"named: {call.text()} raised {type(exc).__name__}: {exc!r}")
        finally:
            call.ended_us = true_now_us(world.loop)
            self.running -= 1
        if call.ok:
            world.note(f"named: {call.text()} returned {_answer_text(call.answer)}")
        else:
            world.stats[f"named: {kind} raised"] += 1
            world.note(f"named: {call.text()} raised {type(call.error).__name__}: {call.error}")
        return call

    # -- after healing ----------------------------------------------------------------------

    def settle(self) -> None:
        """Resume, until answered, each name whose pause or resume got no answer (it may stay paused)."""
        for name in sorted(self.hold_unknown - self.settling - self.busy - self.settle_tried):
            self.settle_tried.add(name)
            self.settling.add(name)
            self.busy.add(name)
            self.world.spawn(self._settle(name))

    async def _settle(self, name: str) -> None:
        try:
            for _ in range(SETTLE_TRIES):
                call = await self._call("resume", name, lambda: self.client.jobs.resume(name))
                if call.ok or isinstance(call.error, JobNotFound):
                    self.hold_unknown.discard(name)
                    self.world.stats["named: settled a pause or resume without an answer"] += 1
                    return
                await asyncio.sleep(1.0)
        finally:
            self.settling.discard(name)
            self.busy.discard(name)

    def quiet(self) -> bool:
        """Nothing under way, nothing owed."""
        return not self.busy and not self.running and not self.settling and not self.owed()

    # -- the checks -------------------------------------------------------------------------

    def fired(self, sent: Sent, now_us: int) -> None:
        """An attempt starts now: one of a named job is checked against what the calls were told."""
        job_id = sent.job_id
        submitted = self.jobs.get(job_id)
        if submitted is None:
            return
        world, occurrence = self.world, sent.attempt.occurrence
        what = f"{job_id}#{occurrence} of {submitted.name}"
        world.stats["named: attempts started"] += 1
        generation = submitted.triggered_from or job_id
        if generation not in self.pointed:
            world.violate(f"named: {what} started; the name's entry never pointed at {generation}")
        origins = self._origins(submitted)
        if len(origins) == 1 and isinstance(origins[0].error, AlreadyExists) and not submitted.triggered_from:
            world.violate(f"named: {what} started; its {origins[0].text()} raised AlreadyExists at "
                          f"{_at(origins[0].ended_us)}")
        for window in self.held.get(job_id, ()):
            broken = world.pause_broken(sent, now_us, window)
            if broken is not None:
                world.violate(f"named: pause did not hold: {what} {broken}")
        newer = self._superseded(submitted, job_id, origins)
        if newer is None:
            return
        if sent.sent_us >= newer.ended_us:  # type: ignore[operator]
            world.violate(f"named: older generation ran: {what} sent at {_at(sent.sent_us)}; "
                          f"{newer.text()} returned at {_at(newer.ended_us)}")
        elif now_us >= newer.ended_us and not sent.sender_alive():  # type: ignore[operator]
            world.stats["named: older generation in flight at a kill"] += 1
            world.note(f"named: {what} started after {newer.text()} returned: sent before it, its sender killed since")
        elif now_us >= newer.ended_us:  # type: ignore[operator]
            world.violate(f"named: older generation ran: {what} started at {_at(now_us)}; "
                          f"{newer.text()} returned at {_at(newer.ended_us)}")

    def _origins(self, submitted: Submitted) -> list[Call]:
        """The calls that may have sent ``submitted``: of its kind and name, under way as it was sent."""
        kind = "trigger" if submitted.triggered_from else "put"
        return [c for c in self.calls[submitted.name] if c.kind == kind and c.started_us <= submitted.at_us
                and (c.ended_us is None or c.ended_us >= submitted.at_us)]

    def _superseded(self, submitted: Submitted, job_id: str, origins: list[Call]) -> Call | None:
        """The first put or delete of the name to return after which nothing of ``job_id`` may start:
        one called after every call that may have sent it had ended, or of a race, the put that
        returned a higher generation than the one that returned ``job_id``."""
        if not origins:
            self.world.stats["named: job sent outside its calls"] += 1
            return None
        mine = next((c for c in origins if c.ok and c.job_id == job_id), None)
        newer = [c for c in self.calls[submitted.name] if c.kind in ("put", "delete") and c.ok and c.job_id != job_id
                 and (all(o.ended_before(c.started_us) for o in origins)
                      or (mine is not None and c.race and c.race == mine.race
                          and (c.generation or 0) > (mine.generation or 0)))]
        return min(newer, key=lambda c: c.ended_us or 0, default=None)

    def _judge_get(self, get: Call) -> None:
        """A get returns the generation of the puts that returned before it, or a newer one; none after a delete."""
        world = self.world
        world.stats["named: gets checked"] += 1
        before = [c for c in self.calls[get.name] if c.kind in ("put", "delete") and c.n < get.n]
        deletes = [i for i, c in enumerate(before) if c.kind == "delete"]
        since = before[deletes[-1] + 1:] if deletes else before
        if deletes and not since:
            if before[-1].ok and get.answer is not None:
                world.violate(f"named: {get.text()} returned generation {get.generation} ({get.job_id}); "
                              f"{before[-1].text()} returned at {_at(before[-1].ended_us)}")
            return
        for put in since:
            if not put.ok or put.generation is None or not put.ended_before(get.started_us + 1):
                continue
            if get.answer is None:
                world.violate(f"named: {get.text()} returned none; {put.text()} returned generation "
                              f"{put.generation} at {_at(put.ended_us)}")
            elif get.generation is not None and (get.generation < put.generation or (
                    get.generation == put.generation and get.job_id != put.job_id)):
                world.violate(f"named: {get.text()} returned generation {get.generation} ({get.job_id}); "
                              f"{put.text()} returned generation {put.generation} ({put.job_id}) "
                              f"at {_at(put.ended_us)}")

    def owed(self) -> list[str]:
        """Occurrences due by now that must have succeeded: of each name's last put, if it returned
        (and, of a race, the higher generation, if both returned), and triggered runs since."""
        world = self.world
        now_us = true_now_us(world.loop)
        succeeded = {(d.job_id, d.occurrence) for d in world.deliveries if d.succeeded}
        missing = []
        for name, calls in sorted(self.calls.items()):
            if name in self.hold_unknown:
                continue  # unsettled: ``final_checks`` fails the seed if it stays so
            mutations = [c for c in calls if c.kind in ("put", "delete")]
            if not mutations:
                continue
            last = [c for c in mutations if c.race and c.race == mutations[-1].race] or mutations[-1:]
            owing: list[str] = []
            if all(c.ok and c.kind == "put" for c in last):
                owing.append(max(last, key=lambda c: c.generation or 0).job_id or "")
            owing += [c.job_id or "" for c in calls if c.kind == "trigger" and c.ok and c.n > last[-1].n]
            for job_id in owing:
                spec = world.specs[job_id]
                if job_id in world.exempted:
                    continue
                for occurrence in range(1, spec.repeats + 1):
                    if spec.occurrence_due_us(occurrence) <= now_us and (job_id, occurrence) not in succeeded:
                        missing.append(f"{job_id}#{occurrence} of {name}")
        return missing

    def final_checks(self) -> None:
        world = self.world
        for missing in self.owed():
            world.violate(f"named: lost: {missing} never succeeded")
        for name in sorted(self.hold_unknown):
            world.violate(f"named: unsettled: {name}'s pause or resume got no answer, nor did a resume after healing")
        for calls in self.calls.values():
            for call in calls:
                if call.ended_us is None:
                    world.violate(f"named: {call.text()}, called at {_at(call.started_us)}, never answered")


def _answer_text(answer: Any) -> str:
    if isinstance(answer, NamedJob):
        return f"generation {answer.generation} job {answer.job.id} in {answer.job.shard}"
    if isinstance(answer, ScheduledJob):
        return f"run {answer.id} in {answer.shard}"
    return repr(answer)


def _at(us: int | None) -> str:
    return "never" if us is None else f"{us - EPOCH_US} µs"


@contextlib.contextmanager
def deterministic(world: World) -> Iterator[None]:
    """Job ids from the seed and the client's clock from the virtual loop, while a named-jobs seed
    runs: ``NamedJobs`` makes ids (``uuid4``) and reads the time (``utc_now``) itself, and a seed
    must replay. Every ``cluster`` module that imported ``utc_now`` gets the virtual one."""
    rng = random.Random(f"uuid/{world.seed}")

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=rng.getrandbits(128), version=4)

    def urandom(size: int) -> bytes:  # ``put_many``'s ids, drawn a call at a time
        return rng.getrandbits(8 * size).to_bytes(size, "big") if size else b""

    def utc_now() -> Any:
        return us_to_datetime(true_now_us(world.loop))

    real = times.utc_now
    patched: list[tuple[Any, str, Any]] = [(uuid, "uuid4", uuid.uuid4), (ids, "urandom", ids.urandom)]
    patched += [(module, "utc_now", real) for module in list(sys.modules.values())
                if getattr(module, "__name__", "").startswith("cluster.") and getattr(module, "utc_now", None) is real]
    for module, attr, _ in patched:
        setattr(module, attr, {"uuid4": uuid4, "urandom": urandom}.get(attr, utc_now))
    try:
        yield
    finally:
        for module, attr, value in patched:
            setattr(module, attr, value)
