"""Handlers that come with timeshard: a recorder for demos, tests and failover drills.

``Recorder`` records every execution it runs — in memory, and with ``path`` also durably as JSON
lines (flushed and fsynced before the attempt reports success), so a drill can count lost, early
and duplicate fires after killing processes. A job's ``data`` may ask it to misbehave:

- ``{"fail_attempts": n}`` — raise on the first ``n`` attempts of each occurrence;
- ``{"sleep": seconds}`` — take that long (to test timeouts and in-flight work).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from typing import Any

from cluster.model.ahead import Ahead, monotonic_domain
from cluster.model.attempt import Attempt, JobContext
from handlers.base import JobHandler


class Recorder(JobHandler):
    """Records executions: ``executions()`` returns them, oldest first."""

    def __init__(self, path: str | None = None) -> None:
        self._path = path
        self._records: list[dict[str, Any]] = []
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115 (kept open)
        self._received: dict[str, float] = {}  # run id -> when its batch reached this actor
        self._sent: dict[str, float] = {}  # run id -> when its silo sent it (batches sent ahead)
        self._domain = monotonic_domain()
        self._batches = 0  # batches being delivered: their records are synced once at the end

    async def timeshard_deliver(self, batch: Sequence[Attempt], timeout: float | None,
                                lease_end: float | None = None, ahead: Sequence[Any] | None = None,
                                stops: dict[str, float] | None = None) -> list[tuple[Any, ...]]:
        # A batch's last jobs start after every fsync before them: a drill judges what was in
        # flight at a kill by when the silo's call arrived, not by when each job started.
        now = time.time()
        sent = self._sent_at(now, ahead)
        for a in batch:
            self._received[Attempt(*a).run_id] = now
            if sent is not None:
                self._sent[Attempt(*a).run_id] = sent
        self._batches += 1
        try:
            outcomes = await super().timeshard_deliver(batch, timeout, lease_end, ahead, stops)
        finally:
            self._batches -= 1
        await self._sync()  # once per batch, off the event loop: the next call is stamped on arrival
        return outcomes

    def _sent_at(self, now: float, ahead: Sequence[Any] | None) -> float | None:
        """When the silo sent this batch, on this host's wall clock, if its monotonic clock is
        ours (a batch sent ahead says when it was sent): a drill measures delivery from it, and
        judges a call that arrived after its silo was killed by whether it was sent before."""
        if ahead is None:
            return None
        info = Ahead(*ahead)
        if not info.domain or info.domain != self._domain:
            return None
        return now - (time.monotonic() - info.sent_mono)

    async def _sync(self) -> None:
        if self._file is not None:
            self._file.flush()
            await asyncio.to_thread(os.fsync, self._file.fileno())

    async def execute_job(self, ctx: JobContext) -> None:
        started = time.time()
        data = ctx.job.data if isinstance(ctx.job.data, dict) else {}
        record = {
            "job_id": ctx.job.id,
            "name": ctx.job.name,
            "run_id": ctx.run_id,
            "dequeue_count": ctx.dequeue_count,
            "occurrence": ctx.occurrence,
            "scheduled_for": ctx.scheduled_for.timestamp(),
            "due": ctx.job.due.timestamp(),
            "started": started,
            "ctx_started": None if ctx.started is None else ctx.started.timestamp(),  # JobContext's own
            "received": self._received.pop(ctx.run_id, started),
            "sent": self._sent.pop(ctx.run_id, None),
            "target": ctx.job.target.name,
            "pid": os.getpid(),
        }
        fail = ctx.dequeue_count <= int(data.get("fail_attempts", 0))
        record["outcome"] = "failed" if fail else "succeeded"
        self._records.append(record)
        if self._file is not None:
            self._file.write(json.dumps(record) + "\n")
            if not self._batches:
                await self._sync()  # a batch syncs once, before it reports success
        if data.get("sleep"):
            await asyncio.sleep(float(data["sleep"]))
        if fail:
            raise RuntimeError(f"failing attempt {ctx.dequeue_count} of {data['fail_attempts']} on purpose")

    async def executions(self) -> list[dict[str, Any]]:
        """Every execution so far, oldest first."""
        return list(self._records)

    async def clear(self) -> int:
        n = len(self._records)
        self._records.clear()
        return n


def read_records(path: str) -> list[dict[str, Any]]:
    """The executions a ``Recorder`` wrote to ``path``; a torn last line (a kill) is skipped."""
    out = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    except FileNotFoundError:
        pass
    return out
