"""``timeshard up``: silos on a store in the foreground, a live status line, Ctrl-C to stop."""

from __future__ import annotations

import argparse
import sys
import time

import ray

from cluster._cluster import Cluster
from cluster.model.options import ClusterOptions
from storage import open_store


def _options(args: argparse.Namespace) -> ClusterOptions:
    changes = {k: v for k, v in (("shard_duration", args.shard_duration), ("lookahead", args.lookahead)) if v}
    return ClusterOptions(**changes)


def _line(statuses: list[dict]) -> str:
    up = [s for s in statuses if "error" not in s]
    counters = [s["counters"] for s in up]
    total = lambda key: sum(c[key] for c in counters)  # noqa: E731
    late = max((c["lateness_max_s"] for c in counters), default=0.0)
    return (f"silos {len(up)}/{len(statuses)} up  shards {sum(len(s['shards']) for s in up)}  "
            f"queued {sum(s['queued'] for s in up)}  in flight {sum(s['inflight'] for s in up)}  "
            f"staged {sum(s['staged'] for s in up)}  scheduled {total('scheduled')}  fired {total('fired')}  "
            f"failed {total('failed')}  retried {total('retried')}  max lateness {late * 1000:.0f} ms")


def run_up(args: argparse.Namespace) -> int:
    open_store(args.store)  # a bad URL or a missing credential fails here, before Ray starts
    ray.init(namespace=args.namespace, include_dashboard=False, log_to_driver=False, configure_logging=False)
    cluster = Cluster.start(args.store, silos=args.silos, namespace=args.namespace, options=_options(args))
    print(f"timeshard up: {args.silos} silos on {args.store} in Ray namespace {args.namespace!r}; "
          f"connect with Cluster.connect(namespace={args.namespace!r}). Ctrl-C stops.", flush=True)
    tty = sys.stderr.isatty()
    try:
        while True:
            line = _line(cluster.status(timeout=10))
            print(("\r" + line.ljust(110)) if tty else line, end="" if tty else "\n", file=sys.stderr, flush=True)
            time.sleep(1.0 if tty else 10.0)
    except KeyboardInterrupt:
        print("\nstopping: finishing in-flight work and releasing shards ...", file=sys.stderr, flush=True)
        cluster.shutdown(graceful=True)
        ray.shutdown()
    return 0
