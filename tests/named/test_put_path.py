"""The write path of ``client.jobs.put`` and ``put_many`` (issue 25 point 2), without Ray.

What a caller relies on: concurrent puts share their writes (group commit) yet each gets its
own generation; a definition is stored once; bad input writes nothing; a put that fails says
whether it may have landed and never leaves a half-made job visible; a store written by the
earlier put path keeps working.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from cluster import Target
from cluster.model.errors import (
    AlreadyExists,
    ClusterUnavailable,
    PutInDoubt,
    PutManyFailed,
    ScheduleInDoubt,
    ValidationError,
)
from cluster.model.jobs import ScheduledJob
from cluster.named.api import NamedJobs
from cluster.named.registry import entry_key, read_entry
from storage import MemoryStore, MetadataWrite, Store, Unavailable
from storage.base import WriteOutcomes
from tests.named.test_list_page import seed

TARGET = Target.actor("mailer", "apps")
DUE = datetime.now(timezone.utc) + timedelta(days=1)


class Submitter:
    """Stands in for the cluster: jobs are durable at once in shard ``s``; cancels are noted."""

    def __init__(self) -> None:
        self.submitted: list[ScheduledJob] = []
        self.calls = 0
        self.cancelled: list[str] = []
        self.fail: BaseException | None = None

    async def describe(self) -> dict[str, Any]:
        return {"store_url": "memory://"}

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        self.calls += 1
        await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        self.submitted.extend(jobs)
        return [dataclasses.replace(j, shard="s") for j in jobs]

    def resolve_target(self, target: Target) -> Target:
        return target

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        self.cancelled.append(job.id)
        return True


class Counting(MemoryStore):
    """A memory store counting batch writes; ``lose`` makes the next batch's writes fail
    without being made (``landed=False``) or after being made (``landed=True``)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []
        self.lose: bool | None = None

    async def write_metadata_many(self, writes: Sequence[MetadataWrite]) -> WriteOutcomes:
        self.batches.append(len(writes))
        lose, self.lose = self.lose, None
        if lose is None:
            return await super().write_metadata_many(writes)
        if lose:
            await super().write_metadata_many(writes)
        return [Unavailable("the answer was lost") for _ in writes]


async def jobs_on(store: Store, submitter: Submitter | None = None) -> tuple[NamedJobs, Submitter]:
    submitter = submitter or Submitter()
    jobs = NamedJobs(submitter, store_url="memory://")
    jobs._stores[id(asyncio.get_running_loop())] = store
    return jobs, submitter


async def test_concurrent_puts_share_their_writes_and_each_gets_its_job() -> None:
    store = Counting()
    jobs, submitter = await jobs_on(store)
    put = await asyncio.gather(*(jobs.put(f"n-{i}", target=TARGET, due_time=DUE, data=i) for i in range(64)))
    assert len(store.batches) <= 2 and submitter.calls <= 2  # one round (two if a tick splits them)
    assert sorted(j.job.id for j in put) == sorted(j.id for j in submitter.submitted)
    for i in range(64):
        got = await jobs.get(f"n-{i}")
        assert got is not None and got.generation == 1 and got.job.id == put[i].job.id and got.job.data == i


async def test_a_small_definition_is_stored_once_and_a_large_one_in_named_defs() -> None:
    store = MemoryStore()
    jobs, _ = await jobs_on(store)
    await jobs.put("small", target=TARGET, schedule="@every 1h", data={"to": "ops"})
    assert await store.names("named-defs/") == ()  # in the entry, written with it
    got = await jobs.get("small")
    assert got is not None and got.job.data == {"to": "ops"} and got.job.schedule is not None
    big = await jobs.put("big", target=TARGET, due_time=DUE, data="x" * 20_000)
    assert await store.names("named-defs/") == (f"named-defs/{big.job.id}",)
    got = await jobs.get("big")
    assert got is not None and got.job.data == "x" * 20_000
    await jobs.put("big", target=TARGET, due_time=DUE, data="small now", overwrite=True)
    assert await store.names("named-defs/") == ()  # the old generation's, deleted before put returned


