"""The Ray transport's own decisions, with stand-in handles (Ray is imported, never started)."""

from __future__ import annotations

import time
from typing import Any

from cluster.model.attempt import Attempt
from cluster.model.jobs import Target
from cluster.model.wire import pack
from cluster.runtime.ray_transport import RayTransport
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
