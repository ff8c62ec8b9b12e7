"""Firing on a job's head (issue 15): the whole job is decoded only when something needs it, the
same unreadable jobs are set aside, and outcome bookkeeping per batch keeps its meaning."""

from __future__ import annotations

import gc
from datetime import timedelta
from typing import Any

import pytest

from cluster.model.attempt import Outcome
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.policies import FailurePolicy
from cluster.model.wire import datetime_to_us, pack
from cluster.runtime import heap
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.metrics import Histogram
from cluster.runtime.runs import JobDecoder
from cluster.runtime.shardlog import ATTEMPTS, DUE, add_op, window_of
from tests.runtime.harness import LocalTransport, Recorder, add, fire_due, item, job, make_parts

WINDOW_US = 10_000_000


def live_entry(parts: Any, job_id: str) -> list[Any] | None:
    for shard in parts.shards:
        if shard.state is not None and job_id in shard.state.live:
            return shard.state.live[job_id]
    return None


@pytest.fixture
def whole_decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The packed jobs a silo decoded whole (``JobDecoder.__call__``)."""
    seen: list[bytes] = []
    original = JobDecoder.__call__

    def counting(self: JobDecoder, packed: bytes) -> ScheduledJob:
        seen.append(packed)
        return original(self, packed)

    monkeypatch.setattr(JobDecoder, "__call__", counting)
    return seen


class Marked(SiloHooks):
    """Like the named-job and flow hooks: interested in jobs carrying a metadata key."""

    metadata_keys = ("mark",)

    def __init__(self) -> None:
        self.started: list[str] = []

    def interested(self, job: ScheduledJob) -> bool:
        return "mark" in job.metadata

    async def attempt_started(self, event: Any) -> None:
        self.started.append(event.job.id)


class Everything(SiloHooks):
    """A hook without ``metadata_keys``: offered every job, whole."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def attempt_started(self, event: Any) -> None:
        self.started.append(event.job.id)


async def test_plain_jobs_that_succeed_are_fired_and_removed_without_decoding_them_whole(
        whole_decodes: list[bytes]) -> None:
    marked = Marked()
    parts = await make_parts(hooks=[marked])
    parts.transport.handlers["h"] = recorder = Recorder()  # type: ignore[attr-defined]
    plain = [job() for _ in range(5)]
    flagged = job(metadata={"mark": "x"})
    await add(parts, *plain, flagged)
    parts.clock.advance(2)  # type: ignore[attr-defined]
    await fire_due(parts)
    assert sorted(c.job.id for c in recorder.ran) == sorted(j.id for j in [*plain, flagged])
    assert marked.started == [flagged.id]  # the hook still sees its job, and only it
    assert whole_decodes == [item(flagged)[2]]  # only the job a hook wanted was decoded whole
    assert all(live_entry(parts, j.id) is None for j in plain)  # removed: one-shot successes
    assert parts.metrics.succeeded.value == 6


async def test_a_hook_without_metadata_keys_is_still_offered_every_job() -> None:
    everything = Everything()
    parts = await make_parts(hooks=[everything])
    parts.transport.handlers["h"] = Recorder()  # type: ignore[attr-defined]
    jobs = [job() for _ in range(3)]
    await add(parts, *jobs)
    parts.clock.advance(2)  # type: ignore[attr-defined]
    await fire_due(parts)
    assert sorted(everything.started) == sorted(j.id for j in jobs)


@pytest.mark.parametrize("broken", ["schedule", "policy"])
async def test_a_job_whose_schedule_or_policy_cannot_be_read_is_set_aside_and_counted_as_before(broken: str) -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()  # type: ignore[attr-defined]
    good, bad = job(), job()
    await add(parts, good)
    wire = bad.to_wire()
    if broken == "schedule":
        wire[7] = "@every never"
    else:
        wire[10] = ["sometimes", 1]
    jid, due_us, _ = item(bad)
    shard = await parts.shards.write_to_window(window_of(due_us, WINDOW_US), [add_op(jid, due_us, pack(wire))])
    parts.clock.advance(2)  # type: ignore[attr-defined]
    await fire_due(parts)
    assert [c.job.id for c in recorder.ran] == [good.id]
    assert set(shard.unreadable) == {bad.id} and parts.metrics.unreadable.value == 1
    assert live_entry(parts, bad.id) is not None  # kept in its shard, unrun
    await fire_due(parts)
    assert parts.metrics.unreadable.value == 1  # counted once


