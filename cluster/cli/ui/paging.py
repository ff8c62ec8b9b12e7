"""Query arguments, server-side pages and a sort key that never breaks on a mixed column."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web

#: The most rows one page of any list holds, whatever ``size`` asks: a request costs the server
#: (and the silos behind it) at most this much.
MAX_PAGE_SIZE = 200
#: Pages beyond this are refused rather than walked to.
MAX_PAGE = 1_000_000


def int_arg(request: web.Request, name: str, default: int, minimum: int, maximum: int | None = None) -> int:
    """The query argument ``name`` as an int; a 400 naming the argument and the rule otherwise."""
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text) if len(text) <= 20 else None
    except ValueError:
        value = None
    if value is None:
        raise web.HTTPBadRequest(text=f"{name}: expected an integer, got {text[:40]!r}")
    if value < minimum:
        raise web.HTTPBadRequest(text=f"{name}: must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise web.HTTPBadRequest(text=f"{name}: must be at most {maximum}, got {value}")
    return value


def size_arg(request: web.Request, default: int) -> int:
    """The ``size`` a request asks for, capped at ``MAX_PAGE_SIZE``."""
    return min(int_arg(request, "size", default, 1), MAX_PAGE_SIZE)


def page_of(request: web.Request, items: Sequence[Any], page_size: int) -> dict[str, Any]:
    """One page of ``items``: ``page`` (1-based), ``pages``, ``total`` and the ``items``."""
    size = size_arg(request, page_size)
    number = int_arg(request, "page", 1, 1, MAX_PAGE)
    start = (number - 1) * size
    return {"page": number, "size": size, "total": len(items), "pages": max(1, -(-len(items) // size)),
            "items": list(items[start:start + size])}


def sort_key(field: str) -> Callable[[dict[str, Any]], tuple[bool, float, str]]:
    """A key for rows by ``field``: None last; numbers by value, the rest as text."""
    def key(row: dict[str, Any]) -> tuple[bool, float, str]:
        value = row.get(field)
        number = float(value) if isinstance(value, (int, float)) else 0.0
        return (value is None, number, "" if isinstance(value, (int, float)) else str(value))
    return key
