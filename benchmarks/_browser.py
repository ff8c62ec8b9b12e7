"""Headless Chromium through Playwright, for the dashboard's browser tests and its benchmark.

Test tooling, not part of the product: it lives here (not under ``tests/``) because the benchmarks
are an installed package and must import it; ``tests/browser.py`` adds the fail-or-skip rule.
The browser is the system's own (``make test`` finds or installs Debian's ``chromium`` with
``tests/chromium.sh``): Playwright's download of its own browser needs a network we do not have.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.async_api import Browser

CHROMIUM_ENV = "TIMESHARD_CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
# Chromium otherwise calls Google's services at start (updates, sync, field trials); on a closed
# network those connections are refused, many at a time, and slow every start.
QUIET_FLAGS = ("--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync")
LAUNCH_TIMEOUT_MS = 60_000


class BrowserUnavailable(RuntimeError):
    """No Chromium, or no Playwright to drive it; the message says how to get them."""


def find_chromium() -> str | None:
    """The Chromium to use: ``$TIMESHARD_CHROMIUM``, else chromium, chromium-browser or google-chrome on PATH."""
    given = os.environ.get(CHROMIUM_ENV)
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def check_browser() -> str:
    """The Chromium's path, once both it and Playwright are here; ``BrowserUnavailable`` says what is missing."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError as exc:
        raise BrowserUnavailable(f"the Python package playwright is missing ({exc}); pip install -e '.[test]'") from exc
    path = find_chromium()
    if path is None:
        given = os.environ.get(CHROMIUM_ENV)
        where = f"{CHROMIUM_ENV}={given} is not executable" if given else f"none of {', '.join(CHROMIUM_NAMES)} is on PATH"
        raise BrowserUnavailable(f"no Chromium: {where}; `make test` installs Debian's chromium, or set {CHROMIUM_ENV}")
    return path


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """A headless Chromium, closed on exit (with the Playwright driver that runs it)."""
    from playwright.async_api import async_playwright

    path = check_browser()
    flags = [*QUIET_FLAGS, *(["--no-sandbox"] if os.geteuid() == 0 else [])]  # Chromium's sandbox refuses root
    async with async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=path, headless=True, args=flags, timeout=LAUNCH_TIMEOUT_MS)
        try:
            yield browser
        finally:
            await browser.close()
