"""``timeshard drain --node NODE``: move a node's silos off it gracefully, before the node goes.

For a Kubernetes preStop hook in the Ray worker container (``--node self``: the Ray node of the
pod the hook runs in), or an operator before a node's maintenance. The keeper places no silo on
the node from then on; the node's silos finish their attempts in flight, release their shards
(peers adopt them at once) and stop; the keeper starts them again on other nodes.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from cluster.cli.jobs import _connect, _Failure, _show
from cluster.model.options import DEFAULT_NAMESPACE

EXAMPLES = """examples:
  timeshard drain --node self                      # in a preStop hook: this pod's Ray node
  timeshard drain --node 10.244.1.17 --wait 60     # by address; wait for the count to be back
  timeshard drain --node 3f2a9c --undo             # place silos on that node again
"""


def resolve_node(spec: str, nodes: list[dict[str, Any]], here: str) -> str:
    """The alive Ray node ``spec`` names: ``self`` (``here``), a node id or its unique prefix, or
    the node's IP address or host name."""
    alive = [n for n in nodes if n.get("Alive")]
    if spec == "self":
        return here
    exact = [n["NodeID"] for n in alive if spec in (n["NodeID"], n.get("NodeManagerAddress"), n.get("NodeManagerHostname"))]
    found = exact or [n["NodeID"] for n in alive if n["NodeID"].startswith(spec)]
    if len(found) != 1:
        known = ", ".join(f"{n['NodeID'][:12]} ({n.get('NodeManagerAddress')})" for n in alive)
        raise _Failure(f"--node {spec!r} names {'no' if not found else 'more than one'} alive Ray node; alive: {known}")
    return str(found[0])


def _drain(args: argparse.Namespace) -> int:
    import ray

    try:
        cluster = _connect(args.namespace)
        node = resolve_node(args.node, ray.nodes(), ray.get_runtime_context().get_node_id())
        keeper = cluster.keeper()
        if keeper is None:
            raise _Failure(f"no keeper runs in namespace {args.namespace!r}: nothing would start the silos again "
                           "elsewhere; start the silos with `timeshard up` (it starts one)")
        if args.undo:
            was = ray.get(keeper.undrain.remote(node), timeout=30)
            _show(args, {"node": node, "was_draining": was},
                  lambda r: f"node {node[:12]}: silos may be placed there again"
                  + ("" if r["was_draining"] else " (it was not draining)"))
            return 0
        done = cluster.drain(node, timeout=args.timeout, wait=args.wait)
    except _Failure as exc:
        print(f"timeshard: error: {exc}", file=sys.stderr)
        return 1
    _show(args, done, _drained_text)
    return 0 if not args.wait or done["back_s"] is not None else 1


def _drained_text(done: dict[str, Any]) -> str:
    stopped = ", ".join(done["stopped"]) or "none"
    line = f"node {done['node'][:12]} drained: silo(s) {stopped} stopped gracefully in {done['stop_s']:.1f} s"
    if done.get("back_s") is not None:
        line += f"; silo count back at target after {done['back_s']:.1f} s"
    elif done["stopped"]:
        line += "; the keeper starts them on other nodes"
    return line


def add_drain_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "drain", help="move a node's silos off it gracefully (a preStop hook, a node's maintenance)",
        description="Place no silo on NODE from now on, and stop its silos gracefully: each finishes its attempts "
        "in flight and releases its shards, which peers adopt at once; the keeper starts them again on other nodes. "
        "Exit 1 if --wait runs out before the silo count is back at its target.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--node", required=True,
                   help="'self' (the Ray node this command runs on), a node id or prefix, or an IP address")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="Ray namespace (default timeshard)")
    p.add_argument("--timeout", type=float, default=20.0,
                   help="seconds a silo gets to finish its attempts in flight (default 20)")
    p.add_argument("--wait", type=float, default=0.0,
                   help="then wait up to this many seconds for the silo count to be back at target (default 0)")
    p.add_argument("--undo", action="store_true", help="let silos be placed on NODE again")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=_drain)
