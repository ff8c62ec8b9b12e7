"""Query arguments, server-side pages and a sort key that never breaks on a mixed column."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web


def int_arg(request: web.Request, name: str, default: int, minimum: int) -> int:
    """The query argument ``name`` as an int; a 400 naming the argument and the rule otherwise."""
    text = request.query.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise web.HTTPBadRequest(text=f"{name}: must be at least {minimum}, got {value}")
    return value


def page_of(request: web.Request, items: Sequence[Any], page_size: int) -> dict[str, Any]:
    """One page of ``items``: ``page`` (1-based), ``pages``, ``total`` and the ``items``."""
    size = int_arg(request, "size", page_size, 1)
    number = int_arg(request, "page", 1, 1)
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
