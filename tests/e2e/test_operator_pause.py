"""Pause across a silo kill (issue 16, point 1, "done when"): a paused named job does not fire
after its shard's owner is killed and the shard replayed elsewhere; resumed, it fires."""

from __future__ import annotations

import asyncio
import os
import signal
import time

from cluster import Target
from cluster.client import _creator_of
from tests.e2e.conftest import executions, silo_pid, wait_for


def holder(cluster, shard: str) -> tuple[str, int] | None:  # type: ignore[no-untyped-def]
    """(The owner tag of the live silo that has ``shard`` loaded, the jobs paused there), if one has."""
    for silo in cluster.status(timeout=5):
        for row in silo.get("shards", ()):
            if "error" not in silo and row["name"] == shard and row["loaded"]:
                return str(silo["owner"]), row["paused"]
    return None


async def test_a_paused_job_stays_paused_across_a_silo_kill_and_fires_once_resumed(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=2)
    client = cluster.client()
    put = await client.jobs.put("beat", target=Target.actor(name), schedule="@every 1s", due_time="2s")
    assert put.job.shard is not None
    paused = await client.jobs.pause("beat", note="e2e: held across a kill")
    assert paused.status.paused and paused.status.paused_note == "e2e: held across a kill"
    due = time.monotonic() + 2

    victim = _creator_of(put.job.shard)
    assert victim is not None
    before = holder(cluster, put.job.shard) or ("", 0)
    os.kill(silo_pid(cluster, victim), signal.SIGKILL)
    # Replayed by another incarnation: the peer that adopted it, or the victim's restart.
    adopted = await wait_for(lambda: (h := holder(cluster, put.job.shard)) is not None and h[0] != before[0] and h,
                             timeout=20)
    assert adopted[1] == 1  # replayed with its pause
    await asyncio.sleep(max(0.0, due - time.monotonic()) + 2.0)  # past two occurrences' due times
    assert [r for r in executions(handle) if r["job_id"] == put.job.id] == [], "a paused job fired"
    got = await client.jobs.get("beat")
    assert got is not None and got.status.paused and got.status.paused_by and got.status.paused_since

    resumed = await client.jobs.resume("beat")
    assert not resumed.status.paused
    await wait_for(lambda: [r for r in executions(handle) if r["job_id"] == put.job.id], timeout=10)
