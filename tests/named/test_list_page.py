"""``client.jobs.list_page`` and ``count``: server-side pages of a scope that read only their own jobs.

No Ray: entries and definitions are written as ``put`` writes them (``write_definition``, then
the entry by ``store.create``), without scheduling anything into a shard.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from cluster import Target
from cluster.client import Client
from cluster.model.errors import ValidationError
from cluster.model.jobs import ScheduledJob, new_job_id
from cluster.model.options import ENTRIES_REGISTRY, ClusterOptions
from cluster.model.wire import datetime_to_us
from cluster.named.api import NamedJobs
from cluster.named.registry import NAMED_MARK, Entry, JobStatus, entry_key, scope_prefix
from cluster.named.writes import write_definition
from storage import Store

T0 = datetime.now(timezone.utc).replace(microsecond=0)


@pytest.fixture
async def jobs() -> NamedJobs:
    # Names in per-name entries, written here as ``put`` writes them; the buckets' pages are
    # ``test_bucket_reads``.
    return NamedJobs(Client("ns", [], ClusterOptions(named_registry=ENTRIES_REGISTRY)), store_url="memory://")


async def seed(store: Store, name: str, *, namespace: str = "default", app_id: str = "default",
               status: JobStatus | None = None) -> Entry:
    """Write the registry entry and definition of ``name`` as ``put`` leaves them."""
    key = entry_key(namespace, app_id, name)
    job = ScheduledJob.create(Target.actor("h", "apps"), name, due=T0 + timedelta(minutes=5), schedule="@every 1m",
                              metadata={NAMED_MARK: key}, now=T0)
    job = replace(job, id=new_job_id(), generation=1, shard="shard-0")
    await write_definition(store, job)
    entry = Entry(key, "", 1, job.id, "shard-0", datetime_to_us(job.first_fire), datetime_to_us(T0),
                  status or JobStatus(next_fire=job.first_fire))
    etag = await store.create(key, entry.metadata())
    return replace(entry, etag=etag)


async def walk(jobs: NamedJobs, prefix: str = "", limit: int = 50, **scope: str) -> list[list[str]]:
    page = await jobs.list_page(prefix, limit=limit, **scope)
    pages = [[j.name for j in page.items]]
    while page.next is not None:
        assert len(pages) < 100
        page = await jobs.list_page(prefix, after=page.next, limit=limit, **scope)
        pages.append([j.name for j in page.items])
    return pages


async def test_pages_cover_the_scope_in_order_and_agree_with_list(jobs: NamedJobs) -> None:
    store = await jobs._store()
    names = [f"job-{i:03d}" for i in range(23)] + ["other"]
    for name in names:
        await seed(store, name)
    await seed(store, "job-999", app_id="elsewhere")  # another scope: never listed here
    await seed(store, "job-998", namespace="ns2")
    assert await walk(jobs, "job-", 10) == [names[:10], names[10:20], names[20:23]]
    assert sum(await walk(jobs, "", 7), []) == [j.name for j in await jobs.list()]
    page = await jobs.list_page("job-01", limit=3)
    assert ([j.name for j in page.items], page.next) == (["job-010", "job-011", "job-012"], "job-012")
    job = page.items[0]
    assert (job.namespace, job.app_id, job.generation, job.job.shard) == ("default", "default", 1, "shard-0")
    assert job.status.next_fires  # computed from the definition, as list and get do
    assert await jobs.count("job-") == 23 and await jobs.count() == 24
    assert await jobs.count(app_id="elsewhere") == 1 and await jobs.count("x") == 0


async def test_a_page_reads_only_its_own_definitions(jobs: NamedJobs, monkeypatch: pytest.MonkeyPatch) -> None:
    store = await jobs._store()
    for i in range(40):
        await seed(store, f"job-{i:03d}")
    read: list[str] = []
    original = store.fetch

    async def counted(name: str, offset: int = 0) -> Any:
        read.append(name)
        return await original(name, offset)

    monkeypatch.setattr(store, "fetch", counted)
    page = await jobs.list_page(after="job-020", limit=5)
    assert [j.name for j in page.items] == [f"job-{i:03d}" for i in range(21, 26)]
    assert sorted(read) == sorted(f"named-defs/{j.job.id}" for j in page.items)
    read.clear()
    assert await jobs.count() == 40 and read == []


async def test_entries_of_a_sub_scope_are_left_out_and_the_page_still_fills(jobs: NamedJobs) -> None:
    store = await jobs._store()
    for name in ("a", "b", "c", "d"):
        await seed(store, name)
    base = scope_prefix("default", "default")
    for junk in ("a/x", "a/y", "b/z"):  # not an entry of this scope (names cannot hold '/')
        await store.create(base + junk, {})
    assert await walk(jobs, limit=2) == [["a", "b"], ["c", "d"]]
    assert await jobs.count() == 4


async def test_a_job_replaced_while_it_is_listed_shows_its_new_generation(jobs: NamedJobs) -> None:
    store = await jobs._store()
    for name in ("a", "b", "c"):
        await seed(store, name)
    entry = await seed(store, "b2")
    # "b2" is replaced by a put: new definition, entry pointing at it, old definition deleted.
    await store.delete(f"named-defs/{entry.job_id}", None)
    await store.delete(entry.key, None)
    newer = await seed(store, "b2")
    real = store.list_page

    async def stale_page(prefix: str = "", *, after: str | None = None, limit: int) -> Any:
        page = await real(prefix, after=after, limit=limit)
        # The listing was taken before the put: it still names the old generation.
        infos = tuple(i._replace(metadata=entry.metadata()) if i.name == entry.key else i for i in page.infos)
        return type(page)(infos, page.next)

    real_list = store.list

    async def stale_list(prefix: str = "") -> Any:
        return [i._replace(metadata=entry.metadata()) if i.name == entry.key else i for i in await real_list(prefix)]

    store.list_page = stale_page  # type: ignore[method-assign]
    store.list = stale_list  # type: ignore[method-assign]
    page = await jobs.list_page(limit=10)
    assert [(j.name, j.job.id) for j in page.items if j.name == "b2"] == [("b2", newer.job_id)]
    # list() reads it again too, rather than leaving a job that exists out of the listing.
    assert [(j.name, j.job.id) for j in await jobs.list() if j.name == "b2"] == [("b2", newer.job_id)]
    await store.delete(newer.key, None)  # and a job deleted meanwhile is left out
    assert [j.name for j in (await jobs.list_page(limit=10)).items] == ["a", "b", "c"]
    assert [j.name for j in await jobs.list()] == ["a", "b", "c"]


BAD_PAGES: list[tuple[str, dict[str, Any]]] = [
    ("limit", {"limit": 0}),
    ("limit", {"limit": 1001}),
    ("limit", {"limit": True}),
    ("limit", {"limit": "5"}),
    ("prefix", {"prefix": "a/b"}),
    ("prefix", {"prefix": "x" * 129}),
    ("after", {"after": ""}),
    ("after", {"after": "a?b"}),
    ("after", {"after": "é" * 60}),  # valid as text, too long once escaped
    ("namespace", {"namespace": ""}),
    ("app_id", {"app_id": "\n"}),
]


@pytest.mark.parametrize("field,kwargs", BAD_PAGES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_PAGES)])
async def test_bad_page_arguments_name_the_field(jobs: NamedJobs, field: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        await jobs.list_page(**kwargs)
    assert info.value.field == field
    if field in ("prefix", "namespace", "app_id"):
        with pytest.raises(ValidationError) as counted:
            await jobs.count(**kwargs)
        assert counted.value.field == field
