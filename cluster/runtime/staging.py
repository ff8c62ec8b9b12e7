"""Due jobs whose target actor does not exist yet wait here (Dapr's staging queue).

A staged run holds no concurrency slot. Every ``staging_interval`` the silo looks again: runs
whose target now resolves go back in flight, and runs that waited longer than
``undeliverable_timeout`` count as a failed attempt, so their failure policy decides.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.model.wire import timedelta_to_us
from cluster.runtime.runs import Run, RunTable
from cluster.runtime.transport import TargetAbsent, Transport

log = logging.getLogger("timeshard.silo")


class Staging:
    """Parks runs whose target is absent and hands them back when it appears or time runs out."""

    def __init__(self, options: ClusterOptions, clock: Clock, runs: RunTable, transport: Transport) -> None:
        self._limit_us = timedelta_to_us(options.undeliverable_timeout)
        self._clock = clock
        self._runs = runs
        self._transport = transport

    def stage(self, runs: list[Run], why: str) -> None:
        """Park ``runs``: their target does not exist (yet)."""
        now = self._clock.now_us()
        for run in runs:
            self._runs.inflight.pop(run.job_id, None)
            run.staged_since = run.staged_since or now
            self._runs.staged[run.job_id] = run
        self._runs.notify_room()
        log.info("target absent, jobs staged", extra={"jobs": len(runs), "why": why})

    async def take_due(self) -> tuple[list[list[Run]], list[tuple[Run, str]]]:
        """Runs to send now, grouped by target, and runs that waited too long, with why.

        Both go back in flight: the caller delivers the first and fails the second.
        """
        staged = self._runs.staged
        if not staged:
            return [], []
        now = self._clock.now_us()
        by_target: dict[str, list[Run]] = defaultdict(list)
        for run in list(staged.values()):
            by_target[run.target.routing_key].append(run)
        ready: list[list[Run]] = []
        expired: list[tuple[Run, str]] = []
        for runs in by_target.values():
            try:
                await self._transport.resolve(runs[0].target)  # off the event loop
            except TargetAbsent as exc:
                absent: str | None = str(exc)
            else:
                absent = None
            runs = [run for run in runs if staged.get(run.job_id) is run]  # not cancelled during the lookup
            if absent is not None:
                for run in runs:
                    if now - run.staged_since > self._limit_us:
                        expired.append((run, f"undeliverable: {absent}"))
                        self._unstage(run)
                continue
            for run in runs:
                self._unstage(run)
            if runs:
                ready.append(runs)
        return ready, expired

    def _unstage(self, run: Run) -> None:
        del self._runs.staged[run.job_id]
        self._runs.start(run)
