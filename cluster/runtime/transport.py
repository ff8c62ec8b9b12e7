"""How a silo reaches other actors: handler actors for delivery, peer silos for pings.

The runtime never imports Ray. ``RayTransport`` (``cluster.runtime.ray_transport``) is the real
one; a test passes its own, which calls handlers in-process, so roles run without Ray.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from cluster.model.attempt import Attempt, Outcome
from cluster.model.jobs import Target


class TargetAbsent(Exception):
    """No actor answers to this target yet; the job waits for it (staging)."""


class Transport(Protocol):
    """Calls out of a silo. Every method answers for itself: none raises a transport fault."""

    def node_id(self) -> str:
        """Where this silo runs (a Ray node id), or "" when unknown."""
        ...

    def resolve(self, target: Target) -> Any:
        """A handle on ``target``'s actor, activating a grain; ``TargetAbsent`` if there is none."""
        ...

    async def deliver(self, target: Target, handle: Any, attempts: Sequence[Attempt], timeout: float,
                      lease_end: float) -> list[Outcome]:
        """Run ``attempts`` in ``handle``'s actor: one outcome per attempt, in order.

        A handler that does not answer within ``timeout`` gives timed-out outcomes; a dead actor
        or a transport fault gives failed ones (and the handle is forgotten). ``lease_end``
        (wall-clock seconds) lets the handler refuse work that arrives after the sender's lease.
        """
        ...

    async def ping(self, silo_id: str, timeout: float) -> bool | None:
        """Whether peer ``silo_id`` answers: False if it is gone for sure, None if unknown."""
        ...

    def notify_adopt(self, silo_ids: Iterable[str]) -> None:
        """Ask peers, without waiting, to look for orphaned shards now (a graceful stop)."""
        ...
