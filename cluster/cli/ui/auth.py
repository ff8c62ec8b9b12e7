"""The dashboard's tokens: required off loopback, checked on every request, never kept in the browser.

A token reaches the server as ``Authorization: Bearer TOKEN`` (scripts) or once as ``?token=TOKEN``
(a person opening the link). The second is exchanged for a cookie and redirected to the same address
without it, so the token leaves the address bar, the history and the access log. The cookie's name
carries the port (a host's cookies are shared by all its ports: a Ray dashboard, a Jupyter) and its
value is an HMAC of the token under a secret of this process: what another server on the host may
read opens this dashboard only until it restarts, and never reveals the token.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware

from cluster.model.errors import ValidationError
from cluster.model.pause import check_by

TOKEN_ENV = "TIMESHARD_UI_TOKEN"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
#: Shorter tokens can be guessed by a script that tries them against the port.
MIN_TOKEN_CHARS = 16
#: Who acted, as the request's ``by`` (set for every request that passed the token check).
BY = "timeshard_ui_by"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class TokenError(ValueError):
    """A token or token file the dashboard refuses to start with; the message says why."""


@dataclass(frozen=True)
class UiToken:
    """One accepted token and the name its holder's actions are recorded under (None: ``--user``);
    its repr never shows the token, in a traceback or a log line."""

    value: str = field(repr=False)
    label: str | None = None


def check_token(value: str, where: str) -> str:
    """``value`` if it is long enough and printable, else ``TokenError`` naming ``where`` it came from."""
    if len(value) < MIN_TOKEN_CHARS:
        raise TokenError(f"{where}: the token has {len(value)} characters; it needs at least {MIN_TOKEN_CHARS} "
                         "(make one with: openssl rand -hex 16)")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise TokenError(f"{where}: the token must be printable, without spaces")
    return value


def read_token_file(path: str) -> list[UiToken]:
    """The tokens of a file: one a line, as ``TOKEN`` or ``LABEL TOKEN`` (the label records who acted);
    blank lines and ``#`` comments are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenError(f"cannot read --token-file {path}: {exc.strerror or exc}") from None
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) > 2:
            raise TokenError(f"--token-file {path}, line {number}: expected TOKEN or LABEL TOKEN")
        label = words[0] if len(words) == 2 else None
        if label is not None:
            try:
                check_by(label)
            except ValidationError as exc:
                raise TokenError(f"--token-file {path}, line {number}: the label {exc}") from None
        tokens.append(UiToken(check_token(words[-1], f"--token-file {path}, line {number}"), label))
    if not tokens:
        raise TokenError(f"--token-file {path} holds no token")
    return tokens


def token_required(host: str) -> bool:
    """True when ``host`` is reachable from other machines, so requests must carry a token."""
    return host not in LOOPBACK


def cookie_name(request: web.Request) -> str:
    """This dashboard's cookie: named after the port it serves, so two on one host never share one."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    port = sockname[1] if isinstance(sockname, tuple) and len(sockname) >= 2 else 0
    return f"timeshard_ui_{port}"


def without_token(request: web.Request) -> str:
    """The address the request asked for, minus ``token``: relative, so it also holds behind a proxy
    that serves the dashboard under a path of its own."""
    path = request.raw_path.partition("?")[0]
    last = path.rsplit("/", 1)[-1]
    rest = "&".join(part for part in request.query_string.split("&") if part and not part.startswith("token="))
    return "./" + last + ("?" + rest if rest else "")


def exchanged(request: web.Request) -> web.StreamResponse:
    """The answer to ``?token=``: a redirect to the address without it. A link followed from another
    site gets a page that moves on by itself instead: a redirect would stay part of that site's
    navigation, whose request a ``SameSite=Strict`` cookie does not join (the dashboard would
    answer 401 to a link pasted in a chat). Its script replaces the address, so the token's
    address does not stay in the history either (the refresh is the fallback without script)."""
    target = without_token(request)
    if request.headers.get("Sec-Fetch-Site", "none") in ("none", "same-origin"):
        return web.HTTPSeeOther(target)
    quoted = html.escape(target, quote=True)
    return web.Response(content_type="text/html", text=(
        f'<!doctype html><meta charset="utf-8"><meta http-equiv="refresh" content="0; url={quoted}">'
        f'<title>timeshard</title><a id="onward" href="{quoted}">open the dashboard</a>'
        '<script src="static/exchange.js"></script>'))


def token_middleware(tokens: Sequence[UiToken], by: str, secret: bytes | None = None) -> Middleware:
    """Refuse (401) every request that carries neither ``Authorization: Bearer TOKEN`` nor this
    process's cookie; a ``GET`` with ``?token=TOKEN`` gets the cookie and a redirect without it.
    Sets the request's ``BY``: the token's label, else ``by``."""
    key = secret if secret is not None else secrets.token_bytes(32)
    known = [(t.value.encode(), hmac.new(key, b"session\0" + t.value.encode(), hashlib.sha256).hexdigest(),
              t.label or by) for t in tokens]

    def by_token(given: str | None) -> str | None:
        if not given:
            return None
        found = None
        for value, _, who in known:  # every token compared, so timing says nothing of which matched
            if hmac.compare_digest(given.encode(), value):
                found = who
        return found

    def by_cookie(given: str | None) -> str | None:
        if not given:
            return None
        found = None
        for _, session, who in known:
            if hmac.compare_digest(given.encode(), session.encode()):
                found = who
        return found

    def session_of(who_token: str) -> str:
        return next(session for value, session, _ in known if hmac.compare_digest(value, who_token.encode()))

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        who = by_token(header[len("Bearer "):] if header.startswith("Bearer ") else None) \
            or by_cookie(request.cookies.get(cookie_name(request)))
        offered = request.query.get("token")
        if offered is not None and request.method in ("GET", "HEAD"):
            if by_token(offered) is None:
                raise web.HTTPUnauthorized(text="the token in the address is wrong")
            # Exchanged: the token leaves the address bar, the history and the access log.
            response = exchanged(request)
            response.set_cookie(cookie_name(request), session_of(offered), path="/", httponly=True,
                                samesite="Strict", secure=request.secure)
            if isinstance(response, web.HTTPException):
                raise response
            return response
        if who is None:
            raise web.HTTPUnauthorized(text="this dashboard needs its token: open it once as ?token=TOKEN "
                                            "or send Authorization: Bearer TOKEN")
        request[BY] = who
        return await handler(request)

    return check
