"""``timeshard ui`` in a real browser: headless Chromium, driven by Playwright, against a cluster on Ray.

One cluster, one ``timeshard ui`` process and one browser serve the whole module (each test opens its
own browser context, so cookies never leak between tests). Every page's screenshot lands in
``tests/artifacts/`` (ignored by git). Needs a Chromium: ``make test`` finds or installs one; without
it these tests fail under CI=true and skip elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import pytest_asyncio
import ray

from cluster import Cluster, Flow, Step, Target
from tests.browser import chromium, expect, require_browser
from tests.e2e.conftest import FAST, RecorderActor, wait_for
from tests.e2e.test_ui import TOKEN, free_port

if TYPE_CHECKING:  # without Playwright the module still imports, so its tests fail (CI) or skip with the reason
    from playwright.async_api import Browser, Dialog, Page

pytestmark = [pytest.mark.ray, pytest.mark.asyncio(loop_scope="module")]

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "tests" / "artifacts"
WAIT_MS = 20_000  # every wait on the page is bounded by this


@dataclass(frozen=True)
class Dashboard:
    """The module's cluster, its recorder handler, and ``timeshard ui`` serving it at ``url``."""

    cluster: Cluster
    recorder: str
    url: str

    @property
    def target(self) -> Target:
        """The recorder, as a job's target."""
        return Target.actor(self.recorder, namespace=ray.get_runtime_context().namespace)


@pytest.fixture(scope="session")
def browser_path() -> str:
    """Checked before Ray starts: without a browser the module fails (CI=true) or skips at once."""
    return require_browser()


@pytest.fixture(scope="module")
def ui_cluster(browser_path: str, ray_session: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, str]]:
    """Two silos on a file store and a Recorder handler, shared by the module's tests."""
    store = tmp_path_factory.mktemp("ui-browser") / "store"
    cluster = Cluster.start(f"file://{store}", silos=2, namespace=f"ts-{uuid.uuid4().hex[:8]}", options=FAST)
    recorder = f"recorder-{uuid.uuid4().hex[:8]}"
    handle = RecorderActor.options(name=recorder, num_cpus=0).remote()
    ray.get(handle.executions.remote(), timeout=60)
    try:
        yield cluster, recorder
    finally:
        ray.kill(handle)
        cluster.shutdown(graceful=False)


@pytest.fixture(scope="module")
def ui_process(ui_cluster: tuple[Cluster, str]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """The real ``timeshard ui`` command (this checkout's code) with a token, and its address."""
    cluster, _ = ui_cluster
    port = free_port()
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address, "TIMESHARD_UI_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", "cluster.cli", "ui", "--namespace", cluster.namespace, "--port", str(port)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{port}", process
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dashboard(ui_cluster: tuple[Cluster, str], ui_process: tuple[str, subprocess.Popen[str]]) -> Dashboard:
    """The module's cluster and its dashboard, once the dashboard answers."""
    url, process = ui_process
    async with aiohttp.ClientSession() as http:
        async def answers() -> bool:
            if process.poll() is not None:
                pytest.fail(f"timeshard ui exited {process.returncode}: {process.stderr.read() if process.stderr else ''}")
            try:
                async with http.get(f"{url}/api/overview", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                    return r.status == 200
            except aiohttp.ClientConnectionError:
                return False

        await wait_for(answers, timeout=60, interval=0.3)
    return Dashboard(*ui_cluster, url)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser(browser_path: str) -> AsyncIterator[Browser]:
    async with chromium() as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    """A fresh browser context (no cookies) with a wide viewport; every wait bounded by ``WAIT_MS``. The
    test fails if the page throws or its Content-Security-Policy blocks anything."""
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    opened.on("console", lambda m: errors.append(m.text)
              if m.type == "error" and "Content Security Policy" in m.text else None)
    try:
        yield opened
        assert not errors, f"the page threw: {errors}"
    finally:
        await context.close()


async def open_dashboard(page: Page, dashboard: Dashboard, tab: str = "overview") -> None:
    """Open the page as a user does the first time (``?token=``), then the tab ``tab``."""
    response = await page.goto(f"{dashboard.url}/?token={TOKEN}")
    assert response is not None and response.status == 200
    assert TOKEN not in page.url, "the token is exchanged for a cookie and leaves the address"
    if tab != "overview":
        await page.click(f"#tab-{tab}")
    await expect(page.locator(f"section#{tab}")).to_be_visible()


async def screenshot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / f"ui-{name}.png"), full_page=True)


