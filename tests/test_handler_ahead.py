"""JobHandler's side of dispatch ahead (issue 15, points 1 and 2), on the real clocks: a batch
costs one task, each job starts at its due time and never before, a withdraw keeps a job from
starting, and the sender's lease is checked at each start."""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any

from cluster.model.ahead import Ahead, monotonic_domain
from cluster.model.attempt import Attempt, JobContext, Outcome
from cluster.model.wire import pack
from handlers import JobHandler
from tests.runtime.harness import job

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


class Notes(JobHandler):
    """Notes per job its task, its start (monotonic) and what it saw of ``VAR``; ``sleep`` jobs wait."""

    def __init__(self, sleep: dict[str, float] | None = None) -> None:
        self.tasks: dict[str, Any] = {}
        self.started: dict[str, float] = {}
        self.saw: dict[str, str] = {}
        self.contexts: dict[str, JobContext] = {}
        self.sleep = sleep or {}

    async def execute_job(self, ctx: JobContext) -> None:
        name = ctx.job.data["name"]
        self.started[name] = time.monotonic()
        self.contexts[name] = ctx
        self.tasks[name] = asyncio.current_task()
        self.saw[name] = VAR.get()
        VAR.set(name)
        if name in self.sleep:
            await asyncio.sleep(self.sleep[name])


def now_us() -> int:
    return time.time_ns() // 1000


def batch(*dues_us: int) -> list[tuple[Any, ...]]:
    """Attempts ``run-0``, ``run-1``... of jobs named ``j0``, ``j1``... due at ``dues_us``."""
    return [tuple(Attempt(pack(job(data={"name": f"j{k}"}).to_wire()), f"run-{k}", 1, due, 1))
            for k, due in enumerate(dues_us)]


def outcomes(out: list[tuple[Any, ...]]) -> dict[str, Outcome]:
    return {o.run_id: o for o in (Outcome(*t) for t in out)}


class InlineNotes(Notes):
    timeshard_task_per_job = False


class OwnTimeout(JobHandler):
    """Job ``j0`` enters ``asyncio.timeout`` before its first await, as an HTTP client call does."""

    async def execute_job(self, ctx: JobContext) -> None:
        if ctx.job.data["name"] == "j0":
            async with asyncio.timeout(0.05):
                await asyncio.sleep(5)


async def test_a_job_that_enters_its_own_timeout_before_its_first_await_times_out_alone() -> None:
    # With jobs started inside the batch's task by default, this timeout cancelled the whole batch.
    out = outcomes(await OwnTimeout().timeshard_deliver(batch(*[now_us()] * 3), 5.0, time.time() + 60))
    assert out["run-0"].error_type == "TimeoutError" and not out["run-0"].timed_out
    assert out["run-1"].succeeded and out["run-2"].succeeded


async def test_by_default_each_job_runs_in_a_task_of_its_own() -> None:
    handler = Notes()
    out = await handler.timeshard_deliver(batch(*[now_us()] * 5), 5.0, time.time() + 60)
    assert all(o.succeeded for o in outcomes(out).values())
    assert len(set(handler.tasks.values())) == 5 and asyncio.current_task() not in handler.tasks.values()


async def test_a_batch_of_jobs_that_do_not_wait_runs_in_one_task_and_a_context_each() -> None:
    handler = InlineNotes()
    out = await handler.timeshard_deliver(batch(*[now_us()] * 50), 5.0, time.time() + 60)
    assert all(o.succeeded for o in outcomes(out).values())
    assert set(handler.tasks.values()) == {asyncio.current_task()}  # the batch's task: none per job
    assert set(handler.saw.values()) == {"unset"}  # one job's contextvars do not leak into the next


async def test_a_job_that_waits_goes_on_in_a_task_of_its_own_and_times_out_alone() -> None:
    handler = InlineNotes(sleep={"j1": 30.0, "j2": 0.01})
    started = time.monotonic()
    out = outcomes(await handler.timeshard_deliver(batch(*[now_us()] * 3), 0.3, time.time() + 60))
    assert time.monotonic() - started < 5
    assert out["run-0"].succeeded and out["run-2"].succeeded
    assert out["run-1"].timed_out and out["run-1"].error_type == "TimeoutError"


