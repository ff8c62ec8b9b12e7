"""In-process parts for runtime tests: a manual clock, a transport that calls handlers directly,
a store that can hold back or fail calls, and one silo's roles wired by ``cluster.runtime.roles``
on a shared memory store — no Ray anywhere."""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from cluster.model.ahead import Ahead, monotonic_domain
from cluster.model.attempt import Attempt, JobContext, Outcome
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us, pack, timedelta_to_us, unpack
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.ownership import AddFailed
from cluster.runtime.roles import Roles, wire
from cluster.runtime.shardlog import OCCURRENCE, SHARD_PREFIX, ShardState, add_op, window_of
from cluster.runtime.transport import Ping, TargetAbsent
from handlers.base import JobHandler
from storage import Fenced, MemoryStore, StorageError, Store, Unavailable, list_logs, read_log

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
T0_US = datetime_to_us(T0)

OPTIONS = ClusterOptions(
    shard_duration="10s", lookahead="5s", heartbeat_interval="1s", suspicion_timeout="5s", adoption_interval="2s",
    staging_interval="1s", handler_timeout="5s", undeliverable_timeout="30s", misfire_grace="1s",
    group_commit_linger="0s", retry_window="0s",  # drained shards go at once unless a test keeps them
)


class ManualClock:
    """A clock that moves only when told: wall time from ``T0``, monotonic from 1000 s."""

    def __init__(self, now_us: int = T0_US) -> None:
        self.wall_us = now_us
        self.mono = 1000.0
        self._moved: asyncio.Event | None = None

    def now_us(self) -> int:
        return self.wall_us

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall_us += int(seconds * 1_000_000)
        self.mono += seconds
        if self._moved is not None:
            self._moved.set()

    async def sleep(self, seconds: float) -> None:
        """Return once this clock has been advanced by ``seconds`` or more (monotonic)."""
        until = self.mono + seconds
        while self.mono < until:
            if self._moved is None:
                self._moved = asyncio.Event()
            self._moved.clear()
            await self._moved.wait()


Handler = Callable[[JobContext], Awaitable[None]]


class WaitingHandler(JobHandler):
    """``JobHandler``'s batch code around a test's handler function, on a ``ManualClock``."""

    def __init__(self, run: Handler, clock: ManualClock, domain: str) -> None:
        self._run = run
        self._clock = clock
        self._domain = domain

    async def execute_job(self, ctx: JobContext) -> None:
        await self._run(ctx)

    def _timeshard_monotonic(self) -> float:
        return self._clock.monotonic()

    def _timeshard_wall(self) -> float:
        return self._clock.now_us() / 1e6

    async def _timeshard_sleep(self, seconds: float) -> None:
        await self._clock.sleep(seconds)

    def _timeshard_domain(self) -> str:
        return self._domain


