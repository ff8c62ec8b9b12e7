"""The dashboard's page as an operator relies on it, in headless Chromium over fakes (no Ray):
which cluster it shows, a cluster that stops answering (a banner, actions disabled) and comes
back, and empty lists said in words.

Needs a Chromium (``make test`` finds or installs one); without it these tests fail under CI=true
and skip elsewhere.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer

from cluster.cli.ui import UiSource, make_app
from cluster.named.api import NamedJobPage
from cluster.named.registry import AttemptRecord
from tests.browser import chromium, expect, require_browser
from tests.test_ui import T0, FakeJobs
from tests.test_ui_flows import FakeFlows

pytestmark = pytest.mark.asyncio(loop_scope="module")

WAIT_MS = 15_000


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Any]:
    require_browser()
    async with chromium() as opened:
        yield opened


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Any) -> AsyncIterator[Any]:
    context = await browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(WAIT_MS)
    opened = await context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield opened
        assert not errors, errors
    finally:
        await context.close()


@pytest_asyncio.fixture(loop_scope="module")
async def served() -> AsyncIterator[list[TestServer]]:
    servers: list[TestServer] = []
    yield servers
    for server in servers:
        await server.close()


async def serve(servers: list[TestServer], source: UiSource) -> TestServer:
    server = TestServer(make_app(source, interval=0.5))
    await server.start_server()
    servers.append(server)
    return server


class FlakyJobs(FakeJobs):
    """``client.jobs`` of a cluster that stops answering while ``answering`` is clear, and comes back."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(names)
        self.answering = asyncio.Event()
        self.answering.set()

    async def list_page(self, *args: Any, **kwargs: Any) -> NamedJobPage:
        await self.answering.wait()
        return await super().list_page(*args, **kwargs)


async def test_the_header_names_the_namespace_and_the_ray_address(page: Any, served: list[TestServer]) -> None:
    server = await serve(served, UiSource(status=lambda: [], jobs=FakeJobs([]), namespace="prod",
                                          address="10.0.0.7:6379"))
    await page.goto(str(server.make_url("/")))
    await expect(page.locator("header #where")).to_have_text("namespace prod · Ray 10.0.0.7:6379")


async def test_a_cluster_that_stops_answering_shows_a_banner_and_disables_actions(page: Any,
                                                                                 served: list[TestServer]) -> None:
    jobs = FlakyJobs(["nightly"])
    server = await serve(served, UiSource(status=lambda: [], jobs=jobs))
    await page.goto(str(server.make_url("/#jobs")))
    pause = page.locator("#jobs tr[data-job='nightly'] button[data-action='pause']")
    await expect(pause).to_be_enabled()
    await expect(page.locator("#stale")).to_be_hidden()
    jobs.answering.clear()
    await expect(page.locator("#stale")).to_be_visible(timeout=15_000)
    await expect(page.locator("#stale")).to_contain_text("actions are disabled")
    for action in ("pause", "trigger", "delete"):
        await expect(page.locator(f"#jobs button[data-action='{action}']")).to_be_disabled()
    jobs.answering.set()
    await expect(page.locator("#stale")).to_be_hidden(timeout=15_000)
    await expect(pause).to_be_enabled()


async def test_empty_lists_say_why_in_words(page: Any, served: list[TestServer]) -> None:
    server = await serve(served, UiSource(status=lambda: [], jobs=FakeJobs(["nightly"]), flows=FakeFlows([])))
    await page.goto(str(server.make_url("/")))
    await expect(page.locator("#silos tr.empty")).to_contain_text("No silo found in this namespace")
    await page.click("#tab-shards")
    await expect(page.locator("#shards-loaded tr.empty")).to_contain_text("No loaded shards")
    await page.click("#tab-flows")
    await expect(page.locator("#flows tr.empty")).to_have_text("No flows.")
    await page.click("#tab-jobs")
    await page.locator("#f-prefix").fill("weekly")
    await expect(page.locator("#jobs tr.empty")).to_have_text(
        "No named jobs in namespace default, app_id default whose name starts with weekly.")


