"""The silo: owns shards, keeps their due jobs in a timer queue, and fires them into handler actors.

A silo runs as an async Ray actor (``cluster._cluster`` makes it one), but this module is plain
asyncio: it talks to the world through a ``Transport`` and reads time from a ``Clock``, both
passed in, so tests run silos in-process on the memory store. Its life:

1. join the membership table as a new incarnation; heartbeat (``heartbeat``, ``lease``);
2. write new jobs into its own shard for each due-time window (``ownership``);
3. load a shard — read, fold, queue — once its window starts within the lookahead (``loading``);
4. claim orphaned shards (owner dead, stale or gone) by metadata CAS, sealed on adoption
   (``adoption``);
5. fire due jobs: one call per target per batch, within a concurrency limit (``firing``,
   ``staging`` for targets that do not exist yet);
6. write each outcome: remove, retry per failure policy, or the next occurrence (``outcomes``);
7. on stop, finish in-flight work and release its shards.

This class wires the roles together and is the Ray-callable API (methods without ``_``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from cluster.model.clock import SYSTEM_CLOCK, Clock
from cluster.model.errors import SiloStopping
from cluster.model.options import ClusterOptions
from cluster.model.wire import timedelta_to_us
from cluster.runtime.cancel import CancelAnswer
from cluster.runtime.hooks import HooksFactory, call_hooks
from cluster.runtime.metrics import MetricsExporter, SiloMetrics
from cluster.runtime.roles import wire
from cluster.runtime.shardlog import add_op, window_of
from cluster.runtime.transport import Transport
from storage import StorageError, Store, open_store

log = logging.getLogger("timeshard.silo")

# Seconds before a failed join is tried again; doubled up to the max.
FIRST_JOIN_RETRY = 0.2
MAX_JOIN_RETRY = 5.0


class Silo:
    """One silo's roles and loops. Methods named without ``_`` are its Ray-callable API.

    ``hooks`` is required: the named-jobs hook is the fence that keeps an overwritten generation
    from running, so a silo without the features' hooks would be unsafe. ``transport`` reaches
    handler actors and peers; ``clock`` and ``rng`` may be replaced by tests. ``store`` may be
    given instead of opened from ``store_url`` (silos sharing one memory store in a test).
    """

    def __init__(self, silo_id: str, store_url: str, options: ClusterOptions, namespace: str, *,
                 hooks: HooksFactory, transport: Transport, clock: Clock = SYSTEM_CLOCK,
                 metrics_exporter: MetricsExporter | None = None, store: Store | None = None,
                 rng: random.Random | None = None) -> None:
        self.silo_id = silo_id
        self.namespace = namespace
        self.options = options
        self._store_url = store_url
        self._hooks_factory = hooks
        self._clock = clock
        self._store = store if store is not None else open_store(store_url)
        self.metrics = SiloMetrics(silo_id, metrics_exporter)
        self._r = wire(silo_id, self._store, options, clock=clock, transport=transport, metrics=self.metrics,
                       rng=rng or random.Random())
        self._tasks: list[asyncio.Task[None]] = []
        self._ready = asyncio.get_running_loop().create_task(self._start())

    # -- lifecycle -----------------------------------------------------------------------

    async def _start(self) -> None:
        await self._join()
        self._r.hooks.extend(self._hooks_factory(self._store, self))
        log.info("silo joined", extra={"silo": self.owner})
        try:
            await self._r.adoption.adopt_orphans()
        except StorageError as exc:  # the maintenance loop looks again shortly
            log.warning("first adoption round failed", extra={"silo": self.owner, "error": repr(exc)})
        self._tasks = [
            asyncio.create_task(self._r.firing.run(), name="fire"),
            asyncio.create_task(self._r.heartbeat.run(), name="heartbeat"),
            asyncio.create_task(self._maintenance_loop(), name="maintenance"),
        ]

    async def _join(self) -> None:
        """Join membership, through storage faults: a silo whose start failed would answer pings
        (so nobody replaces it) while serving nothing, for good."""
        delay = FIRST_JOIN_RETRY
        while True:
            try:
                await self._r.heartbeat.join()
                return
            except StorageError as exc:
                log.warning("join failed, retrying", extra={"silo": self.silo_id, "error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(2 * delay, MAX_JOIN_RETRY)

    @property
    def owner(self) -> str:
        """This incarnation's owner tag, ``<silo id>#<incarnation>``."""
        return self._r.me.owner

    async def ready(self) -> dict[str, Any]:
        """Wait until the silo has joined and claimed its orphans; returns who it is."""
        await self._ready
        return {"silo_id": self.silo_id, "owner": self.owner, "pid": os.getpid()}

    async def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop gracefully: no new work, finish what is in flight, release every shard."""
        await self._ready
        self._r.runs.closing = True
        for task in self._tasks:
            task.cancel()
        deadline = self._clock.monotonic() + timeout
        # Polled: the deadline is on the injectable clock, which an Event's timeout would not follow.
        while self._r.runs.inflight and self._clock.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        released = await self._r.shards.release_all()
        with contextlib.suppress(StorageError):
            await self._r.heartbeat.leave()
        self._r.transport.notify_adopt(self._r.heartbeat.peers())  # hand the released shards over at once
        await call_hooks(self._r.hooks, "close")
        await self._store.close()
        log.info("silo stopped", extra={"silo": self.owner, "released": released})
        return {"released": released, "unfinished": len(self._r.runs.inflight)}

    # -- the API -------------------------------------------------------------------------------

    async def schedule(self, jobs: Sequence[tuple[str, int, bytes]]) -> list[str]:
        """Durably add ``(id, due_us, packed job)`` items; returns each job's shard, in order."""
        await self._ready
        if self._r.runs.closing:
            raise SiloStopping(f"silo {self.silo_id} is stopping")
        by_window: dict[int, list[int]] = defaultdict(list)
        duration = timedelta_to_us(self.options.shard_duration)
        for i, (_, due_us, _) in enumerate(jobs):
            by_window[window_of(due_us, duration)].append(i)
        names: list[str] = [""] * len(jobs)

        async def add(window: int, indexes: list[int]) -> None:
            ops = [add_op(jobs[i][0], jobs[i][1], jobs[i][2]) for i in indexes]
            shard = await self._r.shards.write_to_window(window, ops)
            for i in indexes:
                names[i] = shard.base

        await asyncio.gather(*(add(w, ix) for w, ix in by_window.items()))
        self.metrics.scheduled.inc(len(jobs))
        return names

    async def cancel(self, shard_base: str, job_id: str) -> CancelAnswer:
        """Cancel ``job_id`` in ``shard_base``: ("cancelled" | "absent" | "moved" | "not_owner", info)."""
        await self._ready
        return await self._r.cancelling.cancel(shard_base, job_id)

    async def shards_from(self, window_us: int) -> list[tuple[str, str]]:
        """``(shard, owner)`` of every shard whose window starts at or after ``window_us``."""
        await self._ready
        return await self._r.cancelling.shards_from(window_us)

    async def adopt_now(self) -> int:
        """Look for orphans at once (a peer released its shards or was found dead)."""
        await self._ready
        return await self._r.adoption.adopt_orphans()

    async def declare_peer_dead(self, silo_id: str) -> bool:
        """Fast path of failure detection: mark a peer dead now, then adopt its shards."""
        await self._ready
        return await self._r.heartbeat.declare_peer_dead(silo_id)

    async def ping(self) -> str:
        return self.silo_id

    async def describe(self) -> dict[str, Any]:
        """What a client needs to connect: the store URL and the cluster options."""
        return {"silo_id": self.silo_id, "store_url": self._store_url, "options": self.options, "namespace": self.namespace}

    async def status(self) -> dict[str, Any]:
        """What this silo holds: shards (owner, state, window, jobs), queue, in flight, staged."""
        await self._ready
        return {
            "silo_id": self.silo_id,
            "owner": self.owner,
            "pid": os.getpid(),
            "queued": len(self._r.queue),
            "inflight": len(self._r.runs.inflight),
            "staged": len(self._r.runs.staged),
            "shards": [
                {
                    "name": s.base,
                    "state": s.meta.state,
                    "loaded": s.loaded,
                    "jobs": s.live_count,
                    "window_start": s.meta.window_start,
                    "window_end": s.meta.window_end,
                    "adopted_count": s.meta.adopted_count,
                }
                for s in self._r.shards
            ],
            "poisoned": dict(self._r.adoption.poisoned),
            "counters": self.metrics.snapshot(),
        }

    # -- background ---------------------------------------------------------------------------

    async def _maintenance_loop(self) -> None:
        tick = self.options.staging_interval.total_seconds()
        last_adoption = self._clock.monotonic()
        while True:
            await asyncio.sleep(tick)
            try:
                self._r.firing.retry_staged()
                await self._r.loading.load_due()
                if self._clock.monotonic() - last_adoption >= self.options.adoption_interval.total_seconds():
                    last_adoption = self._clock.monotonic()
                    await self._r.adoption.adopt_orphans()
                    await self._r.loading.delete_drained()
                    await self._r.adoption.forgive()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("maintenance round failed")


__all__ = ["Silo"]