async def test_put_many_validates_every_spec_before_writing_anything() -> None:
    store = MemoryStore()
    jobs, submitter = await jobs_on(store)
    good = [{"name": f"n-{i}", "target": TARGET, "due_time": DUE} for i in range(3)]
    with pytest.raises(ValidationError) as caught:
        await jobs.put_many([*good, {"name": "bad", "target": TARGET, "schedule": "every tuesday"}])
    assert caught.value.field == "specs[3].schedule"
    with pytest.raises(ValidationError) as caught:
        await jobs.put_many([*good, {"name": "n-1", "target": TARGET, "due_time": DUE}])
    assert caught.value.field == "specs[3].name"
    with pytest.raises(ValidationError):
        await jobs.put_many([*good, {"name": "x", "target": TARGET, "due_time": DUE, "colour": "red"}])
    assert submitter.submitted == [] and await store.names() == ()


async def test_put_many_keys_each_spec_in_its_own_scope_and_names_a_bad_one() -> None:
    """A call checks each (namespace, app_id) once and reuses it: each job still lands under its
    own scope's key, with an id of its own, and a bad scope is still named with its spec."""
    store = MemoryStore()
    jobs, _ = await jobs_on(store)
    scopes = [("default", "default"), ("ns-a", "default"), ("default", "app-b"), ("ns-a", "app-b")]
    specs = [{"name": f"n-{i}", "target": TARGET, "due_time": DUE, "namespace": ns, "app_id": app}
             for i in range(8) for ns, app in [scopes[i % 4]]]
    put = await jobs.put_many(specs)
    assert [(j.namespace, j.app_id) for j in put] == [scopes[i % 4] for i in range(8)]
    assert len({j.job.id for j in put}) == 8 and all(len(j.job.id) == 32 for j in put)
    for i, (ns, app) in enumerate(scopes * 2):
        got = await jobs.get(f"n-{i}", namespace=ns, app_id=app)
        assert got is not None and got.job.id == put[i].job.id
        assert await jobs.get(f"n-{i}", namespace=ns, app_id="other") is None
    for bad, field in (({"namespace": "a\nb"}, "specs[2].namespace"), ({"app_id": ""}, "specs[2].app_id"),
                       ({"namespace": ["x"]}, "specs[2].namespace")):
        with pytest.raises(ValidationError) as caught:
            await jobs.put_many([*specs[:2], {**specs[2], "name": "other", **bad}])
        assert caught.value.field == field


async def test_put_many_puts_each_job_and_names_the_ones_it_could_not_put() -> None:
    store = MemoryStore()
    jobs, _ = await jobs_on(store)
    taken = await jobs.put("n-1", target=TARGET, due_time=DUE)
    specs = [{"name": f"n-{i}", "target": TARGET, "due_time": DUE, "data": i} for i in range(4)]
    with pytest.raises(PutManyFailed) as caught:
        await jobs.put_many(specs)
    assert set(caught.value.put) == {"n-0", "n-2", "n-3"}
    assert isinstance(caught.value.errors["n-1"], AlreadyExists)
    got = await jobs.get("n-1")
    assert got is not None and got.job.id == taken.job.id  # untouched
    put = await jobs.put_many([{**s, "overwrite": True} for s in specs])
    assert [j.name for j in put] == [f"n-{i}" for i in range(4)] and put[1].generation == 2


async def test_a_put_whose_entry_write_went_unanswered_says_it_is_in_doubt() -> None:
    store = Counting()
    jobs, _ = await jobs_on(store)
    store.lose = False  # refused unseen: the name does not point at the new job
    with pytest.raises(PutInDoubt) as caught:
        await jobs.put("lost", target=TARGET, due_time=DUE)
    assert caught.value.name == "lost" and not caught.value.landed
    assert await jobs.get("lost") is None  # nothing half-made: no entry at all
    store.lose = True  # made, but its answer lost: read again, it is the put's own job
    put = await jobs.put("landed", target=TARGET, due_time=DUE)
    got = await jobs.get("landed")
    assert got is not None and got.job.id == put.job.id


async def test_a_put_whose_job_could_not_be_scheduled_leaves_nothing_visible() -> None:
    store = MemoryStore()
    jobs, submitter = await jobs_on(store)
    submitter.fail = ScheduleInDoubt("the silo died mid-append", {"x": "s"})
    with pytest.raises(ClusterUnavailable):  # not PutInDoubt: no entry can point at that job
        await jobs.put("never", target=TARGET, due_time=DUE)
    assert await jobs.get("never") is None and await store.names() == ()


