"""Review: a SNAPSHOT record counts the pauses it carries against SNAPSHOT_BYTES."""
from cluster.model.pause import MAX_BY_CHARS, MAX_NOTE_CHARS
from cluster.runtime.shardlog import SNAPSHOT_BYTES, ShardState, add_op
from storage.base import MAX_BLOCK_BYTES
from storage.records import pack


def test_a_snapshot_record_of_many_paused_jobs_stays_within_its_budget() -> None:
    state = ShardState()
    ops = []
    for i in range(12_000):
        job_id = f"job-{i:06}"
        ops.append(add_op(job_id, 10**15, b"d" * 40))
        ops.append([4, job_id, "é" * MAX_NOTE_CHARS, "o" * MAX_BY_CHARS, 10**15])  # PAUSE, the longest allowed
    state.replay(ops)
    first = pack(state.snapshot()[0])
    assert len(first) <= MAX_BLOCK_BYTES, f"SNAPSHOT record of {len(first)} B: no block holds it"
    assert len(first) <= 2 * SNAPSHOT_BYTES
