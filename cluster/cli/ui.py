"""``timeshard ui``: a dashboard an operator can leave open in a browser tab.

    timeshard ui                                  # http://127.0.0.1:8470, this machine only
    timeshard ui --host 0.0.0.0 --token s3cret    # reachable from elsewhere: the token is required

The page is one self-contained HTML document (no CDN, works offline) that polls JSON endpoints
every 2 s. Lists are paged on the server. The app sees the cluster only through what it is given:
a ``status()`` callable (``Cluster.status``) and the public ``client.jobs`` API, so tests hand it
fakes.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cluster.cli.jobs import named_job_to_json
from cluster.model.errors import JobNotFound, ValidationError
from cluster.model.options import DEFAULT_NAMESPACE

__all__ = ["UiSource", "add_ui_command", "make_app", "page", "token_required"]

TOKEN_ENV = "TIMESHARD_UI_TOKEN"
DEFAULT_PORT = 8470
PAGE_SIZE = 50
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
SHARD_SORTS = ("name", "owner", "state", "jobs", "window_start", "adopted_count")
JOB_ACTIONS = ("pause", "resume", "trigger", "delete")


@dataclass(frozen=True)
class UiSource:
    """What the dashboard reads and acts through: silo statuses (blocking, run off the loop) and
    the named-jobs API (``client.jobs``)."""

    status: Callable[[], list[dict[str, Any]]]
    jobs: Any


def token_required(host: str) -> bool:
    """True when ``host`` is reachable from other machines, so requests must carry a token."""
    return host not in LOOPBACK


# -- paging -----------------------------------------------------------------------------------

def _int_arg(request: web.Request, name: str, default: int, minimum: int) -> int:
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


def _page(request: web.Request, items: Sequence[Any], page_size: int) -> dict[str, Any]:
    """One page of ``items``: ``page`` (1-based), ``pages``, ``total`` and the ``items``."""
    size = _int_arg(request, "size", page_size, 1)
    number = _int_arg(request, "page", 1, 1)
    start = (number - 1) * size
    return {"page": number, "size": size, "total": len(items), "pages": max(1, -(-len(items) // size)),
            "items": list(items[start:start + size])}


# -- views ------------------------------------------------------------------------------------

def _silo_row(s: dict[str, Any]) -> dict[str, Any]:
    silo_id, _, incarnation = str(s.get("owner") or "").partition("#")
    return {
        "silo_id": s.get("silo_id"), "incarnation": incarnation or None, "node": s.get("node"),
        "lease_age": s.get("lease_age"), "lease_left": s.get("lease_left"),
        "queued": s.get("queued"), "inflight": s.get("inflight"), "staged": s.get("staged"),
        "shards": len(s.get("shards") or ()), "quarantined": list(s.get("quarantined") or ()),
        "damaged": sorted(s.get("damaged") or {}), "counters": s.get("counters") or {},
        "error": s.get("error"),
    }


def _shard_rows(statuses: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in statuses:
        for shard in s.get("shards") or ():
            rows.append({"name": shard.get("name"), "owner": s.get("owner"), "state": shard.get("state"),
                         "loaded": shard.get("loaded"), "jobs": shard.get("jobs"),
                         "window_start": shard.get("window_start"), "window_end": shard.get("window_end"),
                         "adopted_count": shard.get("adopted_count"), "paused": shard.get("paused"),
                         "unreadable": shard.get("unreadable")})
    return rows


def _sort_key(field: str) -> Callable[[dict[str, Any]], tuple[bool, float, str]]:
    # None sorts last; numbers by value, the rest as text, so a mixed column never breaks the sort.
    def key(row: dict[str, Any]) -> tuple[bool, float, str]:
        value = row.get(field)
        number = float(value) if isinstance(value, (int, float)) else 0.0
        return (value is None, number, "" if isinstance(value, (int, float)) else str(value))
    return key


# -- the app ----------------------------------------------------------------------------------

def make_app(source: UiSource, *, token: str | None = None, page_size: int = PAGE_SIZE) -> web.Application:
    """The dashboard as an aiohttp app; with ``token``, every request must carry it."""
    middlewares = [_token_middleware(token)] if token else []
    app = web.Application(middlewares=middlewares)

    async def statuses() -> list[dict[str, Any]]:
        return await asyncio.to_thread(source.status)

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=page(), content_type="text/html")

    async def overview(request: web.Request) -> web.Response:
        silos = await statuses()
        return web.json_response({"silos": [_silo_row(s) for s in silos]})

    async def shards(request: web.Request) -> web.Response:
        sort = request.query.get("sort") or "name"
        descending = sort.startswith("-")
        field = sort.lstrip("-")
        if field not in SHARD_SORTS:
            raise web.HTTPBadRequest(text=f"sort: expected one of {', '.join(SHARD_SORTS)}, got {field!r}")
        rows = sorted(_shard_rows(await statuses()), key=_sort_key(field), reverse=descending)
        return web.json_response({"sort": sort, **_page(request, rows, page_size)})

    async def jobs(request: web.Request) -> web.Response:
        scope = _scope(request)
        # The client lists a whole scope; paging it here keeps the page light (issue 17 point 3).
        found = await source.jobs.list(request.query.get("prefix", ""), **scope)
        found = sorted(found, key=lambda n: n.name)
        result = _page(request, found, page_size)
        result["items"] = [named_job_to_json(n) for n in result["items"]]
        return web.json_response({**scope, **result})

    async def act(request: web.Request) -> web.Response:
        name, action = request.match_info["name"], request.match_info["action"]
        scope = _scope(request)
        try:
            if action == "trigger":
                run = await source.jobs.trigger(name, **scope)
                return web.json_response({"name": name, "action": action, "run_job_id": run.id})
            if action == "delete":
                if not await source.jobs.delete(name, **scope):
                    raise JobNotFound(f"no job named {name!r}")
                return web.json_response({"name": name, "action": action, "deleted": True})
            named = await getattr(source.jobs, action)(name, **scope)
        except JobNotFound as exc:
            return web.json_response({"error": str(exc)}, status=404)
        except ValidationError as exc:
            return web.json_response({"error": str(exc)}, status=400)
        return web.json_response({"name": name, "action": action, "job": named_job_to_json(named)})

    app.router.add_get("/", index)
    app.router.add_get("/api/overview", overview)
    app.router.add_get("/api/shards", shards)
    app.router.add_get("/api/jobs", jobs)
    app.router.add_post(r"/api/jobs/{name}/{action:(pause|resume|trigger|delete)}", act)
    return app


def _scope(request: web.Request) -> dict[str, str]:
    return {"namespace": request.query.get("namespace") or "default",
            "app_id": request.query.get("app_id") or "default"}


def _token_middleware(token: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    expected = token.encode()

    def matches(given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), expected)

    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        bearer = header[len("Bearer "):] if header.startswith("Bearer ") else None
        if matches(bearer) or matches(request.cookies.get("token")):
            return await handler(request)
        if matches(request.query.get("token")):
            # First visit with ?token=: remember it so the page's own requests carry it.
            response = await handler(request)
            response.set_cookie("token", token, httponly=True, samesite="Strict")
            return response
        return web.json_response({"error": "missing or wrong token"}, status=401)

    return check


# -- the command ------------------------------------------------------------------------------

def add_ui_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``timeshard ui``."""
    p = subparsers.add_parser(
        "ui", help="serve a web dashboard of the running cluster",
        description="Serve a dashboard (silos, shards, named jobs) of the silos in a Ray namespace. Binds to "
        f"127.0.0.1 by default; any other --host needs --token (or ${TOKEN_ENV}), which every request must "
        "then carry (Authorization: Bearer TOKEN, or open the page once with ?token=TOKEN).",
        epilog="examples:\n  timeshard ui\n  timeshard ui --namespace prod --port 9000\n"
        "  timeshard ui --host 0.0.0.0 --token \"$(openssl rand -hex 16)\"\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"Ray namespace of the silos (default {DEFAULT_NAMESPACE})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--token", default=None, help=f"token every request must carry (default ${TOKEN_ENV})")
    p.set_defaults(func=_run_ui)


def _run_ui(args: argparse.Namespace) -> int:
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token_required(args.host) and not token:
        print(f"timeshard ui: error: --host {args.host} is reachable from other machines; "
              f"set --token or ${TOKEN_ENV}", file=sys.stderr)
        return 2
    from cluster.cli.jobs import _connect, _Failure

    try:
        cluster = _connect(args.namespace)
    except _Failure as exc:
        print(f"timeshard ui: error: {exc}", file=sys.stderr)
        return 1
    client = cluster.client()
    app = make_app(UiSource(status=cluster.status, jobs=client.jobs), token=token)

    async def close_client(_: web.Application) -> None:
        await client.jobs.close()

    app.on_cleanup.append(close_client)
    print(f"timeshard ui: http://{args.host}:{args.port}/" + ("?token=..." if token else ""), file=sys.stderr)
    web.run_app(app, host=args.host, port=args.port, print=None)
    return 0


def page() -> str:
    """The dashboard's HTML: inline CSS and JS, no external resources."""
    return _PAGE


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>timeshard</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#223;color:#fff;padding:8px 16px;display:flex;gap:16px;align-items:center}
header button{background:none;border:0;color:#ccd;font:inherit;cursor:pointer;padding:4px 8px}
header button.on{color:#fff;border-bottom:2px solid #8af}
main{padding:12px 16px}table{border-collapse:collapse;width:100%;background:#fff}
th,td{border-bottom:1px solid #ddd;padding:4px 8px;text-align:left;white-space:nowrap}
th{cursor:pointer;background:#eef}.err{color:#b00}.muted{color:#888}
#status{margin-left:auto;font-size:12px}input{margin-right:8px}
</style></head><body>
<header><b>timeshard</b>
<button data-tab="overview" class="on">Overview</button><button data-tab="shards">Shards</button>
<button data-tab="jobs">Named jobs</button><span id="status" class="muted"></span></header>
<main>
<section id="overview"></section>
<section id="shards" hidden></section>
<section id="jobs" hidden><div>
<input id="f-ns" placeholder="namespace (default)"><input id="f-app" placeholder="app_id (default)">
<input id="f-prefix" placeholder="name prefix"></div><div id="jobs-table"></div></section>
</main>
<script>
"use strict";
let tab="overview", shardSort="name", shardPage=1, jobPage=1;
const $=id=>document.getElementById(id);
const esc=v=>String(v==null?"":v).replace(/[&<>"']/g,c=>"&#"+c.charCodeAt(0)+";");
function table(cols,rows,sortable){
  let h="<table><tr>"+cols.map(c=>"<th"+(sortable?" data-sort='"+c[0]+"'":"")+">"+esc(c[1])+"</th>").join("")+"</tr>";
  for(const r of rows) h+="<tr>"+cols.map(c=>"<td>"+(c[2]?c[2](r):esc(r[c[0]]))+"</td>").join("")+"</tr>";
  return h+"</table>";
}
function pager(p,fn){return "<p>page "+p.page+" of "+p.pages+" ("+p.total+") "+
  (p.page>1?"<button onclick='"+fn+"(-1)'>&lt;</button>":"")+(p.page<p.pages?"<button onclick='"+fn+"(1)'>&gt;</button>":"")+"</p>";}
async function get(url){const r=await fetch(url,{credentials:"same-origin"});if(!r.ok)throw new Error(r.status+" "+await r.text());return r.json();}
async function overview(){
  const d=await get("api/overview");
  $("overview").innerHTML=table([["silo_id","silo"],["incarnation","incarnation"],["node","node"],["lease_age","lease age"],
    ["queued","queued"],["inflight","in flight"],["staged","staged"],["shards","shards"],
    ["quarantined","quarantined",r=>esc(r.quarantined.join(", "))],["error","error",r=>"<span class=err>"+esc(r.error)+"</span>"]],d.silos);
}
async function shards(){
  const d=await get("api/shards?sort="+encodeURIComponent(shardSort)+"&page="+shardPage);
  $("shards").innerHTML=pager(d,"shardMove")+table([["name","shard"],["owner","owner"],["state","state"],["loaded","loaded"],
    ["jobs","jobs"],["window_start","window"],["adopted_count","adopted"]],d.items,true);
}
function shardMove(n){shardPage+=n;refresh();}
function scopeQuery(){return "namespace="+encodeURIComponent($("f-ns").value)+"&app_id="+encodeURIComponent($("f-app").value);}
async function jobs(){
  const d=await get("api/jobs?"+scopeQuery()+"&prefix="+encodeURIComponent($("f-prefix").value)+"&page="+jobPage);
  const btn=(r,a)=>"<button onclick=\\"act('"+a+"','"+encodeURIComponent(r.name)+"')\\">"+a+"</button>";
  $("jobs-table").innerHTML=pager(d,"jobMove")+table([["name","name"],
    ["state","state",r=>r.status.paused?"paused":(r.status.finished?"finished":"active")],
    ["ok","ok / failed",r=>esc(r.status.successful)+" / "+esc(r.status.failed)],
    ["next","next fires",r=>esc((r.status.next_fires||[]).slice(0,3).join(", "))],
    ["last","last attempt",r=>esc(r.status.last_attempt?JSON.stringify(r.status.last_attempt):"")],
    ["act","",r=>btn(r,r.status.paused?"resume":"pause")+btn(r,"trigger")+btn(r,"delete")]],d.items);
}
function jobMove(n){jobPage+=n;refresh();}
async function act(action,name){
  if(!confirm(action+" "+decodeURIComponent(name)+"?"))return;
  const r=await fetch("api/jobs/"+name+"/"+action+"?"+scopeQuery(),{method:"POST",credentials:"same-origin"});
  $("status").textContent=action+" "+decodeURIComponent(name)+": "+(r.ok?"done":(await r.text()));refresh();
}
async function refresh(){
  try{await {overview,shards,jobs}[tab]();$("status").textContent="updated "+new Date().toLocaleTimeString();$("status").className="muted";}
  catch(e){$("status").textContent=String(e);$("status").className="err";}
}
document.querySelectorAll("header button").forEach(b=>b.onclick=()=>{
  tab=b.dataset.tab;document.querySelectorAll("header button").forEach(x=>x.classList.toggle("on",x===b));
  document.querySelectorAll("main section").forEach(s=>s.hidden=s.id!==tab);refresh();});
$("shards").onclick=e=>{const s=e.target.dataset&&e.target.dataset.sort;if(s){shardSort=shardSort===s?"-"+s:s;shardPage=1;refresh();}};
["f-ns","f-app","f-prefix"].forEach(id=>$(id).oninput=()=>{jobPage=1;refresh();});
refresh();setInterval(refresh,2000);
</script></body></html>
"""
