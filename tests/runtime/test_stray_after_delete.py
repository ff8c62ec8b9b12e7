"""The job of an overwrite left in doubt is refused once its name was deleted and put anew, not
deferred for good (simulator seed 71301 with named jobs), without Ray."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from cluster.model.errors import PutInDoubt
from cluster.model.jobs import ScheduledJob
from cluster.named.registry import REGISTRY_PREFIX
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import ShardState
from storage import Unavailable, read_log
from tests.named.test_fence import TARGET, fire_for, start
from tests.named.test_put_lost_answer import LosesAnAnswer


class FailsAnEntryWrite(LosesAnAnswer):
    """The store as the caller sees it: its next entry write fails, not landed."""

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        if name.startswith(REGISTRY_PREFIX) and not self.failed:
            self.failed = True
            raise Unavailable(f"{name}: the store did not answer")
        return await self._store.set_metadata(name, metadata, if_match)

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        return await self._store.create(name, metadata)


async def test_an_overwrite_left_in_doubt_is_removed_once_its_name_is_deleted_and_put_anew() -> None:
    """Its job (generation 2) landed, its entry write failed; a delete then cancelled what the
    entry named, and a new put made generation 1 of the name again. The fence took the lower
    generation for the overwrite still under way and deferred the job: it stayed live in its
    shard, asked again every second for good, though no put could ever point the name at it."""
    parts, jobs, starts = await start()
    await jobs.put("b", target=TARGET, schedule="@every 1h")
    jobs._stores[id(asyncio.get_running_loop())] = doubtful = FailsAnEntryWrite(parts.store)
    jobs._writers.clear()  # the next put writes through the store above
    submitted: list[ScheduledJob] = []
    submit = jobs.client.submit_jobs

    async def noting(batch: list[ScheduledJob]) -> list[ScheduledJob]:
        submitted.extend(landed := await submit(batch))
        return landed

    jobs.client.submit_jobs = noting  # type: ignore[method-assign]
    with pytest.raises(PutInDoubt):
        await jobs.put("b", target=TARGET, due_time="1s", overwrite=True)
    assert doubtful.failed
    (stray,) = [job.id for job in submitted]
    jobs.client.submit_jobs = submit  # type: ignore[method-assign]
    assert await jobs.delete("b")
    again = await jobs.put("b", target=TARGET, schedule="@every 1h")
    assert again.generation == 1
    await fire_for(parts, 5)
    assert stray not in starts.log
    assert stray not in await live(parts), "the overwrite's job is still live, deferred for good"


async def live(parts: Roles) -> set[str]:
    """The jobs live in the silo's shards, as their logs say."""
    found: set[str] = set()
    for shard in parts.shards:
        found |= set(ShardState().replay((await read_log(parts.store, shard.base)).records()).live)
    return found
