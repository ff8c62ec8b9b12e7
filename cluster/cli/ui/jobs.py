"""The named-jobs page's endpoints: a scope paged on the server by cursor, one job, and its actions.

They answer only what the page shows: never a job's ``data`` or ``metadata`` (a payload may hold
what an operator's browser, its cache and its extensions should not see).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

from cluster.cli.job_text import named_job_to_json
from cluster.cli.ui.auth import BY
from cluster.cli.ui.paging import MAX_PAGE_SIZE, size_arg
from cluster.cli.ui.source import UiSource
from cluster.model.errors import JobNotFound, ValidationError
from cluster.model.pause import check_note

JOB_ACTIONS = ("pause", "resume", "trigger", "delete")
#: Who did what through the dashboard, and why: one line an action, shown without ``-v``.
audit = logging.getLogger("timeshard.ui.audit")

ROW_STATUS = ("paused", "finished", "successful", "failed", "consecutive_failures")
#: ``failing=1`` reads at most this many definitions per request to fill a page of failing jobs,
#: then hands back a cursor where it stopped: a scope of 100,000 healthy jobs costs no more.
MAX_SCAN = 1000
DETAIL_FIELDS = ("name", "target", "schedule", "due", "generation", "updated_at")
DETAIL_STATUS = ("successful", "failed", "interrupted", "consecutive_failures", "attempts", "excluded",
                 "overlap_skipped", "paused", "paused_since", "paused_by", "paused_note", "staged", "finished",
                 "next_fires")
HISTORY_FIELDS = ("run_id", "scheduled_for", "started", "lateness_s", "duration_s", "outcome", "triggered", "error")
NEXT_FIRES_LISTED = 3


def job_row(named: Any) -> dict[str, Any]:
    """A job as one row of the list: schedule, target, state, counts, next three fire times, last
    outcome, and the outcomes of its recent attempts (newest first) for the row's strip."""
    shown = named_job_to_json(named)
    status = shown["status"]
    last = status["last_attempt"]
    return {"name": named.name, "schedule": shown["schedule"], "due": shown["due"], "target": shown["target"],
            "status": {**{k: status[k] for k in ROW_STATUS}, "next_fires": status["next_fires"][:NEXT_FIRES_LISTED],
                       "last_attempt": None if last is None else {"outcome": last["outcome"], "ended_at": last["ended_at"]},
                       "recent": [{"outcome": h["outcome"], "scheduled_for": h["scheduled_for"], "triggered": h["triggered"]}
                                  for h in status["history"]]}}


def failing(named: Any) -> bool:
    """A job whose last attempt failed, or that is failing again and again."""
    status = named.status
    last = status.last_attempt
    return bool(status.consecutive_failures) or (last is not None and last.outcome == "failed")


async def failing_page(jobs: Any, prefix: str, after: str | None, size: int,
                       where: dict[str, str]) -> tuple[list[Any], str | None, int]:
    """Up to ``size`` failing jobs after ``after``, reading at most ``MAX_SCAN`` definitions: them,
    the cursor to go on from (the last name read; None at the end) and how many were read."""
    found: list[Any] = []
    scanned, cursor = 0, after
    while True:
        page = await jobs.list_page(prefix, after=cursor, limit=min(MAX_PAGE_SIZE, MAX_SCAN - scanned), **where)
        for i, named in enumerate(page.items):
            scanned, cursor = scanned + 1, named.name
            if failing(named):
                found.append(named)
            if len(found) == size or scanned >= MAX_SCAN:
                more = i < len(page.items) - 1 or page.next is not None
                return found, cursor if more else None, scanned
        if page.next is None:
            return found, None, scanned


def job_detail(named: Any) -> dict[str, Any]:
    """A job as its detail shows it: definition, counters, pause, staging, next fires and attempts."""
    shown = named_job_to_json(named)
    status = shown["status"]
    running = status["current_attempt"]
    return {**{k: shown[k] for k in DETAIL_FIELDS}, "status": {
        **{k: status[k] for k in DETAIL_STATUS},
        "current_attempt": None if running is None else {"attempt": running["attempt"], "started_at": running["started_at"]},
        "history": [{k: row[k] for k in HISTORY_FIELDS} for row in status["history"]]}}


