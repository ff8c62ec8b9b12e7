"""A file store written by timeshard before puts were group-committed keeps working (issue 25).

``fixtures/store-at-b5caeec`` was written by ``fixtures/make_store.py`` at main b5caeec: every
definition in ``named-defs/``, a ``.log`` and a ``.lock`` per log, a ``.lock`` leaked per
deleted log, and an entry still retiring an older generation (its put's caller died before the
cancel). Opened by this version (a copy, in a scratch folder), every job reads as it was
put, and overwrites, deletes and new puts work, leaving no definition and no lock file behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path

from cluster import Target
from cluster.model.jobs import ScheduledJob
from cluster.named.api import NamedJobs

FIXTURE = Path(__file__).parent / "fixtures" / "store-at-b5caeec"
TARGET = Target.actor("mailer", "apps")


class Submitter:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    async def describe(self) -> dict[str, str]:
        return {}

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        return [dataclasses.replace(j, shard="shards/now") for j in jobs]

    def resolve_target(self, target: Target) -> Target:
        return target

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        self.cancelled.append(job.id)
        return True


def orphan_locks(root: Path) -> set[str]:
    """Lock files of logs that are gone (the store's own ``.layout.lock`` is no log's)."""
    return {p.name for p in root.rglob("*.lock") if not p.with_suffix(".meta").exists() and not p.name.startswith(".")}


async def test_a_store_written_before_group_commit_reads_and_takes_new_writes(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(FIXTURE, root)
    leaked_before = orphan_locks(root)
    submitter = Submitter()
    jobs = NamedJobs(submitter, store_url=f"file://{root}")
    plain, big, twice = await jobs.get("plain"), await jobs.get("big"), await jobs.get("twice")
    assert plain is not None and plain.job.data == {"to": "ops"} and plain.metadata == {"team": "a"}
    assert plain.job.schedule is not None and plain.job.schedule.text == "@every 1h"
    assert big is not None and big.job.data == "x" * 20_000
    assert twice is not None and twice.generation == 2 and twice.job.data == 2
    assert await jobs.get("deleted") is None
    assert [j.name for j in await jobs.list()] == ["big", "cut", "plain", "twice"]
    cut = await jobs.get("cut")
    assert cut is not None and cut.generation == 2 and cut.job.data == 2
    other = await jobs.get("other", app_id="billing")
    assert other is not None and other.job.due.year == 2099

    replaced = await jobs.put("big", target=TARGET, due_time="2099-01-02T00:00:00Z", data="small", overwrite=True)
    assert replaced.generation == 2 and big.job.id in submitter.cancelled
    assert await jobs.delete("plain")
    assert await jobs.delete("cut")  # cancels the retired generation too, and deletes its definition
    assert cut.job.id in submitter.cancelled and len(submitter.cancelled) == 4
    fresh = await asyncio.gather(*(jobs.put(f"new-{i}", target=TARGET, due_time="2099-01-01T00:00:00Z")
                                   for i in range(5)))
    assert [j.generation for j in fresh] == [1] * 5
    assert [j.name for j in await jobs.list()] == ["big", "new-0", "new-1", "new-2", "new-3", "new-4", "twice"]
    got = await jobs.get("big")
    assert got is not None and got.job.data == "small"
    # The old definitions of "big", "plain" and both of "cut" went with their generations, lock files too.
    defs = {p.name for p in root.rglob("named-defs*.meta")}
    assert defs == {f"named-defs%2F{j.job.id}.meta" for j in (twice, other)}
    assert leaked_before and orphan_locks(root) == set()  # moved into the new layout without them; none leaked since
    await jobs.close()
