"""Review: a stop whose deadline comes before a dead owner's lease ends still must not release early."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from cluster.model.clock import SYSTEM_CLOCK
from cluster.runtime.silo import Silo
from tests.runtime.harness import OPTIONS, LocalTransport, item, job
from tests.runtime.test_silo import ReleaseTimes


async def test_a_short_stop_does_not_release_a_shard_before_its_dead_owners_lease_ends() -> None:
    store = ReleaseTimes()
    options = OPTIONS.with_(heartbeat_interval="100ms", suspicion_timeout="1s")

    def start(transport: LocalTransport) -> Silo:
        return Silo("0", "memory://", options, "test", hooks=lambda _store, _view: [], transport=transport,
                    clock=SYSTEM_CLOCK, store=store)

    first = start(LocalTransport())
    await first.ready()
    (base,) = await first.schedule([item(job(due=timedelta(seconds=4), now=datetime.now(timezone.utc)))])
    for task in first._tasks:  # SIGKILL
        task.cancel()
    second = start(LocalTransport(predecessors_exited=True))
    await second.ready()
    adopted = second._r.shards.get(base)
    assert adopted is not None and adopted.sent_before_until > SYSTEM_CLOCK.monotonic()
    await second.stop(timeout=0.05)
    assert base not in store.released or store.released[base] >= adopted.sent_before_until, \
        f"released {adopted.sent_before_until - store.released[base]:.3f} s before the dead owner's lease ended"
