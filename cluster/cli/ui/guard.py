"""What keeps other web pages away from the dashboard, token or not.

- **Host**: a page on another name that rebinds it to 127.0.0.1 (DNS rebinding) reaches the port
  as a same-origin request; its ``Host`` still names it, so only this dashboard's own addresses
  (and ``--allow-host`` names, for a reverse proxy) are answered. Refused: 421.
- **Forgery**: any page can send a "simple" POST here (a form, ``fetch`` with ``no-cors``). A
  state-changing request must carry a header no such request can have (the page's
  ``X-Timeshard-CSRF`` value, or ``Authorization`` for scripts), and its ``Origin`` and
  ``Sec-Fetch-Site``, when the browser sends them, must say it came from this very origin (another
  port of the same host is "same-site", not "same-origin"). Refused: 403.
- **Framing and sniffing**: every answer says ``frame-ancestors 'none'`` and ``DENY``, loads only
  from itself (``default-src 'self'``, so no inline script can run), ``nosniff``, no referrer.
- Every error is JSON with a reason in words; the access log never shows a query string.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable
from urllib.parse import urlsplit

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.typedefs import Middleware

log = logging.getLogger("timeshard.ui")

CSRF_HEADER = "X-Timeshard-CSRF"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOCAL_NAMES = ("localhost", "127.0.0.1", "[::1]")
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_literal(host: str) -> str:
    """``host`` as it appears in a ``Host`` header: an IPv6 address in brackets, names lower-case."""
    host = host.strip().lower()
    try:
        if ipaddress.ip_address(host.strip("[]")).version == 6:
            return f"[{host.strip('[]')}]"
    except ValueError:
        pass
    return host


def split_host(value: str) -> tuple[str, int | None]:
    """A ``Host`` header as (name, port); port None when it names none. ValueError when malformed."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        name += "]"
        if rest and not rest.startswith(":"):
            raise ValueError(value)
        port_text = rest[1:] if rest else None
    else:
        name, colon, port_text = value.rpartition(":") if ":" in value else (value, "", None)
        if colon and ":" in name:
            raise ValueError(value)  # an IPv6 address must be in brackets
    if not name or (port_text is not None and not port_text.isdigit()):
        raise ValueError(value)
    return name, None if port_text is None else int(port_text)


def local_address(request: web.Request) -> tuple[str, int] | None:
    """The address and port this request's connection arrived on."""
    sockname = request.transport.get_extra_info("sockname") if request.transport else None
    if isinstance(sockname, tuple) and len(sockname) >= 2:
        return host_literal(str(sockname[0])), int(sockname[1])
    return None


def host_middleware(bound: str | None, allow: Iterable[str] = ()) -> Middleware:
    """Refuse (421) a request whose ``Host`` is not one of this dashboard's addresses with its port:
    ``bound``, localhost, 127.0.0.1, [::1] or the address the connection arrived on (a request
    can only carry that one if the browser was pointed at this very address). An ``allow`` name
    (``--allow-host``, for a reverse proxy) matches with any port, or only the one it names."""
    names = {host_literal(n) for n in LOCAL_NAMES}
    if bound and bound not in ("0.0.0.0", "::", ""):
        names.add(host_literal(bound))
    allowed: list[tuple[str, int | None]] = [split_host(host_literal(a)) for a in allow]

    def accepts(request: web.Request, value: str) -> bool:
        try:
            name, port = split_host(value)
        except ValueError:
            return False
        if any(name == a_name and (a_port is None or port == a_port) for a_name, a_port in allowed):
            return True
        local = local_address(request)
        if local is None:
            return False
        ip, served = local
        default = 443 if request.secure else 80
        return (name in names or name == ip) and (port if port is not None else default) == served

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.headers.get("Host", "")
        if not accepts(request, given):
            raise web.HTTPMisdirectedRequest(
                text=f"this dashboard does not answer to the host name {given!r}: open it by its own address "
                     f"(through a tunnel on another port or behind a reverse proxy, start it with --allow-host {given})")
        return await handler(request)

    return check


def forgery_middleware(csrf: str, allow: Iterable[str] = ()) -> Middleware:
    """Refuse (403) a state-changing request that did not come from the page itself (see the module)."""
    proxied = {split_host(host_literal(a))[0] for a in allow}

    def refusal(request: web.Request) -> str | None:
        fetch_site = request.headers.get("Sec-Fetch-Site")
        if fetch_site is not None and fetch_site != "same-origin":
            return f"a {fetch_site} request may not change anything here (Sec-Fetch-Site)"
        origin = request.headers.get("Origin")
        if origin is not None:
            parts = urlsplit(origin)
            same = parts.netloc.lower() == request.headers.get("Host", "").lower() or (
                parts.hostname is not None and host_literal(parts.hostname) in proxied)
            if not same:
                return f"a request from {origin} may not change anything here (Origin)"
        if "Authorization" in request.headers:
            return None  # no other page can set this header without asking first (CORS), and we never agree
        given = request.headers.get(CSRF_HEADER)
        if given is None:
            return f"the request does not come from the dashboard's page (no {CSRF_HEADER} header)"
        if given != csrf:
            return f"the page is from an earlier run of timeshard ui: reload it ({CSRF_HEADER})"
        return None

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method not in SAFE_METHODS:
            reason = refusal(request)
            if reason is not None:
                raise web.HTTPForbidden(text=reason)
        return await handler(request)

    return check


def reason_of(exc: web.HTTPException, request: web.Request) -> str:
    """An HTTP error's reason in words: aiohttp's own (``404: Not Found``) say too little."""
    if isinstance(exc, web.HTTPNotFound) and (exc.text or "").startswith("404"):
        return f"nothing here: {request.path}"
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return f"{request.method} is not allowed on {request.path} (allowed: {', '.join(sorted(exc.allowed_methods))})"
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return "the request's body is too large"
    return exc.text or exc.reason


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as ``{"error": reason}`` with its status; a failure of our own is a 500 that says what
    failed, logged with its traceback."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "WWW-Authenticate")}
        return web.json_response({"error": reason_of(exc, request)}, status=exc.status, headers=headers)
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return web.json_response({"error": f"the dashboard failed: {type(exc).__name__}: {exc}"}, status=500)


async def security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: every answer, static files and errors too, carries the headers."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)


class AccessLogger(AbstractAccessLogger):
    """One line a request, without its query string: a ``?token=`` never reaches a log."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        self.logger.info('%s "%s %s" %s %s %.3fs', request.remote, request.method, request.path,
                         response.status, response.body_length, time)
