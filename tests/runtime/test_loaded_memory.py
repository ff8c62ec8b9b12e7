"""What a loaded job costs in a silo's memory: its shard's state plus its place in the queue."""

from __future__ import annotations

import gc
import tracemalloc
from datetime import timedelta

from cluster.model.wire import timedelta_to_us
from cluster.runtime.shardlog import DUE, add_op, window_of
from tests.runtime.harness import OPTIONS, item, job, make_parts

JOBS = 20_000


async def _loaded_bytes_per_job(jobs: int) -> float:
    """Bytes held after a dormant shard of ``jobs`` jobs is loaded and queued, per job (tracemalloc)."""
    parts = await make_parts()
    template = job(due=timedelta(seconds=32))  # window T0+30 s, beyond the 5 s lookahead: dormant
    jid, due_us, packed = item(template)
    wire = [(f"{i:032x}", due_us + i) for i in range(jobs)]
    ops = [add_op(job_id, due, packed.replace(jid.encode(), job_id.encode())) for job_id, due in wire]
    window = window_of(due_us, timedelta_to_us(OPTIONS.shard_duration))
    shard = await parts.shards.write_to_window(window, ops)
    assert not shard.loaded
    del ops
    parts.clock.advance(26)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        await parts.loading.load_due()
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert shard.state is not None and len(shard.state.live) == jobs
    assert len(parts.queue) == jobs
    first = min(shard.state.live.values(), key=lambda entry: entry[DUE])
    assert parts.queue.pop_due(first[DUE]) == [(first[DUE], f"{0:032x}", first)]
    return held / jobs


async def test_a_loaded_job_costs_its_shard_entry_and_no_queue_object() -> None:
    # 490 B per job here before the queue kept loaded shards as bulks (a tuple and a dict slot
    # per job) and a job's two equal times shared one int; 390 B after: what is left is the shard
    # entry itself (id, packed job, entry list, due, dict slot) and 24 B of bulk columns.
    assert await _loaded_bytes_per_job(JOBS) < 450