async def no_error_shown(page: Page) -> None:
    """The status line says when the page last updated, not an error (it turns red on one)."""
    await expect(page.locator("#status")).to_contain_text("updated")
    await expect(page.locator("#status.err")).to_have_count(0)


async def test_overview_shows_every_silo(page: Page, dashboard: Dashboard) -> None:
    await open_dashboard(page, dashboard)
    for silo_id in dashboard.cluster.silo_ids:
        row = page.locator(f'#overview tr[data-silo="{silo_id}"]')
        await expect(row).to_be_visible()
        await expect(row.locator("td.error")).to_have_text("")
    await expect(page.locator("#overview tr[data-silo]")).to_have_count(len(dashboard.cluster.silo_ids))
    await expect(page.locator("#alerts li.none")).to_have_count(1)  # a healthy cluster raises no alert
    await expect(page.locator("#alerts li[data-kind]")).to_have_count(0)
    # The header names the namespace and the Ray the command joined.
    await expect(page.locator("#where")).to_have_text(re.compile(f"^namespace {dashboard.cluster.namespace} · Ray [0-9.]+:[0-9]+$"))
    await no_error_shown(page)
    await screenshot(page, "overview")


@contextlib.asynccontextmanager
async def ticking(dashboard: Dashboard) -> AsyncIterator[Any]:
    """A client, and a named job firing every second until the block ends."""
    client = dashboard.cluster.client()
    name = f"ticker-{uuid.uuid4().hex[:6]}"
    await client.jobs.put(name, target=dashboard.target, schedule="@every 1s")
    try:
        yield client
    finally:
        await client.jobs.delete(name)
        await client.jobs.close()


async def test_overview_charts_the_fires_of_a_running_job_live(page: Page, dashboard: Dashboard) -> None:
    async with ticking(dashboard):
        await open_dashboard(page, dashboard)
        # The page is not reloaded: the sampler's next readings reach the charts by polling.
        for metric in ("fires_per_s", "lateness_p50_ms", "lateness_p99_ms"):
            chart = page.locator(f'svg.chart[data-metric="{metric}"]')
            await expect(chart).to_be_visible()
            await expect(chart.locator("path.line")).to_have_count(1)
        top = await page.locator('svg.chart[data-metric="fires_per_s"] text.max').text_content()
        assert top is not None and float(top.rstrip("/s ")) > 0, top  # the axis' top is the highest rate seen
        await no_error_shown(page)


async def test_shards_page_lists_the_silos_shards(page: Page, dashboard: Dashboard) -> None:
    # A silo owns shards once it holds jobs: an hourly job's shard is an hour away, far beyond the
    # lookahead (dormant); a job due every second always has its next shard loaded.
    async with ticking(dashboard) as client:
        await client.jobs.put(f"hourly-{uuid.uuid4().hex[:6]}", target=dashboard.target, schedule="@every 1h")
        await open_dashboard(page, dashboard, "shards")
        rows = page.locator("#shards tr[data-shard]")
        await expect(rows.first).to_be_visible()
        await expect(page.locator("#shards-loaded tr[data-shard]").first).to_be_visible(timeout=WAIT_MS)
        await expect(page.locator("#shards-dormant tr[data-shard]").first).to_be_visible(timeout=WAIT_MS)
    owners = {s["owner"] for s in await asyncio.to_thread(dashboard.cluster.status)}
    shown = await rows.evaluate_all("rows => rows.map(r => [r.dataset.shard, r.querySelector('td.owner').textContent])")
    assert shown and all(name for name, _ in shown), shown
    assert {owner for _, owner in shown} <= owners, (shown, owners)
    await no_error_shown(page)
    await screenshot(page, "shards")


