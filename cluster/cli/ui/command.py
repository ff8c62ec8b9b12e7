"""``timeshard ui``: the command that serves the dashboard of a running cluster."""

from __future__ import annotations

import argparse
import logging
import os
import ssl
import sys
from typing import Any

from aiohttp import web

from cluster.cli.ui.app import make_app
from cluster.cli.ui.auth import MIN_TOKEN_CHARS, TOKEN_ENV, TokenError, UiToken, check_token, read_token_file, token_required
from cluster.cli.ui.guard import AccessLogger
from cluster.cli.ui.jobs import audit
from cluster.cli.ui.source import UiSource
from cluster.model.errors import ValidationError
from cluster.model.options import DEFAULT_NAMESPACE
from cluster.model.pause import check_by

DEFAULT_PORT = 8470
SHUTDOWN_TIMEOUT_S = 3.0
#: How the server runs, beyond its app: an access log that never shows a query string (``?token=``).
SERVE_OPTIONS: dict[str, Any] = {"access_log_class": AccessLogger}


class TlsError(ValueError):
    """``--certfile``/``--keyfile`` the dashboard cannot serve HTTPS with; the message says why."""


def add_ui_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``timeshard ui``."""
    p = subparsers.add_parser(
        "ui", help="serve a web dashboard of the running cluster",
        description="Serve a dashboard (silos, shards, named jobs, flows) of the silos in a Ray namespace. Binds to "
        f"127.0.0.1 by default; any other --host needs a token (${TOKEN_ENV} or --token-file, at least "
        f"{MIN_TOKEN_CHARS} characters), which every request must then carry (Authorization: Bearer TOKEN, or open "
        "the page once with ?token=TOKEN: it is exchanged for a cookie and dropped from the address). It answers "
        "only to its own addresses (add a reverse proxy's name with --allow-host) and acts only on requests from "
        "its own page. Each action is logged with who did it and why.",
        epilog="examples:\n  timeshard ui\n  timeshard ui --namespace prod --port 9000\n"
        f"  {TOKEN_ENV}=\"$(openssl rand -hex 16)\" timeshard ui --host 0.0.0.0 --certfile cert.pem --keyfile key.pem\n"
        "  timeshard ui --host 0.0.0.0 --token-file ~/.timeshard-ui-tokens --allow-host dash.example.com\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"Ray namespace of the silos (default {DEFAULT_NAMESPACE})")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    given = p.add_mutually_exclusive_group()
    given.add_argument("--token-file", metavar="PATH", default=None,
                       help="file of tokens, one a line: TOKEN, or LABEL TOKEN to record actions as by LABEL")
    given.add_argument("--token", default=None,
                       help=f"the token itself: every user of this machine sees it in `ps`; prefer ${TOKEN_ENV} "
                       "or --token-file")
    p.add_argument("--allow-host", metavar="NAME[:PORT]", action="append", default=[],
                   help="also answer to this host name (a reverse proxy's); repeatable")
    p.add_argument("--user", default=None,
                   help="who the page's actions are recorded as (default: a token's label, else USER@HOST (timeshard ui))")
    p.add_argument("--certfile", default=None, help="serve HTTPS with this certificate (PEM), with --keyfile")
    p.add_argument("--keyfile", default=None, help="the certificate's private key (PEM)")
    p.set_defaults(func=_run_ui)


def tokens_of(args: argparse.Namespace) -> list[UiToken]:
    """The tokens ``timeshard ui`` accepts: ``--token-file``, ``--token`` or ``$TIMESHARD_UI_TOKEN``; none: []."""
    if args.token_file:
        return read_token_file(args.token_file)
    if args.token:
        return [UiToken(check_token(args.token, "--token"))]
    if os.environ.get(TOKEN_ENV):
        return [UiToken(check_token(os.environ[TOKEN_ENV], f"${TOKEN_ENV}"))]
    return []


def tls_of(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The server's TLS context from ``--certfile``/``--keyfile``; None for plain HTTP."""
    if not args.certfile and not args.keyfile:
        return None
    if not (args.certfile and args.keyfile):
        raise TlsError("--certfile and --keyfile go together")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.certfile, args.keyfile)
    except (OSError, ssl.SSLError) as exc:
        raise TlsError(f"cannot load --certfile {args.certfile} / --keyfile {args.keyfile}: {exc}") from None
    return context


def _run_ui(args: argparse.Namespace) -> int:
    try:
        tokens = tokens_of(args)
        tls = tls_of(args)
        if args.user is not None:
            check_by(args.user)
    except (TokenError, TlsError) as exc:
        print(f"timeshard ui: error: {exc}", file=sys.stderr)
        return 2
    except ValidationError as exc:
        print(f"timeshard ui: error: --user: {exc}", file=sys.stderr)
        return 2
    if token_required(args.host) and not tokens:
        print(f"timeshard ui: error: --host {args.host} is reachable from other machines; "
              f"set ${TOKEN_ENV} or --token-file", file=sys.stderr)
        return 2
    from cluster.cli.jobs import _connect, _Failure

    try:
        cluster = _connect(args.namespace)
    except _Failure as exc:
        print(f"timeshard ui: error: {exc}", file=sys.stderr)
        return 1
    client = cluster.client()
    source = UiSource(status=cluster.status, jobs=client.jobs, flows=client.flows, namespace=args.namespace,
                      address=_ray_address(), keeping=cluster.keeping)
    app = make_app(source, tokens=tokens,
                   bound=args.host, allow_hosts=args.allow_host, user=args.user)

    async def close_client(_: web.Application) -> None:
        await client.jobs.close()

    app.on_cleanup.append(close_client)
    _show_audit()
    scheme = "https" if tls else "http"
    print(f"timeshard ui: {scheme}://{args.host}:{args.port}/" + ("?token=..." if tokens else ""), file=sys.stderr)
    # Ctrl-C or SIGTERM stops within seconds: a listing still in flight is cut off, not awaited.
    web.run_app(app, host=args.host, port=args.port, print=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S,
                ssl_context=tls, **SERVE_OPTIONS)
    return 0


def _ray_address() -> str | None:
    """The address of the Ray the dashboard joined (its GCS), for the page's header."""
    import ray

    address = getattr(ray.get_runtime_context(), "gcs_address", None)
    return None if address is None else str(address)


def _show_audit() -> None:
    """Actions taken through the page reach stderr also without ``-v``: they changed the cluster."""
    if audit.level == logging.NOTSET or audit.level > logging.INFO:
        audit.setLevel(logging.INFO)
    if not audit.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s timeshard ui: %(message)s"))
        audit.addHandler(handler)
        audit.propagate = False
