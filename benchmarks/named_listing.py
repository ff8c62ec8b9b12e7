"""How long the dashboard's named-jobs list takes with many jobs in one scope: paged vs list-then-slice.

    python -m benchmarks.named_listing [--jobs 100000] [--stores file,azure] [--repeat 3]

Fills one scope with ``--jobs`` named jobs, then times ``GET /api/jobs`` of ``timeshard ui``
(served by aiohttp's test server over the real store) for: the first page, a page deep in (its
cursor 90% of the way; on Azure once as a cursor this store never handed out, "cold", and once
as the next page's, "warm"), a prefix-filtered page (100 matches) and ``count=1``; and the old
path, ``client.jobs.list(prefix)`` then a slice of one page, served the same way.

What is filled: each job's registry entry and definition, written as ``client.jobs.put``
writes them (``_write_definition``, then the entry), without Ray and without scheduling the jobs
into shards: the listing reads only the registry and the definitions, so the shards do not
change what is measured. Writes only under ``TIMESHARD_BENCH_DIR`` (a scratch directory when
unset); prints its figures and writes nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from benchmarks._azurite import Azurite
from cluster.cli.jobs import named_job_to_json
from cluster.cli.ui import UiSource, make_app
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.wire import datetime_to_us
from cluster.named.api import NamedJobs, _write_definition
from cluster.named.registry import NAMED_MARK, Entry, JobStatus, entry_key
from storage import Store, open_store

PAGE = 50
FILLERS = 64
T0 = datetime.now(timezone.utc).replace(microsecond=0)


def job_name(i: int) -> str:
    return f"job-{i:06d}"


async def put_like(store: Store, name: str) -> None:
    """The registry entry and definition ``put`` leaves, without scheduling into a shard."""
    key = entry_key("default", "default", name)
    job = ScheduledJob.create(Target.actor("h", "apps"), name, due=T0 + timedelta(minutes=5), schedule="@every 1m",
                              metadata={NAMED_MARK: key}, now=T0)
    job = replace(job, id=new_job_id(), generation=1, shard="shard-0")
    await _write_definition(store, job)
    entry = Entry(key, "", 1, job.id, "shard-0", datetime_to_us(job.first_fire), datetime_to_us(T0),
                  JobStatus(next_fire=job.first_fire))
    await store.create(key, entry.metadata())


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


@asynccontextmanager
async def dashboard(url: str) -> AsyncIterator[TestClient]:
    jobs = NamedJobs(None, store_url=url)  # type: ignore[arg-type]  # no cluster: only the registry is read
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
        await jobs.close()


async def timed(call: Callable[[], Awaitable[Any]]) -> float:
    started = time.perf_counter()
    await call()
    return time.perf_counter() - started


async def measure(url: str, count: int, repeat: int, old_repeat: int) -> dict[str, list[float]]:
    deep = job_name(int(count * 0.9))
    prefix = job_name(count // 2)[:-2]  # 100 jobs

    async def get(path: str, **expect: Any) -> dict[str, Any]:
        answer = await ui.get(path)
        assert answer.status == 200, await answer.text()
        body = await answer.json()
        assert body["items"], path
        return dict(body)

    figures: dict[str, list[float]] = {}
    async with dashboard(url) as ui:
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


async def run_store(kind: str, root: Path, count: int, repeat: int, old_repeat: int) -> None:
    if kind == "file":
        url = f"file://{root / 'file-store'}"
        await run_url(kind, url, count, repeat, old_repeat)
        return
    with Azurite() as azurite:
        secret = azurite.write_connection_string(root / "azurite.secret")
        await run_url(kind, azurite.store_url("named-listing", secret), count, repeat, old_repeat)


async def run_url(kind: str, url: str, count: int, repeat: int, old_repeat: int) -> None:
    print(f"{kind}: {count} named jobs in one scope", flush=True)
    async with open_store(url) as store:
        started = time.perf_counter()
        await fill(store, count)
        print(f"  filled in {time.perf_counter() - started:.0f} s", flush=True)
    figures = await measure(url, count, repeat, old_repeat)
    for label, runs in figures.items():
        shown = ", ".join(f"{r * 1000:.0f}" for r in runs)
        print(f"  {label:40s} median {statistics.median(runs) * 1000:8.1f} ms   (runs: {shown} ms)", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--stores", default="file,azure")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each paged request")
    parser.add_argument("--old-repeat", type=int, default=1, help="runs of each list-then-slice request")
    args = parser.parse_args(argv)
    base = os.environ.get("TIMESHARD_BENCH_DIR")
    root = Path(tempfile.mkdtemp(prefix="named-listing-", dir=base))
    print(f"scratch: {root}", flush=True)
    for kind in args.stores.split(","):
        asyncio.run(run_store(kind, root, args.jobs, args.repeat, args.old_repeat))


if __name__ == "__main__":
    main()
