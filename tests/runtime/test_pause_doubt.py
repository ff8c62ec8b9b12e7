"""A pause answered while the shard's last append is in doubt holds what the log says (simulation,
seed 579): a resume whose append landed, its answer lost and its log not readable back, raised to
its caller and was taken back from memory only; the pause that followed read "already paused" from
memory, the log's resume came back when the shard was taken back from it, and the job started after
the pause had returned."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cluster.runtime.shardlog import PAUSE, RESUME
from storage import StorageError, read_log
from tests.runtime.harness import GatedStore, Recorder, add, fire_due, job, make_parts


async def test_a_pause_after_a_resume_in_doubt_is_written_and_holds() -> None:
    store = GatedStore()
    parts = await make_parts(store, "s")
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=2))
    (name,) = await add(parts, j)
    assert (await parts.pausing.pause(name, j.id, "hold", "ops"))[0] == "paused"

    store.lose_answer("append_block")  # the resume lands, its answer is lost ...
    store.fail_next("stat")  # ... and the log cannot be read back to say so
    with pytest.raises(StorageError):
        await parts.pausing.resume(name, j.id)

    answer = await parts.pausing.pause(name, j.id, "hold again", "ops")
    assert answer[0] == "paused"  # before the fix: "already_paused", from memory
    ops = [record[0] for record in (await read_log(store.inner, name)).records()]
    assert ops[-2:] == [RESUME, PAUSE]  # the pause is written after the resume that landed
    for _ in range(4):
        parts.clock.advance(1)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)
    assert recorder.ran == []
