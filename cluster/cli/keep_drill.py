"""The silo-keeping drill: every worker node replaced in turn under load, as a node-image upgrade
does, while the keeper holds the silo count at its target.

A Ray head and N worker nodes on this machine, one silo per worker, jobs falling due all along.
N new nodes join (the upgrade's new machines; ``ray.cluster_utils`` adds nodes from the main thread
only, so they join before the load rather than between the steps), then each original worker
goes in turn, alternately

- drained, as a Kubernetes preStop hook does (``Cluster.drain``: its silos hand their shards off
  and stop; the keeper starts them elsewhere), then removed from Ray;
- lost: every process of the node SIGKILLed at once (``node_drill.lose_node``); nobody drains
  anything, and the keeper must notice on its own.

Checked, on top of every check of ``timeshard drill`` (nothing lost, nothing early, no
unexplained duplicate, no fire by a superseded owner):
- after each step the silo count is back at target, every silo answering, with no operator
  action: a drained node's silos within the drain's call plus one silo start (``SILO_START_S``),
  a lost node's within ``keep_bound`` of the loss;
- the spread rule holds: one silo per worker node, none on the head or a node that is gone.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster._cluster import Cluster
from cluster._keeper import SILO_START_S, keep_bound
from cluster.cli.drill import _say, _victim, run_drill
from cluster.cli.drill_analysis import DrillReport, Event
from cluster.cli.node_drill import local_nodes, lose_node

NAMESPACE = "timeshard-keep"
#: Seconds of load per step: a node joins, another goes, the silo count comes back.
STEP_SPAN_S = 6.0


@dataclass
class Step:
    """One node replaced: how the old one went, and how long until the count was back at target."""

    how: str  # "drain" | "lose"
    node: str  # the node that went
    new_node: str  # the node that joined just before
    silos: list[str]  # the silos it ran
    stop_s: float | None = None  # drain: the call, from start to its silos stopped
    back_s: float | None = None  # from the drain's call / the loss until every silo answers again
    bound_s: float = 0.0  # what back_s must not exceed
    placement: dict[str, str] = field(default_factory=dict)  # silo -> node, once back
    spread_ok: bool = False


@dataclass
class KeepDrillReport:
    drill: DrillReport
    target: int
    bound_s: float
    steps: list[Step] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (self.drill.ok and len(self.steps) > 0 and all(
            s.back_s is not None and s.back_s <= s.bound_s and s.spread_ok for s in self.steps))

    def table(self) -> str:
        rows = [(f"step {i + 1}: {s.how} node {s.node[:8]} (silos {', '.join(s.silos) or '-'})",
                 "never back at target" if s.back_s is None else
                 f"{self.target} silos back in {s.back_s:.2f} s (bound {s.bound_s:.1f} s)"
                 + (f" (drain call {s.stop_s:.2f} s)" if s.stop_s is not None else "")
                 + ("" if s.spread_ok else f"; NOT one per worker node: {s.placement}"))
                for i, s in enumerate(self.steps)]
        rows.append(("bounds", f"drain: the call + {SILO_START_S:.0f} s; loss: {self.bound_s:.1f} s "
                               "(cluster._keeper.keep_bound)"))
        width = max(len(k) for k, _ in rows)
        return self.drill.table() + "\n" + "\n".join(f"  {k.ljust(width)}  {v}" for k, v in rows)

    def to_json(self) -> dict[str, Any]:
        return {"target": self.target, "bound_s": self.bound_s, "ok": self.ok,
                "steps": [s.__dict__ for s in self.steps], "drill": self.drill.to_json()}


async def _back_at_target(cluster: Cluster, target: int, gone: set[str], started: float,
                          timeout: float) -> tuple[float | None, dict[str, str]]:
    """Seconds from ``started`` until ``target`` silos answer, none on a node in ``gone``."""
    placement: dict[str, str] = {}
    while time.time() - started < timeout:
        placement = await asyncio.to_thread(cluster.placement, 1.0)
        if len(placement) >= target and not set(placement.values()) & gone:
            return round(time.time() - started, 3), placement
        await asyncio.sleep(0.1)
    return None, placement


def _spread(placement: dict[str, str], workers: set[str]) -> bool:
    return len(set(placement.values())) == len(placement) and set(placement.values()) <= workers


async def run_keep_drill(ray_nodes: Any, cluster: Cluster, out_dir: Path, *, rate: float = 150.0,
                         seed: int | None = None, progress: bool = True) -> KeepDrillReport:
    """Replace every worker node of ``ray_nodes`` in turn under load: drained, lost, drained, ..."""
    target = len(cluster.silo_ids)
    report = KeepDrillReport(DrillReport(0, 0, 0, 0, 0, 0), target, keep_bound(cluster.options))
    gone: set[str] = set()
    originals = list(ray_nodes.worker_nodes)
    news = [ray_nodes.add_node(num_cpus=1) for _ in originals]
    ray_nodes.wait_for_nodes()
    _say(progress, f"keep: {len(news)} new nodes joined: {', '.join(n.node_id[:8] for n in news)}")

    async def replace(cluster: Cluster, events: list[Event], progress: bool) -> None:
        for i, (old, new) in enumerate(zip(originals, news, strict=True)):
            how = "drain" if i % 2 == 0 else "lose"
            placement = await asyncio.to_thread(cluster.placement)
            silos = sorted(s for s, n in placement.items() if n == old.node_id)
            step = Step(how, old.node_id, new.node_id, silos)
            report.steps.append(step)
            _say(progress, f"keep: step {i + 1}: {how} node {old.node_id[:8]} "
                 f"(silos {', '.join(silos) or '-'})")
            started = time.time()
            if how == "drain":
                done = await asyncio.to_thread(cluster.drain, old.node_id, timeout=20.0)
                step.stop_s = done["stop_s"]
                step.bound_s = round(step.stop_s + SILO_START_S, 3)
                gone.add(old.node_id)
                await asyncio.to_thread(ray_nodes.remove_node, old)  # the pod ends after its preStop hook
            else:
                step.bound_s = report.bound_s
                hit = [await _victim(cluster, s) for s in silos]
                gone.add(old.node_id)
                await asyncio.to_thread(lose_node, ray_nodes, old.node_id)
                at = time.time()
                for silo, (_, owner, shards) in zip(silos, hit, strict=True):
                    events.append(Event("kill", at, silo, owner, shards))
            step.back_s, step.placement = await _back_at_target(cluster, target, gone, started,
                                                                report.bound_s + 10)
            workers = {n.node_id for n in ray_nodes.worker_nodes}
            step.spread_ok = _spread(step.placement, workers)
            _say(progress, f"keep: step {i + 1}: {target} silos back after {step.back_s} s: "
                 + ", ".join(f"{s}@{n[:8]}" for s, n in sorted(step.placement.items())))

    report.drill = await run_drill(cluster, out_dir, kills=0, rate=rate, seed=seed, progress=progress,
                                   then=replace, then_span=STEP_SPAN_S * len(originals))
    (out_dir / "keep-drill.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return report


def run_keep_drill_command(args: Any) -> int:
    """``timeshard drill --nodes N --replace``: a head and N worker nodes here, then the drill."""
    with local_nodes(args.store, args.nodes, NAMESPACE) as (nodes, cluster):
        report = asyncio.run(run_keep_drill(nodes, cluster, Path(args.out), rate=args.rate, seed=args.seed))
    print("silo-keeping drill results (every worker node replaced in turn under load)")
    print(report.table())
    for fault in report.drill.silo_faults[:10]:
        print(f"  silo exception: {fault}")
    print(f"figures: {Path(args.out) / 'keep-drill.json'}")
    print("result: " + ("OK" if report.ok else "FAILED"))
    return 0 if report.ok else 1
