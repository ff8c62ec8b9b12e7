"""The dashboard as an aiohttp app: the static page and each page's JSON endpoints, behind its guards."""

from __future__ import annotations

import getpass
import hashlib
import hmac
import html
import secrets
import socket
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from cluster.cli.ui import flows, jobs, overview, shards
from cluster.cli.ui.auth import BY, UiToken, check_token, token_middleware
from cluster.cli.ui.guard import Handler, forgery_middleware, host_middleware, json_errors, security_headers
from cluster.cli.ui.sampler import KEEP, SAMPLE_INTERVAL, SAMPLER, Sampler
from cluster.cli.ui.source import UiSource
from cluster.model.pause import check_by

PAGE_SIZE = 50
STATIC = Path(__file__).with_name("static")
PAGES = (overview, shards, jobs, flows)
#: Action bodies are a short note; anything bigger is refused before it is read.
MAX_BODY_BYTES = 16 * 1024
CSRF_META = "{{csrf}}"


def default_by() -> str:
    """Who acts when neither ``--user`` nor a token's label says: the dashboard's own user, marked as such."""
    return f"{getpass.getuser()}@{socket.gethostname()} (timeshard ui)"[:128]


def make_app(source: UiSource, *, token: str | None = None, tokens: Sequence[UiToken] = (),
             page_size: int = PAGE_SIZE, interval: float = SAMPLE_INTERVAL, keep: float = KEEP,
             bound: str | None = None, allow_hosts: Sequence[str] = (), user: str | None = None,
             secret: bytes | None = None) -> web.Application:
    """The dashboard as an aiohttp app; with ``token`` (or ``tokens``), every request must carry one.

    Token or not, it answers only to its own addresses (``bound``, loopback names, ``allow_hosts``)
    and acts only on requests from its own page. Actions are recorded as by the token's label, else
    ``user``, else ``default_by()``. ``secret`` (random per process by default) keys the session
    cookie and the page's anti-forgery value. While it runs, a ``Sampler`` reads the silos'
    statuses every ``interval`` seconds (the overview's charts keep ``keep`` seconds); pages read
    statuses through it, so open tabs do not add readings.
    """
    accepted = [*([UiToken(token)] if token is not None else []), *tokens]
    for t in accepted:
        check_token(t.value, "make_app")
    by = check_by(user) if user is not None else default_by()
    key = secret if secret is not None else secrets.token_bytes(32)
    csrf = hmac.new(key, b"csrf", hashlib.sha256).hexdigest()

    @web.middleware
    async def acting_as(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[BY] = by
        return await handler(request)

    middlewares = [json_errors, host_middleware(bound, allow_hosts), forgery_middleware(csrf, allow_hosts),
                   token_middleware(accepted, by, key) if accepted else acting_as]
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app.on_response_prepare.append(security_headers)
    sampler = Sampler(source.statuses, interval=interval, keep=keep,
                      read_keeping=source.keeper if source.keeping is not None else None)
    app[SAMPLER] = sampler
    app.cleanup_ctx.append(sampler.running)
    shell = page().replace(CSRF_META, html.escape(csrf))

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=shell, content_type="text/html")

    # Only the package's own files, known when the app is built: nothing else of the disk is reachable.
    files = {f.name: f for f in STATIC.iterdir() if f.is_file() and f.suffix in (".js", ".css")}

    async def static(request: web.Request) -> web.FileResponse:
        found = files.get(request.match_info["name"])
        if found is None:
            raise web.HTTPNotFound(text=f"nothing here: {request.path}")
        return web.FileResponse(found)

    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", static)
    for module in PAGES:
        app.router.add_routes(module.routes(source, page_size))
    return app


def page() -> str:
    """The dashboard's HTML shell; its scripts and styles are the package's ``static/`` files."""
    return (STATIC / "index.html").read_text(encoding="utf-8")
