"""The base class of handler actors: implement ``execute_job`` and the silo does the rest."""

from __future__ import annotations

import asyncio
import contextvars
import time
import types
from collections.abc import Coroutine, Generator, Sequence
from typing import Any

from cluster.model.ahead import Ahead, lease_over, monotonic_domain, start_at
from cluster.model.attempt import OVERLAP_CANCELLED, Attempt, JobContext
from cluster.model.errors import failure

_LEASE_EXPIRED = "the sending silo's lease had expired"
_WITHDRAWN = "withdrawn by a cancel before it started"
_STOPPED = "stopped: the job's next occurrence came due (overlap='cancel_other')"
# A withdrawn run id the batch has not brought yet is remembered this long past its sender's
# lease end (s): a batch arriving later than the lease end is refused whole anyway, and the
# margin covers the handler's wall clock running behind the store's (max_clock_skew).
_WITHDRAWN_MARGIN = 60.0


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, Any], first: Any) -> Generator[Any, Any, Any]:
    """A job's coroutine that already ran its first step, continued by a task of its own.

    The task is handed the future the job waits on, as if it had run that step itself; once it
    resumes, the job is delegated to with ``yield from``, so every later step runs at C speed.
    """
    try:
        yield first
    except BaseException as exc:  # cancelled (timed out) before its first wait ended: the job's to handle
        try:
            first = coro.throw(exc)
        except StopIteration as stop:
            return stop.value
        return (yield from _resumed(coro, first))  # it caught that and waits on something else
    return (yield from coro)


