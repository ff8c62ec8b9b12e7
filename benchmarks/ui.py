"""How fast the dashboard renders a big cluster, in a real browser (issue 17).

    python -m benchmarks.ui [--jobs 100000] [--concurrency 64] [--put-many 1000] [--repeats 3] [--screenshot docs/ui-overview.png]

Starts a local Ray and a cluster of silos on a file store in a scratch folder, fills ``--jobs``
named jobs (nightly cron jobs, through ``client.jobs.put`` with ``--concurrency`` callers; the
fill rate is a figure too), adds one small flow and a little firing load (``--firing`` jobs every
second), then serves the dashboard with the real ``timeshard ui`` command and opens it in
headless Chromium. Per page it measures, ``--repeats`` times: the server's answer to the page's
API call alone (no page open), navigation to the page's first rows visible, and one refresh cycle
(``ts.refresh()`` in the page: fetch + render). A page that shows no rows within
``--page-timeout`` is recorded as timed out and not measured again. ``--screenshot PATH`` saves
the overview as a user sees it.

Writes ``ui.json`` to ``$TIMESHARD_BENCH_DIR`` (default: a scratch folder; never the repository).
Needs Chromium (``make test`` installs it; ``$TIMESHARD_CHROMIUM`` points at another).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import ray

from benchmarks._browser import chromium
from benchmarks.report import Report, machine_info, percentiles
from cluster import Cluster, Flow, Step, Target
from cluster._cluster import start_or_join_ray
from handlers.builtin import Recorder

ROOT = Path(__file__).resolve().parent.parent
LOAD_APP = "load"  # the firing load's jobs live in their own app_id, apart from the filled ones
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class Page:
    """A dashboard page: its tab, the selector of its rows, and the API call its render makes."""

    tab: str
    rows: str
    api: str


PAGES = (
    Page("overview", "#overview tr[data-silo]", "/api/overview"),
    Page("shards", "#shards tr[data-shard]", "/api/shards"),
    Page("flows", "#flows tr[data-flow]", "/api/flows"),
    Page("jobs", "#jobs tr[data-job]", "/api/jobs"),
)


def bench_dir() -> Path:
    """``$TIMESHARD_BENCH_DIR``, else a scratch folder: this benchmark never writes the repository."""
    given = os.environ.get("TIMESHARD_BENCH_DIR")
    return Path(given) if given else Path(tempfile.gettempdir()) / "timeshard-bench-ui"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def fill(report: Report, client: Any, target: Target, count: int, concurrency: int,
               put_many: int = 0) -> dict[str, Any]:
    """Put ``count`` nightly named jobs through ``concurrency`` callers (``put_many`` of that many
    a call, if given); returns the rate."""
    next_index = iter(range(0, count, put_many or 1))
    done = 0
    started = time.perf_counter()

    def spec(i: int) -> dict[str, Any]:
        return {"name": f"job-{i:07d}", "target": target, "schedule": f"0 {i % 60} 3 * * *"}

    async def caller() -> None:
        nonlocal done
        for i in next_index:  # one shared iterator: each index goes to exactly one caller
            if put_many:
                await client.jobs.put_many([spec(k) for k in range(i, min(count, i + put_many))])
                done += min(count, i + put_many) - i
            else:
                await client.jobs.put(**spec(i))
                done += 1

    async def progress() -> None:
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            elapsed = time.perf_counter() - started
            left = (count - done) / (done / elapsed) if done else float("inf")
            report.progress(f"filled {done:,}/{count:,} named jobs ({done / elapsed:,.0f}/s, ~{left:,.0f} s left)")

    ticker = asyncio.create_task(progress())
    try:
        await asyncio.gather(*(caller() for _ in range(min(concurrency, count))))
    finally:
        ticker.cancel()
    seconds = time.perf_counter() - started
    report.progress(f"filled {count:,} named jobs in {seconds:,.1f} s ({count / seconds:,.0f}/s)")
    return {"jobs": count, "concurrency": concurrency, "put_many": put_many, "seconds": round(seconds, 2),
            "per_s": round(count / seconds, 1)}


def serve(namespace: str) -> tuple[str, subprocess.Popen[bytes]]:
    """``timeshard ui`` (this checkout's code) on a free loopback port, as a user runs it."""
    port = free_port()
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("TIMESHARD_UI_TOKEN", None)  # loopback: no token
    process = subprocess.Popen([sys.executable, "-m", "cluster.cli", "ui", "--namespace", namespace, "--port", str(port)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return f"http://127.0.0.1:{port}", process


async def until_answers(url: str, process: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"timeshard ui exited {process.returncode}")
            try:
                async with http.get(f"{url}/api/overview") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.3)
    raise TimeoutError(f"timeshard ui did not answer within {timeout} s")


async def timed(call: Callable[[], Awaitable[Any]], timeout_s: float) -> float | None:
    """Seconds ``call`` took, or None when it did not finish within ``timeout_s``."""
    started = time.perf_counter()
    try:
        await asyncio.wait_for(call(), timeout_s)
    except (asyncio.TimeoutError, TimeoutError):
        return None
    return time.perf_counter() - started


async def measure(report: Report, url: str, repeats: int, timeout_s: float, screenshot: Path | None,
                  screenshot_after: float = 60.0) -> dict[str, Any]:
    """Per page, ``repeats`` times: its API call alone (no page open), navigation -> first rows
    visible, then one refresh cycle in the page (seconds; None: not within ``timeout_s``).

    The overview goes first (and its screenshot): the named-jobs page, last, can leave the server
    busy with listings its 2 s refresh asked for.
    """
    from playwright.async_api import Error as PlaywrightError

    results: dict[str, Any] = {}
    async with chromium() as browser, aiohttp.ClientSession() as http:
        context = await browser.new_context(viewport={"width": 1400, "height": 900})
        context.set_default_timeout(timeout_s * 1000)
        page = await context.new_page()
        await page.goto(url + "/")
        tabs = set(await page.locator("#tabs button").evaluate_all("bs => bs.map(b => b.dataset.tab)"))
        for p in PAGES:
            if p.tab not in tabs:
                report.progress(f"page {p.tab}: not on this dashboard yet, skipped")
                continue
            runs: dict[str, list[float | None]] = {"api_s": [], "render_s": [], "refresh_s": []}

            async def api(p: Page = p) -> None:
                async with http.get(url + p.api) as r:
                    r.raise_for_status()
                    await r.read()

            async def render(p: Page = p) -> None:
                await page.goto(f"{url}/#{p.tab}", wait_until="commit")
                await page.locator(p.rows).first.wait_for(state="visible")

            async def refresh() -> None:
                await page.evaluate("async () => { await ts.refresh(); }")
                if await page.locator("#status.err").count():
                    raise RuntimeError(f"the dashboard shows an error: {await page.locator('#status').text_content()}")

            for _ in range(repeats):
                await page.goto("about:blank")  # no page open while the API alone is timed; then a real navigation
                runs["api_s"].append(await timed(api, timeout_s))
                try:
                    runs["render_s"].append(await timed(render, timeout_s))
                except PlaywrightError:  # its own wait ran out first
                    runs["render_s"].append(None)
                runs["refresh_s"].append(await timed(refresh, timeout_s) if runs["render_s"][-1] is not None else None)
                if None in runs["render_s"]:
                    break  # a page that did not render in time is not measured again
            rows = await page.locator(p.rows).count()
            results[p.tab] = {"rows_shown": rows, **{k: [None if v is None else round(v, 3) for v in vs] for k, vs in runs.items()}}
            report.progress(f"page {p.tab}: rows shown {rows}, seconds: api {fmt(runs['api_s'])}, render {fmt(runs['render_s'])}, "
                            f"refresh {fmt(runs['refresh_s'])}")
            if p.tab == "overview" and screenshot is not None:
                # Enough 2 s readings for the charts to draw a line an operator would recognise.
                for waited in range(0, int(screenshot_after), 10):
                    report.progress(f"screenshot of the overview in {int(screenshot_after) - waited} s (charts filling)")
                    await asyncio.sleep(min(10.0, screenshot_after - waited))
                screenshot.parent.mkdir(parents=True, exist_ok=True)
                await page.screenshot(path=str(screenshot))
                report.progress(f"screenshot of the overview: {screenshot}")
        await context.close()
    return results


def fmt(values: list[float | None]) -> str:
    return " / ".join("timed out" if v is None else f"{v:.2f}" for v in values)


def p50(values: list[float | None]) -> str:
    """The median of the runs that finished, and how many did not."""
    done = [v for v in values if v is not None]
    median = f"{percentiles(done)['p50']:.3f}" if done else "-"
    return median + (f" ({len(values) - len(done)} timed out)" if len(done) < len(values) else "")


async def run(args: argparse.Namespace, report: Report, scratch: Path) -> dict[str, Any]:
    namespace = f"ts-ui-bench-{uuid.uuid4().hex[:6]}"
    cluster = Cluster.start(f"file://{scratch / 'store'}", silos=args.silos, namespace=namespace)
    recorder_name = f"recorder-{uuid.uuid4().hex[:6]}"
    recorder = ray.remote(Recorder).options(name=recorder_name, num_cpus=0).remote()
    ray.get(recorder.executions.remote(), timeout=60)
    target = Target.actor(recorder_name, namespace=ray.get_runtime_context().namespace)
    client = cluster.client()
    process: subprocess.Popen[bytes] | None = None
    try:
        report.progress(f"cluster of {args.silos} silos up; filling {args.jobs:,} named jobs, {args.concurrency} callers")
        filled = await fill(report, client, target, args.jobs, args.concurrency, args.put_many)
        for i in range(args.firing):
            await client.jobs.put(f"tick-{i}", target=target, schedule="@every 1s", app_id=LOAD_APP)
        flow = Flow("nightly-etl", [Step("extract", target), Step("transform", target, depends_on=["extract"]),
                                    Step("load", target, depends_on=["transform"]), Step("report", target, depends_on=["transform"])])
        await client.flows.submit(flow)
        report.progress(f"{args.firing} jobs firing every second and flow {flow.name} submitted; serving the dashboard")
        url, process = serve(namespace)
        await until_answers(url, process)
        pages = await measure(report, url, args.repeats, args.page_timeout, args.screenshot, args.screenshot_after)
        fired = len(ray.get(recorder.executions.remote(), timeout=60))
        return {"fill": filled, "pages": pages, "fired_during_run": fired}
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # still answering a listing: aiohttp waits for it
                process.kill()
                process.wait(timeout=30)
        await client.jobs.close()
        ray.kill(recorder)
        cluster.shutdown(graceful=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ui", description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=100_000, help="named jobs to fill (default 100,000)")
    parser.add_argument("--concurrency", type=int, default=64, help="callers of client.jobs.put while filling (default 64)")
    parser.add_argument("--put-many", type=int, default=0,
                        help="fill with client.jobs.put_many of this many jobs a call (default 0: client.jobs.put)")
    parser.add_argument("--silos", type=int, default=2, help="silos (default 2)")
    parser.add_argument("--firing", type=int, default=10, help="jobs firing every second during the run (default 10)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per page (default 3)")
    parser.add_argument("--page-timeout", type=float, default=600.0, help="seconds a page may take to show rows (default 600)")
    parser.add_argument("--screenshot", type=Path, default=None, help="save a screenshot of the overview here")
    parser.add_argument("--screenshot-after", type=float, default=60.0,
                        help="seconds of live charts before the screenshot (default 60)")
    args = parser.parse_args(argv)
    if args.jobs < 0 or args.concurrency < 1 or args.repeats < 1:
        parser.error("--jobs must be >= 0, --concurrency and --repeats >= 1")

    report = Report("ui")
    out = bench_dir()
    scratch = Path(tempfile.mkdtemp(prefix="timeshard-ui-bench-"))
    start_or_join_ray(include_dashboard=False, log_to_driver=False, configure_logging=False,
                      namespace=f"ui-bench-{uuid.uuid4().hex[:6]}")
    try:
        results = asyncio.run(run(args, report, scratch))
    finally:
        ray.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)

    fill_ = results["fill"]
    print(f"\nfilled {fill_['jobs']:,} named jobs in {fill_['seconds']:,.1f} s: {fill_['per_s']:,.0f} jobs/s "
          f"({fill_['concurrency']} callers)")
    rows = []
    for tab, r in results["pages"].items():
        rows.append([tab, str(r["rows_shown"]), *(p50(r[k]) for k in ("api_s", "render_s", "refresh_s")), fmt(r["render_s"])])
    report.table(["page", "rows shown", "api alone p50 s", "render p50 s", "refresh p50 s", "render, every run (s)"], rows)
    data = {**report.data, "machine": machine_info(), "args": {k: str(v) for k, v in vars(args).items()}, **results,
            "seconds": round(time.perf_counter() - report.started, 1)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "ui.json").write_text(json.dumps(data, indent=2, default=str) + "\n")
    print(f"results: {out / 'ui.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
