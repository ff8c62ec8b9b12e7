"""How long the dashboard's named-jobs list takes with many jobs in one scope: paged vs list-then-slice.

    python -m benchmarks.named_listing [--jobs 100000] [--stores file,azure] [--repeat 3]
    python -m benchmarks.named_listing --jobs 1000000 --stores file --before --old-repeat 0
    python -m benchmarks.named_listing --registry buckets --stores memory,file,azure --jobs 1000000 --old-repeat 0 --takeover

Fills one scope with ``--jobs`` named jobs, then times ``GET /api/jobs`` of ``timeshard ui``
(served by aiohttp's test server over the real store) for: the first page, a page deep in (its
cursor 90% of the way; on Azure once as a cursor this store never handed out, "cold", and once
as the next page's, "warm"), a prefix-filtered page (100 matches) and ``count=1``; and the old
path, ``client.jobs.list(prefix)`` then a slice of one page, served the same way.

What is filled: each job's registry entry and definition, written as ``client.jobs.put``
writes them (``write_definition``, then the entry), without Ray and without scheduling the jobs
into shards: the listing reads only the registry and the definitions, so the shards do not
change what is measured. ``--fill put_many`` writes them through ``NamedJobs.put_many`` instead
(definitions inline, as puts write them now; 2,000 a call), and ``--fill entries`` (the default)
writes those entries straight into the registry, 5,000 a ``write_metadata_many``: the way to
1,000,000 in minutes.

Besides the dashboard's requests, each run times the store's own ``list_page(limit=50)`` and
``count`` of the scope, and ``NamedJobs.list_page`` / ``count``. With ``--before`` (file store)
the same figures are taken first on the flat layout every log had until the directory layout
(the ``FileStore`` of commit ``BEFORE``, loaded from git), filled once; then the store is opened
by today's ``FileStore``, which moves it in (timed), and measured again: before and after on the
same names, in one run.

With ``--registry buckets`` the names live where a cluster keeps them by default, in registry
buckets owned by silos (two in-process silos, no Ray; ``benchmarks._bucket_names`` says how a
million names load in a minute or two, with a progress line); stores ``memory``, ``file`` and
``azure``. It checks once that the count is every name and the pages come in name order, then
times ``NamedJobs.list_page`` (first, deep), ``count`` (the scope, a prefix of 100) and the
dashboard's requests, and names the full garbage collections those calls sat through. With
``--takeover``, a new silo then takes every bucket from its log: that time, and its first page
and count. On the file store it prints how many files the store holds and its fullest directory.

Writes only under ``TIMESHARD_BENCH_DIR`` (a scratch directory when
unset); prints its figures and writes nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import gc
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from benchmarks import _bucket_names
from benchmarks._azurite import Azurite
from cluster.cli.job_text import named_job_to_json
from cluster.cli.ui import UiSource, make_app
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.wire import datetime_to_us, pack
from cluster.named.api import NamedJobs
from cluster.named.registry import NAMED_MARK, Entry, JobStatus, entry_key
from cluster.named.writes import write_definition
from storage import AlreadyExists as LogExists
from storage import MemoryStore, MetadataWrite, Store, open_store

PAGE = 50
FILLERS = 64
PUT_MANY = 2000
ENTRIES = 5000
#: The branch point of the directory layout: its FileStore keeps every file flat in the root.
BEFORE = "9844743"
T0 = datetime.now(timezone.utc).replace(microsecond=0)


def job_name(i: int) -> str:
    return f"job-{i:06d}"


async def put_like(store: Store, name: str) -> None:
    """The registry entry and definition ``put`` leaves, without scheduling into a shard."""
    key = entry_key("default", "default", name)
    job = ScheduledJob.create(Target.actor("h", "apps"), name, due=T0 + timedelta(minutes=5), schedule="@every 1m",
                              metadata={NAMED_MARK: key}, now=T0)
    job = replace(job, id=new_job_id(), generation=1, shard="shard-0")
    await write_definition(store, job)
    entry = Entry(key, "", 1, job.id, "shard-0", datetime_to_us(job.first_fire), datetime_to_us(T0),
                  JobStatus(next_fire=job.first_fire))
    await store.create(key, entry.metadata())


class Unscheduled:
    """What ``NamedJobs.put_many`` needs of a cluster, without one: jobs land in a stand-in shard."""

    async def describe(self) -> dict[str, Any]:
        return {}

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        return [dataclasses.replace(j, shard="shards/bench") for j in jobs]

    def resolve_target(self, target: Target) -> Target:
        return target

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        return True


def flat_store(root: Path) -> Store:
    """The ``FileStore`` of ``BEFORE`` (every log's files flat in ``root``), read from git."""
    source = subprocess.run(["git", "show", f"{BEFORE}:storage/file.py"], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parent.parent).stdout
    spec = importlib.util.spec_from_loader("storage._file_before", loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "storage"
    sys.modules[spec.name] = module
    exec(compile(source, f"storage/file.py at {BEFORE}", "exec"), module.__dict__)  # noqa: S102  our own code, from git
    store: Store = module.FileStore(root)
    return store


async def fill_put_many(jobs: NamedJobs, count: int) -> None:
    started = time.perf_counter()
    due = T0 + timedelta(days=30)
    for start in range(0, count, PUT_MANY):
        await jobs.put_many([{"name": job_name(i), "target": Target.actor("h", "apps"), "due_time": due}
                             for i in range(start, min(count, start + PUT_MANY))])
        done = min(count, start + PUT_MANY)
        if done % max(PUT_MANY, count // 20) < PUT_MANY or done == count:
            rate = done / (time.perf_counter() - started)
            print(f"\r  filling: {done}/{count} jobs ({rate:.0f}/s)", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)


def inline_entry(name: str) -> MetadataWrite:
    """The registry entry a put writes now (its definition inline), as one write of a batch."""
    key = entry_key("default", "default", name)
    job = ScheduledJob.create(Target.actor("h", "apps"), name, due=T0 + timedelta(minutes=5), schedule="@every 1m",
                              metadata={NAMED_MARK: key}, now=T0)
    job = replace(job, id=new_job_id(), generation=1, shard="shard-0")
    packed = base64.b64encode(pack(job.to_wire())).decode("ascii")
    entry = Entry(key, "", 1, job.id, "shard-0", datetime_to_us(job.first_fire), datetime_to_us(T0),
                  JobStatus(next_fire=job.first_fire), (), packed)
    return MetadataWrite(key, entry.metadata(), create=True)


async def fill_entries(store: Store, count: int) -> None:
    started = time.perf_counter()
    for start in range(0, count, ENTRIES):
        outcomes = await store.write_metadata_many([inline_entry(job_name(i))
                                                    for i in range(start, min(count, start + ENTRIES))])
        # AlreadyExists: a create retried after a lost answer (Azure) finds its own first try.
        failed = [o for o in outcomes if not isinstance(o, str | LogExists)]
        assert not failed, failed[:3]
        done = min(count, start + ENTRIES)
        if done % max(ENTRIES, count // 20) < ENTRIES or done == count:
            rate = done / (time.perf_counter() - started)
            print(f"\r  filling: {done}/{count} jobs ({rate:.0f}/s)", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)


async def fill(store: Store, count: int) -> None:
    limit = asyncio.Semaphore(FILLERS)
    done = 0
    started = time.perf_counter()

    async def one(i: int) -> None:
        nonlocal done
        async with limit:
            await put_like(store, job_name(i))
        done += 1
        if done % max(1, count // 20) == 0 or done == count:
            rate = done / (time.perf_counter() - started)
            print(f"\r  filling: {done}/{count} jobs ({rate:.0f}/s)", end="", file=sys.stderr, flush=True)

    await asyncio.gather(*(one(i) for i in range(count)))
    print(file=sys.stderr)


def named_jobs(url: str, store: Store | None = None) -> NamedJobs:
    """NamedJobs over ``url``, or over ``store`` itself (the flat one) in the running loop."""
    jobs = NamedJobs(Unscheduled(), store_url=url)  # type: ignore[arg-type]  # no cluster: only the registry
    if store is not None:
        jobs._stores[id(asyncio.get_running_loop())] = store
    return jobs


@asynccontextmanager
async def dashboard(jobs: NamedJobs) -> AsyncIterator[TestClient]:
    app = make_app(UiSource(status=lambda: [], jobs=jobs))

    async def old(request: web.Request) -> web.Response:
        # The handler before paging: the whole scope listed (every entry and definition read), one page kept.
        found = sorted(await jobs.list(request.query.get("prefix", "")), key=lambda n: n.name)
        return web.json_response({"total": len(found), "items": [named_job_to_json(n) for n in found[:PAGE]]})

    app.router.add_get("/old/jobs", old)
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


class Collections:
    """The garbage collector's pauses while a call is timed: with a million entries in the owners'
    memory a full collection is what a slow run most often is, so each run names the ones it held."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []  # (generation, seconds)
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))


COLLECTIONS = Collections()


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


def show_collections() -> None:
    """The collections of generation 2 (the whole heap) made while calls were timed."""
    full = [seconds for generation, seconds in COLLECTIONS.pauses if generation == 2]
    if full:
        print(f"  gc: {len(full)} full collections, {sum(full) * 1000:.0f} ms in all, longest {max(full) * 1000:.0f} ms",
              flush=True)
    COLLECTIONS.pauses.clear()


async def measure_store(store: Store, jobs: NamedJobs, count: int, repeat: int) -> dict[str, list[float]]:
    """The store's own page and count of the scope, and NamedJobs' (no HTTP)."""
    scope = entry_key("default", "default", "x")[:-1]
    deep = entry_key("default", "default", job_name(int(count * 0.9)))
    expect = await store.count(scope, nested=False)
    assert expect == count, (expect, count)
    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("store: list_page(limit=50), first", lambda: store.list_page(scope, limit=PAGE)),
        ("store: list_page(limit=50), deep", lambda: store.list_page(scope, after=deep, limit=PAGE)),
        ("store: count(scope)", lambda: store.count(scope, nested=False)),
        ("named: list_page(limit=50)", lambda: jobs.list_page(limit=PAGE)),
        ("named: count()", jobs.count),
    ]
    figures: dict[str, list[float]] = {}
    for _ in range(repeat):
        for label, call in cases:
            figures.setdefault(label, []).append(await timed(call))
    return figures


async def measure(jobs: NamedJobs, count: int, repeat: int, old_repeat: int) -> dict[str, list[float]]:
    deep = job_name(int(count * 0.9))
    prefix = job_name(count // 2)[:-2]  # 100 jobs

    async def get(path: str, **expect: Any) -> dict[str, Any]:
        answer = await ui.get(path)
        assert answer.status == 200, await answer.text()
        body = await answer.json()
        assert body["items"], path
        return dict(body)

    figures: dict[str, list[float]] = {}
    async with dashboard(jobs) as ui:
        cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
            ("paged: first page", lambda: get(f"/api/jobs?size={PAGE}")),
            ("paged: deep page (cold cursor)", lambda: get(f"/api/jobs?size={PAGE}&after={deep}")),
            ("paged: prefix page", lambda: get(f"/api/jobs?size={PAGE}&prefix={prefix}")),
            ("paged: count=1 (names only)", lambda: get(f"/api/jobs?size={PAGE}&count=1")),
        ]
        for _ in range(repeat):
            for label, call in cases:
                figures.setdefault(label, []).append(await timed(call))
            # A warm deep cursor: the next of a page this store served (what paging forward sends).
            warm = f"/api/jobs?size={PAGE}&after=" + (await get(f"/api/jobs?size={PAGE}&after={deep}"))["next"]
            figures.setdefault("paged: deep page (warm cursor)", []).append(await timed(lambda: get(warm)))  # noqa: B023
        for _ in range(old_repeat):
            figures.setdefault("old: list then slice, first page", []).append(await timed(lambda: get("/old/jobs")))
            figures.setdefault("old: list then slice, prefix", []).append(
                await timed(lambda: get(f"/old/jobs?prefix={prefix}")))
    return figures


async def run_store(kind: str, root: Path, args: argparse.Namespace) -> None:
    if args.registry == "buckets":
        await run_buckets(kind, root, args)
        return
    if kind == "file":
        url = f"file://{root / 'file-store'}"
        if args.before:
            await run_before_after(url, root / "file-store", args)
        else:
            await run_url(kind, url, args)
        return
    with Azurite() as azurite:
        secret = azurite.write_connection_string(root / "azurite.secret")
        await run_url(kind, azurite.store_url("named-listing", secret), args)


async def fill_store(url: str, count: int, how: str, store: Store | None = None) -> None:
    started = time.perf_counter()
    if how == "put_many":
        jobs = named_jobs(url, store)
        await fill_put_many(jobs, count)
        if store is None:
            await jobs.close()
    elif how == "entries":
        if store is not None:
            await fill_entries(store, count)
        else:
            async with open_store(url) as opened:
                await fill_entries(opened, count)
    else:
        async with open_store(url) as opened:
            await fill(opened, count)
    print(f"  filled in {time.perf_counter() - started:.0f} s", flush=True)


async def report(url: str, args: argparse.Namespace, store: Store | None = None) -> None:
    jobs = named_jobs(url, store)
    figures = await measure_store(store if store is not None else await jobs._store(), jobs, args.jobs, args.repeat)
    figures.update(await measure(jobs, args.jobs, args.repeat, args.old_repeat))
    if store is None:
        await jobs.close()
    for label, runs in figures.items():
        shown = ", ".join(f"{r * 1000:.0f}" for r in runs)
        print(f"  {label:40s} median {statistics.median(runs) * 1000:8.1f} ms   (runs: {shown} ms)", flush=True)


async def run_url(kind: str, url: str, args: argparse.Namespace) -> None:
    print(f"{kind}: {args.jobs} named jobs in one scope", flush=True)
    await fill_store(url, args.jobs, args.fill)
    await report(url, args)


async def run_before_after(url: str, root: Path, args: argparse.Namespace) -> None:
    print(f"file, before (flat layout of {BEFORE}): {args.jobs} named jobs in one scope", flush=True)
    flat = flat_store(root)
    await fill_store(url, args.jobs, args.fill, flat)
    files = sum(1 for _ in os.scandir(root))
    print(f"  {files} files in the store's one directory", flush=True)
    await report(url, args, flat)
    await flat.close()
    print(f"file, after (directory layout, the same store moved in): {args.jobs} named jobs in one scope", flush=True)
    started = time.perf_counter()
    async with open_store(url) as store:
        await store.count()  # the first call opens the layout: moves every file in, then indexes them
    print(f"  moved into the directory layout in {time.perf_counter() - started:.1f} s", flush=True)
    widest = max(len(os.listdir(d)) for d, _, _ in os.walk(root))
    print(f"  the fullest directory holds {widest} entries", flush=True)
    await report(url, args)


class BucketRecords:
    """The key and entry metadata of name ``i`` as a put's ``PUT`` record carries them (``inline_entry``'s),
    from one job built once: parsing a schedule per name made the load ten times slower than its appends."""

    def __init__(self) -> None:
        self.scope = entry_key("default", "default", "x")[:-1]
        self.job = ScheduledJob.create(Target.actor("h", "apps"), "x", due=T0 + timedelta(minutes=5),
                                       schedule="@every 1m", metadata={NAMED_MARK: self.scope + "x"}, now=T0)
        first = inline_entry(job_name(0))
        assert first.name == self.scope + job_name(0)  # names of this benchmark are stored unescaped

    def __call__(self, i: int) -> tuple[str, dict[str, str]]:
        name = job_name(i)
        key = self.scope + name
        job = replace(self.job, id=new_job_id(), name=name, metadata={NAMED_MARK: key}, generation=1, shard="shard-0")
        packed = base64.b64encode(pack(job.to_wire())).decode("ascii")
        entry = Entry(key, "", 1, job.id, "shard-0", datetime_to_us(job.first_fire), datetime_to_us(T0),
                      JobStatus(next_fire=job.first_fire), (), packed)
        return key, entry.metadata()


async def measure_named(jobs: NamedJobs, count: int, repeat: int) -> dict[str, list[float]]:
    """``NamedJobs.list_page`` and ``count`` (no HTTP), after checking the count is every name."""
    deep = job_name(int(count * 0.9))
    prefix = job_name(count // 2)[:-2]  # 100 jobs
    # What each call is timed answering is checked once: every name counted, pages in name order.
    assert await jobs.count() == count and await jobs.count(prefix) == 100
    first, after = await jobs.list_page(limit=PAGE), await jobs.list_page(after=deep, limit=PAGE)
    assert [n.name for n in first.items] == [job_name(i) for i in range(PAGE)], first.items[:3]
    assert [n.name for n in after.items] == [job_name(int(count * 0.9) + 1 + i) for i in range(PAGE)], after.items[:3]
    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("named: list_page(limit=50), first", lambda: jobs.list_page(limit=PAGE)),
        ("named: list_page(limit=50), deep", lambda: jobs.list_page(after=deep, limit=PAGE)),
        ("named: count()", jobs.count),
        ("named: count(prefix), 100 names", lambda: jobs.count(prefix)),
    ]
    figures: dict[str, list[float]] = {}
    for _ in range(repeat):
        for label, call in cases:
            figures.setdefault(label, []).append(await timed(call))
    return figures


def show(figures: dict[str, list[float]]) -> None:
    for label, runs in figures.items():
        shown = ", ".join(f"{r * 1000:.1f}" for r in runs)
        print(f"  {label:40s} median {statistics.median(runs) * 1000:8.1f} ms   (runs: {shown} ms)", flush=True)


async def run_buckets(kind: str, root: Path, args: argparse.Namespace) -> None:
    """The default registry: names in silo-owned buckets (``benchmarks._bucket_names``)."""
    clock = _bucket_names.clock_now()
    if kind == "azure":
        with Azurite() as azurite:
            secret = azurite.write_connection_string(root / "azurite.secret")
            async with open_store(azurite.store_url("named-listing", secret)) as store:
                await run_buckets_on(kind, store, clock, args)
        return
    store = MemoryStore() if kind == "memory" else _bucket_names.file_store(str(root / f"buckets-{kind}"), clock)
    try:
        await run_buckets_on(kind, store, clock, args)
    finally:
        await store.close()
    if kind == "file":
        where = root / f"buckets-{kind}"
        files = [f for _, _, names in os.walk(where) for f in names]
        widest = max(len(os.listdir(d)) for d, _, _ in os.walk(where))
        print(f"  the store: {len(files)} files, the fullest directory holds {widest} entries, "
              f"{sum(1 for f in files if f.endswith('.lock'))} .lock files", flush=True)


async def run_buckets_on(kind: str, store: Store, clock: Any, args: argparse.Namespace) -> None:
    print(f"{kind}, registry buckets: {args.jobs} named jobs in one scope", flush=True)
    cluster = await _bucket_names.start(store, clock)
    await _bucket_names.load(cluster, args.jobs, BucketRecords())
    jobs = cluster.jobs()
    gc.callbacks.append(COLLECTIONS)
    figures = await measure_named(jobs, args.jobs, args.repeat)
    figures.update(await measure(jobs, args.jobs, args.repeat, args.old_repeat))
    show(figures)
    show_collections()
    if args.takeover:
        await takeover(cluster, store, clock, args)
    gc.callbacks.remove(COLLECTIONS)


async def takeover(cluster: Any, store: Store, clock: Any, args: argparse.Namespace) -> None:
    """Both owners stop (releasing their buckets); a new silo takes every bucket from its log:
    how long that takes, then the first page and count its fresh memory answers."""
    for hooks in cluster.hooks.values():
        assert hooks.buckets is not None
        await hooks.buckets.release_all()
    started = time.perf_counter()
    fresh = await _bucket_names.start(store, clock, silos=("c",), take_all=True)
    print(f"  a new silo took every bucket ({args.jobs} names) in {time.perf_counter() - started:.1f} s", flush=True)
    jobs = fresh.jobs()
    COLLECTIONS.pauses.clear()  # the takeover's own
    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("after takeover: first list_page", lambda: jobs.list_page(limit=PAGE)),
        ("after takeover: first count()", jobs.count)]
    show({label: [await timed(call)] for label, call in cases})
    show_collections()
    assert await jobs.count() == args.jobs, "the new owner's count is not every name"
    assert [n.name for n in (await jobs.list_page(limit=PAGE)).items] == [job_name(i) for i in range(PAGE)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--stores", default="file,azure")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each paged request")
    parser.add_argument("--old-repeat", type=int, default=1, help="runs of each list-then-slice request")
    parser.add_argument("--fill", choices=("entries", "put_many", "put_like"), default="entries",
                        help="entries: each registry entry as a put writes it (definition inline), 5,000 a "
                             "write_metadata_many; put_many: NamedJobs.put_many, 2,000 a call; put_like: one "
                             "entry and definition at a time")
    parser.add_argument("--registry", choices=("entries", "buckets"), default="entries",
                        help="entries: names in per-name registry entries (the older layout); buckets: in "
                             "silo-owned registry buckets, the default registry (in-process silos, no Ray)")
    parser.add_argument("--takeover", action="store_true",
                        help="buckets: then a new silo takes every bucket from its log; time that and its first reads")
    parser.add_argument("--before", action="store_true",
                        help="file store: measure the flat layout first, then the same store moved into the new one")
    args = parser.parse_args(argv)
    base = os.environ.get("TIMESHARD_BENCH_DIR")
    root = Path(tempfile.mkdtemp(prefix="named-listing-", dir=base))
    print(f"scratch: {root}", flush=True)
    for kind in args.stores.split(","):
        asyncio.run(run_store(kind, root, args))


if __name__ == "__main__":
    main()
