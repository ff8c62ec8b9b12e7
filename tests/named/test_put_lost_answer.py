"""A put whose write to the name's entry landed while its answer was lost (issue 25, point 6:
simulator seed 818), without Ray."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from cluster.named.registry import REGISTRY_PREFIX
from storage import AlreadyExists as LogExists
from storage import Fenced, LogInfo, MemoryStore, MetadataWrite, Store, Unavailable
from storage.base import Appended, Fetched, LogStat, ServerTime, WriteOutcomes
from tests.named.test_fence import TARGET, fire_for, start
from tests.named.test_put_path import DUE, jobs_on
from tests.named.test_put_path import TARGET as PUT_TARGET


class LosesAnAnswer(Store):
    """The silos' store as one caller sees it: its next entry write lands and answers ``Fenced``
    (an answer lost, then the retried request refused), and the write after that fails."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.lost = self.failed = False

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        etag = await self._store.set_metadata(name, metadata, if_match)
        if name.startswith(REGISTRY_PREFIX) and not self.lost:
            self.lost = True
            raise Fenced(f"{name}: landed, its answer lost")
        return etag

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        if self.lost and not self.failed:
            self.failed = True
            raise Unavailable(f"{name}: the store did not answer")
        return await self._store.create(name, metadata)

    async def list(self, prefix: str = "") -> list[LogInfo]:
        return await self._store.list(prefix)

    async def stat(self, name: str) -> LogStat:
        return await self._store.stat(name)

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        return await self._store.append_block(name, payload, if_match)

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        return await self._store.fetch(name, offset)

    async def delete(self, name: str, if_match: str | None) -> None:
        await self._store.delete(name, if_match)

    async def server_time(self) -> ServerTime | None:
        return await self._store.server_time()


async def test_an_overwrite_whose_entry_write_landed_unanswered_keeps_the_job_it_points_at() -> None:
    """The put took its own landed write for another put's win: it cancelled the job the name
    now pointed at and deleted its definition, then failed its next try. The name was left
    pointing at nothing that runs, and ``get`` raised ``Fenced`` until the next put."""
    parts, jobs, starts = await start()
    first = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    jobs._stores[id(asyncio.get_running_loop())] = LosesAnAnswer(parts.store)
    second = await jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True)
    found = await jobs.get("tick")
    assert found is not None and (found.generation, found.job.id) == (2, second.job.id)
    starts.log.append("put returned")
    await fire_for(parts, 3)
    assert second.job.id in starts.after("put returned") and first.job.id not in starts.after("put returned")


class CreateMeetsItself(MemoryStore):
    """The next entry create lands and answers ``AlreadyExists``, as on Azure when its answer is
    lost and the retried request finds the entry it made."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = True

    async def write_metadata_many(self, writes: Sequence[MetadataWrite]) -> WriteOutcomes:
        outcomes = await super().write_metadata_many(writes)
        if not self.armed:
            return outcomes
        self.armed = False
        return [LogExists(f"{w.name}: landed, its answer lost") if w.create and isinstance(o, str) else o
                for w, o in zip(writes, outcomes, strict=True)]


async def test_a_put_whose_entry_create_landed_unanswered_returns_and_keeps_its_job() -> None:
    """Found by the simulation, seed 120113: the put took its own landed create for another put's,
    cancelled its job and raised ``AlreadyExists``, while the name pointed at that job; its
    attempt, sent ahead before the cancel by a silo killed since, started all the same."""
    jobs, submitter = await jobs_on(CreateMeetsItself())
    put = await jobs.put("tick", target=PUT_TARGET, due_time=DUE)
    assert submitter.cancelled == []
    found = await jobs.get("tick")
    assert found is not None and (found.generation, found.job.id) == (1, put.job.id)
