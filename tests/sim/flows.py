"""Flows in the simulation (the ``flows`` kind): ``cluster.flows`` driven as a user drives it.

In a share of seeds a user submits flows (a DAG of steps, each a job) through the real
``cluster.flows.api.Flows`` on a real ``Client`` (its Ray calls are ``SimRay``'s), cancels some,
and submits again a flow whose submit failed (the same definition under the same name returns the
flow). The silos run the real ``FlowHooks``, which record steps and start dependants. Only the
client's store is the simulation's: the shared memory store, with latency, errors and lost answers
on every call (``ClientStore``), and the flow code's clock and ids (virtual time; ids drawn here).

Each step's job fails its first ``fail`` attempts (its data says how many): a step whose retries
cannot outlast that is *doomed*, and its flow must halt. What the user was told is the truth the
checks judge by, with the handler's record of what ran:

- **(a) order**: a step's attempt leaves its silo only after each step it depends on ran with
  success at the handler and that success was durable in the flow log (its ``ok`` landed);
- **(b) cancel**: once ``Flows.cancel`` returned True, no attempt of the flow's steps is sent, nor
  starts while its sender runs (as for a job's cancel: a run already under way finishes first);
- **(c) nothing acknowledged lost**: a flow whose submit returned ends, after healing, as its
  design and the user's calls say: succeeded (every step ran with success) if no step is doomed,
  halted by a doomed step if one is, cancelled if a cancel returned True; and an ``ok`` in a
  flow log is never written for a step whose job did not run with success. A cancel without an
  answer is made again after healing and the flow judged by that answer; one that then ended
  cancelled must hold a cancel record its user wrote (counted);
- **(e) not early**: no step starts before its flow's first submit was called and each step it
  depends on had its ``ok`` land (a step has no delay of its own);
- **(d) once**: a step's job is a job: ``World.check_duplicates`` holds it to one success unless
  a kill, a pause or a duplicate delivery explains another, and to one chain.

Everything random here is drawn from ``random.Random(f"flows/{seed}")``: a seed that draws no
flows runs as it did before they existed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from unittest import mock

from cluster.client import Client
from cluster.flows.api import Flows
from cluster.flows.log import read_flow
from cluster.flows.model import (
    FLOW_CANCELLED,
    FLOW_HALTED,
    FLOW_META,
    FLOW_PREFIX,
    FLOW_SUCCEEDED,
    STEP_META,
    Backoff,
    Flow,
    FlowStatus,
    RetryPolicy,
    Step,
)
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.wire import unpack
from storage import AlreadyExists, Fenced, LogInfo, NotFound, StorageError, Store, Unavailable
from storage.base import Appended, Fetched, LogStat, ServerTime
from storage.records import decode
from tests.sim.client import CALL_TIMEOUT_S, SimRay, _drop, earlier_try
from tests.sim.loop import EPOCH_US, true_now_us

if TYPE_CHECKING:
    from cluster.model.attempt import Attempt
    from tests.sim.world import Delivery, Sent, Spec, World

#: The share of seeds in which a user runs flows (with the ``flows`` kind on).
FLOW_SHARE = 0.5
MAX_STEPS = 5
P_CANCEL = 0.25  # a turn of the user cancels a running flow rather than submitting one
SETTLE_TRIES = 8  # after healing, a cancel in doubt is made again until answered, at most this often
P_DOOMED = 0.15  # a flow has a step that fails more often than its retries allow
P_STORE_ERROR = 0.03  # per client store call, as a silo's
P_LOST_ANSWER = 0.03
MAX_LATENCY_S = 0.05
RESUBMITS = 2  # a submit that failed is made again this often, a little later
TARGET = Target.actor("h", namespace="test")

_WRITES = frozenset({"create", "set_metadata", "append_block", "delete"})
_LOST: Mapping[str, tuple[type[StorageError], ...]] = {
    "create": (AlreadyExists, Unavailable), "set_metadata": (Fenced, Unavailable),
    "append_block": (Fenced, Unavailable), "delete": (NotFound, Unavailable),
}


def flows_rng(seed: int) -> random.Random:
    return random.Random(f"flows/{seed}")


@dataclass
class Design:
    """A flow as the user made it: each step's dependencies, its failures and its retries."""

    name: str
    deps: dict[str, tuple[str, ...]]
    fail: dict[str, int]
    retries: dict[str, int]
    flow: Flow
    acked_us: int | None = None  # when a submit of it first returned
    cancel_true_us: int | None = None  # when a cancel of it first returned True
    cancel_in_doubt: bool = False  # a cancel raised or got no answer: it may have landed
    submit_sent_us: int | None = None  # when its first submit call was made: no step of it may start before
    settle_tried: bool = False  # its cancel in doubt is being, or was, made again after healing
    cancel_settled: bool = False  # a cancel made again after healing was answered

    @property
    def doomed(self) -> set[str]:
        return {s for s, n in self.fail.items() if n > self.retries[s]}


