"""fire_all's catch-up cap holds while a late job fires, not only when its shard loads."""

from __future__ import annotations

from datetime import timedelta

from cluster.model.occurrences import FIRE_ALL_LIMIT
from tests.runtime.harness import Recorder, add, fire_due, job, make_parts


async def test_a_fire_all_job_far_behind_replays_at_most_the_limit_then_keeps_its_grid() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(schedule="@every 1s", misfire="fire_all")
    await add(parts, j)
    parts.clock.advance(4000)  # an outage: 4,000 occurrences missed
    for _ in range(2 * FIRE_ALL_LIMIT):
        parts.lease.renew(parts.clock.monotonic())
        before = len(recorder.ran)
        await fire_due(parts)
        if len(recorder.ran) == before:
            break
    assert FIRE_ALL_LIMIT <= len(recorder.ran) <= FIRE_ALL_LIMIT + 1  # the first late fire, then the limit
    last = recorder.ran[-1].scheduled_for
    assert (last - j.due) % timedelta(seconds=1) == timedelta(0)  # still on the job's grid
