"""The Ray transport's own decisions, with stand-in handles (Ray is imported, never started)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import ray.exceptions
from ray.core.generated.common_pb2 import ActorDiedErrorContext

from cluster.model.attempt import Attempt
from cluster.model.jobs import Target
from cluster.model.wire import pack
from cluster.runtime.ray_transport import RayTransport, process_ended
from cluster.runtime.transport import Ping
from tests.runtime.harness import job


class PlainActor:
    """A handle on an actor that defines execute_job but does not subclass JobHandler."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        outer = self

        class Method:
            async def remote(self, ctx: Any) -> None:
                outer.calls.append(ctx)

        self.execute_job = Method()


async def test_a_plain_actor_gets_no_attempt_once_the_senders_lease_has_run_out() -> None:
    """Issue 12, point 8: per-job delivery used to send no lease at all."""
    j = job()
    attempts = [Attempt(pack(j.to_wire()), "run-1", 1, 0, 1)]
    actor, transport = PlainActor(), RayTransport("test")
    (outcome,) = await transport.deliver(Target.actor("plain"), actor, attempts, 5.0, lease_end=time.time() - 1)
    assert outcome.refused and actor.calls == []
    (outcome,) = await transport.deliver(Target.actor("plain"), actor, attempts, 5.0, lease_end=time.time() + 10)
    assert outcome.succeeded and len(actor.calls) == 1


class Peer:
    """A handle on a peer silo whose ping raises ``error`` (or answers, if None)."""

    def __init__(self, error: Exception | None) -> None:
        class Method:
            async def remote(self) -> str:
                if error is not None:
                    raise error
                return "peer"

        self.ping = Method()


def died(reason: int, message: str) -> Exception:
    """The ActorDiedError a caller gets, built from the context Ray's GCS records (issue 12, point 6)."""
    context = ActorDiedErrorContext(reason=reason, actor_id=b"\x01" * 16, error_message=message)
    return ray.exceptions.ActorDiedError(context)


def no_actor(name: str, namespace: str | None = None) -> Any:
    raise ValueError(f"Failed to look up actor with name '{name}'")


async def test_only_rays_report_of_an_exited_worker_process_counts_as_proof_that_a_peer_is_gone(monkeypatch: Any) -> None:
    import cluster.runtime.ray_transport as rt

    monkeypatch.setattr(rt.ray, "get_actor", no_actor)  # looked up again: the name is free now
    cases = [
        (None, Ping.ALIVE),
        (died(ActorDiedErrorContext.WORKER_DIED, "The actor is dead because its worker process has died. Worker exit "
                                                 "type: SYSTEM_ERROR Worker exit detail: connection error code 2."),
         Ping.EXITED),
        (died(ActorDiedErrorContext.NODE_DIED, "The actor died because its node has died. Node Id: ab"), Ping.GONE),
        (died(ActorDiedErrorContext.RAY_KILL, "The actor is dead because it was killed by `ray.kill`."), Ping.GONE),
        (ray.exceptions.ActorUnavailableError("restarting", None), Ping.UNKNOWN),
    ]
    for error, answer in cases:
        transport = RayTransport("test")
        transport._peers["p"] = Peer(error)
        assert await transport.ping("p", 1.0) is answer, error


async def test_a_peer_started_again_under_its_name_is_asked_not_its_dead_predecessor(monkeypatch: Any) -> None:
    """The keeper starts a drained or lost silo again under its id. A peer still holding the old
    actor's handle got "killed by ray.kill" from it and declared the new, live incarnation dead:
    it rejoined, its shards moved, and a job fired twice (keeping drill, 2 unexplained duplicates)."""
    import cluster.runtime.ray_transport as rt

    killed = died(ActorDiedErrorContext.RAY_KILL, "The actor is dead because it was killed by `ray.kill`.")
    exited = died(ActorDiedErrorContext.WORKER_DIED, "The actor is dead because its worker process has died.")
    for name_now, answer in ((Peer(None), Ping.ALIVE), (Peer(killed), Ping.GONE), (Peer(exited), Ping.EXITED)):
        monkeypatch.setattr(rt.ray, "get_actor", lambda name, namespace=None, h=name_now: h)
        transport = RayTransport("test")
        transport._peers["p"] = Peer(killed)  # the handle kept from before: its actor is gone
        assert await transport.ping("p", 1.0) is answer
        assert transport._peers.get("p") in (name_now, None) and not transport._dead

    class Id:
        def hex(self) -> str:
            return "actor-1"

    # The name still the dead handle's own actor (Ray restarting it, or not yet rid of it): its
    # death is the answer, never a ping of the restarting actor that would only time out.
    same = Peer(None)
    same._actor_id = Id()  # type: ignore[attr-defined]
    for dead, answer in ((exited, Ping.EXITED), (killed, Ping.GONE)):
        monkeypatch.setattr(rt.ray, "get_actor", lambda name, namespace=None: same)
        transport = RayTransport("test")
        transport._peers["p"], transport._actor_ids["p"] = Peer(dead), "actor-1"
        assert await transport.ping("p", 1.0) is answer


def test_a_process_counts_as_ended_only_on_its_own_node_once_it_is_gone() -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    assert process_ended(int(child.stdout))  # exited and reaped
    assert not process_ended(os.getpid())
    assert not RayTransport("test").exited("", int(child.stdout))  # where it ran is unknown: no proof


async def test_a_slow_actor_lookup_does_not_block_the_event_loop(monkeypatch: Any) -> None:
    """Issue 15: ``ray.get_actor`` ran inside the event loop, a 25-30 ms stall per first delivery."""
    import asyncio

    import cluster.runtime.ray_transport as rt

    def slow_get_actor(name: str, namespace: str | None = None) -> str:
        time.sleep(0.3)  # a GCS round trip under load, stretched
        return f"handle of {name}"

    monkeypatch.setattr(rt.ray, "get_actor", slow_get_actor)
    transport = RayTransport("test")
    ticks: list[float] = []

    async def ticker() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.01)

    beat = asyncio.ensure_future(ticker())
    try:
        await asyncio.sleep(0)
        lookup = transport.resolve(Target.actor("h"))
        handle = await lookup if asyncio.iscoroutine(lookup) else lookup
    finally:
        beat.cancel()
    assert handle == "handle of h"
    assert len(ticks) >= 10 and max(b - a for a, b in zip(ticks, ticks[1:], strict=False)) < 0.2  # the loop ran on
    assert await transport.resolve(Target.actor("h")) == "handle of h"  # cached: no second lookup
