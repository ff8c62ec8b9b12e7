"""The base class of handler actors: implement ``execute_job`` and the silo does the rest."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from cluster.model.attempt import Attempt, JobContext, Outcome


class JobHandler:
    """Subclass, decorate with ``@ray.remote`` and implement ``execute_job``.

    The silo delivers due jobs in batches — one Ray call per handler actor per batch — and this
    class runs each job's ``execute_job`` concurrently, with a per-job timeout, and reports every
    outcome back. Raise from ``execute_job`` to report a failure: the job's failure policy then
    decides whether and when it runs again.
    """

    async def execute_job(self, ctx: JobContext) -> None:
        """Run one attempt of ``ctx.job``; raise to report failure. Must be idempotent."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute_job(ctx)")

    # The method's name is ``cluster.model.attempt.DELIVER``: silos call it by that name.
    async def timeshard_deliver(
        self, batch: Sequence[Attempt], timeout: float | None, lease_end: float | None = None
    ) -> list[tuple[Any, ...]]:
        """Run a batch of attempts concurrently; returns one ``Outcome``, as a plain tuple, per attempt, in order.

        Plain tuples: Ray pickles a named tuple by reference to its class, 2.1 µs per job round
        trip against 0.16 for a tuple (measured with Ray's cloudpickle, 500 outcomes per batch).
        ``lease_end`` (wall clock) is when the sending silo's ownership lease runs out: work
        arriving later comes from a silo that was paused or cut off and may no longer own the
        jobs, so it is refused unstarted and the silo that does own them runs it.
        """
        if lease_end is not None and time.time() > lease_end:
            return [tuple(Outcome(Attempt(*a).run_id, "the sending silo's lease had expired", "LeaseExpired",
                                  refused=True)) for a in batch]
        attempts = [Attempt(*a) for a in batch]
        # One task per job and one deadline for the batch (they all start now), rather than a
        # wait_for per job: the per-job timer and wrapper task cost more than a no-op handler.
        tasks = [asyncio.ensure_future(self._run_one(a, lease_end)) for a in attempts]
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        return [
            tuple(Outcome(a.run_id, f"execute_job did not finish within {timeout} s", "TimeoutError", True)
                  if task in pending else task.result())
            for a, task in zip(attempts, tasks, strict=True)
        ]

    async def _run_one(self, attempt: Attempt, lease_end: float | None = None) -> Outcome:
        # Checked again per job: in a slow handler the last jobs of a batch start well after the
        # batch arrived, and none may start once the sender's lease is over.
        if lease_end is not None and time.time() > lease_end:
            return Outcome(attempt.run_id, "the sending silo's lease had expired", "LeaseExpired", refused=True)
        try:
            await self.execute_job(attempt.context(self._timeshard_memo()))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # any failure is the job's, not the batch's
            return Outcome(attempt.run_id, str(exc) or repr(exc), type(exc).__name__)
        return Outcome(attempt.run_id)

    def _timeshard_memo(self) -> dict:
        # Decoded schedules and policies shared by the jobs this handler runs; created lazily
        # because subclasses define __init__ without calling ours. Bounded by clearing.
        memo = self.__dict__.get("_timeshard_decoded")
        if memo is None or len(memo) > 10_000:
            memo = self.__dict__["_timeshard_decoded"] = {}
        return memo