async def test_a_job_sent_ahead_to_another_host_starts_no_sooner_than_its_wait_after_arrival() -> None:
    handler = Notes()
    sent = now_us()
    ahead = Ahead(sent, time.monotonic(), "another host", 0.0)
    called = time.monotonic()
    out = outcomes(await handler.timeshard_deliver(batch(sent + 30_000, sent + 60_000, sent - 5_000), 5.0,
                                                   time.time() + 60, tuple(ahead)))
    assert all(o.succeeded for o in out.values())
    assert handler.started["j0"] - called >= 0.030 and handler.started["j1"] - called >= 0.060
    assert handler.started["j2"] - called < 0.030  # already due: started on arrival
    ctx = handler.contexts["j0"]
    assert ctx.started is not None and ctx.started >= ctx.scheduled_for  # JobContext.started: the actual start


def test_a_context_built_without_a_start_says_none_and_positional_construction_still_works() -> None:
    j = job()
    ctx = JobContext(j, "run-1", 1, j.due, 1)
    assert ctx.started is None and ctx.started_us is None


async def test_on_the_senders_host_the_wait_runs_from_the_senders_clock_reading() -> None:
    """Transit is then not added: a batch sent 1 s ago for a job due 1.01 s after sending starts ~10 ms in."""
    handler = Notes()
    sent_mono = time.monotonic() - 1.0
    sent = now_us() - 1_000_000
    called = time.monotonic()
    await handler.timeshard_deliver(batch(sent + 1_010_000), 5.0, time.time() + 60,
                                    tuple(Ahead(sent, sent_mono, monotonic_domain(), time.monotonic() + 60)))
    assert handler.started["j0"] >= sent_mono + 1.010
    assert handler.started["j0"] - called < 0.5  # not a relative wait of 1.01 s after arrival


async def test_a_withdraw_drops_a_waiting_job_which_then_never_starts() -> None:
    handler = Notes()
    sent = now_us()
    deliver = asyncio.create_task(handler.timeshard_deliver(
        batch(sent + 200_000, sent + 200_000), 5.0, time.time() + 60, tuple(Ahead(sent, time.monotonic(), "", 0.0))))
    await asyncio.sleep(0.01)
    assert await handler.timeshard_withdraw(["run-0"], time.time() + 60) == ["run-0"]
    out = outcomes(await deliver)
    assert out["run-0"].refused and out["run-0"].error_type == "Withdrawn" and out["run-1"].succeeded
    assert list(handler.started) == ["j1"]


async def test_a_withdraw_that_overtakes_its_batch_still_keeps_the_job_from_starting() -> None:
    handler = Notes()
    assert await handler.timeshard_withdraw(["run-0"], time.time() + 60) == []  # not here (yet)
    out = outcomes(await handler.timeshard_deliver(batch(now_us(), now_us()), 5.0, time.time() + 60))
    assert out["run-0"].refused and out["run-1"].succeeded and list(handler.started) == ["j1"]


async def test_a_withdrawn_job_whose_batch_comes_again_is_refused_again() -> None:
    """Ray runs a call again when its answer was lost: the withdrawn job once started on the second
    delivery, after its cancel had returned "cancelled" (found by the simulation, seed 290)."""
    handler = Notes()
    sent = now_us()
    again = batch(sent + 50_000, sent + 50_000)
    deliver = asyncio.create_task(handler.timeshard_deliver(again, 5.0, time.time() + 60,
                                                            tuple(Ahead(sent, time.monotonic(), "", 0.0))))
    await asyncio.sleep(0.01)
    assert await handler.timeshard_withdraw(["run-0"], time.time() + 60) == ["run-0"]
    assert outcomes(await deliver)["run-0"].error_type == "Withdrawn"
    out = outcomes(await handler.timeshard_deliver(again, 5.0, time.time() + 60,
                                                   tuple(Ahead(sent, time.monotonic(), "", 0.0))))
    assert out["run-0"].refused and out["run-0"].error_type == "Withdrawn" and out["run-1"].succeeded
    assert list(handler.started) == ["j1"]


async def test_a_lease_that_ends_while_a_job_waits_refuses_it_at_its_start() -> None:
    handler = Notes()
    sent = now_us()
    out = outcomes(await handler.timeshard_deliver(batch(sent, sent + 100_000), 5.0, time.time() + 0.05,
                                                   tuple(Ahead(sent, time.monotonic(), "another host", 0.0))))
    assert out["run-0"].succeeded  # due on arrival, within the lease
    assert out["run-1"].refused and out["run-1"].error_type == "LeaseExpired" and list(handler.started) == ["j0"]
