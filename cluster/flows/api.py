"""``client.flows``: submit, inspect, cancel and list flows (see ``cluster.flows.model``)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cluster.flows.log import FlowLogDamaged, FlowState, create_log, read_flow, update, write_definition
from cluster.flows.model import (
    ADMISSION_HOLDS_S,
    FLOW_CANCELLED,
    FLOW_HALTED,
    FLOW_PREFIX,
    FLOW_RUNNING,
    FLOW_SUCCEEDED,
    TERMINAL_STEP_STATES,
    Flow,
    FlowExists,
    FlowPlan,
    FlowStatus,
    compile_flow,
)
from cluster.flows.progress import advance
from cluster.model.clock import SYSTEM_CLOCK, Clock
from cluster.model.errors import ValidationError
from cluster.model.jobs import ScheduledJob
from cluster.model.ports import JobSubmitter
from cluster.model.wire import us_to_datetime
from storage import AlreadyExists, Fenced, LogHead, Store, Unavailable, list_logs, open_store

__all__ = ["FLOW_STATES", "DamagedFlow", "FlowIndex", "FlowPage", "Flows"]

FLOW_STATES = (FLOW_RUNNING, FLOW_SUCCEEDED, FLOW_HALTED, FLOW_CANCELLED)
_READS_AT_ONCE = 16  # flow logs fetched concurrently by one page; enough to hide store latency
_DEFINE_TRIES = 5  # races with other submits of one name, each lost only to a write that landed
# How long a cancel waits for an intent's writer to confirm, so as to cancel its jobs where they
# landed; a writer slower than that adds jobs the silos' admission refuses (``FlowHooks.admit``).
_CONFIRM_POLLS, _CONFIRM_POLL_S = 100, 0.05


@dataclass(frozen=True)
class DamagedFlow:
    """A flow whose log cannot be read whole (damaged frames, records lost): its name and what is wrong."""

    name: str
    reason: str


@dataclass(frozen=True)
class FlowPage:
    """One page of flows in name order, and how many flows match in all.

    ``damaged`` names the page's flows whose log cannot be read: one bad log never hides the
    others. A page filtered by state leaves them out (their state cannot be read)."""

    flows: tuple[FlowStatus, ...]
    total: int
    damaged: tuple[DamagedFlow, ...] = ()


class FlowIndex:
    """Pages of flows read from a store, reading only the flow logs a page needs.

    A flow log only grows, and every append changes its ETag; so a log whose ETag in the store's
    listing is the one last read here holds the same flow, and is not fetched again. A dashboard
    polling pages through one index fetches only the flows that moved since its last poll.
    """

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, FlowStatus]] = {}  # log name -> (ETag read, status at it)

    async def page(self, store: Store, prefix: str = "", *, state: str | None = None,
                   offset: int = 0, limit: int = 50) -> FlowPage:
        """The flows whose name starts with ``prefix`` (and, given ``state``, whose state it is),
        in name order, from ``offset``, at most ``limit``; ``total`` counts every match.

        One listing of the store, then only the page's flow logs are read; with ``state`` every
        listed flow's log is (a flow's state is only in its log), each at most once per change.
        Bad arguments raise ``ValidationError`` naming the argument, before any read.
        """
        _check_page(prefix, state, offset, limit)
        infos = await list_logs(store, FLOW_PREFIX + prefix)  # each flow's current generation
        listed = {info.name for info in infos}
        for name in [n for n in self._seen if n.startswith(FLOW_PREFIX + prefix) and n not in listed]:
            del self._seen[name]  # gone from the store: forget it
        if state is None:
            read = await self._read(store, infos[offset:offset + limit])
            return FlowPage(tuple(s for s in read if isinstance(s, FlowStatus)), len(infos),
                            tuple(s for s in read if isinstance(s, DamagedFlow)))
        matching = [s for s in await self._read(store, infos) if isinstance(s, FlowStatus) and s.state == state]
        return FlowPage(tuple(matching[offset:offset + limit]), len(matching))

    async def _read(self, store: Store, infos: Sequence[LogHead]) -> list[FlowStatus | DamagedFlow | None]:
        gate = asyncio.Semaphore(_READS_AT_ONCE)

        async def one(info: LogHead) -> FlowStatus | DamagedFlow | None:
            seen = self._seen.get(info.name)
            if seen is not None and seen[0] == info.etag:
                return seen[1]
            try:
                async with gate:
                    state = await read_flow(store, _flow_name(info))
            except FlowLogDamaged as exc:
                return DamagedFlow(_flow_name(info), str(exc))
            if state is None:
                return None  # created, its definition not appended yet
            if state.damage is not None:  # records lost until its next writer repairs it (a torn tail is not damage)
                return DamagedFlow(_flow_name(info), f"flow log {_flow_name(info)!r}: {state.damage}")
            status = state.status()
            self._seen[info.name] = (state.etag, status)
            return status

        return list(await asyncio.gather(*(one(info) for info in infos)))


def _check_page(prefix: Any, state: Any, offset: Any, limit: Any) -> None:
    if not isinstance(prefix, str):
        raise ValidationError("prefix", "must be a string", prefix)
    if state is not None and state not in FLOW_STATES:
        raise ValidationError("state", f"must be one of {', '.join(FLOW_STATES)} or None", state)
    for name, value, least in (("offset", offset, 0), ("limit", limit, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValidationError(name, f"must be an int >= {least}", value)


def _flow_name(info: LogHead) -> str:
    return info.base[len(FLOW_PREFIX):]


class Flows:
    """``client.flows``: submit, inspect, cancel and list flows. Reads and writes flow logs in the
    cluster's store (its URL comes from a silo) and schedules root steps through the silos.

    ``clock`` times the flow's records and its root steps' due times (the host's, unless a test
    runs the client on a clock of its own)."""

    def __init__(self, client: JobSubmitter, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self._client = client
        self._clock = clock
        self._owner = f"client-{uuid.uuid4().hex[:8]}"
        self._store_url: str | None = None
        self._index = FlowIndex()

    async def _open(self) -> Store:
        if self._store_url is None:
            self._store_url = (await self._client.describe())["store_url"]
        return open_store(self._store_url)

    async def _schedule(self, jobs: Sequence[ScheduledJob], suspects: Sequence[str] = (),
                        settled: Sequence[str] = (), /) -> list[str | None]:
        assert not suspects and not settled, "a client never takes over a flow's intent (silos reconcile flows)"
        return [job.shard for job in await self._client.submit_jobs(jobs)]

    async def submit(self, flow: Flow) -> FlowStatus:
        """Validate ``flow``, store it and start its root steps; returns its status.

        Submitting the same definition under the same name again returns the existing flow,
        moved on from wherever a failed submit of it stopped (so submitting again after an error
        is how to make sure it runs); a different definition under a taken name raises ``FlowExists``.
        """
        plan = compile_flow(flow, flow_id=uuid.uuid4().hex[:16], created_us=self._clock.now_us(),
                            resolve=self._client.resolve_target)
        async with await self._open() as store:
            await self._define(store, plan)
            # Also for a flow submitted before: a submit that failed after writing the definition
            # may have scheduled none of its root steps, and nothing else would (reconcile takes
            # over only steps some writer meant to schedule).
            state = await advance(store, plan.name, self._owner, self._schedule, now_us=self._clock.now_us)
        assert state is not None
        return state.status()

    async def _define(self, store: Store, plan: FlowPlan) -> None:
        """Make the flow's log hold ``plan``'s definition: written now, or written before by a
        submit of the same definition (whose call may have failed after writing it)."""
        for _ in range(_DEFINE_TRIES):
            try:
                await create_log(store, plan)
                return
            except AlreadyExists:
                pass
            existing = await read_flow(store, plan.name)
            if existing is None:  # created by a submit that failed before writing the definition
                try:
                    await write_definition(store, plan)
                    return
                except Fenced:
                    continue  # written meanwhile (perhaps by this very append, its answer lost): read again
            if _definition(existing.plan) != _definition(plan):
                raise FlowExists("name", "a different flow already has this name", plan.name)
            return
        raise Unavailable(f"flow log {plan.name!r}: lost {_DEFINE_TRIES} races to define it")

    async def get(self, name: str) -> FlowStatus | None:
        """The flow's state and every step's, or None if there is no flow of that name."""
        async with await self._open() as store:
            state = await read_flow(store, name)
        return None if state is None else state.status()

    async def list(self) -> list[FlowStatus]:
        """Every flow's status, in name order."""
        async with await self._open() as store:
            infos = await list_logs(store, FLOW_PREFIX)
            states = [await read_flow(store, _flow_name(info)) for info in infos]
        return [s.status() for s in states if s is not None]

    async def page(self, prefix: str = "", *, state: str | None = None, offset: int = 0, limit: int = 50) -> FlowPage:
        """One page of flows in name order (those whose name starts with ``prefix`` and, given
        ``state``, in that state) and how many match; reads only the flow logs the page needs,
        and through the same ``Flows`` only those that changed since (see ``FlowIndex``)."""
        async with await self._open() as store:
            return await self._index.page(store, prefix, state=state, offset=offset, limit=limit)

    async def cancel(self, name: str) -> bool:
        """Cancel a running flow: no step starts any more, scheduled ones are cancelled (a running
        attempt finishes first). True if it was running; False if finished or unknown.

        With a step scheduled, it returns no sooner than ``ADMISSION_HOLDS_S`` after its record
        landed: a silo's admission of a step read before that no longer holds then."""
        async with await self._open() as store:
            wrote: list[list[Any]] = []
            token = uuid.uuid4().hex[:16]

            def decide(s: FlowState) -> list[list[Any]]:
                if s.cancel_token == token:
                    return []  # ours landed, its answer lost: read again, it is there (``wrote`` says so)
                wrote[:] = [r for r in [["cancel", self._clock.now_us(), token]] if s.apply(r)]
                return wrote

            state = await update(store, name, decide)
            if state is None or not wrote:
                return False
            landed = asyncio.get_running_loop().time()  # the cancel record landed by now
            # A step with an intent may have been admitted by its silo before the record landed.
            admitted = any(s.token is not None and s.state not in TERMINAL_STEP_STATES for s in state.steps.values())
            # An intent written just before the cancel is being scheduled: let its writer confirm.
            for _ in range(_CONFIRM_POLLS):
                if not state.unconfirmed():
                    break
                await asyncio.sleep(_CONFIRM_POLL_S)
                state = await read_flow(store, name)
                assert state is not None
            cancelled = []
            for plan in state.plan.steps:
                step = state.steps[plan.name]
                if step.state in TERMINAL_STEP_STATES:
                    continue
                if step.shard is not None:
                    job = state.plan.job(plan.name, us_to_datetime(step.due_us or state.plan.created_us))
                    await self._client.try_cancel_job(dataclasses.replace(job, shard=step.shard))
                cancelled.append(plan.name)
            if cancelled:
                record = ["cancelled", cancelled, self._clock.now_us()]
                await update(store, name, lambda s: [record] if s.apply(record) else [])
            if admitted:
                await _admissions_lapsed(landed)
        return True


async def _admissions_lapsed(since: float) -> None:
    """Return once every silo's admission of a step read before ``since`` has lapsed
    (``FlowHooks.admit_holds_s``): from then on, no attempt admitted before the cancel landed is
    sent. Before: one admitted just before it, its silo stalled before the send (its writer
    stalled too, so the cancel knew no shard of its job), was sent after the cancel returned."""
    left = since + ADMISSION_HOLDS_S - asyncio.get_running_loop().time()
    if left > 0:
        await asyncio.sleep(left)


def _definition(plan: FlowPlan) -> list[Any]:
    return plan.to_wire()[2]

