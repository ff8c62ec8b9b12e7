"""A put whose write to the name's entry landed while its answer was lost, without Ray: the
store's retry of that write is refused by the write itself (issue 25, point 6: simulator
seeds 818 and 142700). What the caller is told must match what runs."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from cluster.model.errors import PutInDoubt
from cluster.named.api import NamedJobs
from cluster.named.registry import REGISTRY_PREFIX
from cluster.runtime.roles import Roles
from storage import AlreadyExists, Fenced, LogInfo, Store, Unavailable
from storage.base import Appended, Fetched, LogStat, ServerTime
from tests.named.test_fence import TARGET, fire_for, start


class LosesAnAnswer(Store):
    """The silos' store as one caller sees it: its next entry write lands and answers as the
    store's retry of it is answered (``AlreadyExists`` for a create, ``Fenced`` for a
    compare-and-swap); ``then_fails``: the entry write after that fails without landing;
    ``blind``: entry reads fail from then on."""

    def __init__(self, store: Store, *, then_fails: bool = False, blind: bool = False) -> None:
        self._store = store
        self.then_fails, self.blind = then_fails, blind
        self.lost = False

    def _after_loss(self, name: str) -> None:
        if name.startswith(REGISTRY_PREFIX) and self.lost and self.then_fails:
            self.then_fails = False
            raise Unavailable(f"{name}: the store did not answer")

    def _lose(self, name: str, refusal: type[Exception]) -> None:
        if name.startswith(REGISTRY_PREFIX) and not self.lost:
            self.lost = True
            raise refusal(f"{name}: landed, its answer lost, its retry refused")

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        self._after_loss(name)
        etag = await self._store.set_metadata(name, metadata, if_match)
        self._lose(name, Fenced)
        return etag

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        self._after_loss(name)
        etag = await self._store.create(name, metadata)
        self._lose(name, AlreadyExists)
        return etag

    async def stat(self, name: str) -> LogStat:
        if self.blind and self.lost and name.startswith(REGISTRY_PREFIX):
            raise Unavailable(f"{name}: the store did not answer")
        return await self._store.stat(name)

    async def list(self, prefix: str = "") -> list[LogInfo]:
        return await self._store.list(prefix)

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        return await self._store.append_block(name, payload, if_match)

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        return await self._store.fetch(name, offset)

    async def delete(self, name: str, if_match: str | None) -> None:
        await self._store.delete(name, if_match)

    async def server_time(self) -> ServerTime | None:
        return await self._store.server_time()


def lossy(parts: Roles, jobs: NamedJobs, **faults: bool) -> LosesAnAnswer:
    """Make ``jobs`` see the silos' store through ``LosesAnAnswer`` from its next call on."""
    loop = id(asyncio.get_running_loop())
    store = jobs._stores[loop] = LosesAnAnswer(parts.store, **faults)
    jobs._writers.pop(loop, None)  # its writer holds the store it was made with
    return store


async def test_an_overwrite_whose_entry_write_landed_unanswered_keeps_the_job_it_points_at() -> None:
    """The put took its own landed write for another put's win: it cancelled the job the name
    now pointed at, then failed its next try. The name was left pointing at nothing that runs,
    and ``get`` raised ``Fenced`` until the next put."""
    parts, jobs, starts = await start()
    first = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    store = lossy(parts, jobs, then_fails=True)
    second = await jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True)
    assert store.lost
    found = await jobs.get("tick")
    assert found is not None and (found.generation, found.job.id) == (2, second.job.id)
    starts.log.append("put returned")
    await fire_for(parts, 3)
    assert second.job.id in starts.after("put returned") and first.job.id not in starts.after("put returned")


async def test_a_new_name_whose_entry_create_landed_unanswered_is_put_not_refused() -> None:
    """The put took the refusal of its own create's retry for another put holding the name: it
    raised ``AlreadyExists`` while the name pointed at its job, which ran when its cancel
    failed (simulator seed 142700)."""
    parts, jobs, starts = await start()
    store = lossy(parts, jobs)
    put = await jobs.put("report", target=TARGET, schedule="@every 1s")
    assert store.lost and put.generation == 1
    found = await jobs.get("report")
    assert found is not None and found.job.id == put.job.id
    starts.log.append("put returned")
    await fire_for(parts, 3)
    assert starts.after("put returned").count(put.job.id) >= 2


async def test_a_refused_entry_write_that_cannot_be_read_again_raises_put_in_doubt() -> None:
    """Whose write refused this one is unknown, and it may be this put's own: the put may have
    landed, so the caller is told so, never that nothing was put (a plain store error)."""
    parts, jobs, starts = await start()
    store = lossy(parts, jobs, blind=True)
    with pytest.raises(PutInDoubt):
        await jobs.put("report", target=TARGET, schedule="@every 1s")
    starts.log.append("put raised")
    store.blind = False
    found = await jobs.get("report")
    assert found is not None  # it had landed: the doubt was real
    await fire_for(parts, 3)
    assert found.job.id in starts.after("put raised")
