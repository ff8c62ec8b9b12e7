"""The many-machines drill: a Ray cluster of a head and worker nodes on this machine, one silo per
worker node, a steady load; then a whole worker node is lost, and the cluster is scaled up and
down while jobs keep falling due.

Losing a node is simulated the honest way: every process of that Ray node (its raylet and the
worker processes under it, the silo's among them) is SIGKILLed at once, as when a machine loses
power, and the node is removed from the cluster. ``ray.cluster_utils.Cluster.remove_node`` alone
kills the raylet but leaves its workers running, which is a partition, not a lost machine.

Checked with the cluster's default options, on top of every check of ``timeshard drill``:
- the silos started one per worker node (placement);
- failover: the lost node's jobs fire elsewhere within ``failover_bound``; the figure is the
  time from the node's loss to the first fire of its jobs by another silo;
- scaling up under load: the new silos are placed on nodes, and the shards rebalance (no silo
  holds more than its fair share, as seen in the store) within ``REBALANCE_BOUND_S``;
- scaling down under load: the removed silos hand their shards over; nothing lost or early.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

from cluster._cluster import LOCAL_RAY_CONFIG, Cluster
from cluster.cli.drill import DRILL_OPTIONS, _say, _victim, run_drill
from cluster.cli.drill_analysis import DrillReport, Event
from cluster.runtime.membership import DEAD, LEAVING, MEMBER_PREFIX, Member, parse_owner
from cluster.runtime.shardlog import SHARD_PREFIX
from storage import StorageError, Store, open_store
from storage.generations import list_logs

NAMESPACE = "timeshard-nodes"
#: Rebalancing after a scale-up is due within this many seconds: the new silos' first adoption
#: round plus the hand-over rounds of the old ones (every ``adoption_interval``, 2 s by default),
#: each hand-over waiting for the runs in flight of its shard.
REBALANCE_BOUND_S = 12.0
#: How long the load runs after the scaling steps, so that moved shards fire what is due.
SCALE_SPAN_S = 24.0


@dataclass
class NodeDrillReport:
    """The drill's checks (``drill``) plus where silos ran and how long rebalancing took."""

    drill: DrillReport
    nodes: int
    placement: dict[str, str]  # silo -> node id, at the start
    spread_ok: bool
    lost_node: str = ""
    scaled_up_to: int = 0
    scale_up_s: float = 0.0  # Cluster.scale up, called -> returned (new silos placed and serving)
    rebalanced_s: float | None = None  # scale-up returned -> no silo above its fair share (store)
    placement_after_scale: dict[str, str] = field(default_factory=dict)
    scaled_down_to: int = 0

    @property
    def ok(self) -> bool:
        return (self.drill.ok and self.spread_ok and self.rebalanced_s is not None
                and self.rebalanced_s <= REBALANCE_BOUND_S)

    def table(self) -> str:
        rows = [
            ("Ray nodes (head + workers)", self.nodes),
            ("silos spread one per worker node", "yes" if self.spread_ok else f"NO: {self.placement}"),
            ("node lost", self.lost_node[:12]),
            ("scaled up to", f"{self.scaled_up_to} silos on {len(set(self.placement_after_scale.values()))} nodes "
             f"in {self.scale_up_s:.2f} s"),
            ("rebalanced after scale-up", "never" if self.rebalanced_s is None
             else f"{self.rebalanced_s:.2f} s (bound {REBALANCE_BOUND_S:.0f} s)"),
            ("scaled down to", f"{self.scaled_down_to} silos"),
        ]
        width = max(len(k) for k, _ in rows)
        return self.drill.table() + "\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items() if k != "drill"}
        out["drill"] = self.drill.to_json()
        out["ok"] = self.ok
        return out


