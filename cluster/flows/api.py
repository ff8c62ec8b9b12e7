"""``client.flows``: submit, inspect, cancel and list flows (see ``cluster.flows.model``)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from cluster.flows.log import FlowState, create_log, read_flow, update
from cluster.flows.model import FLOW_PREFIX, TERMINAL_STEP_STATES, Flow, FlowExists, FlowPlan, FlowStatus, compile_flow
from cluster.flows.progress import advance
from cluster.model.clock import wall_clock_us
from cluster.model.jobs import ScheduledJob
from cluster.model.ports import JobSubmitter
from cluster.model.wire import us_to_datetime
from storage import AlreadyExists, Store, open_store

__all__ = ["Flows"]


class Flows:
    """``client.flows``: submit, inspect, cancel and list flows. Reads and writes flow logs in the
    cluster's store (its URL comes from a silo) and schedules root steps through the silos."""

    def __init__(self, client: JobSubmitter) -> None:
        self._client = client
        self._owner = f"client-{uuid.uuid4().hex[:8]}"
        self._store_url: str | None = None

    async def _open(self) -> Store:
        if self._store_url is None:
            self._store_url = (await self._client.describe())["store_url"]
        return open_store(self._store_url)

    async def _schedule(self, jobs: Sequence[ScheduledJob]) -> list[str | None]:
        return [job.shard for job in await self._client.submit_jobs(jobs)]

    async def submit(self, flow: Flow) -> FlowStatus:
        """Validate ``flow``, store it and start its root steps; returns its status.

        Submitting the same definition under the same name again returns the existing flow;
        a different definition under a taken name raises ``FlowExists``.
        """
        plan = compile_flow(flow, flow_id=uuid.uuid4().hex[:16], created_us=wall_clock_us(),
                            resolve=self._client.resolve_target)
        async with await self._open() as store:
            try:
                await create_log(store, plan)
            except AlreadyExists:
                existing = await read_flow(store, flow.name)
                if existing is None or _definition(existing.plan) != _definition(plan):
                    raise FlowExists("name", "a different flow already has this name", flow.name) from None
                return existing.status()
            state = await advance(store, plan.name, self._owner, self._schedule)
        assert state is not None
        return state.status()

    async def get(self, name: str) -> FlowStatus | None:
        """The flow's state and every step's, or None if there is no flow of that name."""
        async with await self._open() as store:
            state = await read_flow(store, name)
        return None if state is None else state.status()

    async def list(self) -> list[FlowStatus]:
        """Every flow's status, in name order."""
        async with await self._open() as store:
            infos = await store.list(FLOW_PREFIX)
            states = [await read_flow(store, info.name[len(FLOW_PREFIX):].rpartition("~")[0]) for info in infos]
        return [s.status() for s in states if s is not None]

    async def cancel(self, name: str) -> bool:
        """Cancel a running flow: no step starts any more, scheduled ones are cancelled (a running
        attempt finishes first). True if it was running; False if finished or unknown."""
        async with await self._open() as store:
            wrote: list[list[Any]] = []

            def decide(s: FlowState) -> list[list[Any]]:
                wrote[:] = [r for r in [["cancel", wall_clock_us()]] if s.apply(r)]
                return wrote

            state = await update(store, name, decide)
            if state is None or not wrote:
                return False
            # An intent written just before the cancel is being scheduled: let its writer confirm.
            for _ in range(100):
                if not state.unconfirmed():
                    break
                await asyncio.sleep(0.05)
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
                record = ["cancelled", cancelled, wall_clock_us()]
                await update(store, name, lambda s: [record] if s.apply(record) else [])
        return True


def _definition(plan: FlowPlan) -> list[Any]:
    return plan.to_wire()[2]

