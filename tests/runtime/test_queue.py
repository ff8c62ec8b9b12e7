"""The silo's timer queue: order, cancel, replace, and a wait that fires on time, never early."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cluster.model.clock import wall_clock_us
from cluster.runtime.queue import JobQueue


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 30), st.integers(0, 1_000)),
        st.tuples(st.just("cancel"), st.integers(0, 30), st.just(0)),
        st.tuples(st.just("drain"), st.just(0), st.integers(0, 1_000)),
    ),
    max_size=200,
)


@given(ops)
@settings(max_examples=300, deadline=None)
def test_every_live_job_comes_out_exactly_once_in_due_order_never_early(script):
    q: JobQueue[str] = JobQueue(clock=FakeClock())
    expected: dict[str, int] = {}  # the model: key -> due of its latest push
    out: list[tuple[int, str]] = []
    for op, k, t in script:
        key = f"j{k}"
        if op == "push":
            q.push(key, t, key)
            expected[key] = t
        elif op == "cancel":
            assert q.cancel(key) == (key in expected)
            expected.pop(key, None)
        else:
            batch = q.pop_due(t)
            for due, key_out, item in batch:
                assert due <= t, "a job came out before its due time"
                assert expected.pop(key_out) == due
                assert item == key_out
            assert [d for d, *_ in batch] == sorted(d for d, *_ in batch)
            assert all(d > t for d in expected.values()), "a due job was left behind"
            out.extend((d, k2) for d, k2, _ in batch)
        assert len(q) == len(expected)
    rest = q.pop_due(10**9)
    assert {k: d for d, k, _ in rest} == expected
    assert [(d, k) for d, k, _ in rest] == sorted((d, k) for d, k, _ in rest)
    assert len(q) == 0 and q.next_due() is None


class QueueMachine(RuleBasedStateMachine):
    """Random interleavings of push, replace, cancel, time passing and bounded drains."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.q: JobQueue[int] = JobQueue(clock=self.clock)
        self.model: dict[str, int] = {}
        self.seen: set[str] = set()
        self.counter = 0

    @rule(delay=st.integers(0, 50))
    def push_new(self, delay):
        self.counter += 1
        key = f"k{self.counter}"
        self.q.push(key, self.clock.now + delay, self.counter)
        self.model[key] = self.clock.now + delay

    @precondition(lambda self: self.model)
    @rule(data=st.data(), delay=st.integers(0, 50))
    def retry_existing(self, data, delay):
        key = data.draw(st.sampled_from(sorted(self.model)))
        self.q.push(key, self.clock.now + delay, 0)
        self.model[key] = self.clock.now + delay

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def cancel(self, data):
        key = data.draw(st.sampled_from(sorted(self.model)))
        assert self.q.cancel(key)
        del self.model[key]
        assert not self.q.cancel(key)

    @rule(step=st.integers(0, 20), limit=st.one_of(st.none(), st.integers(1, 5)))
    def advance_and_drain(self, step, limit):
        self.clock.now += step
        batch = self.q.pop_due(limit=limit)
        if limit is not None:
            assert len(batch) <= limit
        for due, key, _ in batch:
            assert due <= self.clock.now
            assert self.model.pop(key) == due
        if limit is None or len(batch) < limit:
            assert all(d > self.clock.now for d in self.model.values())

    @invariant()
    def sizes_and_head_agree(self):
        assert len(self.q) == len(self.model)
        assert self.q.next_due() == (min(self.model.values()) if self.model else None)


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=100, stateful_step_count=60, deadline=None)


def test_tombstones_are_compacted_so_memory_follows_live_jobs():
    q: JobQueue[None] = JobQueue(clock=FakeClock())
    for i in range(10_000):
        q.push(f"j{i}", i, None)
    for i in range(9_990):
        q.cancel(f"j{i}")
    assert len(q) == 10
    assert q._stored <= 2 * 10 + 64
    assert [k for _, k, _ in q.pop_due(10**6)] == [f"j{i}" for i in range(9_990, 10_000)]


def test_replacing_a_key_moves_it_and_leaves_no_ghost():
    q: JobQueue[str] = JobQueue(clock=FakeClock())
    q.push("a", 100, "first")
    q.push("a", 5, "retry")
    assert q.get("a") == (5, "retry")
    assert q.pop_due(1_000) == [(5, "a", "retry")]
    assert q.pop_due(1_000) == []


async def test_wait_fires_at_the_due_time_not_before():
    q: JobQueue[str] = JobQueue()
    due = wall_clock_us() + 80_000
    q.push("x", due, "x")
    assert await q.wait_due(timeout=5)
    assert wall_clock_us() >= due
    assert [k for _, k, _ in q.pop_due()] == ["x"]


async def test_an_earlier_push_wakes_a_sleeping_wait_at_once():
    q: JobQueue[str] = JobQueue()
    q.push("late", wall_clock_us() + 60_000_000, "late")
    waiter = asyncio.create_task(q.wait_due(timeout=30))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    soon = wall_clock_us() + 30_000
    q.push("soon", soon, "soon")
    assert await asyncio.wait_for(waiter, 5)
    assert wall_clock_us() >= soon
    assert [k for _, k, _ in q.pop_due()] == ["soon"]


async def test_wait_on_an_empty_queue_wakes_on_the_first_push():
    q: JobQueue[str] = JobQueue()
    waiter = asyncio.create_task(q.wait_due())
    await asyncio.sleep(0.02)
    assert not waiter.done()
    q.push("now", wall_clock_us(), "now")
    assert await asyncio.wait_for(waiter, 5)


async def test_wait_times_out_when_nothing_falls_due():
    q: JobQueue[str] = JobQueue()
    q.push("far", wall_clock_us() + 3_600_000_000, "far")
    assert await q.wait_due(timeout=0.05) is False
    assert len(q) == 1


async def test_cancelling_the_head_lets_the_wait_move_to_the_next_job():
    q: JobQueue[str] = JobQueue()
    now = wall_clock_us()
    q.push("a", now + 20_000, "a")
    q.push("b", now + 60_000, "b")
    q.cancel("a")
    assert await q.wait_due(timeout=5)
    assert wall_clock_us() >= now + 60_000
    assert [k for _, k, _ in q.pop_due()] == ["b"]