async def test_named_job_paused_and_resumed_from_the_page(page: Page, dashboard: Dashboard) -> None:
    client = dashboard.cluster.client()
    name = f"nightly-{uuid.uuid4().hex[:6]}"
    await client.jobs.put(name, target=dashboard.target, schedule="@every 1h")
    asked: list[tuple[str, str]] = []

    async def accept(dialog: Dialog) -> None:
        asked.append((dialog.type, dialog.message))
        await dialog.accept("from the browser test" if dialog.type == "prompt" else "")

    page.on("dialog", accept)
    try:
        await open_dashboard(page, dashboard, "jobs")
        row = page.locator(f'#jobs tr[data-job="{name}"]')
        await expect(row.locator("td.state")).to_have_text("active")
        await no_error_shown(page)
        await screenshot(page, "jobs")

        # Pause asks why (the note shows with the pause, with who paused); resume asks to confirm.
        for action, state, dialog in (("pause", "paused", ("prompt", f"pause {name}? Why (shown with the pause, optional):")),
                                      ("resume", "active", ("confirm", f"resume {name}?"))):
            await row.locator(f'button[data-action="{action}"][data-name="{name}"]').click()
            await wait_for(functools.partial(stored_paused, client, name, state == "paused"), timeout=WAIT_MS / 1000)
            await expect(row.locator("td.state")).to_have_text(state)
            assert asked[-1] == dialog
            if action == "pause":
                paused = await client.jobs.get(name)
                assert paused is not None and paused.status.paused_note == "from the browser test"
                assert paused.status.paused_by is not None and paused.status.paused_by.endswith("(timeshard ui)")
        assert len(asked) == 2

        # Its detail: counters, next fire times and paused state, from the store.
        await row.locator(f'a[data-open="{name}"]').click()
        detail = page.locator("#job-detail")
        await expect(detail).to_contain_text(name)
        stored = await client.jobs.get(name)
        assert stored is not None and stored.status.next_fires
        # Shown in the page's one time style; its <time datetime> is the instant itself.
        first = detail.locator("ul.next-fires time").first
        await expect(first).to_be_visible()
        shown = datetime.fromisoformat(str(await first.get_attribute("datetime")).replace("Z", "+00:00"))
        assert abs(shown - stored.status.next_fires[0]) < timedelta(milliseconds=1), (shown, stored.status.next_fires)
    finally:
        await client.jobs.close()


async def stored_paused(client: Any, name: str, paused: bool) -> bool:
    job = await client.jobs.get(name)
    assert job is not None, f"job {name} vanished"
    return bool(job.status.paused) == paused


async def test_without_the_token_the_browser_gets_401_and_sees_nothing(page: Page, dashboard: Dashboard) -> None:
    for path in ("/", "/?token=wrong", "/static/app.js", "/api/overview", "/api/jobs"):
        response = await page.goto(dashboard.url + path)
        assert response is not None and response.status == 401, path
        body = await page.content()
        assert not any(silo_id in body for silo_id in dashboard.cluster.silo_ids), body
        assert "timeshard" not in (await page.title()), path
    await expect(page.locator("tr[data-silo], #tabs button")).to_have_count(0)


async def test_flows_page_draws_a_submitted_flow(page: Page, dashboard: Dashboard) -> None:
    client = dashboard.cluster.client()
    target = dashboard.target
    deps = {"extract": [], "transform": ["extract"], "load": ["transform"], "report": ["transform"]}
    flow = Flow(f"etl-{uuid.uuid4().hex[:6]}", [Step(step, target, depends_on=d) for step, d in deps.items()])
    await client.flows.submit(flow)
    await open_dashboard(page, dashboard, "flows")
    await expect(page.locator(f'#flows tr[data-flow="{flow.name}"]')).to_be_visible()
    await page.click(f'a[data-open-flow="{flow.name}"]')
    for step in deps:
        await expect(page.locator(f'svg#flow-dag g.step[data-step="{step}"]')).to_have_count(1)
    await expect(page.locator("svg#flow-dag g.step[data-state]")).to_have_count(len(deps))
    await expect(page.locator("svg#flow-dag path.edge")).to_have_count(sum(len(d) for d in deps.values()))
    await no_error_shown(page)
    await screenshot(page, "flows")
