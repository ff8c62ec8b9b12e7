"""The dashboard's page in headless Chromium, attacked (no Ray: the app serves the fakes of ``tests/test_ui.py``).

Hostile job, silo, flow and step names must render as text and act on the right name; a step
named ``__proto__`` must not break the DAG; another site can neither frame the page, nor drive
it, nor read it through a rebound name; a token leaves the address; a cluster that does not answer
shows as such; and all of it runs under the page's Content-Security-Policy (a violation fails the
test). Needs a Chromium (``make test`` finds or installs one); without it these tests fail under
CI=true and skip elsewhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.test_utils import TestServer

from cluster.cli.ui import UiSource, make_app
from cluster.flows.model import FlowStatus, StepStatus
from cluster.named.api import NamedJobPage
from tests.browser import chromium_with, expect, require_browser
from tests.test_ui import TOKEN, FakeJobs
from tests.test_ui_flows import FakeFlows

pytestmark = pytest.mark.asyncio(loop_scope="module")

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
IMG = "<img src=x onerror=window.__pwned=1>"
SVG = "'><svg onload=window.__pwned=2>"
HOSTILE = [IMG, SVG, "__proto__", "toString", "constructor"]
WAIT_MS = 15_000
REBIND = "rebind.example"
#: Chromium resolves this name to 127.0.0.1: what a DNS rebinding does once the page has loaded.
FLAGS = (f"--host-resolver-rules=MAP {REBIND} 127.0.0.1",)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    require_browser()
    async with chromium_with(*FLAGS) as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Any) -> AsyncIterator[Any]:
    """A fresh context; the test fails if the page throws or the Content-Security-Policy blocks anything."""
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    opened = await context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda exc: problems.append(f"threw: {exc}"))
    opened.on("console", lambda m: problems.append(f"console: {m.text}")
              if m.type == "error" and "Content Security Policy" in m.text else None)
    opened.problems = problems  # a test that expects a refusal takes its message out
    try:
        yield opened
        assert await opened.evaluate("window.__pwned") is None, "a hostile name ran as script"
        assert not problems, problems
    finally:
        await context.close()


Serve = Callable[..., Awaitable[TestServer]]


@pytest_asyncio.fixture(loop_scope="module")
async def serve() -> AsyncIterator[Serve]:
    """``serve(app_or_source, host=...)``: a running server; closed after the test."""
    servers: list[TestServer] = []

    async def start(app: web.Application, host: str = "127.0.0.1") -> TestServer:
        server = TestServer(app, host=host)
        await server.start_server()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


def hostile_silos() -> list[dict[str, Any]]:
    return [{"silo_id": IMG, "owner": f"{IMG}#1", "node": SVG, "queued": 1, "inflight": 0, "staged": 0,
             "lease_age": 0.1, "lease_left": 5.0, "heartbeat_interval_s": 1.0,
             "shards": [{"name": SVG, "state": "active", "loaded": True, "jobs": 1, "window_start": 0, "window_end": 1,
                         "unreadable": 2}],
             "quarantined": [SVG], "damaged": {}, "counters": {}},
            {"silo_id": SVG, "error": IMG}]


def machinery_flow() -> FlowStatus:
    """A flow whose steps are named like what a plain JS object holds, and with markup."""
    deps = {"__proto__": (), "toString": ("__proto__",), "constructor": ("toString",), IMG: ("__proto__",),
            "hasOwnProperty": (IMG, "constructor")}
    steps = {name: StepStatus(name, "pending" if d else "running", 0 if d else 1, None, None if d else T0, None,
                              None if d else SVG, d, f"job-{i}") for i, (name, d) in enumerate(deps.items())}
    return FlowStatus(SVG, "id-hostile", "running", None, steps, T0, None)


async def no_token_in(page: Any) -> None:
    assert TOKEN not in page.url, page.url
    assert TOKEN not in await page.evaluate("location.href + document.referrer + document.cookie")


async def test_hostile_names_render_as_text_and_act_on_the_right_job(page: Any, serve: Serve) -> None:
    jobs = FakeJobs([*HOSTILE, "plain"])
    server = await serve(make_app(UiSource(status=hostile_silos, jobs=jobs), token=TOKEN, interval=0.5))
    response = await page.goto(str(server.make_url("/")) + f"?token={TOKEN}")
    assert response is not None and response.status == 200
    await no_token_in(page)
    await expect(page.locator("#alerts li[data-kind='silo_down']")).to_contain_text(IMG)
    await expect(page.locator("#alerts li[data-kind='quarantined']")).to_contain_text(SVG)
    await expect(page.locator("#overview tr[data-silo]")).to_have_count(2)
    assert await page.locator("#overview td.node span").first.get_attribute("title") == SVG
    await page.click("#tab-shards")
    await expect(page.locator("#shards-loaded tr[data-shard] td.name")).to_have_text([SVG])

    await page.click("#tab-jobs")
    await expect(page.locator("#jobs tr[data-job]")).to_have_count(len(HOSTILE) + 1)
    shown = await page.locator("#jobs tr[data-job]").evaluate_all(
        "rows => rows.map(r => [r.dataset.job, r.querySelector('td.name').textContent])")
    assert sorted(shown) == sorted([n, n] for n in [*HOSTILE, "plain"])
    assert await page.locator("main img, #jobs svg").count() == 0, "markup in a name became an element"

    asked: list[tuple[str, str]] = []

    async def answer(dialog: Any) -> None:
        asked.append((dialog.type, dialog.message))
        await dialog.accept("because <b>reasons</b>")

    page.on("dialog", answer)
    for name in (IMG, "__proto__"):
        row = page.locator("#jobs tr[data-job]").filter(has=page.locator("td.name").get_by_text(name, exact=True))
        await row.locator("button[data-action='pause']").click()
        await expect(row.locator("td.state")).to_have_text("paused")
        paused = [c for c in jobs.calls if c[0] == "pause"]
        assert paused[-1][:2] == ("pause", name) and jobs.paused_with["note"] == "because <b>reasons</b>"
    assert [a[0] for a in asked] == ["prompt", "prompt"] and asked[0][1].startswith(f"pause {IMG}?")
    await page.locator("#jobs a[data-open]").filter(has_text="toString").click()
    await expect(page.locator("#job-detail h2").first).to_have_text("toString close")
    assert await page.locator("#job-detail").get_attribute("data-job") == "toString"


async def test_flow_steps_named_like_object_machinery_draw_the_whole_dag(page: Any, serve: Serve) -> None:
    flows = FakeFlows([])
    flow = machinery_flow()
    flows.flows[flow.name] = flow
    server = await serve(make_app(UiSource(status=lambda: [], jobs=FakeJobs([]), flows=flows)))
    await page.goto(str(server.make_url("/#flows")))
    row = page.locator("#flows tr[data-flow]")
    await expect(row).to_have_count(1)
    assert await row.get_attribute("data-flow") == SVG
    await row.locator("a[data-open-flow]").click()
    steps = page.locator("svg#flow-dag g.step")
    await expect(steps).to_have_count(len(flow.steps))
    drawn = await steps.evaluate_all("gs => gs.map(g => [g.dataset.step, g.querySelector('text.name').textContent,"
                                     " g.getAttribute('transform')])")
    assert sorted(name for name, _, _ in drawn) == sorted(flow.steps) and all(n == t for n, t, _ in drawn)
    assert len({where for _, _, where in drawn}) == len(flow.steps), f"boxes drawn over each other: {drawn}"
    edges = await page.locator("svg#flow-dag path.edge").evaluate_all("ps => ps.map(p => [p.dataset.from, p.dataset.to])")
    assert sorted(edges) == sorted([d, s.name] for s in flow.steps.values() for d in s.depends_on)
    await expect(page.locator("#flow-detail h2")).to_have_text(f"Flow {SVG}")
    await expect(page.locator("#flow-detail tr[data-flow-step]")).to_have_count(len(flow.steps))


async def test_a_token_link_from_another_site_opens_the_page_and_leaves_no_token_behind(page: Any, serve: Serve) -> None:
    dashboard = await serve(make_app(UiSource(status=lambda: [], jobs=FakeJobs(["a"])), token=TOKEN))
    link = str(dashboard.make_url("/")) + f"?token={TOKEN}#jobs"
    chat = web.Application()

    async def index(_: web.Request) -> web.Response:
        return web.Response(text=f"<a id='link' href='{link}'>the dashboard</a>", content_type="text/html")

    chat.router.add_get("/", index)
    elsewhere = await serve(chat, host="localhost")  # another site: localhost is not 127.0.0.1
    await page.goto(str(elsewhere.make_url("/")))
    await page.click("#link")
    await expect(page.locator("#jobs tr[data-job='a']")).to_be_visible()
    await no_token_in(page)
    await page.go_back()
    assert page.url == str(elsewhere.make_url("/")), "the token's address stayed in the history"


async def test_another_site_can_neither_frame_nor_drive_the_dashboard(page: Any, serve: Serve) -> None:
    """Loopback without a token (the default): any page the operator visits can reach the port."""
    jobs = FakeJobs(["nightly"])
    dashboard = await serve(make_app(UiSource(status=lambda: [], jobs=jobs)))
    base = str(dashboard.make_url("/"))
    evil = web.Application()

    async def index(_: web.Request) -> web.Response:
        return web.Response(content_type="text/html", text=f"""
            <iframe id='dash' src='{base}'></iframe><iframe name='sink'></iframe>
            <form id='f' method='post' target='sink' action='{base}api/jobs/nightly/delete'><input name='x'></form>
            <script>
              document.getElementById('f').submit();
              fetch('{base}api/jobs/nightly/pause', {{method: 'POST', mode: 'no-cors', credentials: 'include',
                    body: 'x', headers: {{'Content-Type': 'text/plain'}}}}).then(() => document.title = 'sent');
            </script>""")

    evil.router.add_get("/", index)
    attacker = await serve(evil, host="localhost")
    await page.goto(str(attacker.make_url("/")))
    await expect(page).to_have_title("sent")
    await asyncio.sleep(1.0)
    assert [c for c in jobs.calls if c[0] in ("pause", "delete")] == [], jobs.calls
    for frame in page.frames[1:]:
        assert await frame.locator("#tabs button").count() == 0, "the dashboard rendered inside another site's frame"
    refused = [p for p in page.problems if "frame-ancestors 'none'" in p]
    assert refused, f"Chromium did not report refusing the frame: {page.problems}"
    page.problems[:] = [p for p in page.problems if p not in refused]


async def test_a_rebound_name_reads_nothing(page: Any, serve: Serve) -> None:
    jobs = FakeJobs(["nightly"])
    dashboard = await serve(make_app(UiSource(status=lambda: [], jobs=jobs)))
    rebound = f"http://{REBIND}:{dashboard.port}/"
    response = await page.goto(rebound)
    assert response is not None and response.status == 421
    assert "nightly" not in await page.content()
    # The attacker's script, now same-origin with the port, reads and acts: both refused.
    got = await page.evaluate("""async () => {
        const r = await fetch('/api/jobs'); const p = await fetch('/api/jobs/nightly/pause', {method: 'POST'});
        return [r.status, await r.text(), p.status]; }""")
    assert got[0] == 421 and "nightly" not in got[1] and got[2] == 421, got
    assert jobs.calls == []


class SilentJobs(FakeJobs):
    """``client.jobs`` of a cluster that stopped answering: a listing never returns."""

    async def list_page(self, *args: Any, **kwargs: Any) -> NamedJobPage:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_cluster_that_does_not_answer_shows_as_such(page: Any, serve: Serve) -> None:
    server = await serve(make_app(UiSource(status=lambda: [], jobs=SilentJobs(["a"]))))
    await page.goto(str(server.make_url("/#jobs")))
    started = asyncio.get_running_loop().time()
    await expect(page.locator("#status.err")).to_contain_text("no answer within 10 s", timeout=20_000)
    assert asyncio.get_running_loop().time() - started < 15


async def test_the_whole_page_works_under_its_policy(page: Any, serve: Serve) -> None:
    """Every tab renders and a pause goes through, with no Content-Security-Policy violation (the fixture fails on one)."""
    silos = [{"silo_id": "s0", "owner": "s0#1", "node": "n", "queued": 0, "inflight": 0, "staged": 0, "lease_age": 0.1,
              "lease_left": 3.0, "heartbeat_interval_s": 1.0, "shards": [], "quarantined": [], "damaged": {}, "counters": {}}]
    jobs = FakeJobs(["nightly"])
    flows = FakeFlows(["etl-1"])
    server = await serve(make_app(UiSource(status=lambda: silos, jobs=jobs, flows=flows), token=TOKEN, interval=0.5))
    response = await page.goto(str(server.make_url("/")) + f"?token={TOKEN}")
    assert response is not None and response.status == 200
    headers = await response.all_headers()
    assert headers["content-security-policy"].startswith("default-src 'self'; frame-ancestors 'none'")
    await expect(page.locator("#overview tr[data-silo='s0']")).to_be_visible()
    await expect(page.locator("svg.chart")).to_have_count(3)
    await page.click("#tab-shards")
    await expect(page.locator("#shards-loaded h2")).to_have_text("Loaded")
    await page.click("#tab-flows")
    await page.locator("a[data-open-flow='etl-1']").click()
    await expect(page.locator("svg#flow-dag g.step")).to_have_count(4)
    await page.click("#tab-jobs")
    page.on("dialog", lambda d: asyncio.ensure_future(d.accept("maintenance window")))
    await page.locator("#jobs tr[data-job='nightly'] button[data-action='pause']").click()
    await expect(page.locator("#jobs tr[data-job='nightly'] td.state")).to_have_text("paused")
    assert jobs.paused_with["note"] == "maintenance window"
    await expect(page.locator("#status")).to_contain_text("updated")
    await no_token_in(page)
