"""The named-jobs page's endpoints: a scope paged on the server by cursor, one job, and its actions."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from cluster.cli.jobs import named_job_to_json
from cluster.cli.ui.paging import int_arg
from cluster.cli.ui.source import UiSource
from cluster.model.errors import JobNotFound, ValidationError

JOB_ACTIONS = ("pause", "resume", "trigger", "delete")
#: The most jobs one page of the dashboard asks for: each costs one definition read.
MAX_PAGE_SIZE = 200


def scope(request: web.Request) -> dict[str, str]:
    """The ``namespace`` and ``app_id`` a request names (``default`` when left out)."""
    return {"namespace": request.query.get("namespace") or "default",
            "app_id": request.query.get("app_id") or "default"}


def _bad(exc: ValidationError) -> web.Response:
    return web.json_response({"error": str(exc), "field": exc.field}, status=400)


def routes(source: UiSource, page_size: int) -> list[web.RouteDef]:
    async def jobs(request: web.Request) -> web.Response:
        """One page after the cursor ``after`` (a job name; none: the first page) and the cursor
        to the next (``next``, null at the end). ``count=1`` adds ``total``, which lists the
        scope's names: the page asks for it when its filters change, not every refresh."""
        where = scope(request)
        prefix = request.query.get("prefix", "")
        after = request.query.get("after") or None
        size = min(int_arg(request, "size", page_size, 1), MAX_PAGE_SIZE)
        answer: dict[str, Any] = {**where, "prefix": prefix, "after": after, "size": size}
        try:
            page = await source.jobs.list_page(prefix, after=after, limit=size, **where)
            if request.query.get("count") == "1":
                answer["total"] = await source.jobs.count(prefix, **where)
        except ValidationError as exc:
            return _bad(exc)
        return web.json_response({**answer, "items": [named_job_to_json(n) for n in page.items], "next": page.next})

    async def one(request: web.Request) -> web.Response:
        """One job with its whole status: counters, next fire times, pause, staging, history."""
        name = request.match_info["name"]
        try:
            found = await source.jobs.get(name, **scope(request))
        except ValidationError as exc:
            return _bad(exc)
        if found is None:
            return web.json_response({"error": f"no job named {name!r}"}, status=404)
        return web.json_response(named_job_to_json(found))

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
            return _bad(exc)
        return web.json_response({"name": name, "action": action, "job": named_job_to_json(named)})

    return [web.get("/api/jobs", jobs),
            web.get("/api/jobs/{name}", one),
            web.post(r"/api/jobs/{name}/{action:(" + "|".join(JOB_ACTIONS) + ")}", act)]
