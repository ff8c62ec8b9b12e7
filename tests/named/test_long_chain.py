"""A recurring job whose chain of shards grew long: a delete, cancel or trigger from its first
handle still reaches it, without Ray.

Each occurrence of ``@every 1s`` moves on to the shard of its window; with 2 s windows the job
has passed through twenty shards in 40 s, each still listed (kept for the retry window) and
answering "moved" on to the next. The client follows that chain to the shard that holds the
job now; a fixed count of hops gave up after sixteen shards, and ``timeshard delete`` of a job
that had run for 42 s answered "could not reach the owner" on a healthy one-silo cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.named.bucket_cluster import BUCKET_OPTIONS, TARGET, Cluster

SHORT = BUCKET_OPTIONS.with_(shard_duration="2s", lookahead="1s", retry_window="600s")
LONG_S = 60  # thirty windows: more shards in the chain than the sixteen hops the client had


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_a_delete_of_a_recurring_named_job_reaches_it_through_a_long_chain_of_shards(
        kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path, options=SHORT)
    jobs = c.jobs()
    tick = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    await c.fire(LONG_S)
    assert c.starts.log.count(tick.job.id) >= LONG_S - 2
    assert await jobs.delete("tick")
    c.starts.log.append("returned")
    await c.fire(4)
    assert c.starts.after("returned") == []
    assert await jobs.get("tick") is None


@pytest.mark.parametrize("call", ["cancel", "pause", "trigger"])
async def test_a_call_from_a_recurring_jobs_first_handle_reaches_it_through_a_long_chain_of_shards(
        call: str, tmp_path: Path) -> None:
    c = await Cluster.start("memory", tmp_path, options=SHORT)
    client = c.jobs().client
    first = await client.schedule_job(TARGET, due="1s", schedule="@every 1s")
    await c.fire(LONG_S)
    assert c.starts.log.count(first.id) >= LONG_S - 2
    if call == "cancel":
        assert await client.try_cancel_job(first)
    elif call == "pause":
        assert await client.pause_job(first)
    else:
        run = await client.trigger_job(first)
        assert run.id != first.id
        return
    c.starts.log.append("returned")
    await c.fire(4)
    assert c.starts.after("returned") == []
