"""A store whose names were kept in per-name entries, opened with registry buckets (issue 25 point 5.6), without Ray.

``named_registry="buckets"`` (the default). What a user switching over relies on: every
job put before is there (``get``, ``list``, ``count``), still fires, and an overwrite or delete
still cancels it; the switch is made once (a later owner does not take the old names in again,
so a name deleted on the buckets stays deleted). On the memory and the file store, and on the
file store written at main b5caeec (``fixtures/store-at-b5caeec``: definitions in
``named-defs/``, an entry still retiring an older generation).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cluster.named.bucket import bucket_base
from storage import list_logs
from tests.named.bucket_cluster import BUCKET_OPTIONS, TARGET, Cluster
from tests.named.test_old_store import FIXTURE
from tests.runtime.harness import OPTIONS

STORES = ["memory", "file"]


@pytest.mark.parametrize("kind", STORES)
async def test_jobs_put_with_entries_are_there_fire_and_are_replaced_once_the_cluster_keeps_names_in_buckets(
        kind: str, tmp_path: Path) -> None:
    before = await Cluster.start(kind, tmp_path, silos=("a",), options=OPTIONS)  # names in entries, as today
    old = before.jobs()
    tick = await old.put("tick", target=TARGET, schedule="@every 1s")
    later = await old.put("later", target=TARGET, schedule="@every 1h", app_id="billing")
    gone = await old.put("gone", target=TARGET, schedule="@every 1h")
    assert await old.delete("gone")
    await before.fire(1)
    assert before.starts.log == [tick.job.id]
    await before.flush_status()

    c = Cluster(before.store, before.clock, BUCKET_OPTIONS)
    c.starts = before.starts
    await c.add("b")
    await before.kill("a")
    await c.maintain()  # b takes every bucket (taking the old names in), and sees a dead
    c.clock.advance(OPTIONS.firing_lease.total_seconds())
    await c.maintain()  # a's lease has run out: its shards are b's
    jobs = c.jobs()
    got = await jobs.get("tick")
    assert got is not None and (got.generation, got.job.id) == (1, tick.job.id) and got.status.successful == 1
    assert [j.job.id for j in await jobs.list(app_id="billing")] == [later.job.id]
    assert await jobs.get("gone") is None and await jobs.count() == 1
    c.starts.log.append("switched")
    await c.fire(2)
    assert c.starts.after("switched").count(tick.job.id) == 2  # cleared by the bucket's owner from what it took in
    assert gone.job.id not in c.starts.log
    new = await jobs.put("tick", target=TARGET, schedule="@every 1s", overwrite=True)
    assert new.generation == 2
    c.starts.log.append("put returned")
    assert await jobs.delete("later", app_id="billing")
    await c.fire(2)
    assert tick.job.id not in c.starts.after("put returned") and new.job.id in c.starts.after("put returned")

    await c.add("d")
    await c.kill("b")  # the next owner replays the buckets: no import again
    await c.maintain()
    jobs = c.jobs()
    assert await jobs.get("later", app_id="billing") is None
    got = await jobs.get("tick")
    assert got is not None and got.job.id == new.job.id
    heads = {h.base: h for h in await list_logs(c.store, "registry/")}
    assert all(heads[bucket_base(n)].metadata.get("imported") == "1" for n in range(4))


async def test_the_store_written_at_b5caeec_reads_on_the_buckets(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(FIXTURE, root)
    c = await Cluster.start("file", tmp_path, silos=("a",), root=root)
    jobs = c.jobs()
    plain, big, twice = await jobs.get("plain"), await jobs.get("big"), await jobs.get("twice")
    assert plain is not None and plain.job.data == {"to": "ops"} and plain.metadata == {"team": "a"}
    assert big is not None and big.job.data == "x" * 20_000  # its definition in named-defs/
    assert twice is not None and twice.generation == 2 and twice.job.data == 2
    assert await jobs.get("deleted") is None
    assert [j.name for j in await jobs.list()] == ["big", "cut", "plain", "twice"] and await jobs.count() == 4
    cut = await jobs.get("cut")
    assert cut is not None and cut.generation == 2
    other = await jobs.get("other", app_id="billing")
    assert other is not None and other.job.due.year == 2099
    replaced = await jobs.put("big", target=TARGET, due_time="2099-01-02T00:00:00Z", data="small", overwrite=True)
    assert replaced.generation == 2
    assert await jobs.delete("cut")  # its entry still retired an older generation: both cancelled
    assert [j.name for j in await jobs.list()] == ["big", "plain", "twice"]