@dataclass
class FlowTruth:
    """What landed in the store about flows (true µs), read off each write as it lands."""

    ok_landed: dict[tuple[str, str], int] = field(default_factory=dict)  # (flow, step) -> its ok landed
    ended_landed: dict[tuple[str, str], int] = field(default_factory=dict)  # ... its ok or fail landed
    job_step: dict[str, tuple[str, str]] = field(default_factory=dict)  # job id -> (flow, step), from "flow"
    cancel_landed: dict[str, int] = field(default_factory=dict)  # flow -> when its user's "cancel" record landed


class SimFlows:
    """The user of flows in one seed, and the checks of what flows did."""

    def __init__(self, world: World, rng: random.Random) -> None:
        self._world = world
        self.rng = rng
        self.ray = SimRay(world, rng)
        client = Client("sim", list(world.procs), world.options, call_silo=self.ray,
                        start=rng.randrange(len(world.procs)))
        world.clients.append(client)
        self.flows = _StoreFlows(client, ClientStore(world, self), world, self.ray)
        self.designs: dict[str, Design] = {}
        self.truth = FlowTruth()
        self.calls = 0

    @classmethod
    def draw(cls, world: World) -> SimFlows | None:
        rng = flows_rng(world.seed)
        if world.faults.flows and rng.random() < FLOW_SHARE:
            return cls(world, rng)
        return None

    @contextlib.contextmanager
    def ids(self) -> Iterator[None]:
        """Flow ids, intent tokens and owner tags drawn from this seed (``uuid4`` elsewhere): they
        name jobs and order sets of them, and a seed must replay."""
        rng = random.Random(f"flow ids/{self._world.seed}")
        with mock.patch.object(uuid, "uuid4", lambda: uuid.UUID(int=rng.getrandbits(128), version=4)):
            yield

    # -- the user -----------------------------------------------------------------------

    def design(self, n: int) -> Design:
        rng = self.rng
        names = [f"s{i}" for i in range(rng.randint(2, MAX_STEPS))]
        flow_retries = rng.choice((0, 1, 2))
        deps: dict[str, tuple[str, ...]] = {}
        retries: dict[str, int] = {}
        own: dict[str, RetryPolicy | None] = {}
        for i, name in enumerate(names):
            earlier = names[:i]
            deps[name] = tuple(sorted(rng.sample(earlier, rng.randint(0, min(2, len(earlier))))))
            if rng.random() < 0.3:
                r = rng.choice((0, 1, 2))
                own[name], retries[name] = RetryPolicy(r, backoff=Backoff("constant", "1s")), r
            else:
                own[name], retries[name] = None, flow_retries
        fail = {name: (1 if rng.random() < 0.25 and retries[name] else 0) for name in names}
        if rng.random() < P_DOOMED:
            doomed = rng.choice(names)
            fail[doomed] = retries[doomed] + 1
        flow = Flow(f"f{n}", [Step(name, TARGET, {"fail": fail[name]}, deps[name], own[name]) for name in names],
                    retry=RetryPolicy(flow_retries, backoff=Backoff("constant", "1s")))
        return Design(flow.name, deps, fail, retries, flow)

    async def user(self, until: float) -> None:
        """Until ``until`` (loop time): submit flows, now and then cancel a running one."""
        world, rng, n = self._world, self.rng, 0
        while world.loop.time() < until:
            await asyncio.sleep(rng.uniform(0.3, 1.5))
            running = sorted(d.name for d in self.designs.values()
                             if d.acked_us is not None and d.cancel_true_us is None and not d.cancel_in_doubt)
            if running and rng.random() < P_CANCEL:
                world.spawn(self._call(self._cancel(self.designs[rng.choice(running)])))
                continue
            n += 1
            design = self.design(n)
            self.designs[design.name] = design
            world.spawn(self._call(self._submit(design)))

    async def _call(self, call: Awaitable[None]) -> None:
        self.calls += 1
        try:
            await call
        finally:
            self.calls -= 1

    async def _answer(self, what: str, call: Awaitable[Any]) -> tuple[bool, Any]:
        """(True, its result), (False, the exception), or (False, None) without an answer in time."""
        task = asyncio.ensure_future(call)
        done, _ = await asyncio.wait({task}, timeout=CALL_TIMEOUT_S)
        if not done:
            task.add_done_callback(_drop)
            self._world.note(f"flows: {what}: no answer within {CALL_TIMEOUT_S} s")
            return False, None
        if task.exception() is not None:
            exc = task.exception()
            self._world.note(f"flows: {what}: raised {type(exc).__name__}: {exc}")
            return False, exc
        return True, task.result()

    async def _submit(self, design: Design) -> None:
        world = self._world
        design.submit_sent_us = true_now_us(world.loop)
        for tries in range(1 + RESUBMITS):
            ok, answer = await self._answer(f"submit {design.name}", self.flows.submit(design.flow))
            if ok:
                status: FlowStatus = answer
                if design.acked_us is None:
                    design.acked_us = true_now_us(world.loop)
                world.stats["flows submitted"] += 1
                world.stats["flows submitted again after a failure"] += tries > 0
                world.note(f"flows: submit {design.name}: acknowledged ({status.state}) "
                           f"{ {s: d for s, d in design.deps.items() if d} } fail {design.fail}")
                return
            world.stats["flow submits failed"] += 1
            await asyncio.sleep(self.rng.uniform(0.5, 3.0))

    async def _cancel(self, design: Design) -> None:
        world = self._world
        ok, answer = await self._answer(f"cancel {design.name}", self.flows.cancel(design.name))
        if not ok:
            design.cancel_in_doubt = True
            world.stats["flow cancels in doubt"] += 1
            return
        world.note(f"flows: cancel {design.name}: {answer}")
        if answer and design.cancel_true_us is None:
            design.cancel_true_us = true_now_us(world.loop)
            world.stats["flows cancelled"] += 1

    def settle(self) -> None:
        """After healing, cancel again each flow whose cancel got no answer, until answered (as
        ``World.settle`` does a job's): how it ended is then judged by that answer, not excused."""
        for design in self.designs.values():
            if design.cancel_in_doubt and design.cancel_true_us is None and not design.settle_tried:
                design.settle_tried = True
                self._world.spawn(self._call(self._settle_cancel(design)))

    async def _settle_cancel(self, design: Design) -> None:
        world = self._world
        for _ in range(SETTLE_TRIES):
            ok, answer = await self._answer(f"cancel {design.name} again", self.flows.cancel(design.name))
            if ok:
                design.cancel_settled = True
                world.note(f"flows: cancel {design.name} again: {answer}")
                if answer:  # it was running: from here on it must hold, as any cancel that returned True
                    design.cancel_true_us = true_now_us(world.loop)
                world.stats[f"flows: settled a cancel in doubt, then {'cancelled' if answer else 'finished'}"] += 1
                return
            await asyncio.sleep(1.0)

    # -- what happens -------------------------------------------------------------------

    def landed(self, name: str, payload: bytes, now_us: int, *, by_user: bool = False) -> None:
        """A frame landed in a flow log (by a silo or the client): what it makes durable."""
        flow = name[len(FLOW_PREFIX):].rpartition("~")[0]
        world = self._world
        for record in decode(payload).records():
            world.say(f"flow log {flow}: {record if record[0] != 'flow' else ['flow', record[1][1]]}")
            if record[0] == "cancel" and by_user:
                self.truth.cancel_landed.setdefault(flow, now_us)  # a user's cancel: what a cancelled flow needs
            elif record[0] == "flow":
                _, flow_id, steps, _ = record[1]
                for i, step in enumerate(steps):
                    self.truth.job_step[f"{flow_id}-{i}"] = (flow, step[0])
            elif record[0] == "fail":
                self.truth.ended_landed.setdefault((flow, record[1]), now_us)
            elif record[0] == "ok":
                step = record[1]
                self.truth.ended_landed.setdefault((flow, step), now_us)
                if (flow, step) in self.truth.ok_landed:
                    continue
                self.truth.ok_landed[(flow, step)] = now_us
                job_ids = [j for j, at in self.truth.job_step.items() if at == (flow, step)]
                if not any((job_id, 1) in world.ran_ok for job_id in job_ids):
                    world.violate(f"flow step ok unrun: {flow}/{step} recorded as succeeded at "
                                  f"{now_us - EPOCH_US} µs; no attempt of its job had succeeded")

    def spec(self, job_id: str, attempt: Attempt) -> Spec:
        """A step's job as the handler sees it: one occurrence, failing its first ``fail`` attempts.
        Due at the earliest the user allowed, never at what the library wrote in the job: once its
        flow's first submit was called and each of its dependencies' ``ok`` had landed (a step
        carries no delay of its own). ``fired`` judges the order by sends; this judges the start."""
        from tests.sim.world import Spec

        job = ScheduledJob.from_wire(unpack(attempt.job))
        assert FLOW_META in job.metadata, f"{job_id} is neither a job the client scheduled nor a flow step"
        flow, step = self.truth.job_step.setdefault(job_id, (job.metadata[FLOW_META], job.metadata[STEP_META]))
        design = self.designs.get(flow)
        due_us = EPOCH_US
        if design is not None and design.submit_sent_us is not None:
            landed = (self.truth.ok_landed.get((flow, dep), EPOCH_US) for dep in design.deps.get(step, ()))
            due_us = max([design.submit_sent_us, *landed])
        return Spec(job_id, due_us, fail_first=int(job.data["fail"]))

    def fired(self, sent: Sent, now_us: int, alive: bool) -> None:
        """An attempt of a step's job starts now: (a) its dependencies' success was durable when
        it left; (b) no cancel of its flow had returned True when it left (or, its sender alive,
        when it starts)."""
        world = self._world
        flow, step = self.truth.job_step[sent.job_id]
        design = self.designs.get(flow)
        if design is None:
            return
        world.stats["flow steps started"] += 1
        for dep in design.deps[step]:
            landed = self.truth.ok_landed.get((flow, dep))
            if landed is None or landed > sent.sent_us:
                when = "never" if landed is None else f"at {landed - EPOCH_US} µs"
                world.violate(f"flow order: {flow}/{step} sent at {sent.sent_us - EPOCH_US} µs before its "
                              f"dependency {dep} had durably succeeded (its ok landed {when})")
        cancelled = design.cancel_true_us
        if cancelled is not None and (sent.sent_us >= cancelled or (now_us >= cancelled and alive)):
            world.violate(f"flow cancel did not hold: {flow}/{step} sent at {sent.sent_us - EPOCH_US} µs, "
                          f"started at {now_us - EPOCH_US} µs; its flow's cancel returned True at "
                          f"{cancelled - EPOCH_US} µs")
        elif cancelled is not None and now_us >= cancelled:
            world.stats["flow step started after a cancel, sender killed"] += 1

    def outcome_lost(self, first: Delivery, again: Delivery) -> tuple[str, str] | None:
        """Why a step's job ran with success again, if its flow allows it: no ``ok`` of it had
        landed in the flow log when the second left, and the silo of a successful run was killed
        after sending it, before writing that ``ok``. Only that silo knew the outcome but the
        shard, which a drain may delete before reconcile looks; then the step runs again (the
        window ``cluster.flows.log`` names). A silo that runs on writes the outcome until it
        lands, and reads an unsure one from the shard at once (``FlowHooks``)."""
        step = self.truth.job_step.get(first.job_id)
        if step is None:
            return None
        ok = self.truth.ok_landed.get(step)
        if ok is not None and ok <= again.sent_us:
            return None
        world = self._world
        # Any success of it before, not only the first: the run that ended it may be a re-run
        # from the log after its first sender's kill, whose own sender was killed in turn.
        killed = [d.sender for d in world.deliveries
                  if d.job_id == first.job_id and d.succeeded and d.at_us < again.sent_us
                  and any(kind == "kill" and d.sent_us <= at_us <= again.sent_us
                          for at_us, kind in world.faulted.get(d.sender.rpartition("#")[0], ()))]
        if not killed:
            return None
        # Run again from a new shard (reconcile schedules it anew): one more run, as a retried
        # schedule call's, held to the same "never two live copies" (``World.final_checks``).
        self._world.added_again.add(first.job_id)
        return "flow step's outcome lost to a kill", f"{killed[0]} was killed before its flow heard {step[1]} succeeded"

    def explain_reruns(self) -> None:
        """A step's job that fired from a second shard: its flow ran it again, as reconcile does
        for a job gone without a trace. Allowed as ``outcome_lost`` allows a second success: no
        end of the step (``ok`` or ``fail``) had landed when the rerun left, and the silo of a run
        before it was killed after sending that run. Then it is held, as a retried schedule
        call's one more run, to "never two live copies" (``World.final_checks``)."""
        world = self._world
        by_job: dict[str, list[Delivery]] = {}
        for d in world.deliveries:
            if d.job_id in self.truth.job_step:
                by_job.setdefault(d.job_id, []).append(d)
        for job_id, runs in sorted(by_job.items()):
            first_shard = runs[0].shard
            rerun = next((d for d in runs if d.shard != first_shard), None)
            if rerun is None or job_id in world.added_again:
                continue
            ended = self.truth.ended_landed.get(self.truth.job_step[job_id])
            if ended is not None and ended <= rerun.sent_us:
                continue
            if any(kind == "kill" and d.sent_us <= at_us <= rerun.sent_us
                   for d in runs if d.sent_us < rerun.sent_us
                   for at_us, kind in world.faulted.get(d.sender.rpartition("#")[0], ())):
                world.added_again.add(job_id)
                world.stats["flow steps run again after a kill"] += 1
                world.note(f"{job_id} ran again from {rerun.shard}: a silo running it was killed before its flow "
                           "heard how it ended")

    async def settled(self) -> bool:
        """Whether every flow the user was told of (or may have cancelled) is finished, and no
        call of the user's is still under way."""
        if self.calls:
            return False
        for design in self.designs.values():
            if design.acked_us is not None or design.cancel_in_doubt:
                state = await read_flow(self._world.store, design.name)
                if state is None or not state.finished:
                    return False
        return True

    async def final_checks(self) -> None:
        """(c): each acknowledged flow ended as its design and the user's calls say."""
        world = self._world
        ran_ok = {self.truth.job_step[j] for j, _ in world.ran_ok if j in self.truth.job_step}
        for name, design in sorted(self.designs.items()):
            if design.acked_us is None:
                world.stats["flows never acknowledged"] += 1
                continue
            state = await read_flow(world.store, name)
            status = None if state is None else state.status()
            shown = "no flow" if status is None else f"{status.state} (halted by {status.halted_by})"
            unran = [] if status is None else sorted(s for s in status.steps if (name, s) not in ran_ok)
            if status is None:
                world.violate(f"flow lost: {name} acknowledged, its log is gone")
                continue
            if status.state == FLOW_SUCCEEDED and unran:
                world.violate(f"flow succeeded unrun: {name} says succeeded; {unran} never ran with success")
            if design.cancel_true_us is not None:
                if status.state != FLOW_CANCELLED:
                    world.violate(f"flow cancel lost: {name}'s cancel returned True, it ended {shown}")
            elif design.cancel_in_doubt and not design.cancel_settled:
                world.violate(f"flow cancel unsettled: {name}'s cancel got no answer, nor did it when made "
                              f"again after healing; it ended {shown}")
            elif design.cancel_in_doubt and status.state == FLOW_CANCELLED:
                # The cancel made again found it finished: cancelled by the one in doubt, whose
                # record, written by the user, must have landed.
                if name in self.truth.cancel_landed:
                    world.stats["flows cancelled by a cancel in doubt"] += 1
                else:
                    world.violate(f"flow cancelled uncalled: {name} ended {shown}; no cancel of it landed")
            elif design.doomed:
                if status.state != FLOW_HALTED or status.halted_by not in design.doomed:
                    world.violate(f"flow not halted by its policy: {name} ended {shown}; "
                                  f"{sorted(design.doomed)} exhaust their retries")
            elif status.state != FLOW_SUCCEEDED:
                world.violate(f"flow lost: {name} acknowledged, every step can succeed; it ended {shown}, "
                              f"steps never run with success {unran}")
            if status.state != "running":
                world.stats["flows completed"] += 1
                world.stats[f"flows {status.state}"] += 1


