"""The flows page's endpoints: a paged list of flows, one flow with every step, and cancel."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from cluster.cli.ui.jobs import action_note, record
from cluster.cli.ui.paging import MAX_PAGE, int_arg, size_arg
from cluster.cli.ui.source import UiSource
from cluster.flows.log import FlowLogDamaged
from cluster.model.errors import ValidationError


def iso(at: datetime | None) -> str | None:
    """A time as ISO 8601 text (what the browser's ``Date`` parses); None stays None."""
    return None if at is None else at.isoformat()


def flow_summary(flow: Any) -> dict[str, Any]:
    """A ``FlowStatus`` as one row of the list: its state, times and how many steps succeeded."""
    steps = flow.steps.values()
    return {"name": flow.name, "id": flow.id, "state": flow.state, "halted_by": flow.halted_by,
            "created_at": iso(flow.created_at), "ended_at": iso(flow.ended_at),
            "steps_done": sum(1 for s in steps if s.state == "succeeded"), "steps_total": len(flow.steps)}


def flow_to_json(flow: Any) -> dict[str, Any]:
    """A ``FlowStatus`` with every step (dependencies first): state, attempts, next retry, times,
    last error, what it depends on, its job's id and the shard that holds the job."""
    steps = [{"name": s.name, "state": s.state, "attempts": s.attempts, "next_retry": iso(s.next_retry),
              "started_at": iso(s.started_at), "ended_at": iso(s.ended_at), "error": s.error,
              "depends_on": list(s.depends_on), "job_id": s.job_id,
              "shard": s.shard} for s in flow.steps.values()]
    return {**flow_summary(flow), "steps": steps}


def routes(source: UiSource, page_size: int) -> list[web.RouteDef]:
    def api() -> Any:
        if source.flows is None:
            raise web.HTTPServiceUnavailable(text="flows: this dashboard was started without client.flows")
        return source.flows

    async def flows(request: web.Request) -> web.Response:
        size = size_arg(request, page_size)
        number = int_arg(request, "page", 1, 1, MAX_PAGE)
        state = request.query.get("state") or None
        try:
            found = await api().page(request.query.get("prefix", ""), state=state,
                                     offset=(number - 1) * size, limit=size)
        except ValidationError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"page": number, "size": size, "total": found.total,
                                  "pages": max(1, -(-found.total // size)),
                                  "items": [flow_summary(f) for f in found.flows],
                                  "damaged": [{"name": d.name, "reason": d.reason} for d in found.damaged]})

    async def flow(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            found = await api().get(name)
        except FlowLogDamaged as exc:
            return web.json_response({"error": f"flow {name!r}: its log is damaged: {exc}"}, status=409)
        if found is None:
            return web.json_response({"error": f"no flow named {name!r}"}, status=404)
        return web.json_response(flow_to_json(found))

    async def cancel(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        try:
            note = await action_note(request)
        except ValidationError as exc:
            return web.json_response({"error": str(exc), "field": exc.field}, status=400)
        what = f"cancel flow {name!r}"
        try:
            if await api().cancel(name):
                record(request, what, note, "done")
                return web.json_response({"name": name, "action": "cancel", "cancelled": True})
            found = await api().get(name)
        except FlowLogDamaged as exc:
            record(request, what, note, f"refused: its log is damaged: {exc}")
            return web.json_response({"error": f"flow {name!r}: its log is damaged: {exc}"}, status=409)
        if found is None:
            record(request, what, note, "not found")
            return web.json_response({"error": f"no flow named {name!r}"}, status=404)
        record(request, what, note, f"refused: already {found.state}")
        return web.json_response({"error": f"flow {name!r} is already {found.state}"}, status=409)

    return [web.get("/api/flows", flows),
            web.get("/api/flows/{name}", flow),
            web.post("/api/flows/{name}/cancel", cancel)]