async def test_a_failed_job_is_retried_by_its_own_policy_decoded_when_the_failure_needs_it() -> None:
    parts = await make_parts()
    j = job(failure_policy=FailurePolicy.constant("7s", max_retries=3))
    parts.transport.handlers["h"] = Recorder(fail=[j.id])  # type: ignore[attr-defined]
    await add(parts, j)
    parts.clock.advance(2)  # type: ignore[attr-defined]
    await fire_due(parts)
    entry = live_entry(parts, j.id)
    assert entry is not None and entry[ATTEMPTS] == 1
    assert entry[DUE] == datetime_to_us(j.due) + 7_000_000  # the job's policy (7 s after due), not the default
    assert parts.metrics.failed.value == 1 and parts.metrics.retried.value == 1


async def test_a_recurring_job_that_succeeds_moves_to_its_next_occurrence() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = Recorder()  # type: ignore[attr-defined]
    j = job(schedule="@every 2s")
    await add(parts, j)
    parts.clock.advance(2)  # type: ignore[attr-defined]
    await fire_due(parts)
    assert any(shard.state is not None and j.id in shard.state.live for shard in parts.shards)
    assert parts.queue.get(j.id) is not None


class LosesShardMidCall(LocalTransport):
    """Delivers, but the shard of ``victim`` is lost to another owner while the call is out."""

    victim = ""

    async def deliver(self, target: Target, handle: Any, attempts: Any, timeout: float,
                      lease_end: float, ahead: Any = None) -> list[Outcome]:
        outcomes = await super().deliver(target, handle, attempts, timeout, lease_end, ahead)
        for shard in self.parts.shards:
            if shard.state is not None and self.victim in shard.state.live:
                shard.lost = True
        return outcomes

    parts: Any = None


async def test_a_batch_spanning_a_lost_shard_and_a_held_one_records_only_the_held_ones_outcomes() -> None:
    transport = LosesShardMidCall()
    transport.handlers["h"] = Recorder()
    parts = await make_parts(transport=transport)
    transport.parts = parts
    kept = [job(due=timedelta(seconds=1)) for _ in range(3)]
    lost = [job(due=timedelta(seconds=-9)) for _ in range(2)]  # an earlier window: another shard
    transport.victim = lost[0].id
    names = set(await add(parts, *kept)) | set(await add(parts, *lost))
    assert len(names) == 2
    parts.clock.advance(2)  # type: ignore[attr-defined]
    await fire_due(parts)
    assert len(transport.calls) == 1 and len(transport.calls[0][1]) == 5  # one call for both shards
    assert all(live_entry(parts, j.id) is None for j in kept)
    lost_shard = next(s for s in parts.shards if s.lost)
    assert lost_shard.state is not None and all(j.id in lost_shard.state.live for j in lost)  # not written
    assert not parts.runs.inflight and parts.metrics.succeeded.value == 3


def test_observing_many_values_at_once_counts_sums_and_samples_them_as_one_at_a_time() -> None:
    values = [0.001 * i for i in range(250)]
    one, many = Histogram(exported=None), Histogram(exported=None)
    for v in values:
        one.observe(v)
    many.observe_many(values)
    many.observe_many([])
    assert (many.count, many.max) == (one.count, one.max) and many.total == pytest.approx(one.total)

    class Sink:
        def __init__(self) -> None:
            self.seen: list[float] = []

        def observe(self, value: float) -> None:
            self.seen.append(value)

    sink = Sink()
    sampled = Histogram(exported=sink)  # type: ignore[arg-type]
    sampled.observe_many(values[:40])
    sampled.observe_many(values[40:])
    sampled.flush()
    assert len(sink.seen) == 100 and set(sink.seen) <= set(values)  # a uniform sample of SAMPLE values


def test_tuning_the_collector_raises_only_the_young_generation_threshold() -> None:
    before = gc.get_threshold()
    try:
        heap.tune()
        assert gc.get_threshold() == (heap.YOUNG, before[1], before[2])
    finally:
        gc.set_threshold(*before)