def scope(request: web.Request) -> dict[str, str]:
    """The ``namespace`` and ``app_id`` a request names (``default`` when left out)."""
    return {"namespace": request.query.get("namespace") or "default",
            "app_id": request.query.get("app_id") or "default"}


def _bad(exc: ValidationError) -> web.Response:
    return web.json_response({"error": str(exc), "field": exc.field}, status=400)


async def action_note(request: web.Request) -> str | None:
    """The ``note`` of an action's JSON body (why it was done), checked like a pause note; None without one."""
    if not request.can_read_body:
        return None
    try:
        body = await request.json()
    except ValueError:
        raise web.HTTPBadRequest(text="the body must be JSON, as {\"note\": \"why\"}") from None
    note = body.get("note") if isinstance(body, dict) else None
    return check_note(note or None)


def record(request: web.Request, what: str, note: str | None, outcome: str) -> None:
    """One audit line: what was done to what, by whom, why, and how it ended."""
    audit.info("%s by %s%s: %s", what, request[BY], f" (note: {note!r})" if note else "", outcome)


def routes(source: UiSource, page_size: int) -> list[web.RouteDef]:
    async def jobs(request: web.Request) -> web.Response:
        """One page after the cursor ``after`` (a job name; none: the first page) and the cursor
        to the next (``next``, null at the end). ``count=1`` adds ``total``, which lists the
        scope's names: the page asks for it when its filters change, not every refresh."""
        where = scope(request)
        prefix = request.query.get("prefix", "")
        after = request.query.get("after") or None
        size = size_arg(request, page_size)
        answer: dict[str, Any] = {**where, "prefix": prefix, "after": after, "size": size}
        try:
            if request.query.get("failing") == "1":
                found, cursor, scanned = await failing_page(source.jobs, prefix, after, size, where)
                return web.json_response({**answer, "failing": True, "scanned": scanned,
                                          "items": [job_row(n) for n in found], "next": cursor})
            page = await source.jobs.list_page(prefix, after=after, limit=size, **where)
            if request.query.get("count") == "1":
                answer["total"] = await source.jobs.count(prefix, **where)
        except ValidationError as exc:
            return _bad(exc)
        return web.json_response({**answer, "items": [job_row(n) for n in page.items], "next": page.next})

    async def one(request: web.Request) -> web.Response:
        """One job with its whole status: counters, next fire times, pause, staging, history."""
        name = request.match_info["name"]
        try:
            found = await source.jobs.get(name, **scope(request))
        except ValidationError as exc:
            return _bad(exc)
        if found is None:
            return web.json_response({"error": f"no job named {name!r}"}, status=404)
        return web.json_response(job_detail(found))

    async def act(request: web.Request) -> web.Response:
        name, action = request.match_info["name"], request.match_info["action"]
        where = scope(request)
        what = f"{action} job {name!r} (namespace {where['namespace']!r}, app_id {where['app_id']!r})"
        try:
            note = await action_note(request)
            answer = await _act(source, request, name, action, note, where)
        except JobNotFound as exc:
            record(request, what, None, f"not found: {exc}")
            return web.json_response({"error": str(exc)}, status=404)
        except ValidationError as exc:
            return _bad(exc)
        record(request, what, note, "done")
        return web.json_response(answer)

    return [web.get("/api/jobs", jobs),
            web.get("/api/jobs/{name}", one),
            web.post(r"/api/jobs/{name}/{action:(" + "|".join(JOB_ACTIONS) + ")}", act)]


async def _act(source: UiSource, request: web.Request, name: str, action: str, note: str | None,
               where: dict[str, str]) -> dict[str, Any]:
    if action == "trigger":
        run = await source.jobs.trigger(name, **where)
        return {"name": name, "action": action, "run_job_id": run.id}
    if action == "delete":
        if not await source.jobs.delete(name, **where):
            raise JobNotFound(f"no job named {name!r}")
        return {"name": name, "action": action, "deleted": True}
    if action == "pause":
        named = await source.jobs.pause(name, note=note, by=request[BY], **where)
    else:
        named = await source.jobs.resume(name, **where)
    return {"name": name, "action": action, "job": job_detail(named)}
