"""``timeshard ui``: a dashboard an operator can leave open in a browser tab.

    timeshard ui                                          # http://127.0.0.1:8470, this machine only
    TIMESHARD_UI_TOKEN=... timeshard ui --host 0.0.0.0    # reachable from elsewhere: the token is required

The pages are static files of this package (no CDN, works offline) that poll JSON endpoints.
Lists are paged on the server. The app sees the cluster only through a ``UiSource``: a
``status()`` callable (``Cluster.status``) and the public ``client.jobs`` and ``client.flows`` APIs,
so tests hand it fakes. ``sampler`` reads the silos once per interval for every page; one module
per page serves that page's endpoints: ``overview``, ``shards``, ``jobs``, ``flows``. ``guard``
keeps other web pages out (Host, forgery, framing), ``auth`` checks the token.
"""

from cluster.cli.ui.app import make_app, page
from cluster.cli.ui.auth import MIN_TOKEN_CHARS, TOKEN_ENV, TokenError, UiToken, token_required
from cluster.cli.ui.command import add_ui_command
from cluster.cli.ui.guard import CSRF_HEADER
from cluster.cli.ui.source import UiSource

__all__ = ["CSRF_HEADER", "MIN_TOKEN_CHARS", "TOKEN_ENV", "TokenError", "UiSource", "UiToken", "add_ui_command",
           "make_app", "page", "token_required"]
