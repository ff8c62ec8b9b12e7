"""Headless Chromium for tests: a browser, or fail (under CI=true) / skip (locally) with the reason."""

from __future__ import annotations

import os
from typing import Any

import pytest

from benchmarks._browser import BrowserUnavailable, check_browser, chromium

__all__ = ["chromium", "expect", "require_browser"]


def require_browser() -> str:
    """The Chromium's path; without it (or Playwright), fail the run under ``CI=true`` and skip elsewhere."""
    try:
        return check_browser()
    except BrowserUnavailable as exc:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"a browser is required under CI=true: {exc}", pytrace=False)
        pytest.skip(f"no browser ({exc})")  # only outside CI: under CI=true it failed above


def expect(target: Any) -> Any:
    """Playwright's ``expect`` (its assertions retry until their timeout), imported on first use so
    that a test module imports without Playwright and its tests can fail or skip with the reason."""
    from playwright.async_api import expect as playwright_expect

    return playwright_expect(target)