async def test_the_address_holds_the_tab_filters_and_what_is_open_across_a_reload(page: Any,
                                                                                  served: list[TestServer]) -> None:
    jobs = FakeJobs([f"job-{i:03d}" for i in range(30)] + ["other"])
    flows = FakeFlows(["etl-1", "etl-2"])
    server = await serve(served, UiSource(status=lambda: [], jobs=jobs, flows=flows))
    base = str(server.make_url("/"))
    # A shared link: the jobs whose names start with job-01, job-013 open.
    await page.goto(base + "#jobs?prefix=job-01&open=job-013")
    await expect(page.locator("#jobs tr[data-job]")).to_have_count(10)
    await expect(page.locator("#f-prefix")).to_have_value("job-01")
    await expect(page.locator("#job-detail")).to_have_attribute("data-job", "job-013")
    # Filtering and opening from the page write the address; a reload comes back to the same view.
    await page.locator("#f-prefix").fill("job-02")
    await expect(page.locator("#jobs tr[data-job]")).to_have_count(10)
    await page.locator("#jobs a[data-open='job-021']").click()
    await expect(page).to_have_url(base + "#jobs?prefix=job-02&open=job-021")
    await page.reload()
    await expect(page.locator("#jobs tr[data-job]")).to_have_count(10)
    await expect(page.locator("#job-detail")).to_have_attribute("data-job", "job-021")
    # A flow open in the flows tab, then back to the jobs as they were.
    await page.goto(base + "#flows?state=running&open=etl-2")
    await expect(page.locator("svg#flow-dag g.step")).to_have_count(4)
    await expect(page.locator("#f-flow-state")).to_have_value("running")
    await expect(page.locator("#flow-detail h2")).to_have_text("Flow etl-2")
    await page.go_back()
    await expect(page.locator("#tab-jobs.on")).to_be_visible()
    await expect(page.locator("#job-detail")).to_have_attribute("data-job", "job-021")


async def test_sortable_headings_are_buttons_with_aria_sort_kept_in_the_address(page: Any,
                                                                                served: list[TestServer]) -> None:
    silos = [{"silo_id": "s0", "owner": "s0#1", "shards": [
        {"name": f"shard-{i}", "state": "active", "loaded": True, "jobs": 10 - i, "window_start": i, "window_end": i + 1}
        for i in range(3)]}]
    server = await serve(served, UiSource(status=lambda: silos, jobs=FakeJobs([])))
    await page.goto(str(server.make_url("/")) + "#shards?ls=-jobs")
    jobs_heading = page.locator("#shards-loaded th[data-sort='jobs']")
    await expect(jobs_heading).to_have_attribute("aria-sort", "descending")
    await expect(page.locator("#shards-loaded th[data-sort='name']")).to_have_attribute("aria-sort", "none")
    await expect(page.locator("#shards-loaded td.jobs")).to_have_text(["10", "9", "8"])
    await jobs_heading.locator("button").focus()  # reachable from the keyboard: Enter sorts
    await page.keyboard.press("Enter")
    await expect(jobs_heading).to_have_attribute("aria-sort", "ascending")
    await expect(page.locator("#shards-loaded td.jobs")).to_have_text(["8", "9", "10"])
    await expect(page).to_have_url(str(server.make_url("/")) + "#shards?ls=jobs")


