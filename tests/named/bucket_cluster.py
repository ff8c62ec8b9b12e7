"""In-process silos keeping names in registry buckets (``named_registry="buckets"``), without Ray.

Each silo is the runtime's roles (``tests.runtime.harness``) with the named-jobs hooks; calls
between silos and from the client go straight to the silo asked, as ``Silo.call_peer`` and
``Silo.feature_call`` make them; a silo taken down refuses every call (as Ray does once its
actor is gone). The client is the real ``Client`` and ``NamedJobs`` over that.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cluster.client import Client
from cluster.model.attempt import JobContext
from cluster.model.clock import Clock
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.options import BUCKETS_REGISTRY, ClusterOptions
from cluster.model.routing import SiloRefused
from cluster.model.wire import datetime_to_us
from cluster.named.api import NamedJobs
from cluster.named.hooks import NamedJobHooks
from cluster.runtime.lookup import Lookup
from cluster.runtime.membership import REPORTED, Membership
from cluster.runtime.roles import Roles
from storage import FileStore, MemoryStore, ServerTime, Store
from tests.runtime.harness import OPTIONS, ManualClock, fire_due, make_parts

TARGET = Target.actor("h", "test")
BUCKET_OPTIONS = replace(OPTIONS, named_registry=BUCKETS_REGISTRY)


class ManualTimeFileStore(FileStore):
    """A file store on the test's manual clock."""

    def __init__(self, root: str, clock: ManualClock) -> None:
        super().__init__(root)
        self._manual = clock

    async def server_time(self) -> ServerTime | None:
        return ServerTime(self._manual.now_us(), 1)


class Starts:
    """A handler noting every start, in order with the marks a test makes (``"put returned"``)."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.log.append(ctx.job.id)

    def after(self, mark: str) -> list[str]:
        return self.log[self.log.index(mark) + 1:]


class View:
    """What ``NamedJobHooks`` sees of its silo (``SiloView``)."""

    def __init__(self, cluster: Cluster, parts: Roles, options: ClusterOptions) -> None:
        self.cluster, self.parts, self.options = cluster, parts, options

    @property
    def owner(self) -> str:
        return self.parts.me.owner

    @property
    def clock(self) -> Clock:
        return self.parts.skew.clock

    @property
    def log_owner(self) -> Any:
        return self.parts.adoption.owner

    @property
    def lease(self) -> Any:
        return self.parts.lease

    async def schedule(self, jobs: Any, suspects: Any = ()) -> list[str]:
        return await self.parts.scheduling.schedule(jobs, suspects)

    async def cancel(self, shard_base: str, job_id: str) -> Any:
        return await self.parts.cancelling.cancel(shard_base, job_id)

    def holds_shard(self, shard_base: str) -> bool:
        return self.parts.shards.get(shard_base) is not None

    async def call_peer(self, silo_id: str, method: str, *args: Any) -> Any:
        return await self.cluster.call(silo_id, method, args, caller=self.parts.me.silo_id)


class Cluster:
    """Silos sharing one store and one manual clock (see the module docstring)."""

    def __init__(self, store: Store, clock: ManualClock, options: ClusterOptions = BUCKET_OPTIONS) -> None:
        self.store, self.clock, self.options = store, clock, options
        self.parts: dict[str, Roles] = {}
        self.hooks: dict[str, NamedJobHooks] = {}
        self.down: set[str] = set()
        self.hanging: set[str] = set()  # silos that take calls and never answer (paused, cut off)
        self.starts = Starts()
        self.calls: list[tuple[str, str, str, Any]] = []  # (caller, silo, feature method, what was sent)

    @classmethod
    async def start(cls, kind: str, tmp: Path, silos: tuple[str, ...] = ("a",), *,
                    options: ClusterOptions = BUCKET_OPTIONS, root: Path | None = None) -> Cluster:
        # Half a second ahead of the wall clock that put reads: a job put due in 1 s is due in the
        # first second the test fires.
        clock = ManualClock(datetime_to_us(datetime.now(timezone.utc)) + 500_000)
        store: Store = MemoryStore() if kind == "memory" else ManualTimeFileStore(str(root or tmp / "store"), clock)
        cluster = cls(store, clock, options)
        for silo_id in silos:
            await cluster.add(silo_id)
        await cluster.maintain()
        return cluster

    async def add(self, silo_id: str) -> Roles:
        parts = await make_parts(self.store, silo_id, clock=self.clock, options=self.options)
        hooks = NamedJobHooks(self.store, View(self, parts, self.options))
        parts.hooks.append(hooks)
        parts.transport.handlers["h"] = self.starts
        parts.lease.renew(parts.clock.monotonic())
        self.parts[silo_id], self.hooks[silo_id] = parts, hooks
        self.down.discard(silo_id)
        return parts

    def up(self) -> list[str]:
        return [s for s in self.parts if s not in self.down and s not in self.hanging]

    async def call(self, silo_id: str, method: str, args: tuple[Any, ...], caller: str = "client") -> Any:
        if silo_id in self.down or silo_id not in self.parts:
            raise SiloRefused(f"silo {silo_id} is not registered")
        parts = self.parts[silo_id]
        if silo_id in self.hanging:
            await asyncio.Event().wait()
        if method == "feature_call":
            self.calls.append((caller, silo_id, args[0], args[1]))
            serve = self.hooks[silo_id].service(args[0])
            assert serve is not None, args[0]
            return await serve(*args[1:])
        methods = {"schedule": parts.scheduling.schedule, "cancel": parts.cancelling.cancel,
                   "shards_from": parts.cancelling.shards_from, "pause": parts.pausing.pause,
                   "resume": parts.pausing.resume, "find_job": Lookup(self.store, parts.shards).find}
        return await methods[method](*args)

    def jobs(self) -> NamedJobs:
        client = Client("test", list(self.parts), self.options, call_silo=self.call)
        jobs = NamedJobs(client, store_url="memory://")
        jobs._stores[id(asyncio.get_running_loop())] = self.store  # the silos' own store
        return jobs

    async def maintain(self) -> None:
        """One maintenance round on every silo up: leases renewed, orphans adopted, buckets taken."""
        for silo_id in self.up():
            parts = self.parts[silo_id]
            parts.lease.renew(parts.clock.monotonic())
            await parts.adoption.adopt_orphans()
            await self.hooks[silo_id].maintain()

    async def fire(self, seconds: int) -> None:
        """``seconds`` seconds of firing on every silo up, a second at a time."""
        for _ in range(seconds):
            self.clock.advance(1)
            for silo_id in self.up():
                parts = self.parts[silo_id]
                parts.lease.renew(parts.clock.monotonic())
                await parts.loading.load_due()
                await fire_due(parts)
            await asyncio.sleep(0.01)  # verdicts and status changes under way

    async def kill(self, silo_id: str) -> None:
        """``silo_id`` stops answering and is declared dead; its lease runs out for the others."""
        self.down.add(silo_id)
        await Membership(self.store).declare_dead(self.parts[silo_id].me.row, REPORTED)
        await self.maintain()  # the others see it dead: gone once its lease has run out from now
        self.clock.advance(self.options.firing_lease.total_seconds())

    async def flush_status(self) -> None:
        for silo_id in self.up():
            await self.hooks[silo_id].flush_status()

    async def stray_of(self, jobs: NamedJobs, name: str, generation: int) -> ScheduledJob:
        """The job of a put of ``name`` that died once its job had landed: never pointed at."""
        current = await jobs.get(name)
        assert current is not None
        (stray,) = await jobs.client.submit_jobs([replace(current.job, id=new_job_id(), generation=generation,
                                                          shard=None)])
        return stray