@dataclass
class LocalTransport:
    """Calls handlers in this process: ``handlers[name]`` runs one attempt and raises to fail."""

    handlers: dict[str, Handler] = field(default_factory=dict)
    calls: list[tuple[str, list[Attempt]]] = field(default_factory=list)  # (target name, batch)
    alive: dict[str, Ping] = field(default_factory=dict)  # ping answers by silo id (else UNKNOWN)
    notified: list[str] = field(default_factory=list)
    predecessors_exited: bool = False  # whether a rejoining silo finds its predecessor's process gone
    # Peers whose row's process this silo can prove ended (this host's process table, or Ray's record of its exit)
    ended_peers: set[str] = field(default_factory=set)
    node: str = "local"  # set per silo by ``make_parts``: each silo on a host of its own
    exited_nodes: set[str] = field(default_factory=set)  # hosts whose silo process this host's table shows gone
    pinging: dict[str, asyncio.Event] = field(default_factory=dict)  # pings of these silos held until set
    # Handlers that wait for due times, as JobHandler does, on this clock (None: they cannot
    # wait, as actors that do not subclass JobHandler; the silo then sends each job when due).
    clock: ManualClock | None = None
    domain: str | None = None  # the waiting handlers' monotonic_domain(); None: the silo's own (one host)
    withdraws: list[list[str]] = field(default_factory=list)  # run ids of every withdraw asked for
    stops: list[dict[str, float]] = field(default_factory=list)  # every delivery's stops (overlap cancel_other)
    lose_withdraws: bool = False  # a withdraw gets no answer (lost, timed out)
    hold_withdraws: list[asyncio.Event] = field(default_factory=list)  # the next withdraws wait for these, in turn
    resolving: dict[str, asyncio.Event] = field(default_factory=dict)  # lookups held until set
    _waiting: dict[str, WaitingHandler] = field(default_factory=dict)

    def node_id(self) -> str:
        return self.node

    def exited(self, node: str, pid: int) -> bool:
        # Every silo here shares one process: only a silo's own host (its predecessor's) is judged.
        return node in self.exited_nodes or (self.predecessors_exited and node == self.node)

    async def ended(self, silo_id: str, node: str, pid: int) -> bool:
        return silo_id in self.ended_peers or self.exited(node, pid)

    async def resolve(self, target: Target) -> Any:
        held = self.resolving.get(target.name)
        if held is not None:
            await held.wait()  # a slow lookup
        if target.name not in self.handlers:
            raise TargetAbsent(f"no handler {target.name!r}")
        return self.handlers[target.name]

    def waits(self, handle: Any) -> bool:
        return self.clock is not None

    def waiting_handler(self, name: str) -> WaitingHandler:
        handler = self._waiting.get(name)
        if handler is None:
            assert self.clock is not None
            handler = self._waiting[name] = WaitingHandler(self.handlers[name], self.clock,
                                                           monotonic_domain() if self.domain is None else self.domain)
        return handler

    async def withdraw(self, handle: Any, run_ids: Sequence[str], lease_end: float, timeout: float) -> list[str] | None:
        self.withdraws.append(list(run_ids))
        if self.hold_withdraws:
            await self.hold_withdraws.pop(0).wait()  # a slow call
        if self.lose_withdraws:
            return None
        name = next(name for name, h in self.handlers.items() if h is handle)
        return await self.waiting_handler(name).timeshard_withdraw(run_ids, lease_end)

    async def deliver(self, target: Target, handle: Any, attempts: Sequence[Attempt], timeout: float,
                      lease_end: float, ahead: Ahead | None = None,
                      stops: Mapping[str, float] | None = None) -> list[Outcome]:
        self.calls.append((target.name, list(attempts)))
        if stops:
            self.stops.append(dict(stops))
        if self.clock is not None:
            out = await self.waiting_handler(target.name).timeshard_deliver(
                [tuple(a) for a in attempts], timeout, lease_end, None if ahead is None else tuple(ahead),
                None if not stops else dict(stops))
            return [Outcome(*o) for o in out]
        outcomes = []
        for attempt in attempts:
            try:
                await handle(attempt.context())
            except Exception as exc:
                outcomes.append(Outcome(attempt.run_id, str(exc), type(exc).__name__))
            else:
                outcomes.append(Outcome(attempt.run_id))
        return outcomes

    async def ping(self, silo_id: str, timeout: float) -> Ping:
        held = self.pinging.get(silo_id)
        if held is not None:
            await held.wait()  # a slow answer: a peer Ray is restarting, say
        return self.alive.get(silo_id, Ping.UNKNOWN)

    def notify_adopt(self, silo_ids: Iterable[str]) -> None:
        self.notified.extend(silo_ids)

    def delivered(self) -> list[str]:
        """Job ids in the order they were delivered."""
        return [ScheduledJob.from_wire(unpack(a.job)).id for _, batch in self.calls for a in batch]