def _children(pid: int) -> list[int]:
    """Every descendant of process ``pid`` (Linux /proc; Ray's workers are its raylet's children)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


def lose_node(ray_cluster: Any, node_id: str) -> None:
    """SIGKILL every process of Ray node ``node_id`` at once, then remove it from the cluster."""
    node = next(n for n in ray_cluster.worker_nodes if n.node_id == node_id)
    raylets = [p.process.pid for p in node.all_processes.get("raylet", [])]
    for pid in [pid for r in raylets for pid in _children(r)] + raylets:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    ray_cluster.remove_node(node, allow_graceful=False)


async def _balanced_after(store: Store, started: float, timeout: float) -> float | None:
    """Seconds from ``started`` until no live silo holds more shards than its fair share (None: never)."""
    while time.time() - started < timeout:
        try:
            heads = await list_logs(store, SHARD_PREFIX)
            rows = [Member.from_metadata(i.metadata, i.etag) for i in await store.list(MEMBER_PREFIX)]
        except StorageError:
            await asyncio.sleep(0.2)
            continue
        alive = {m.silo_id: m.incarnation for m in rows if m.status not in (DEAD, LEAVING)}
        held = dict.fromkeys(alive, 0)
        for head in heads:
            parsed = parse_owner(head.metadata.get("owner", ""))
            if parsed is not None and alive.get(parsed[0]) == parsed[1]:
                held[parsed[0]] += 1
        fair = -(-len(heads) // max(len(alive), 1))
        if held and max(held.values()) <= fair:
            return round(time.time() - started, 3)
        await asyncio.sleep(0.2)
    return None


async def _placement(cluster: Cluster) -> dict[str, str]:
    """Silo -> node of every silo that answers within a few seconds (one on a lost node does not)."""
    refs = {silo: h.ready.remote() for silo, h in cluster.handles().items()}
    out = {}
    for silo, ref in refs.items():
        with contextlib.suppress(Exception):
            out[silo] = (await asyncio.wait_for(asyncio.wrap_future(ref.future()), 5.0))["node"]
    return out


async def run_node_drill(ray_cluster: Any, cluster: Cluster, out_dir: Path, *, scale_to: int, rate: float = 200.0,
                         seed: int | None = None, progress: bool = True) -> NodeDrillReport:
    """Lose the node of one silo under load, then scale to ``scale_to`` silos and back, under load."""
    workers = {n.node_id for n in ray_cluster.worker_nodes}
    placement = await _placement(cluster)
    spread_ok = len(set(placement.values())) == len(placement) and set(placement.values()) <= workers
    _say(progress, f"nodes: silos on {len(set(placement.values()))} worker nodes: "
         + ", ".join(f"{s}@{n[:8]}" for s, n in sorted(placement.items())))
    report = NodeDrillReport(DrillReport(0, 0, 0, 0, 0, 0), len(workers) + 1, placement, spread_ok)
    store = open_store(cluster.store_url)
    before = len(cluster.silo_ids)

    async def lose(cluster: Cluster, silo: str, events: list[Event], progress: bool, label: str) -> bool:
        pid, owner, shards = await _victim(cluster, silo)
        node = placement[silo]
        await asyncio.to_thread(lose_node, ray_cluster, node)
        events.append(Event("kill", time.time(), silo, owner, shards))
        report.lost_node = node
        _say(progress, f"nodes: {label}: node {node[:8]} lost with silo {silo} ({owner}, {len(shards)} shards)")
        return True

    async def scale(cluster: Cluster, events: list[Event], progress: bool) -> None:
        started = time.time()
        await asyncio.to_thread(cluster.scale, scale_to)
        report.scale_up_s = round(time.time() - started, 3)
        report.scaled_up_to = scale_to
        serving = time.time()
        report.placement_after_scale = await _placement(cluster)
        _say(progress, f"nodes: scaled up to {scale_to} silos in {report.scale_up_s:.1f} s; waiting for shards "
             "to rebalance")
        report.rebalanced_s = await _balanced_after(store, serving, REBALANCE_BOUND_S + 8)
        _say(progress, f"nodes: rebalanced after {report.rebalanced_s} s; scaling down to {before}")
        await asyncio.to_thread(cluster.scale, before)
        report.scaled_down_to = before

    try:
        report.drill = await run_drill(cluster, out_dir, kills=1, rate=rate, seed=seed, progress=progress, hit=lose,
                                       then=scale, then_span=SCALE_SPAN_S)
    finally:
        await store.close()
    (out_dir / "node-drill.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


@contextlib.contextmanager
def local_nodes(store: str, nodes_count: int, namespace: str = NAMESPACE) -> Iterator[tuple[Any, Cluster]]:
    """A head and ``nodes_count`` worker nodes on this machine, a fresh store, and a cluster of
    one silo per worker node on them; all of it gone afterwards."""
    from ray.cluster_utils import Cluster as RayNodes

    if store.startswith("file://") and Path(store[7:]).exists():
        import shutil

        shutil.rmtree(store[7:])
    nodes = RayNodes(initialize_head=True, head_node_args={"num_cpus": 2, "_system_config": LOCAL_RAY_CONFIG})
    for _ in range(nodes_count):
        nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, namespace=namespace, log_to_driver=False, configure_logging=False)
    try:
        cluster = Cluster.start(store, silos=nodes_count, namespace=namespace, options=DRILL_OPTIONS)
        try:
            yield nodes, cluster
        finally:
            cluster.shutdown(graceful=False)
    finally:
        ray.shutdown()
        nodes.shutdown()


def run_node_drill_command(args: Any) -> int:
    """``timeshard drill --nodes N``: a head and N worker nodes on this machine, then the drill."""
    with local_nodes(args.store, args.nodes) as (nodes, cluster):
        report = asyncio.run(run_node_drill(nodes, cluster, Path(args.out), scale_to=args.nodes + 2,
                                            rate=args.rate, seed=args.seed))
    print("node-loss and scaling drill results")
    print(report.table())
    for fault in report.drill.silo_faults[:10]:
        print(f"  silo exception: {fault}")
    print(f"figures: {Path(args.out) / 'node-drill.json'}")
    print("result: " + ("OK" if report.ok else "FAILED"))
    return 0 if report.ok else 1