async def test_a_refresh_keeps_the_focused_control_and_the_selected_text(page: Any, served: list[TestServer]) -> None:
    jobs = FakeJobs(["nightly", "weekly"])
    server = await serve(served, UiSource(status=lambda: [], jobs=jobs))
    await page.goto(str(server.make_url("/#jobs")))
    trigger = page.locator("#jobs button[data-action='trigger'][data-name='weekly']")
    await trigger.focus()
    refreshed = await page.locator("#status").text_content()
    # The rows change (a job paused elsewhere), so the table is redrawn around the focused button.
    await jobs.pause("nightly")
    await expect(page.locator("#jobs tr[data-job='nightly'] td.state")).to_have_text("paused")
    await expect(page.locator("#status")).not_to_have_text(refreshed or "")
    assert await page.evaluate("[document.activeElement.dataset.action, document.activeElement.dataset.name]") == [
        "trigger", "weekly"], "the focus moved away on a refresh"
    # Text being selected (to copy a name) is not swept away by the next refresh.
    await page.evaluate("""() => { const td = document.querySelector("#jobs tr[data-job='weekly'] td.name");
        const range = document.createRange(); range.selectNodeContents(td);
        getSelection().removeAllRanges(); getSelection().addRange(range); }""")
    await jobs.pause("weekly")
    await asyncio.sleep(4.5)  # two refreshes
    assert await page.evaluate("getSelection().toString()") == "weekly"
    await page.evaluate("getSelection().removeAllRanges()")
    await expect(page.locator("#jobs tr[data-job='weekly'] td.state")).to_have_text("paused")


def with_history(jobs: FakeJobs, name: str, outcomes: list[str], consecutive: int = 0) -> None:
    """``name``'s attempts ended with ``outcomes`` (oldest first)."""
    records = [AttemptRecord(f"{name}-{i}", 1, i, T0 + timedelta(minutes=i), T0 + timedelta(minutes=i, seconds=1), "s0#1",
                             outcome, None if outcome == "succeeded" else "boom", T0 + timedelta(minutes=i, seconds=2))
               for i, outcome in enumerate(outcomes)]
    job = jobs.jobs[name]
    jobs.jobs[name] = replace(job, status=replace(job.status, history=tuple(reversed(records)), last_attempt=records[-1],
                                                  consecutive_failures=consecutive))


async def test_named_jobs_show_schedule_target_state_and_a_strip_of_recent_outcomes(page: Any,
                                                                                    served: list[TestServer]) -> None:
    jobs = FakeJobs(["billing", "nightly", "reports"])
    with_history(jobs, "nightly", ["succeeded", "succeeded", "failed", "failed"], consecutive=2)
    with_history(jobs, "reports", ["failed", "succeeded"])
    server = await serve(served, UiSource(status=lambda: [], jobs=jobs))
    await page.goto(str(server.make_url("/#jobs")))
    nightly = page.locator("#jobs tr[data-job='nightly']")
    await expect(nightly.locator("td.state")).to_have_text("failing")
    await expect(page.locator("#jobs tr[data-job='reports'] td.state")).to_have_text("active")
    await expect(nightly.locator("td.target")).to_have_text("actor:h@test")
    await expect(nightly.locator("td.schedule")).to_contain_text("once at ")
    strip = await nightly.locator("td.recent i").evaluate_all("is => is.map(i => i.dataset.outcome)")
    assert strip == ["succeeded", "succeeded", "failed", "failed"], strip  # oldest first, the streak at the end
    # Failing only: the server reads on until it has a page of failing jobs.
    await page.check("#f-failing")
    await expect(page.locator("#jobs tr[data-job]")).to_have_count(1)
    await expect(page.locator("#jobs tr[data-job='nightly']")).to_be_visible()
    await expect(page).to_have_url(re.compile(r"#jobs\?failing=1$"))


