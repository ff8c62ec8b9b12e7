"""Where new silos go: spread over the alive nodes (the default), or packed onto one.

Pure: the caller reads the nodes and where the running silos are from Ray, this module decides.
Spreading puts one silo on each node before any node gets a second, so losing one machine takes
as few silos as possible and every node does a share of the scheduling work. A node qualifies
only if it carries every resource the silos require (``ClusterOptions.silo_resources`` and
``silo_num_cpus``), which is how operators pin silos to chosen nodes, and has room for one more:
a node advertising ``{"timeshard": 1}`` holds one silo, and a silo placed on a full node would wait
in Ray's queue for good instead of failing here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SPREAD, PACK = "spread", "pack"
PLACEMENTS = (SPREAD, PACK)


class NoNodeFits(LookupError):
    """No alive node carries the resources the silos require."""


@dataclass(frozen=True)
class Node:
    """An alive Ray node as placement sees it: its id and the resources it carries in total."""

    node_id: str
    resources: Mapping[str, float]
    is_head: bool = False

    def fits(self, required: Mapping[str, float]) -> bool:
        return self.room(required) >= 1

    def room(self, required: Mapping[str, float]) -> float:
        """How many silos requiring ``required`` this node holds in all (unbounded without a requirement)."""
        return min((self.resources.get(name, 0.0) // amount for name, amount in required.items() if amount > 0),
                   default=float("inf"))


def place(count: int, nodes: Sequence[Node], running: Sequence[str], *, placement: str = SPREAD,
          required: Mapping[str, float] | None = None) -> list[str]:
    """The node id for each of ``count`` new silos, given the nodes the ``running`` silos are on.

    ``spread``: each silo to the qualifying node with the fewest silos, ties to the node listed
    first (worker nodes before the head, so the head keeps its room for the driver and GCS).
    ``pack``: every silo to the qualifying node with the most silos, else the first qualifying one.
    A node takes no more silos than its resources hold (``Node.room``), the running ones counted.
    Raises ``NoNodeFits`` naming the required resources when no alive node qualifies or has room.
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement: must be one of {', '.join(PLACEMENTS)} (got {placement!r})")
    needed = dict(required or {})
    fitting = [n for n in nodes if n.fits(needed)]
    if not fitting:
        raise NoNodeFits(f"no alive Ray node carries the resources silos require ({needed}); "
                         f"start nodes with `ray start --resources '{{...}}'` or change silo_resources")
    order = {n.node_id: i for i, n in enumerate(sorted(fitting, key=lambda n: n.is_head))}
    counts = Counter({n.node_id: 0 for n in fitting})
    counts.update(node for node in running if node in counts)
    room = {n.node_id: n.room(needed) for n in fitting}
    chosen: list[str] = []
    for _ in range(count):
        open_ = [n for n in counts if counts[n] < room[n]]
        if not open_:
            raise NoNodeFits(f"no alive Ray node has room for another silo ({needed} each; {len(chosen)} of "
                             f"{count} placed): add a node, or lower what each silo requires")
        if placement == SPREAD:
            node = min(open_, key=lambda n: (counts[n], order[n]))
        else:
            node = min(open_, key=lambda n: (-counts[n], order[n]))
        counts[node] += 1
        chosen.append(node)
    return chosen