class GatedStore:
    """A memory store whose chosen calls wait at a gate: for driving an interleaving by hand.

    ``gate("create", "shards/")`` makes the next ``create`` of a name with that prefix wait
    until the returned event is set; ``reached(...)`` is set once a call waits there.
    ``fail_next("append_block", n)`` makes the next ``n`` such calls raise ``Unavailable``.
    """

    def __init__(self, inner: MemoryStore | None = None) -> None:
        self.inner = inner or MemoryStore()
        self._gates: dict[tuple[str, str], tuple[asyncio.Event, asyncio.Event]] = {}
        self._failures: dict[tuple[str, str], int] = {}
        self._lost_answers: dict[str, int] = {}
        self._lost_error: dict[str, type[StorageError]] = {}

    def gate(self, method: str, prefix: str) -> asyncio.Event:
        release, reached = asyncio.Event(), asyncio.Event()
        self._gates[(method, prefix)] = (release, reached)
        return release

    def reached(self, method: str, prefix: str) -> asyncio.Event:
        return self._gates[(method, prefix)][1]

    def fail_next(self, method: str, n: int = 1, prefix: str = "") -> None:
        """The next ``n`` calls of ``method`` on a name starting with ``prefix`` raise ``Unavailable``."""
        self._failures[(method, prefix)] = n

    def lose_answer(self, method: str, n: int = 1, error: type[StorageError] = Fenced) -> None:
        """The next ``n`` such calls land, then raise ``Fenced`` as a retried CAS does on Azure
        (or ``error``: ``Unavailable`` is a call that timed out after landing)."""
        self._lost_answers[method] = n
        self._lost_error[method] = error

    def __getattr__(self, attr: str) -> Any:
        target = getattr(self.inner, attr)
        if not callable(target) or attr.startswith("_"):
            return target

        async def call(*args: Any, **kwargs: Any) -> Any:
            name = args[0] if args and isinstance(args[0], str) else ""
            for (method, prefix), (release, reached) in list(self._gates.items()):
                if method == attr and name.startswith(prefix) and not release.is_set():
                    reached.set()
                    await release.wait()
            for (method, prefix), left in self._failures.items():
                if method == attr and left and name.startswith(prefix):
                    self._failures[(method, prefix)] -= 1
                    raise Unavailable(f"injected: {attr} failed")
            result = await target(*args, **kwargs)
            if self._lost_answers.get(attr):
                self._lost_answers[attr] -= 1
                # Landed, but the answer was lost and the retry saw our own write as a conflict.
                raise self._lost_error.get(attr, Fenced)(f"injected: {attr} landed, its answer was lost")
            return result

        return call


class Recorder:
    """A handler that records the jobs it ran; ``fail`` names job ids that raise."""

    def __init__(self, fail: Iterable[str] = ()) -> None:
        self.ran: list[JobContext] = []
        self.fail = set(fail)

    async def __call__(self, ctx: JobContext) -> None:
        self.ran.append(ctx)
        if ctx.job.id in self.fail:
            raise RuntimeError(f"job {ctx.job.id} failed on purpose")


class Blocking:
    """A handler whose attempts note their occurrence in ``ran``, set ``started`` and run until
    ``finish`` is set: a job caught while it runs."""

    def __init__(self) -> None:
        self.started, self.finish = asyncio.Event(), asyncio.Event()
        self.ran: list[int] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.ran.append(ctx.occurrence)
        self.started.set()
        await self.finish.wait()


async def make_parts(store: Store | None = None, silo_id: str = "0", *, clock: ManualClock | None = None,
                     transport: LocalTransport | None = None, options: ClusterOptions = OPTIONS,
                     hooks: Sequence[SiloHooks] = (), join: bool = True) -> Roles:
    """Wire one silo's roles on ``store`` (a new memory store by default) and join membership."""
    transport = transport or LocalTransport()
    if transport.node == "local":
        transport.node = f"local/{silo_id}"
    parts = wire(silo_id, store if store is not None else MemoryStore(), options, clock=clock or ManualClock(),
                 transport=transport, metrics=SiloMetrics(silo_id), rng=random.Random(7))
    parts.hooks.extend(hooks)
    if join:
        await parts.heartbeat.join()
        await parts.skew.sample()  # as Silo._start does: fire by the store's clock from the start
    return parts