async def test_one_time_style_everywhere_with_a_utc_switch_and_relative_times(page: Any,
                                                                             served: list[TestServer]) -> None:
    jobs = FakeJobs(["nightly"])
    nightly = jobs.jobs["nightly"]
    soon = datetime.now(timezone.utc) + timedelta(minutes=90)
    jobs.jobs["nightly"] = replace(nightly, status=replace(nightly.status, next_fires=[soon]))
    server = await serve(served, UiSource(status=lambda: [], jobs=jobs))
    await page.goto(str(server.make_url("/#jobs")))
    cell = page.locator("#jobs tr[data-job='nightly'] td.next time")
    await expect(cell).to_contain_text("(in 90 min)")
    await expect(page.locator("#zone")).to_have_text("times: local")
    local = await cell.text_content()
    await page.click("#zone")
    await expect(page.locator("#zone")).to_have_text("times: UTC")
    await expect(cell).to_contain_text(" UTC (in 90 min)")
    assert await cell.get_attribute("title") == (local or "").split(" (")[0], "the other zone is the title"
    await page.reload()  # remembered
    await expect(page.locator("#zone")).to_have_text("times: UTC")


async def test_an_alert_links_to_its_shard_and_a_silo_to_its_shards(page: Any, served: list[TestServer]) -> None:
    def silo(silo_id: str, shards: list[str], quarantined: list[str]) -> dict[str, Any]:
        return {"silo_id": silo_id, "owner": f"{silo_id}#1", "lease_age": 0.1, "lease_left": 3.0, "heartbeat_interval_s": 1.0,
                "quarantined": quarantined, "damaged": {}, "parked": {}, "clock": {}, "counters": {},
                "shards": [{"name": n, "state": "active", "loaded": True, "jobs": 1, "window_start": 0, "window_end": 1}
                           for n in shards]}

    silos = [silo("s0", ["shard-a", "shard-b"], ["shard-b"]), silo("s1", ["shard-c"], [])]
    server = await serve(served, UiSource(status=lambda: silos, jobs=FakeJobs([])))
    await page.goto(str(server.make_url("/")))
    await page.locator("#alerts li[data-kind='quarantined'] a[data-shard-link='shard-b']").click()
    await expect(page.locator("#tab-shards.on")).to_be_visible()
    await expect(page.locator("#shards-loaded tr[data-shard]")).to_have_count(1)
    await expect(page.locator("#shards-loaded tr[data-shard='shard-b']")).to_be_visible()
    await expect(page.locator("#shards-only")).to_contain_text("shard shard-b only")
    await page.click("#shards-only button")
    await expect(page.locator("#shards-loaded tr[data-shard]")).to_have_count(3)
    await page.click("#tab-overview")
    await page.locator("#overview tr[data-silo='s0'] a[data-silo-link='s0']").click()
    await expect(page.locator("#shards-loaded tr[data-shard]")).to_have_count(2)
    await expect(page.locator("#shards-loaded td.owner")).to_have_text(["s0#1", "s0#1"])
    await expect(page).to_have_url(re.compile(r"#shards\?silo=s0$"))


async def test_a_flow_step_links_to_the_shard_that_holds_its_job(page: Any, served: list[TestServer]) -> None:
    shards = [{"name": n, "state": "active", "loaded": True, "jobs": 1, "window_start": 0, "window_end": 1}
              for n in ("shards/w-etl-1-b", "shards/other")]
    silos = [{"silo_id": "s0", "owner": "s0#1", "lease_age": 0.1, "lease_left": 3.0, "heartbeat_interval_s": 1.0,
              "quarantined": [], "damaged": {}, "parked": {}, "clock": {}, "counters": {}, "shards": shards}]
    server = await serve(served, UiSource(status=lambda: silos, jobs=FakeJobs([]), flows=FakeFlows(["etl-1"])))
    await page.goto(str(server.make_url("/")) + "#flows?open=etl-1")
    steps = page.locator("#flow-detail tr[data-flow-step]")
    await expect(steps.locator("a[data-job-shard]")).to_have_count(1)  # only step b was scheduled
    await page.locator("#flow-detail tr[data-flow-step='b'] a[data-job-shard='shards/w-etl-1-b']").click()
    await expect(page.locator("#tab-shards.on")).to_be_visible()
    await expect(page.locator("#shards-loaded tr[data-shard]")).to_have_count(1)
    await expect(page.locator("#shards-loaded tr[data-shard='shards/w-etl-1-b']")).to_be_visible()