class _StoreFlows(Flows):
    """``Flows`` on the simulation's store: the real class, but its store is not opened from the
    URL a silo names (``memory://`` would be a new, empty store), and its clock is virtual time."""

    def __init__(self, client: Client, store: Store, world: World, ray: SimRay) -> None:
        super().__init__(client, clock=_TrueClock(world))
        self._sim_store = store
        self._world = world
        self._ray = ray

    async def _open(self) -> Store:
        return self._sim_store

    async def _schedule(self, jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (), /) -> list[str | None]:
        shards = await super()._schedule(jobs, suspects)
        for job, shard in zip(jobs, shards, strict=True):
            if job.id in self._ray.schedule_maybe_acted and shard is not None:
                await earlier_try(self._world, self._ray, job.id, shard)  # as any client's retried call
        return shards


class _TrueClock:
    """The user's host: the true time (the store's), as the simulated client's due times are."""

    def __init__(self, world: World) -> None:
        self._world = world

    def now_us(self) -> int:
        return true_now_us(self._world.loop)

    def monotonic(self) -> float:
        return self._world.loop.time()


class ClientStore(Store):
    """The flow user's view of the shared store: latency, errors and lost answers while faults
    are on; every write that lands is recorded (``SimFlows.landed``)."""

    def __init__(self, world: World, sim: SimFlows) -> None:
        self._world = world
        self._sim = sim

    async def _call(self, method: str, name: str, op: Callable[[], Awaitable[Any]], payload: bytes = b"") -> Any:
        world, rng = self._world, self._sim.rng
        if world.faults.latency:
            await asyncio.sleep(rng.random() * MAX_LATENCY_S)
        if world.injecting and world.faults.storage_errors and rng.random() < P_STORE_ERROR:
            raise Unavailable(f"injected: {method} {name} failed")
        result = await op()
        if method in _WRITES:
            if method == "append_block" and name.startswith(FLOW_PREFIX):
                self._sim.landed(name, payload, true_now_us(world.loop), by_user=True)
            if world.injecting and world.faults.lost_answers and rng.random() < P_LOST_ANSWER:
                error = rng.choice(_LOST[method])
                world.note(f"lost answer flows client {method} {name} -> {error.__name__}")
                raise error(f"injected: {method} {name} landed, its answer was lost")
        return result

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        return await self._call("create", name, lambda: self._world.store.create(name, metadata))  # type: ignore[no-any-return]

    async def list(self, prefix: str = "") -> list[LogInfo]:
        return await self._call("list", prefix, lambda: self._world.store.list(prefix))  # type: ignore[no-any-return]

    async def stat(self, name: str) -> LogStat:
        return await self._call("stat", name, lambda: self._world.store.stat(name))  # type: ignore[no-any-return]

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        return await self._call("set_metadata", name,  # type: ignore[no-any-return]
                                lambda: self._world.store.set_metadata(name, metadata, if_match))

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        return await self._call("append_block", name,  # type: ignore[no-any-return]
                                lambda: self._world.store.append_block(name, payload, if_match), payload)

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        return await self._call("fetch", name, lambda: self._world.store.fetch(name, offset))  # type: ignore[no-any-return]

    async def delete(self, name: str, if_match: str | None) -> None:
        await self._call("delete", name, lambda: self._world.store.delete(name, if_match))

    async def server_time(self) -> ServerTime | None:
        return await self._call("server_time", "", self._world.store.server_time)  # type: ignore[no-any-return]
