"""Every failure path ends in a durable outcome: nothing raised on the way to a handler leaves a
job in no queue or a run holding a slot for good (issue 13, point 3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from cluster.model.attempt import Outcome
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.policies import FailurePolicy
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.shardlog import ATTEMPTS
from tests.runtime.harness import OPTIONS, T0, LocalTransport, Recorder, add, fire_due, job, make_parts


def live_entry(parts: Any, job_id: str) -> list[Any] | None:
    for shard in parts.shards:
        if shard.state is not None and job_id in shard.state.live:
            return shard.state.live[job_id]
    return None


class GrainsThatFail(LocalTransport):
    """Activating a grain raises, as Ray does for a class path that names a function."""

    async def resolve(self, target: Target) -> Any:
        if target.kind == "grain":
            raise TypeError(f"{target.cls_path} is not a class")
        return await super().resolve(target)


async def test_a_grain_that_cannot_be_activated_is_a_failed_attempt_retried_by_its_policy() -> None:
    parts = await make_parts(transport=GrainsThatFail())
    grain = ScheduledJob.create(Target.grain("os.path:join", 1), due=T0 + timedelta(seconds=1), now=T0,
                                failure_policy=FailurePolicy.constant("1s", max_retries=1))
    await add(parts, grain)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert not parts.runs.inflight  # the slot is free again
    assert live_entry(parts, grain.id)[ATTEMPTS] == 1 and grain.id in parts.queue  # a durable retry
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert live_entry(parts, grain.id) is None and not parts.runs.inflight  # retries exhausted: removed


async def test_grain_classes_outside_the_allow_list_fail_at_run_time() -> None:
    options = OPTIONS.with_(allowed_code_prefixes=["myapp"])
    parts = await make_parts(options=options)
    parts.transport.handlers["grain:handlers.builtin:Recorder:1"] = recorder = Recorder()
    grain = ScheduledJob.create(Target.grain("handlers.builtin:Recorder", 1), due=T0 + timedelta(seconds=1), now=T0,
                                failure_policy=FailurePolicy.constant("1s", max_retries=0))
    await add(parts, grain)  # written by a caller that did not check: a silo checks again
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert recorder.ran == [] and live_entry(parts, grain.id) is None and not parts.runs.inflight


@dataclass
class ShortReplies(LocalTransport):
    """A handler process that answers for fewer attempts than it was sent."""

    answer: int = 1
    sent: list[int] = field(default_factory=list)

    async def deliver(self, target: Target, handle: Any, attempts: Any, timeout: float,
                      lease_end: float, ahead: Any = None) -> list[Outcome]:
        self.sent.append(len(attempts))
        return [Outcome(a.run_id) for a in attempts[: self.answer]]


async def test_a_short_reply_records_the_missing_attempts_as_failed() -> None:
    transport = ShortReplies(handlers={"h": Recorder()})
    parts = await make_parts(transport=transport)
    policy = FailurePolicy.constant("5s", max_retries=3)
    jobs = [job(failure_policy=policy) for _ in range(3)]
    await add(parts, *jobs)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert transport.sent == [3] and not parts.runs.inflight
    answered = [j for j in jobs if live_entry(parts, j.id) is None]
    retried = [j for j in jobs if (e := live_entry(parts, j.id)) is not None and e[ATTEMPTS] == 1]
    assert len(answered) == 1 and len(retried) == 2 and all(j.id in parts.queue for j in retried)


async def test_a_retry_function_that_raises_leaves_the_decision_to_the_default_policy() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = Recorder(fail=[])
    bad = job(failure_policy=FailurePolicy.callable("json:dumps", max_retries=5))  # dumps(ctx, exc) raises
    parts.transport.handlers["h"].fail.add(bad.id)
    await add(parts, bad)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert not parts.runs.inflight
    assert live_entry(parts, bad.id)[ATTEMPTS] == 1 and bad.id in parts.queue  # retried, durably


class Flaky(SiloHooks):
    """A hook whose admit raises until told otherwise."""

    def __init__(self) -> None:
        self.broken = True
        self.asked = 0

    async def admit(self, event: Any) -> bool:
        self.asked += 1
        if self.broken:
            raise RuntimeError("registry unreachable")
        return True

    def interested(self, job: ScheduledJob) -> bool:
        return True


async def test_an_admit_hook_that_raises_fails_closed_and_is_asked_again() -> None:
    hook = Flaky()
    parts = await make_parts(hooks=[hook])
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job()
    await add(parts, j)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert hook.asked == 1 and recorder.ran == []  # undecided: not started
    assert j.id in parts.queue and not parts.runs.inflight and live_entry(parts, j.id) is not None
    hook.broken = False
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert [ctx.job.id for ctx in recorder.ran] == [j.id]
