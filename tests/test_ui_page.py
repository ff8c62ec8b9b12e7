"""The dashboard's page in headless Chromium over fakes (no Ray): how it behaves against a slow server.

Needs a Chromium (``make test`` finds or installs one); without it these tests fail under CI=true
and skip elsewhere.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestServer

from cluster.cli.ui import UiSource, make_app
from cluster.named.api import NamedJobPage
from tests.browser import chromium, expect, require_browser
from tests.test_ui import SILOS, FakeJobs


class SlowJobs(FakeJobs):
    """``client.jobs`` whose listing takes ``delay`` seconds, counting how many run at once."""

    def __init__(self, names: list[str], delay: float) -> None:
        super().__init__(names)
        self.delay, self.running, self.most, self.listed = delay, 0, 0, 0

    async def list_page(self, *args: Any, **kwargs: Any) -> NamedJobPage:
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(self.delay)
            return await super().list_page(*args, **kwargs)
        finally:
            self.running -= 1
            self.listed += 1


async def test_a_listing_slower_than_the_refresh_never_piles_requests_up() -> None:
    """With 100,000 jobs and the old listing, a 2 s refresh started a new request before the last
    answered: they piled up in the browser and the server (4.6 GB). One refresh runs at a time."""
    require_browser()
    jobs = SlowJobs([f"job-{i:03d}" for i in range(5)], delay=3.0)
    server = TestServer(make_app(UiSource(status=lambda: SILOS, jobs=jobs), interval=0.5))
    await server.start_server()
    try:
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(str(server.make_url("/#jobs")))
            await expect(page.locator('#jobs tr[data-job="job-000"]')).to_be_visible(timeout=15_000)
            await asyncio.sleep(7.0)  # more than three 2 s ticks during each 3 s listing
            await page.locator("#f-prefix").fill("job-00")  # a filter typed meanwhile waits its turn too
            await asyncio.sleep(4.0)
    finally:
        await server.close()
    assert jobs.most == 1, f"{jobs.most} listings ran at once"
    assert jobs.listed >= 3, f"the page stopped refreshing after {jobs.listed} listings"
