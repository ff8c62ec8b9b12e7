"""The named-jobs page's endpoints: a paged list of a scope, and pause, resume, trigger, delete."""

from __future__ import annotations

from aiohttp import web

from cluster.cli.jobs import named_job_to_json
from cluster.cli.ui.paging import page_of
from cluster.cli.ui.source import UiSource
from cluster.model.errors import JobNotFound, ValidationError

JOB_ACTIONS = ("pause", "resume", "trigger", "delete")


def scope(request: web.Request) -> dict[str, str]:
    """The ``namespace`` and ``app_id`` a request names (``default`` when left out)."""
    return {"namespace": request.query.get("namespace") or "default",
            "app_id": request.query.get("app_id") or "default"}


def routes(source: UiSource, page_size: int) -> list[web.RouteDef]:
    async def jobs(request: web.Request) -> web.Response:
        where = scope(request)
        found = await source.jobs.list(request.query.get("prefix", ""), **where)
        found = sorted(found, key=lambda n: n.name)
        result = page_of(request, found, page_size)
        result["items"] = [named_job_to_json(n) for n in result["items"]]
        return web.json_response({**where, **result})

    async def act(request: web.Request) -> web.Response:
        name, action = request.match_info["name"], request.match_info["action"]
        where = scope(request)
        try:
            if action == "trigger":
                run = await source.jobs.trigger(name, **where)
                return web.json_response({"name": name, "action": action, "run_job_id": run.id})
            if action == "delete":
                if not await source.jobs.delete(name, **where):
                    raise JobNotFound(f"no job named {name!r}")
                return web.json_response({"name": name, "action": action, "deleted": True})
            named = await getattr(source.jobs, action)(name, **where)
        except JobNotFound as exc:
            return web.json_response({"error": str(exc)}, status=404)
        except ValidationError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"name": name, "action": action, "job": named_job_to_json(named)})

    return [web.get("/api/jobs", jobs),
            web.post(r"/api/jobs/{name}/{action:(" + "|".join(JOB_ACTIONS) + ")}", act)]
