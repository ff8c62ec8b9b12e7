"""The overview page's endpoint: one row per silo."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cluster.cli.ui.source import UiSource


def silo_row(s: dict[str, Any]) -> dict[str, Any]:
    """What the overview shows of one silo's ``status()``."""
    silo_id, _, incarnation = str(s.get("owner") or "").partition("#")
    return {
        "silo_id": s.get("silo_id"), "incarnation": incarnation or None, "node": s.get("node"),
        "lease_age": s.get("lease_age"), "lease_left": s.get("lease_left"),
        "queued": s.get("queued"), "inflight": s.get("inflight"), "staged": s.get("staged"),
        "shards": len(s.get("shards") or ()), "quarantined": list(s.get("quarantined") or ()),
        "damaged": sorted(s.get("damaged") or {}), "counters": s.get("counters") or {},
        "error": s.get("error"),
    }


def routes(source: UiSource, page_size: int) -> list[web.RouteDef]:
    async def overview(request: web.Request) -> web.Response:
        return web.json_response({"silos": [silo_row(s) for s in await source.statuses()]})

    return [web.get("/api/overview", overview)]
