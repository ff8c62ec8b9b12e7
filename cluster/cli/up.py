"""``timeshard up``: silos on a store in the foreground, a live status line, Ctrl-C to stop."""

from __future__ import annotations

import argparse
import logging
import sys
import time

import ray

from cluster._cluster import Cluster, start_or_join_ray
from cluster.client import running_silo_ids
from cluster.model.options import ClusterOptions
from storage import DEFAULT_URL as DEFAULT_STORE
from storage import open_store


def _options(args: argparse.Namespace) -> ClusterOptions:
    changes = {k: v for k, v in (("shard_duration", args.shard_duration), ("lookahead", args.lookahead),
                                 ("placement", getattr(args, "placement", None))) if v}
    return ClusterOptions(**changes)


def _line(statuses: list[dict]) -> str:
    up = [s for s in statuses if "error" not in s]
    counters = [s["counters"] for s in up]
    total = lambda key: sum(c[key] for c in counters)  # noqa: E731
    late = max((c["lateness_max_s"] for c in counters), default=0.0)
    nodes = len({s.get("node") for s in up})
    return (f"silos {len(up)}/{len(statuses)} up on {nodes} node(s)  shards {sum(len(s['shards']) for s in up)}  "
            f"queued {sum(s['queued'] for s in up)}  in flight {sum(s['inflight'] for s in up)}  "
            f"staged {sum(s['staged'] for s in up)}  scheduled {total('scheduled')}  fired {total('fired')}  "
            f"failed {total('failed')}  retried {total('retried')}  max lateness {late * 1000:.0f} ms")


def _start_or_scale(args: argparse.Namespace) -> tuple[Cluster, str]:
    """Start the silos, or scale the ones already running in the namespace to ``--silos``."""
    if running_silo_ids(args.namespace):
        cluster = Cluster.connect(args.namespace)
        if cluster.store_url != args.store and args.store != DEFAULT_STORE:
            raise SystemExit(f"timeshard up: silos in namespace {args.namespace!r} run on {cluster.store_url}, "
                             f"not {args.store}; stop them first or use another --namespace")
        before = len(cluster.silo_ids)
        change = cluster.scale(args.silos)
        what = (f"added silos {', '.join(change['added'])}" if change["added"] else
                f"removed silos {', '.join(change['removed'])} (their shards handed over)" if change["removed"] else
                "nothing to change")
        return cluster, f"scaled from {before} to {len(cluster.silo_ids)} silos: {what}"
    cluster = Cluster.start(args.store, silos=args.silos, namespace=args.namespace, options=_options(args))
    return cluster, f"{args.silos} silos on {args.store}"


def run_up(args: argparse.Namespace) -> int:
    open_store(args.store)  # a bad URL or a missing credential fails here, before Ray starts
    # Ray logs this on every connection to a cluster with a token; it is not the user's concern.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    start_or_join_ray(args.address or None, namespace=args.namespace, include_dashboard=False, log_to_driver=False,
                      configure_logging=False)
    cluster, what = _start_or_scale(args)
    nodes = sorted({s.get("node", "")[:12] for s in cluster.status(timeout=30) if "error" not in s})
    print(f"timeshard up: {what} in Ray namespace {args.namespace!r}, on node(s) {', '.join(nodes)}; "
          f"connect with Cluster.connect(namespace={args.namespace!r}).", flush=True)
    if args.detach:
        print("detached: the silos keep running in Ray, and a keeper on the head starts any that are lost "
              "again; `timeshard status` shows them (live versus target), `timeshard up --silos N --detach` "
              "scales them, `timeshard drain --node NODE` moves them off a node.", flush=True)
        return 0
    print("Ctrl-C stops them.", flush=True)
    tty = sys.stderr.isatty()
    try:
        while True:
            line = _line(cluster.status(timeout=10))
            print(("\r" + line.ljust(120)) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
            time.sleep(1.0 if tty else 10.0)
    except KeyboardInterrupt:
        print("\nstopping: finishing in-flight work and releasing shards ...", file=sys.stderr, flush=True)
        cluster.shutdown(graceful=True)
        ray.shutdown()
    return 0
