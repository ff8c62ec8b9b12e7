"""Headless Chromium for tests: a browser, or fail (under CI=true) / skip (locally) with the reason."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from benchmarks._browser import LAUNCH_TIMEOUT_MS, QUIET_FLAGS, BrowserUnavailable, check_browser, chromium

__all__ = ["chromium", "chromium_with", "expect", "require_browser"]


def require_browser() -> str:
    """The Chromium's path; without it (or Playwright), fail the run under ``CI=true`` and skip elsewhere."""
    try:
        return check_browser()
    except BrowserUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"a browser is required under CI=true: {exc}", pytrace=False)
        pytest.skip(f"no browser ({exc})")  # only outside CI: under CI=true it failed above


@asynccontextmanager
async def chromium_with(*flags: str) -> AsyncIterator[Any]:
    """``chromium()`` started with more command-line ``flags`` (say, a host resolver rule that
    plays a DNS rebinding: ``--host-resolver-rules=MAP rebind.example 127.0.0.1``)."""
    from playwright.async_api import async_playwright

    path = require_browser()
    args = [*QUIET_FLAGS, *(["--no-sandbox"] if os.geteuid() == 0 else []), *flags]
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=path, headless=True, args=args, timeout=LAUNCH_TIMEOUT_MS)
        try:
            yield browser
        finally:
            await browser.close()


def expect(target: Any) -> Any:
    """Playwright's ``expect`` (its assertions retry until their timeout), imported on first use so
    that a test module imports without Playwright and its tests can fail or skip with the reason."""
    from playwright.async_api import expect as playwright_expect

    return playwright_expect(target)
