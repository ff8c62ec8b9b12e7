"""A cancel that waited for a recurring job's run follows the job where its outcome moved it,
however far it went on from there."""

from __future__ import annotations

from typing import Any

from cluster.model.attempt import JobContext
from cluster.runtime.runs import Run
from tests.runtime.harness import add, fire_due, job, make_parts


async def test_a_cancel_of_a_run_whose_job_moved_on_and_on_sends_the_caller_along_not_cancelled() -> None:
    """Found by the simulation (seed 466479): a cancel marked a run whose outcome had already
    moved the job to the next window's shard; that shard's owner ran the next occurrence and moved
    the job on again. The cancel read the next shard, found the job no longer live there, took it
    for ended there and answered "cancelled"; the occurrence after next fired. Told "cancelled"
    (following every "moved"), the caller must see no start of the job after it was told."""
    parts = await make_parts()
    starts: list[int] = []
    runs: list[Run] = []

    async def handler(ctx: JobContext) -> None:
        starts.append(ctx.occurrence)
        runs.append(parts.runs.inflight[ctx.job.id])

    parts.transport.handlers["h"] = handler
    j = job(schedule="@every 10s", repeats=5)
    (name,) = await add(parts, j)
    for _ in range(2):  # occurrence 1 moves the job to the next window, occurrence 2 on again
        parts.clock.advance(10)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)
    assert starts == [1, 2]
    # The cancel that found occurrence 1's run in flight, its outcome's move already decided.
    answer: tuple[str, Any] = await parts.cancelling._cancel_run(runs[0])
    heard = [answer[0]]
    while answer[0] == "moved":
        answer = await parts.cancelling.cancel(answer[1], j.id)
        heard.append(answer[0])
    assert heard == ["moved", "moved", "cancelled"]
    told = len(starts)
    for _ in range(5):
        parts.clock.advance(10)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)
    assert len(starts) == told
