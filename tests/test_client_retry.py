"""The client's retry after a silo died mid-call, without a Ray cluster: in-process silos behind
stand-ins for Ray handles (issue 12, point 9). Only Ray's exception types are used."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import ray.exceptions

from cluster.client import Client
from cluster.model.clock import SYSTEM_CLOCK
from cluster.model.jobs import Target
from cluster.runtime.shardlog import SHARD_PREFIX, ShardState
from cluster.runtime.silo import Silo
from storage import MemoryStore, Store, list_logs, read_log
from tests.runtime.harness import OPTIONS, LocalTransport


async def copies(store: Store, job_id: str) -> list[str]:
    """The shards in which ``job_id`` is live: more than one means it fires more than once."""
    found = []
    for head in await list_logs(store, SHARD_PREFIX):
        if job_id in ShardState().replay((await read_log(store, head.base)).records()).live:
            found.append(head.base)
    return found


class Cluster:
    """Silos on one memory store, reached through handle stand-ins. The first silo asked to
    schedule lands the call, then dies before answering, and Ray restarts it."""

    def __init__(self) -> None:
        self.store = MemoryStore()
        self.silos: dict[str, Silo] = {}
        self.killed: list[Silo] = []

    async def start(self, silo_id: str) -> None:
        # A restart follows a SIGKILL on this node: the new incarnation sees the old process gone.
        self.silos[silo_id] = Silo(silo_id, "memory://", OPTIONS, "test", hooks=lambda _store, _view: [],
                                   transport=LocalTransport(predecessors_exited=True, node=f"local/{silo_id}"), clock=SYSTEM_CLOCK,
                                   store=self.store)
        await self.silos[silo_id].ready()

    def handle(self, silo_id: str) -> Any:
        cluster = self

        class Method:
            def __init__(self, name: str) -> None:
                self.name = name

            async def remote(self, *args: Any) -> Any:
                silo = cluster.silos[silo_id]
                answer = await getattr(silo, self.name)(*args)
                if self.name == "schedule" and not cluster.killed:
                    cluster.killed.append(silo)
                    for task in silo._tasks:  # SIGKILL: its loops end where they are, nothing more is written
                        task.cancel()
                    await cluster.start(silo_id)
                    raise ray.exceptions.RayActorError()
                return answer

        class Handle:
            def __getattr__(self, name: str) -> Method:
                return Method(name)

        return Handle()

    async def stop(self) -> None:
        for silo in self.silos.values():
            await silo.stop()


async def test_a_schedule_retried_after_its_silo_died_mid_call_leaves_one_copy_that_cancel_reaches(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the retry wrote the job again into another silo's shard, both copies were live, and
    cancel reached only the one the client was told about."""
    cluster = Cluster()
    for silo_id in ("a", "b"):
        await cluster.start(silo_id)
    client = Client("test", ["a", "b"], OPTIONS)
    monkeypatch.setattr(client, "_handle", cluster.handle)
    (job,) = await client.schedule_jobs([{"target": Target.actor("h", "test"), "due": timedelta(hours=1)}])
    assert cluster.killed  # the first try landed, and its silo died before answering
    assert await copies(cluster.store, job.id) == [job.shard]
    assert await client.try_cancel_job(job)
    assert await copies(cluster.store, job.id) == []
    await cluster.stop()
