"""The dashboard's token: required off loopback, checked on every request."""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

TOKEN_ENV = "TIMESHARD_UI_TOKEN"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def token_required(host: str) -> bool:
    """True when ``host`` is reachable from other machines, so requests must carry a token."""
    return host not in LOOPBACK


def token_middleware(token: str) -> Middleware:
    """Refuse (401) every request that carries neither ``Authorization: Bearer TOKEN`` nor the
    cookie a first visit with ``?token=TOKEN`` sets."""
    expected = token.encode()

    def matches(given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), expected)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        bearer = header[len("Bearer "):] if header.startswith("Bearer ") else None
        if matches(bearer) or matches(request.cookies.get("token")):
            return await handler(request)
        if matches(request.query.get("token")):
            # First visit with ?token=: remember it so the page's own requests carry it.
            response = await handler(request)
            response.set_cookie("token", token, httponly=True, samesite="Strict")
            return response
        return web.json_response({"error": "missing or wrong token"}, status=401)

    return check
