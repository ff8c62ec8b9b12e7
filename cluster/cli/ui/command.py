"""``timeshard ui``: the command that serves the dashboard of a running cluster."""

from __future__ import annotations

import argparse
import os
import sys

from aiohttp import web

from cluster.cli.ui.app import make_app
from cluster.cli.ui.auth import TOKEN_ENV, token_required
from cluster.cli.ui.source import UiSource
from cluster.model.options import DEFAULT_NAMESPACE

DEFAULT_PORT = 8470
SHUTDOWN_TIMEOUT_S = 3.0


def add_ui_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``timeshard ui``."""
    p = subparsers.add_parser(
        "ui", help="serve a web dashboard of the running cluster",
        description="Serve a dashboard (silos, shards, named jobs, flows) of the silos in a Ray namespace. Binds to "
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
    app = make_app(UiSource(status=cluster.status, jobs=client.jobs, flows=client.flows), token=token)

    async def close_client(_: web.Application) -> None:
        await client.jobs.close()

    app.on_cleanup.append(close_client)
    print(f"timeshard ui: http://{args.host}:{args.port}/" + ("?token=..." if token else ""), file=sys.stderr)
    # Ctrl-C or SIGTERM stops within seconds: a listing still in flight is cut off, not awaited.
    web.run_app(app, host=args.host, port=args.port, print=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    return 0


