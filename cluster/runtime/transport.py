"""How a silo reaches other actors: handler actors for delivery, peer silos for pings.

The runtime never imports Ray. ``RayTransport`` (``cluster.runtime.ray_transport``) is the real
one; a test passes its own, which calls handlers in-process, so roles run without Ray.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import Enum
from typing import Any, Protocol

from cluster.model.ahead import Ahead
from cluster.model.attempt import Attempt, Outcome
from cluster.model.jobs import Target


class TargetAbsent(Exception):
    """No actor answers to this target yet; the job waits for it (staging)."""


class Ping(Enum):
    """What a ping learned about a peer silo. Only ``EXITED`` proves it can fire nothing more."""

    ALIVE = "alive"  # it answered
    EXITED = "exited"  # Ray saw its worker process exit (the raylet on its node): proof it is gone
    GONE = "gone"  # Ray reports it dead, but not its process's exit (node lost, killed, removed): it may still run
    UNKNOWN = "unknown"  # no answer in time, or unreachable for now: the heartbeat watch decides


class Transport(Protocol):
    """Calls out of a silo. Every method answers for itself: none raises a transport fault."""

    def node_id(self) -> str:
        """Where this silo runs (a Ray node id and pid namespace), or "" when unknown."""
        ...

    def exited(self, node: str, pid: int) -> bool:
        """Whether process ``pid`` on ``node`` provably ended: True only on that node, once it is gone."""
        ...

    async def ended(self, silo_id: str, node: str, pid: int) -> bool:
        """Whether peer ``silo_id``'s process ``pid`` on ``node`` (its row's) provably ended.

        Only what a process that still runs cannot bring about counts: this host's process table
        (``exited``), or Ray's record that the raylet on its node saw that very process exit. A
        timeout, a network error, a refused call, "node lost" or "killed" (Ray records a kill when
        it sends it, to a process that may be cut off and run on) prove nothing.
        """
        ...

    async def resolve(self, target: Target) -> Any:
        """A handle on ``target``'s actor, activating a grain; ``TargetAbsent`` if there is none.

        A cached handle comes back at once; a lookup never blocks the event loop (it runs off
        it, bounded by a timeout: a lookup that times out counts as absent for now).
        """
        ...

    def waits(self, handle: Any) -> bool:
        """Whether ``handle``'s actor can be sent jobs ahead: it waits for their due times (a ``JobHandler``)."""
        ...

    async def deliver(self, target: Target, handle: Any, attempts: Sequence[Attempt], timeout: float,
                      lease_end: float, ahead: Ahead | None = None,
                      stops: Mapping[str, float] | None = None) -> list[Outcome]:
        """Run ``attempts`` in ``handle``'s actor: one outcome per attempt, in order.

        A handler that does not answer within ``timeout`` (after the last due time) gives
        timed-out outcomes; a dead actor or a transport fault gives failed ones (and the handle is
        forgotten). ``lease_end`` (wall-clock seconds) lets the handler refuse work that starts
        after the sender's lease. With ``ahead``, some attempts are not due yet: the handler waits.
        ``stops`` (given only when not empty) maps run ids to a wall-clock time (s) at which a
        ``JobHandler`` cancels that attempt if it still runs (``overlap="cancel_other"``).
        """
        ...

    async def withdraw(self, handle: Any, run_ids: Sequence[str], lease_end: float, timeout: float) -> list[str] | None:
        """Ask ``handle``'s actor that none of ``run_ids`` start from now on: the ones it dropped
        while they waited, or None if it did not answer within ``timeout``."""
        ...

    async def ping(self, silo_id: str, timeout: float) -> Ping:
        """What peer ``silo_id``'s answer, or Ray's report of its death, tells about it."""
        ...

    def notify_adopt(self, silo_ids: Iterable[str]) -> None:
        """Ask peers, without waiting, to look for orphaned shards now (a graceful stop)."""
        ...

    async def call_peer(self, silo_id: str, method: str, args: Sequence[Any], timeout: float) -> Any:
        """Call ``method(*args)`` on peer silo ``silo_id``: its answer, or ``SiloRefused``
        (not acted on: no such silo now) or ``SiloLost`` (maybe acted on: died, or no answer
        within ``timeout``). The one call that raises: its caller tells the two apart."""
        ...
