"""One job id in two shards of one silo: a flow step taken again after its intent's writer died
puts its fixed job id into the silo's fresh shard while the old copy lives on in a shard the silo
adopted. The run table and the timer queue are keyed by job id alone; a cancel of one copy must
hold for that copy, and leave the other to fire."""

from __future__ import annotations

from cluster.model.jobs import ScheduledJob
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import CANCELLED, REMOVE, SUCCEEDED
from storage import MemoryStore, read_log
from tests.runtime.harness import LocalTransport, Recorder, add, fire_due, job, make_parts


async def _adopted_and_fresh(handler: object) -> tuple[Roles, ScheduledJob, str]:
    """Silo a's first incarnation adds a job, and a is restarted (Ray after a SIGKILL): its second
    incarnation adopts the first one's shard, job loaded and queued. Returns the silo, the job and
    that adopted shard; the job's second copy is the caller's to add."""
    store = MemoryStore()
    first = await make_parts(store, "a")
    j = job()
    (old,) = await add(first, j)
    parts = await make_parts(store, "a", transport=LocalTransport(predecessors_exited=True))
    parts.transport.handlers["h"] = handler  # type: ignore[assignment]
    parts.adoption._budget = 64
    assert await parts.adoption.adopt_orphans() == 1
    adopted = parts.shards.get(old)
    assert adopted is not None and adopted.state is not None and j.id in adopted.state.live
    # Past what the first incarnation's lease may still have sent: a cancel would wait it out.
    parts.clock.advance(max(0.0, adopted.sent_before_until - parts.clock.monotonic()))
    parts.lease.renew(parts.clock.monotonic())
    return parts, j, old


async def _ops(parts: Roles, name: str, job_id: str) -> list[list[object]]:
    return [op[:4] for op in (await read_log(parts.store, name)).records() if op[1] == job_id]


async def test_a_cancel_of_the_adopted_copy_leaves_the_fresh_copy_queued_to_fire() -> None:
    """The fresh copy's push took the job's one place in the queue; a cancel of the adopted copy
    took that place away with it, and the fresh copy, live in its shard's log, was queued nowhere:
    it neither fired nor went."""
    parts, j, old = await _adopted_and_fresh(recorder := Recorder())
    (new,) = await add(parts, j)  # the step taken again: its copy in the silo's fresh shard
    assert new != old
    assert await parts.cancelling.cancel(old, j.id) == ("cancelled", None)
    parts.clock.advance(2)
    await fire_due(parts)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]
    assert [REMOVE, j.id, 1, CANCELLED] in await _ops(parts, old, j.id)
    assert [REMOVE, j.id, 1, SUCCEEDED] in await _ops(parts, new, j.id)
