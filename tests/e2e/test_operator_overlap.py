"""End to end on Ray (issue 16, "done when"): an overlap policy with a slow handler. Two jobs on
``@every 1s`` whose handler takes 2.5 s, one with ``skip`` and one with ``buffer_one``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import pairwise

import pytest

from cluster import Target
from tests.e2e.conftest import executions, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.file_only]

RUN_S = 2.5


def runs_of(handle, job_id):  # type: ignore[no-untyped-def]
    return [r for r in executions(handle) if r["job_id"] == job_id]


async def test_skip_and_buffer_one_with_a_handler_slower_than_its_schedule(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=1)
    client = cluster.client()
    first = datetime.now(timezone.utc) + timedelta(seconds=1)
    spec = {"target": Target.actor(name), "schedule": "@every 1s", "due": first, "data": {"sleep": RUN_S}}
    skip, buffer_one = await client.schedule_jobs([{**spec, "name": "skip", "overlap": "skip"},
                                                   {**spec, "name": "buffer_one", "overlap": "buffer_one"}])
    assert (skip.overlap, buffer_one.overlap) == ("skip", "buffer_one")
    await wait_for(lambda: len(runs_of(handle, skip.id)) >= 2 and len(runs_of(handle, buffer_one.id)) >= 3,
                   timeout=30)
    await client.try_cancel_job(skip)
    await client.try_cancel_job(buffer_one)
    t0 = first.timestamp()

    def offsets(job_id: str) -> list[float]:
        return [round(r["scheduled_for"] - t0, 3) for r in runs_of(handle, job_id)][:3]

    def starts(job_id: str) -> list[float]:
        return [r["started"] - t0 for r in runs_of(handle, job_id)][:3]

    # skip: 1 and 2 came due while 0 ran (0 to 2.5 s): the job goes on at 3.
    assert offsets(skip.id)[:2] == [0, 3]
    # buffer_one: 2 waited (1 skipped) and started as 0 ended; then 5 (3 and 4 skipped).
    assert offsets(buffer_one.id) == [0, 2, 5]
    for job_id in (skip.id, buffer_one.id):
        begun = starts(job_id)
        assert all(b - a >= RUN_S - 0.05 for a, b in pairwise(begun)), f"occurrences overlapped: {begun}"
    waited = starts(buffer_one.id)
    assert 2.5 <= waited[1] < 3.5 and 5.0 <= waited[2] < 6.0, f"the buffered ones did not start as the last ended: {waited}"
    counters = (await cluster.silos[0].status.remote())["counters"]
    # skip: 1, 2; buffer_one: 1, 3, 4 — each counted as the occurrence before it ended.
    assert counters["overlap_skipped"] >= 5 and counters["overlap_buffered"] >= 2
    assert counters["overlap_cancelled"] == 0
