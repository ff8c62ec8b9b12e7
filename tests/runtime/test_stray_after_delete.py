"""The job of an overwrite left in doubt is refused once its name was deleted and put anew, not
deferred for good (simulator seed 71301 with named jobs), without Ray."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from cluster.model.errors import PutInDoubt
from cluster.model.jobs import ScheduledJob
from cluster.model.wire import datetime_to_us
from cluster.named.registry import NAMED_MARK, REGISTRY_PREFIX, REPLACES_MARK, Entry, JobStatus, read_entry
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import ShardState
from storage import Store, Unavailable, read_log
from tests.named.test_fence import TARGET, fire_for, start
from tests.named.test_put_lost_answer import LosesAnAnswer


class FailsAnEntryWrite(LosesAnAnswer):
    """The store as the caller sees it: its next entry write fails, not landed."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.failed = False

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


async def test_an_overwrite_due_before_it_points_the_name_at_its_job_waits_and_then_runs() -> None:
    """The other side of the rule above: while the entry still names the job an overwrite
    replaces, that overwrite may still point the name at its job, which must wait, not go."""
    parts, jobs, starts = await start()
    first = await jobs.put("late", target=TARGET, schedule="@every 1h")
    job = ScheduledJob.create(TARGET, "late", due=timedelta(seconds=1), now=datetime.now(timezone.utc),
                              metadata={**first.job.metadata, REPLACES_MARK: first.job.id})
    job = replace(job, generation=2)
    (job,) = await jobs.client.submit_jobs([job])
    await fire_for(parts, 2)  # due, the name not pointed at it yet
    assert job.id not in starts.log
    assert job.id in await live(parts), "refused while its put could still point the name at it"
    entry = await read_entry(parts.store, first.job.metadata[NAMED_MARK])
    assert entry is not None
    pointed = Entry(entry.key, "", 2, job.id, job.shard or "", datetime_to_us(job.due), 0, JobStatus(next_fire=job.due),
                    (entry.retired(),))
    await parts.store.set_metadata(entry.key, pointed.metadata(), entry.etag)  # its compare-and-swap, now
    await fire_for(parts, 2)
    assert job.id in starts.log