class JobHandler:
    """Subclass, decorate with ``@ray.remote`` and implement ``execute_job``.

    The silo delivers due jobs in batches — one Ray call per handler actor per batch, often a
    little before they are due — and this class starts each job's ``execute_job`` once it is
    due (never before: see ``cluster.model.ahead``), runs the jobs of a batch concurrently under
    one deadline, and reports every outcome back. Raise from ``execute_job`` to report a
    failure: the job's failure policy then decides whether and when it runs again.

    Each job runs in an asyncio task of its own, so everything that binds to the current task
    works as in any coroutine: ``asyncio.timeout()``, and the timeouts of aiohttp, httpx and
    anyio. A handler whose ``execute_job`` never enters such a scope before its first ``await``
    (most often: one that does not await at all) may set ``timeshard_task_per_job = False``:
    each job then begins inside the batch's one task, and only a job that suspends goes on in a
    task of its own, which saves about 6 µs per job (a no-op job: about 8 µs against 14 on a
    2-core machine). Before its first suspension such a job shares the batch's task (a timeout
    entered there would cancel the whole batch); each job still runs in a ``contextvars``
    context of its own.
    """

    #: One task per job (safe for any ``execute_job``); False: jobs start inside the batch's task.
    timeshard_task_per_job = True

    async def execute_job(self, ctx: JobContext) -> None:
        """Run one attempt of ``ctx.job``; raise to report failure. Must be idempotent."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute_job(ctx)")

    # The method's name is ``cluster.model.attempt.DELIVER``: silos call it by that name.
    async def timeshard_deliver(
        self, batch: Sequence[Attempt], timeout: float | None, lease_end: float | None = None,
        ahead: Sequence[Any] | None = None, stops: dict[str, float] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run a batch of attempts, each once it is due; returns one ``Outcome``, as a plain tuple, per attempt, in order.

        Plain tuples: Ray pickles a named tuple by reference to its class, 2.1 µs per job round
        trip against 0.16 for a tuple (measured with Ray's cloudpickle, 500 outcomes per batch).
        ``lease_end`` (wall clock, store time) is when the sending silo's ownership lease runs
        out, less ``max_clock_skew``, as this host's clock may run that far behind the store's:
        a job due to start later comes from a silo that may have been paused or cut off and
        may no longer own it, so it is refused unstarted and the silo that does own it runs it.
        ``ahead`` (an ``Ahead``) comes with a batch sent before its jobs are due: each job waits
        for its due time here, and until it starts a cancel can withdraw it (``timeshard_withdraw``).
        Without it every job is due on arrival. ``stops`` maps run ids to a wall-clock time (s)
        at which that job, if still running, is cancelled and reported ``OverlapCancelled``: its
        job's next occurrence is due then (``overlap="cancel_other"``).
        """
        received = self._timeshard_monotonic()
        info = None if ahead is None else Ahead(*ahead)
        domain = self._timeshard_domain()
        n = len(batch)
        outcomes: list[tuple[Any, ...] | None] = [None] * n
        arrived_wall = self._timeshard_wall()
        if lease_over(info, domain, received, arrived_wall, lease_end):
            return [(a[1], _LEASE_EXPIRED, "LeaseExpired", False, True) for a in batch]
        state = self._timeshard_state()
        withdrawn: dict[str, float] = state["withdrawn"]
        if info is None:
            order: Sequence[int] = range(n)
            starts: list[float] | None = None
        else:
            starts = [start_at(info, received, domain, a[3]) for a in batch]
            order = sorted(range(n), key=starts.__getitem__)
        waiting: dict[str, int] = state["waiting"]
        memo = self._timeshard_memo()
        pending: dict[asyncio.Future[Any], int] = {}
        last_start = received
        i = 0
        try:
            while i < n:
                if starts is not None:
                    now = self._timeshard_monotonic()
                    if starts[order[i]] > now:
                        for k in order[i:]:  # withdrawable until they start
                            waiting[batch[k][1]] = k
                        while starts[order[i]] > now:  # checked on the clock: a timer may fire a hair early
                            await self._timeshard_sleep(starts[order[i]] - now)
                            now = self._timeshard_monotonic()
                    last_start = now
                    wall = self._timeshard_wall()
                    over = lease_over(info, domain, now, wall, lease_end)
                else:
                    wall = arrived_wall
                    over = False  # checked on arrival, and every job is due on arrival
                started_us = int(wall * 1e6)  # JobContext.started: one reading per group of starts
                # No await from here to the end of this group: a withdraw lands before or after it whole.
                while i < n and (starts is None or starts[order[i]] <= last_start):
                    k = order[i]
                    i += 1
                    run_id = batch[k][1]
                    if waiting:
                        waiting.pop(run_id, None)
                    # Kept until it expires, not dropped here: Ray runs a call again when its
                    # answer was lost, and the batch's second coming must find it withdrawn too.
                    if withdrawn and run_id in withdrawn:
                        outcomes[k] = (run_id, _WITHDRAWN, "Withdrawn", False, True)
                        continue
                    if over:
                        outcomes[k] = (run_id, _LEASE_EXPIRED, "LeaseExpired", False, True)
                        continue
                    task = self._timeshard_start(Attempt(*batch[k]), memo, outcomes, k, started_us)
                    if task is not None:
                        pending[task] = k
        finally:
            for k in order[i:]:  # this call ended early (cancelled): forget what never started
                waiting.pop(batch[k][1], None)
        if pending:
            stopped: set[asyncio.Future[Any]] = set()
            stoppers: list[asyncio.Future[None]] = [] if not stops else [
                asyncio.ensure_future(self._timeshard_stop_at(task, stops[batch[k][1]], stopped))
                for task, k in pending.items() if batch[k][1] in stops]
            deadline = None if timeout is None else last_start + timeout
            left = None if deadline is None else max(0.0, deadline - self._timeshard_monotonic())
            try:
                _, late = await asyncio.wait(pending, timeout=left)
            finally:
                for stopper in stoppers:
                    stopper.cancel()
            for task in late:
                task.cancel()
            if late:
                await asyncio.wait(late)
            for task, k in pending.items():
                run_id = batch[k][1]
                if task in stopped and task.cancelled():
                    outcomes[k] = (run_id, _STOPPED, OVERLAP_CANCELLED, False, False)
                    continue
                if task in late:
                    outcomes[k] = (run_id, f"execute_job did not finish within {timeout} s", "TimeoutError", True, False)
                    continue
                exc = task.exception()
                outcomes[k] = (run_id, None, None, False, False) if exc is None else \
                    (run_id, *failure(exc), False, False)
        return outcomes  # type: ignore[return-value]  # every slot filled above

    async def timeshard_withdraw(self, run_ids: Sequence[str], keep_until: float) -> list[str]:
        """Make sure the named attempts never start here from now on; returns those it dropped.

        A run waiting here for its due time is dropped (its batch reports it refused,
        "Withdrawn") and named in the answer. A run not waiting here has started already, or has
        not arrived: the withdraw may overtake its batch. So every run named is remembered
        until ``keep_until`` (wall clock, its sender's lease end) plus a margin, and refused if
        its batch arrives meanwhile (or arrives again: Ray repeats a call whose answer was
        lost); a batch arriving later is refused whole for the lease.
        Atomic with the starts: this handler's event loop runs it between two of them.
        """
        state = self._timeshard_state()
        waiting: dict[str, int] = state["waiting"]
        withdrawn: dict[str, float] = state["withdrawn"]
        now = self._timeshard_wall()
        for run_id, until in list(withdrawn.items()):
            if until < now:
                del withdrawn[run_id]
        dropped = []
        for run_id in run_ids:
            if waiting.pop(run_id, None) is not None:
                dropped.append(run_id)
            withdrawn[run_id] = keep_until + _WITHDRAWN_MARGIN
        return dropped

    async def _timeshard_stop_at(self, task: asyncio.Future[Any], wall_stop: float,
                                 stopped: set[asyncio.Future[Any]]) -> None:
        """Cancel ``task`` at ``wall_stop`` (this host's wall clock) if it still runs then."""
        while not task.done():
            left = wall_stop - self._timeshard_wall()  # read again after each sleep: a timer may fire early
            if left <= 0:
                stopped.add(task)
                task.cancel()
                return
            sleep = asyncio.ensure_future(self._timeshard_sleep(left))
            try:
                await asyncio.wait({task, sleep}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleep.cancel()

    def _timeshard_start(self, attempt: Attempt, memo: dict[Any, Any], outcomes: list[Any],
                         k: int, started_us: int) -> asyncio.Future[Any] | None:
        """Start one job: its outcome in ``outcomes[k]`` if it ended at once, else its task."""
        try:
            coro = self.execute_job(attempt.context(memo, started_us))
        except Exception as exc:  # decoding, or a synchronous execute_job that raised
            outcomes[k] = (attempt.run_id, *failure(exc), False, False)
            return None
        if self.timeshard_task_per_job:
            return asyncio.get_running_loop().create_task(coro)  # a task runs in a copy of the context
        context = contextvars.copy_context()
        try:
            first = context.run(coro.send, None)
        except StopIteration:
            outcomes[k] = (attempt.run_id, None, None, False, False)
            return None
        except Exception as exc:  # any failure is the job's, not the batch's
            outcomes[k] = (attempt.run_id, *failure(exc), False, False)
            return None
        # Made inside the job's context: the task goes on in a copy of it (3.10 has no context=).
        return context.run(asyncio.get_running_loop().create_task, _resumed(coro, first))

    def _timeshard_state(self) -> dict[str, Any]:
        # Created lazily, as the memo is: subclasses define __init__ without calling ours.
        state = self.__dict__.get("_timeshard_handler")
        if state is None:
            state = self.__dict__["_timeshard_handler"] = {"waiting": {}, "withdrawn": {},
                                                           "domain": monotonic_domain()}
        return state

    def _timeshard_domain(self) -> str:
        return str(self._timeshard_state()["domain"])

    # The clocks a batch waits on; a test overrides them to run handlers on a clock of its own.
    def _timeshard_monotonic(self) -> float:
        return time.monotonic()

    def _timeshard_wall(self) -> float:
        return time.time()

    async def _timeshard_sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def _timeshard_memo(self) -> dict:
        # Decoded schedules and policies shared by the jobs this handler runs; created lazily
        # because subclasses define __init__ without calling ours. Bounded by clearing.
        memo = self.__dict__.get("_timeshard_decoded")
        if memo is None or len(memo) > 10_000:
            memo = self.__dict__["_timeshard_decoded"] = {}
        return memo
