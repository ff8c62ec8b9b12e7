"""Where new silos go: spread over the alive nodes (the default), or packed onto one.

Pure: the caller reads the nodes and where the running silos are from Ray, this module decides.
Spreading puts one silo on each node before any node gets a second, so losing one machine takes
as few silos as possible and every node does a share of the scheduling work. A node qualifies
only if it carries every resource the silos require (``ClusterOptions.silo_resources``), which
is how operators pin silos to chosen nodes.
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
        return all(self.resources.get(name, 0.0) >= amount for name, amount in required.items())


def place(count: int, nodes: Sequence[Node], running: Sequence[str], *, placement: str = SPREAD,
          required: Mapping[str, float] | None = None) -> list[str]:
    """The node id for each of ``count`` new silos, given the nodes the ``running`` silos are on.

    ``spread``: each silo to the qualifying node with the fewest silos, ties to the node listed
    first (worker nodes before the head, so the head keeps its room for the driver and GCS).
    ``pack``: every silo to the qualifying node with the most silos, else the first qualifying one.
    Raises ``NoNodeFits`` naming the required resources when no alive node qualifies.
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
    chosen = []
    for _ in range(count):
        if placement == SPREAD:
            node = min(counts, key=lambda n: (counts[n], order[n]))
        else:
            node = min(counts, key=lambda n: (-counts[n], order[n]))
        counts[node] += 1
        chosen.append(node)
    return chosen

