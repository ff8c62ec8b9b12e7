"""The silo: owns shards, keeps their due jobs in a timer queue, and fires them into handler actors.

A silo runs as an async Ray actor (``cluster._cluster`` makes it one), but this module is plain
asyncio: it talks to the world through a ``Transport`` and reads time from a ``Clock``, both
passed in, so tests run silos in-process on the memory store. Its life:

1. join the membership table as a new incarnation; heartbeat (``heartbeat``, ``lease``);
2. write new jobs into its own shard for each due-time window (``ownership``);
3. load a shard — read, fold, queue — once its window starts within the lookahead (``loading``);
4. claim orphaned shards (owner proven gone: process exited, or lease over) by metadata CAS, sealed
   (``adoption``), and hand shards beyond a fair share over to silos that have fewer (``balance``); a shard whose owners keep dying while it fires runs in quarantine (small
   batches, halved around suspects), and a job that keeps killing them is parked until an
   operator releases it (``quarantine``);
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
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from cluster.model.clock import SYSTEM_CLOCK, Clock
from cluster.model.errors import InvalidJob, SiloStopping, UnsupportedWireVersion
from cluster.model.options import ClusterOptions
from cluster.model.routing import SiloRefused
from cluster.model.wire import datetime_to_us
from cluster.runtime.cancel import CancelAnswer
from cluster.runtime.firing import describe_target
from cluster.runtime.hooks import HooksFactory, call_hooks
from cluster.runtime.lease import Lease
from cluster.runtime.logowner import Owner
from cluster.runtime.lookup import FindAnswer, Lookup
from cluster.runtime.metrics import MetricsExporter, SiloMetrics
from cluster.runtime.pausing import PauseAnswer
from cluster.runtime.roles import wire
from cluster.runtime.runs import JobDecoder, UnreadableJob, log_if_failed
from cluster.runtime.shardlog import MAX_US, MIN_US
from cluster.runtime.store_format import check_store_format
from cluster.runtime.transport import Transport
from storage import StorageError, Store, open_store

log = logging.getLogger("timeshard.silo")

# Seconds before a failed start step (join, first clock reading) is tried again; doubled up to the max.
FIRST_JOIN_RETRY = 0.2
MAX_JOIN_RETRY = 5.0
PEER_CALL_TIMEOUT_S = 10.0  # a feature's call to a peer (a registry bucket's owner): no answer by then is a loss
# Staged runs ``status()`` names one by one (it counts them all).
STAGED_SHOWN = 20


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_items(jobs: Any, decode: JobDecoder) -> list[int | None]:
    """Refuse a schedule call unless every item is ``(id, due_us, packed job)`` of that very job.

    ``due_us`` is when the job first fires: its ``due``, later by its jitter. Returns each job's
    first scheduled time where it differs from that (a jittered job), else None.

    Each packed job is decoded as a replay will decode it, so nothing is acknowledged that a
    silo could not run. Raises ``InvalidJob`` naming the first bad item (``jobs[i]``) and the
    rule, or ``UnsupportedWireVersion`` for a job of a newer version; nothing of the call is
    written then.
    """
    if not isinstance(jobs, (list, tuple)):
        raise InvalidJob("jobs", "must be a list of (id, due_us, packed job) items", _short(jobs))
    scheduled: list[int | None] = []
    for i, item in enumerate(jobs):
        where = f"jobs[{i}]"
        if not isinstance(item, (list, tuple)) or len(item) != 3:
            raise InvalidJob(where, "must be an (id, due_us, packed job) triple", _short(item))
        job_id, due_us, packed = item
        if type(job_id) is not str or not job_id:
            raise InvalidJob(f"{where}.id", "must be a non-empty str", _short(job_id))
        if type(due_us) is not int or not MIN_US <= due_us <= MAX_US:
            raise InvalidJob(f"{where}.due_us", "must be an int of microseconds since 1970 within years 1 to 9999",
                             _short(due_us))
        if type(packed) is not bytes:
            raise InvalidJob(f"{where}.job", "must be bytes (msgpack of ScheduledJob.to_wire())", _short(packed))
        try:
            job = decode(packed)
        except UnreadableJob as exc:
            if isinstance(exc.__cause__, UnsupportedWireVersion):
                raise UnsupportedWireVersion(f"{where}.job (id {job_id})", exc.__cause__.rule) from None
            raise InvalidJob(f"{where}.job (id {job_id})", f"must be msgpack of ScheduledJob.to_wire(): {exc}") from None
        target = job.target
        if not (type(target.name) is str and target.name and (target.namespace is None or type(target.namespace) is str)):
            raise InvalidJob(f"{where}.job (id {job_id})", "target must name an actor (a str) and a namespace (str or None)")
        if job.id != job_id:
            raise InvalidJob(f"{where}.id", f"must be the packed job's id {job.id!r}", _short(job_id))
        scheduled_us = datetime_to_us(job.due)
        fire_us = job.fire_us(scheduled_us)
        if fire_us != due_us:
            raise InvalidJob(f"{where}.due_us", f"must be the packed job's first fire time ({fire_us} us)", due_us)
        scheduled.append(None if fire_us == scheduled_us else scheduled_us)
    return scheduled


class Silo:
    """One silo's roles and loops. Methods named without ``_`` are its Ray-callable API.

    ``hooks`` is required: the named-jobs hook is the fence that keeps an overwritten generation
    from running, so a silo without the features' hooks would be unsafe. ``transport`` reaches
    handler actors and peers; ``clock`` and ``rng`` may be replaced by tests. ``store`` may be
    given instead of opened from ``store_url`` (silos sharing one memory store in a test).
    ``on_superseded`` runs once a newer process of this silo has joined (Ray restarted it
    elsewhere while this one still ran): by then this one holds nothing, and should end.
    ``check_format=False`` skips the store format check (``store_format``), for a simulator
    whose every store call draws from its world's random stream.
    """

    def __init__(self, silo_id: str, store_url: str, options: ClusterOptions, namespace: str, *,
                 hooks: HooksFactory, transport: Transport, clock: Clock = SYSTEM_CLOCK,
                 metrics_exporter: MetricsExporter | None = None, store: Store | None = None,
                 rng: random.Random | None = None, on_superseded: Callable[[], None] | None = None,
                 check_format: bool = True) -> None:
        self.silo_id = silo_id
        self.namespace = namespace
        self.options = options
        self._store_url = store_url
        self._hooks_factory = hooks
        self._clock = clock
        self._store = store if store is not None else open_store(store_url)
        self._check_format_first = check_format
        self.metrics = SiloMetrics(silo_id, metrics_exporter)
        self._r = wire(silo_id, self._store, options, clock=clock, transport=transport, metrics=self.metrics,
                       rng=rng or random.Random())
        if on_superseded is not None:
            self._r.heartbeat.on_superseded = on_superseded
        self._lookup = Lookup(self._store, self._r.shards)
        self._tasks: list[asyncio.Task[None]] = []
        self._check_decoder = JobDecoder()  # schedule's round-trip check: its own memo, no metrics
        self._ready = asyncio.get_running_loop().create_task(self._start())
        self._ready.add_done_callback(log_if_failed)

    # -- lifecycle -----------------------------------------------------------------------

    async def _start(self) -> None:
        # Before anything is written: a store of a newer release is refused, naming both
        # formats (UnsupportedStoreFormat fails ``ready``), never joined and misread.
        if self._check_format_first:
            await self._retrying("store format", self._check_format)
        # Through storage faults: a silo whose start failed would answer pings (so nobody
        # replaces it) while serving nothing, for good.
        await self._retrying("join", self._r.heartbeat.join)
        self._r.hooks.extend(self._hooks_factory(self._store, self))
        log.info("silo joined", extra={"silo": self.owner})
        # Nothing fires before the store's clock is read: on this host's clock, one that runs
        # ahead would fire jobs early (found by the simulation, issue 12 point 10).
        await self._retrying("first reading of the store's clock", self._r.skew.sample)
        try:
            await self._r.adoption.adopt_orphans()
        except StorageError as exc:  # the maintenance loop looks again shortly
            log.warning("first adoption round failed", extra={"silo": self.owner, "error": repr(exc)})
        await call_hooks(self._r.hooks, "maintain")
        self._tasks = [
            asyncio.create_task(self._r.firing.run(), name="fire"),
            asyncio.create_task(self._r.heartbeat.run(), name="heartbeat"),
            asyncio.create_task(self._maintenance_loop(), name="maintenance"),
            asyncio.create_task(self._r.skew.run(), name="skew"),
        ]
        for task in self._tasks:
            task.add_done_callback(log_if_failed)

    async def _check_format(self) -> None:
        await check_store_format(self._store)

    async def _retrying(self, what: str, step: Callable[[], Awaitable[None]]) -> None:
        """Run ``step`` until it gets through the store, backing off between tries."""
        delay = FIRST_JOIN_RETRY
        while True:
            try:
                await step()
                return
            except StorageError as exc:
                log.warning("start step failed, retrying", extra={"silo": self.silo_id, "step": what,
                                                                   "error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(2 * delay, MAX_JOIN_RETRY)

    @property
    def owner(self) -> str:
        """This incarnation's owner tag, ``<silo id>#<incarnation>``."""
        return self._r.me.owner

    async def ready(self) -> dict[str, Any]:
        """Wait until the silo has joined and claimed its orphans; returns who it is."""
        await self._ready
        return {"silo_id": self.silo_id, "owner": self.owner, "pid": os.getpid(), "node": self.node}

    @property
    def clock(self) -> Clock:
        """The store's time as read on this host (``cluster.runtime.skew``): what hooks time records by."""
        return self._r.skew.clock

    @property
    def log_owner(self) -> Owner:
        """This silo as the owner and judge of logs, shared by its shards and the features' logs."""
        return self._r.adoption.owner

    @property
    def lease(self) -> Lease:
        return self._r.lease

    async def feature_call(self, method: str, *args: Any) -> Any:
        """Answer ``method(*args)`` by the feature that serves it (a named put at its bucket's owner)."""
        await self._ready
        for hook in self._r.hooks:
            serve = hook.service(method)
            if serve is not None:
                return await serve(*args)
        raise LookupError(f"no feature of silo {self.silo_id} answers {method!r}")

    def holds_shard(self, shard_base: str) -> bool:
        """Whether this silo holds shard ``shard_base`` now (``SiloView.holds_shard``)."""
        return self._r.shards.get(shard_base) is not None

    async def call_peer(self, silo_id: str, method: str, *args: Any) -> Any:
        """One call to silo ``silo_id`` for a feature (``SiloView.call_peer``); this silo's own is made here."""
        if silo_id == self.silo_id:
            if method != "feature_call":
                raise SiloRefused(f"silo {silo_id} answers only feature calls from itself")
            return await self.feature_call(*args)
        return await self._r.transport.call_peer(silo_id, method, args, PEER_CALL_TIMEOUT_S)

    @property
    def node(self) -> str:
        """The Ray node this silo runs on ("" outside Ray)."""
        return self._r.me.row.node.partition("/")[0]

    async def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        """Stop gracefully: no new work, finish what is in flight, release every shard.

        The heartbeat goes on until then, so the lease holds while runs end; only once the
        shards are released does the silo mark itself dead, proof for peers that it is gone. A
        shard adopted while its dead owner's lease may still run is released once that lease is
        over (at most a lease after the adoption), the others at once.
        """
        await self._ready
        self._r.runs.closing = True
        self._r.heartbeat.watching_peers = False
        beating = [t for t in self._tasks if t.get_name() == "heartbeat"]
        for task in self._tasks:
            if task not in beating:
                task.cancel()
        deadline = self._clock.monotonic() + timeout
        # Polled: the deadline is on the injectable clock, which an Event's timeout would not follow.
        while self._r.runs.inflight and self._clock.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.02)
        # A shard claimed from a dead owner whose lease may still run is released once it ends:
        # what that owner sent ahead may start at a handler until then, and a peer claiming the
        # shard released knows of no lease to wait out before it answers a cancel or pause.
        now = self._clock.monotonic()
        first = {shard for shard in self._r.shards if shard.sent_before_until <= now}
        released = await self._r.shards.release_all(lambda shard: shard in first)
        if len(first) < len(self._r.shards.shards):
            self._r.transport.notify_adopt(self._r.heartbeat.peers())  # these go at once, the rest below
            while self._sends_may_start():  # noqa: ASYNC110  (at most a lease: not cut short by the deadline)
                await asyncio.sleep(0.02)
            released += await self._r.shards.release_all(lambda shard: shard not in first)
        for task in beating:
            await self._r.heartbeat.halt(task)
        with contextlib.suppress(StorageError):
            await self._r.heartbeat.leave()
        self._r.transport.notify_adopt(self._r.heartbeat.peers())  # hand the released shards over at once
        await call_hooks(self._r.hooks, "close")
        await self._store.close()
        log.info("silo stopped", extra={"silo": self.owner, "released": released})
        return {"released": released, "unfinished": len(self._r.runs.inflight)}

    def _sends_may_start(self) -> bool:
        """Whether what a dead previous owner of a held shard sent ahead may still start."""
        now = self._clock.monotonic()
        return any(shard.sent_before_until > now for shard in self._r.shards)

    # -- the API -------------------------------------------------------------------------------

    async def schedule(self, jobs: Sequence[tuple[str, int, bytes]], suspects: Sequence[str] = (),
                       settled: Sequence[str] = ()) -> list[str]:
        """Durably add ``(id, due_us, packed job)`` items, all or none; returns each job's shard, in order.

        ``suspects``: silos that may hold an earlier try of this very call (a client retrying
        after losing them); jobs already there are answered with their shard, not added again.
        ``settled``: holders that already refused it with no call of it under way in them (a
        client's retry, ``cluster.model.routing``; a flow step handed from holder to holder,
        ``cluster.flows.progress.hand_over``).
        Every item is decoded first (``check_items``): a bad one raises ``InvalidJob`` naming it,
        and nothing of the call is written.
        """
        scheduled = check_items(jobs, self._check_decoder)
        items: Sequence[tuple[Any, ...]] = jobs
        if any(at is not None for at in scheduled):  # a jittered job first fires after its scheduled time
            items = [(*item, at) for item, at in zip(jobs, scheduled, strict=True)]
        await self._ready
        if self._r.runs.closing or self._r.heartbeat.superseded:
            raise SiloStopping(f"silo {self.silo_id} is stopping")
        names = await self._r.scheduling.schedule(items, suspects, settled)
        self.metrics.scheduled.inc(len(jobs))
        return names

    async def cancel(self, shard_base: str, job_id: str) -> CancelAnswer:
        """Cancel ``job_id`` in ``shard_base``: ("cancelled" | "absent" | "moved" | "not_owner", info)."""
        await self._ready
        return await self._r.cancelling.cancel(shard_base, job_id)

    async def find_job(self, shard_base: str, job_id: str) -> FindAnswer:
        """Where ``job_id`` is, as ``shard_base`` says: ("found", packed job), ("moved", shard),
        ("absent", None) or ("gone", None) if the shard no longer exists. Read only."""
        await self._ready
        return await self._lookup.find(shard_base, job_id)
    async def pause(self, shard_base: str, job_id: str, note: str | None, by: str) -> PauseAnswer:
        """Pause ``job_id`` in ``shard_base``: ("paused" | "already_paused", the pause record
        ``[note, by, since_us]``), or ("absent" | "moved" | "not_owner", info) as ``cancel`` answers."""
        await self._ready
        return await self._r.pausing.pause(shard_base, job_id, note, by)

    async def resume(self, shard_base: str, job_id: str) -> PauseAnswer:
        """Resume ``job_id`` in ``shard_base``: ("resumed" | "not_paused", None), or as ``cancel`` answers."""
        await self._ready
        return await self._r.pausing.resume(shard_base, job_id)

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

    async def release_quarantine(self, shard_base: str) -> dict[str, Any] | None:
        """Release ``shard_base`` from quarantine and queue its parked jobs; None if not held here.

        Returns ``{"shard", "was_quarantined", "released_jobs"}``.
        """
        await self._ready
        return await self._r.quarantine.release(shard_base)

    async def ping(self) -> str:
        return self.silo_id

    async def describe(self) -> dict[str, Any]:
        """What a client needs to connect: the store URL and the cluster options."""
        return {"silo_id": self.silo_id, "store_url": self._store_url, "options": self.options, "namespace": self.namespace}

    async def status(self) -> dict[str, Any]:
        """What this silo holds: shards (owner, state, window, jobs, quarantine), queue, in flight, staged.

        ``quarantined`` names the shards firing in quarantine batches, ``parked`` the jobs held back
        per shard (see ``cluster.runtime.quarantine``); ``paused`` the jobs an operator paused in
        each loaded shard (see ``cluster.runtime.pausing``). ``unreadable`` counts per shard the records
        and jobs that cannot be decoded (kept, never run); ``damaged`` the shards whose log had bad
        frames before whole ones: records lost, byte ranges, and where a copy of the log is kept.
        ``lease_age`` is the seconds since the heartbeat that last renewed this silo's lease began
        (None before the first), ``lease_left`` the seconds until it ends (at or below 0: lapsed),
        ``heartbeat_interval_s`` how often it should be renewed; ``niceness`` the silo process's
        (above 0 it loses the CPU to any busy process on its node). Each shard's ``generation`` is the
        generation of its log being written (compaction starts a new one). ``counters`` are
        cumulative for this incarnation, lateness also as Prometheus-style cumulative buckets
        (``lateness_buckets``: upper bound in seconds -> fires at or below it, ``+Inf`` all).
        """
        await self._ready
        quarantine = self._r.quarantine
        lease, now = self._r.lease, self._clock.monotonic()
        shards = list(self._r.shards)
        return {
            "silo_id": self.silo_id,
            "owner": self.owner,
            "pid": os.getpid(),
            "node": self.node,
            "niceness": os.getpriority(os.PRIO_PROCESS, 0),
            "queued": len(self._r.queue),
            "inflight": len(self._r.runs.inflight),
            "staged": len(self._r.runs.staged),
            "staged_jobs": self._staged_jobs(),
            "lease_age": None if lease.renewed_from is None else round(now - lease.renewed_from, 3),
            "lease_left": round(lease.until - now, 3),
            "heartbeat_interval_s": self.options.heartbeat_interval.total_seconds(),
            "shards": [
                {
                    "name": s.base,
                    "state": s.meta.state,
                    "loaded": s.loaded,
                    "jobs": s.live_count,
                    "window_start": s.meta.window_start,
                    "window_end": s.meta.window_end,
                    "adopted_count": s.meta.adopted_count,
                    "generation": s.writer.generation,
                    **quarantine.describe(s),
                    "unreadable": len(s.unreadable) + (s.damage.unreadable if s.damage else 0),
                    "paused": 0 if s.state is None else len(s.state.paused),
                }
                for s in shards
            ],
            "quarantined": [s.base for s in shards if quarantine.quarantined(s)],
            "parked": {s.base: parked for s in shards if (parked := quarantine.parked_jobs(s))},
            "clock": self._r.skew.report(),
            "damaged": {
                s.base: {"lost": s.damage.lost, "kept_as": s.damage.kept_as, "unreadable": s.damage.unreadable,
                         "ranges": [[d.offset, d.end, d.reason] for d in s.damage.ranges]}
                for s in shards if s.damage is not None
            },
            "counters": self.metrics.snapshot(),
        }

    def _staged_jobs(self) -> list[dict[str, Any]]:
        """The first ``STAGED_SHOWN`` staged runs: job id and name, the absent target, since when (µs)."""
        shown = []
        for run in list(self._r.runs.staged.values())[:STAGED_SHOWN]:
            shown.append({"job": run.job_id, "name": run.job.name, "target": describe_target(run.target),
                          "since_us": run.staged_since})
        return shown

    # -- background ---------------------------------------------------------------------------

    async def _maintenance_loop(self) -> None:
        tick = self.options.staging_interval.total_seconds()
        interval = self.options.adoption_interval.total_seconds()
        last_upkeep = self._r.adoption.start_rounds()
        while True:
            await self._r.adoption.wait_for_round(tick)  # or less: a peer's death read at a heartbeat
            try:
                self._r.shards.settle_writers()
                await self._r.firing.retry_staged()
                await self._r.loading.load_due()
                await self._r.quarantine.clear_idle()
                adopting = self._r.adoption.round_due()  # not every interval in a large cluster
                if adopting or self._clock.monotonic() - last_upkeep >= interval:
                    last_upkeep = self._clock.monotonic()
                    if adopting:
                        await self._r.adoption.adopt_orphans()
                        await call_hooks(self._r.hooks, "maintain")
                        if self._r.adoption.excess:  # in the background: it waits for runs to finish
                            self._r.runs.spawn(self._r.balance.hand_over(self._r.adoption.excess))
                    await self._r.loading.delete_drained()
                    await self._r.quarantine.forgive()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:  # an outage: expected, and the next round tries again
                self.metrics.store_errors.inc()
                log.warning("maintenance round failed", extra={"silo": self.owner, "error": repr(exc)})
            except Exception:
                log.exception("maintenance round failed")


__all__ = ["Silo"]
