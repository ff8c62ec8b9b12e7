"""The dashboard as an aiohttp app: the static page and each page's JSON endpoints."""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from cluster.cli.ui import flows, jobs, overview, shards
from cluster.cli.ui.auth import token_middleware
from cluster.cli.ui.sampler import KEEP, SAMPLE_INTERVAL, SAMPLER, Sampler
from cluster.cli.ui.source import UiSource

PAGE_SIZE = 50
STATIC = Path(__file__).with_name("static")
PAGES = (overview, shards, jobs, flows)


def make_app(source: UiSource, *, token: str | None = None, page_size: int = PAGE_SIZE,
             interval: float = SAMPLE_INTERVAL, keep: float = KEEP) -> web.Application:
    """The dashboard as an aiohttp app; with ``token``, every request must carry it.

    While it runs, a ``Sampler`` reads the silos' statuses every ``interval`` seconds (the
    overview's charts keep ``keep`` seconds); pages read statuses through it, so open tabs do not
    add readings.
    """
    app = web.Application(middlewares=[token_middleware(token)] if token else [])
    sampler = Sampler(source.statuses, interval=interval, keep=keep)
    app[SAMPLER] = sampler
    app.cleanup_ctx.append(sampler.running)

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=page(), content_type="text/html")

    app.router.add_get("/", index)
    app.router.add_static("/static/", STATIC)
    for module in PAGES:
        app.router.add_routes(module.routes(source, page_size))
    return app


def page() -> str:
    """The dashboard's HTML shell; its scripts and styles are the package's ``static/`` files."""
    return (STATIC / "index.html").read_text(encoding="utf-8")
