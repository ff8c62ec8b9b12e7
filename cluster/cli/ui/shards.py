"""The shards page's endpoint: every owned shard, loaded or dormant, sorted and paged on the server."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cluster.cli.ui.paging import page_of, sort_key
from cluster.cli.ui.sampler import SAMPLER
from cluster.cli.ui.source import UiSource

SHARD_SORTS = ("name", "owner", "state", "jobs", "window_start", "adopted_count", "generation")
LOADED = {"true": True, "false": False}


def shard_rows(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per shard a silo reports, with its owner: the columns the page shows."""
    rows = []
    for s in statuses:
        for shard in s.get("shards") or ():
            rows.append({"name": shard.get("name"), "owner": s.get("owner"), "state": shard.get("state"),
                         "loaded": shard.get("loaded"), "jobs": shard.get("jobs"),
                         "window_start": shard.get("window_start"), "window_end": shard.get("window_end"),
                         "adopted_count": shard.get("adopted_count"), "generation": shard.get("generation")})
    return rows


def routes(source: UiSource, page_size: int) -> list[web.RouteDef]:
    async def shards(request: web.Request) -> web.Response:
        """``?loaded=true|false`` keeps loaded or dormant shards only, ``name`` one shard, ``silo`` the
        shards of one silo; ``sort`` names a column (``-`` descending)."""
        sort = request.query.get("sort") or "name"
        descending = sort.startswith("-")
        field = sort.lstrip("-")
        if field not in SHARD_SORTS:
            raise web.HTTPBadRequest(text=f"sort: expected one of {', '.join(SHARD_SORTS)}, got {field!r}")
        loaded = request.query.get("loaded")
        if loaded is not None and loaded not in LOADED:
            raise web.HTTPBadRequest(text=f"loaded: expected true or false, got {loaded!r}")
        rows = shard_rows(await request.app[SAMPLER].statuses())
        if loaded is not None:
            rows = [r for r in rows if bool(r["loaded"]) is LOADED[loaded]]
        # An alert's link names one shard; a silo's link names the silo whose shards to show.
        name, silo = request.query.get("name"), request.query.get("silo")
        if name:
            rows = [r for r in rows if r["name"] == name]
        if silo:
            rows = [r for r in rows if str(r["owner"] or "").partition("#")[0] == silo]
        rows.sort(key=sort_key(field), reverse=descending)
        return web.json_response({"sort": sort, "loaded": loaded, "name": name, "silo": silo,
                                  **page_of(request, rows, page_size)})

    return [web.get("/api/shards", shards)]