async def test_overwrites_of_one_name_from_one_process_are_ordered_and_cancel_what_they_replace() -> None:
    store = MemoryStore()
    jobs, submitter = await jobs_on(store)
    first = await jobs.put("same", target=TARGET, due_time=DUE)
    put = await asyncio.gather(*(jobs.put("same", target=TARGET, due_time=DUE, data=i, overwrite=True)
                                 for i in range(5)))
    assert sorted(j.generation for j in put) == [2, 3, 4, 5, 6]
    last = max(put, key=lambda j: j.generation)
    entry = await read_entry(store, entry_key("default", "default", "same"))
    assert entry is not None and entry.job_id == last.job.id and entry.retire == ()
    assert set(submitter.cancelled) == {first.job.id} | {j.job.id for j in put if j is not last}


async def test_a_store_written_by_the_earlier_put_path_keeps_working() -> None:
    store = MemoryStore()
    jobs, _ = await jobs_on(store)
    old = await seed(store, "legacy")  # entry plus named-defs/<id>, as put wrote them before
    got = await jobs.get("legacy")
    assert got is not None and got.job.id == old.job_id and got.job.schedule is not None
    put = await jobs.put("legacy", target=TARGET, due_time=DUE, overwrite=True)
    assert put.generation == 2
    assert await store.names("named-defs/") == ()  # the old definition went with its generation
    await seed(store, "legacy-2")
    assert await jobs.delete("legacy-2") and await store.names("named-defs/") == ()


async def test_deletes_share_the_rounds_of_puts_and_cancel_every_job_they_name() -> None:
    store = Counting()
    jobs, submitter = await jobs_on(store)
    old = await asyncio.gather(*(jobs.put(f"n-{i}", target=TARGET, due_time=DUE) for i in range(10)))
    again = await jobs.put("n-0", target=TARGET, due_time=DUE, overwrite=True)
    store.batches.clear()
    deleted = await asyncio.gather(*(jobs.delete(f"n-{i}") for i in range(10)),
                                   *(jobs.put(f"m-{i}", target=TARGET, due_time=DUE) for i in range(10)))
    assert deleted[:10] == [True] * 10 and len(store.batches) <= 2
    assert {j.job.id for j in old} | {again.job.id} <= set(submitter.cancelled)
    assert [await jobs.get(f"n-{i}") for i in range(10)] == [None] * 10
    assert None not in [await jobs.get(f"m-{i}") for i in range(10)]
    assert await jobs.delete("never-put") is False


async def test_a_put_then_a_delete_of_one_name_in_one_tick_leave_it_deleted() -> None:
    jobs, submitter = await jobs_on(MemoryStore())
    put, deleted = await asyncio.gather(jobs.put("x", target=TARGET, due_time=DUE), jobs.delete("x"))
    assert deleted is True and await jobs.get("x") is None and put.job.id in submitter.cancelled


def test_an_inline_definition_and_the_longest_status_still_fit_azures_metadata() -> None:
    from cluster.named.registry import INLINE_DEFINITION_CHARS, Entry, JobStatus
    from storage.base import check_metadata
    from tests.named.test_history import recurring, run_attempts

    status = run_attempts(JobStatus(), recurring(), 20, size=20, error="\u00e9" * 600)  # 6 bytes a character, escaped
    entry = Entry("names/default/default/nightly", "", 1, "j" * 26, "shards/x", 1, 2, status,
                  definition="A" * INLINE_DEFINITION_CHARS)
    check_metadata(entry.metadata())  # raises past 8 KiB
    kept = Entry.from_metadata(entry.key, entry.metadata(), "e").status.history
    assert kept and kept[0] == status.history[0]  # the oldest went first, the newest stays


async def test_a_caller_that_stops_waiting_does_not_fail_the_others_of_its_round() -> None:
    class Gated(MemoryStore):
        gate: asyncio.Event | None = None

        async def write_metadata_many(self, writes: Sequence[MetadataWrite]) -> WriteOutcomes:
            if self.gate is not None:
                await self.gate.wait()  # the round is under way: its callers wait here
            return await super().write_metadata_many(writes)

    store = Gated()
    jobs, _ = await jobs_on(store)
    await asyncio.gather(*(jobs.put(f"n-{i}", target=TARGET, due_time=DUE) for i in range(4)))
    store.gate = asyncio.Event()
    impatient = asyncio.ensure_future(jobs.delete("n-0"))
    others = asyncio.gather(*(jobs.delete(f"n-{i}") for i in range(1, 4)),
                            *(jobs.put(f"m-{i}", target=TARGET, due_time=DUE) for i in range(4)))
    for _ in range(20):
        await asyncio.sleep(0)
    impatient.cancel()
    store.gate.set()
    done = await others
    assert done[:3] == [True, True, True] and all(j.generation == 1 for j in done[3:])