def job(target: str = "h", *, due: timedelta | datetime = timedelta(seconds=1), now: datetime = T0, **kw: Any) -> ScheduledJob:
    """A valid job for ``target``, due ``due`` after ``now`` (T0) unless ``due`` is a datetime."""
    return ScheduledJob.create(Target.actor(target, namespace="test"), due=due if isinstance(due, datetime) else now + due,
                               now=now, **kw)


def item(j: ScheduledJob) -> tuple[str, int, bytes]:
    """What ``Silo.schedule`` takes for ``j``."""
    return j.id, datetime_to_us(j.first_fire), pack(j.to_wire())


async def add(parts: Roles, *jobs: ScheduledJob) -> list[str]:
    """Durably add ``jobs`` through the shard table, as ``Silo.schedule`` does; their shards."""
    names = []
    for j in jobs:
        jid, due_us, packed = item(j)
        window = window_of(due_us, timedelta_to_us(OPTIONS.shard_duration))
        try:
            shard = await parts.shards.write_to_window(window, [add_op(jid, due_us, packed, 1, 0, datetime_to_us(j.due))])
        except AddFailed as failed:
            raise failed.error from failed  # what Silo.schedule raises
        names.append(shard.base)
    return names


# One idle watch per loop, shared by every task waiting for idleness: two tasks that each
# yielded until the loop had nothing else to run would keep it busy for each other forever.
_idle_watch: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop,
                                       tuple[asyncio.Future[None], asyncio.Task[None]]] = weakref.WeakKeyDictionary()


async def until_idle(limit: int = 100_000) -> None:
    """Run the event loop until no callback is ready: every task waits on an event, a gate, the
    manual clock or a timer not yet due. A check made after this sees everything that can happen
    before a gate opens, the clock moves or a timer comes due, however many turns it takes;
    a fixed number of yields passes a check whose event merely comes a few turns late.

    Relies on the loop's ready queue (``_ready``, ``_scheduled``: asyncio's base loop, the one
    pytest-asyncio runs): there is no public way to ask a loop whether it is idle.
    """
    loop = asyncio.get_running_loop()
    if not hasattr(loop, "_ready"):
        raise TypeError(f"until_idle needs asyncio's own event loop, not {type(loop).__name__}")
    watch = _idle_watch.get(loop)
    if watch is None or watch[0].done():
        idle = loop.create_future()
        watch = _idle_watch[loop] = idle, loop.create_task(_watch_for_idle(loop, idle, limit))
    await asyncio.shield(watch[0])


async def _watch_for_idle(loop: asyncio.AbstractEventLoop, idle: asyncio.Future[None], limit: int) -> None:
    for _ in range(limit):
        await asyncio.sleep(0)
        ready: Sized = loop._ready  # type: ignore[attr-defined]
        timers: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
        if not ready and not (timers and timers[0].when() <= loop.time()):
            idle.set_result(None)
            return
    idle.set_exception(AssertionError(f"the event loop still had work after {limit} turns: something spins"))


async def fire_due(parts: Roles) -> None:
    """One turn of the fire loop, without the loop: take what is due and deliver it, to the end."""
    batch = parts.queue.pop_due(limit=parts.runs.room)
    parts.firing.dispatch(batch)
    await until_idle()  # let deliveries and outcome writes run to completion
    # Outcome writes and isolated shards' lanes end on their own; nothing to wait on but the table.
    while parts.firing.busy:  # noqa: ASYNC110
        await asyncio.sleep(0.001)


async def live_copies(store: Store, job_id: str) -> list[tuple[str, int]]:
    """``(shard, occurrence)`` of every live copy of ``job_id``, folding every shard log."""
    copies = []
    for head in await list_logs(store, SHARD_PREFIX):
        state = ShardState().replay((await read_log(store, head.base)).records())
        if job_id in state.live:
            copies.append((head.base, state.live[job_id][OCCURRENCE]))
    return copies
