"""The silo's timer queue: order, cancel, replace, and a wait that fires on time, never early."""

from __future__ import annotations

import asyncio
import gc
import random
import tracemalloc
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from cluster.model.clock import wall_clock_us
from cluster.runtime import queue_order
from cluster.runtime.queue import SLOT_SHIFT, JobQueue
from tests.runtime.harness import until_idle


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
        self.q: JobQueue[list[object]] = JobQueue(clock=self.clock)
        self.model: dict[str, int] = {}
        self.items: dict[str, list[object]] = {}  # the item last pushed, by key
        self.shared: dict[str, list[object]] = {}  # one loaded shard's live jobs, new ones bulked in batches
        self.shard = object()
        self.seen: set[str] = set()
        self.counter = 0

    def _item(self, key: str, due: int) -> list[object]:
        self.items[key] = item = [due, None]
        self.model[key] = due
        return item

    @rule(delay=st.integers(0, 50))
    def push_new(self, delay):
        self.counter += 1
        key = f"k{self.counter}"
        self.q.push(key, self.clock.now + delay, self._item(key, self.clock.now + delay))

    @precondition(lambda self: self.model)
    @rule(data=st.data(), delay=st.integers(0, 50))
    def retry_existing(self, data, delay):
        key = data.draw(st.sampled_from(sorted(self.model)))
        self.q.push(key, self.clock.now + delay, self._item(key, self.clock.now + delay))

    @rule(data=st.data(), delays=st.lists(st.integers(-3, 50), max_size=12))
    def push_bulk(self, data, delays):
        """A shard loaded: its jobs queued at once, new keys and (maybe) keys already queued."""
        keys = []
        for _ in delays:
            if self.model and data.draw(st.booleans()):
                key = data.draw(st.sampled_from(sorted(self.model)))
            else:
                self.counter += 1
                key = f"k{self.counter}"
            if key not in keys:
                keys.append(key)
        dues = [self.clock.now + delay for delay in delays[:len(keys)]]
        items = [self._item(key, due) for key, due in zip(keys, dues, strict=True)]
        # Each bulk looks up in its own shard's live jobs: what it held when it was loaded.
        self.q.push_bulk(keys, dues, items, dict(zip(keys, items, strict=True)).get, lambda item: item[0],
                         owner=object())

    @rule(delays=st.lists(st.integers(-3, 50), max_size=12))
    def push_bulk_of_new_jobs(self, delays):
        """New jobs scheduled into a loaded shard, a bulk per batch: one owner, its lookup, and
        each item marked with its bulk."""
        keys = []
        for _ in delays:
            self.counter += 1
            keys.append(f"k{self.counter}")
        dues = [self.clock.now + delay for delay in delays]
        items = [self._item(key, due) for key, due in zip(keys, dues, strict=True)]
        self.shared.update(zip(keys, items, strict=True))
        self.q.push_bulk(keys, dues, items, self.shared.get, lambda item: item[0], owner=self.shard, slot=1,
                         disjoint_only=True)

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
        assert [(d, k) for d, k, _ in batch] == sorted((d, k) for d, k, _ in batch)
        for due, key, _ in batch:
            assert due <= self.clock.now
            assert self.model.pop(key) == due
        if limit is None or len(batch) < limit:
            assert all(d > self.clock.now for d in self.model.values())

    @invariant()
    def sizes_and_head_agree(self):
        assert len(self.q) == len(self.model)
        assert {k: d for d, k, _ in self.q} == self.model
        assert all(self.q.get(k) == (d, self.items[k]) for k, d in self.model.items())
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
    await until_idle()  # the waiter now waits for a push or its timer, or it has returned
    assert not waiter.done()
    soon = wall_clock_us() + 30_000
    q.push("soon", soon, "soon")
    assert await asyncio.wait_for(waiter, 5)
    assert wall_clock_us() >= soon
    assert [k for _, k, _ in q.pop_due()] == ["soon"]


async def test_wait_on_an_empty_queue_wakes_on_the_first_push():
    q: JobQueue[str] = JobQueue()
    waiter = asyncio.create_task(q.wait_due())
    await until_idle()  # the waiter now waits for a push or its timer, or it has returned
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


# --- The head slot under load: pushes into it while it is being peeked and popped -----------

SLOT = 1_000 << SLOT_SHIFT  # the start of a slot, so dues SLOT + small share it


def test_pushes_into_the_head_between_pops_come_out_in_due_order_ties_by_key():
    q: JobQueue[str] = JobQueue(clock=FakeClock(SLOT + 1_000))
    for key in ("m", "c", "x", "e"):
        q.push(key, SLOT + 10, key)
    assert q.next_due() == SLOT + 10  # the head slot is now ordered
    assert [k for _, k, _ in q.pop_due(limit=1)] == ["c"]
    for key in ("a", "d", "z"):  # same due: "a" and "d" sort before what is left
        q.push(key, SLOT + 10, key)
    q.push("late", SLOT + 20, "late")
    q.push("early", SLOT + 5, "early")
    assert q.next_due() == SLOT + 5
    assert [k for _, k, _ in q.pop_due(limit=3)] == ["early", "a", "d"]
    q.push("b", SLOT + 10, "b")
    assert [(d - SLOT, k) for d, k, _ in q.pop_due()] == [
        (10, "b"), (10, "e"), (10, "m"), (10, "x"), (10, "z"), (20, "late")]
    assert len(q) == 0 and q.next_due() is None


def test_replace_and_cancel_in_the_ordered_head_slot():
    q: JobQueue[str] = JobQueue(clock=FakeClock(SLOT + 1_000))
    for key in ("a", "b", "c", "d"):
        q.push(key, SLOT + 10, key)
    assert q.next_due() == SLOT + 10
    q.push("b", SLOT + 3, "b again")  # replaced: earlier, same slot
    assert q.next_due() == SLOT + 3
    assert q.cancel("a") and not q.cancel("a")
    q.push("c", SLOT + 10, "c again")  # replaced with the same due: one entry, the new item
    q.push("d", SLOT + 50 + (1 << SLOT_SHIFT), "d later")  # moved to a later slot
    q.cancel("b")
    q.push("b", SLOT + 10, "b third")  # cancelled, then queued again at an old due
    assert q.get("c") == (SLOT + 10, "c again")
    assert q.pop_due() == [(SLOT + 10, "b", "b third"), (SLOT + 10, "c", "c again")]
    assert q.next_due() == SLOT + 50 + (1 << SLOT_SHIFT) and len(q) == 1


async def test_an_earlier_push_into_the_ordered_head_slot_wakes_the_wait():
    clock = FakeClock(SLOT - 60_000_000)  # a minute before the head slot
    q: JobQueue[str] = JobQueue(clock=clock)
    q.push("late", SLOT + 100_000, "late")
    assert q.next_due() == SLOT + 100_000  # ordered: later pushes go to its arrivals
    waiter = asyncio.create_task(q.wait_due(timeout=120))
    await until_idle()  # the minute-long sleep is armed, and nothing wakes it
    assert not waiter.done()
    clock.now = SLOT + 50  # time moves on (a fake clock wakes nobody) ...
    q.push("soon", SLOT + 50, "soon")  # ... so only this push can end the minute-long sleep
    assert await asyncio.wait_for(waiter, 5)
    assert [k for _, k, _ in q.pop_due()] == ["soon"]


class CountingKey(str):
    """A job id that counts how often it is ordered against another."""

    compared = 0

    def __lt__(self, other: str) -> bool:
        CountingKey.compared += 1
        return str.__lt__(self, other)

    def __gt__(self, other: str) -> bool:
        CountingKey.compared += 1
        return str.__gt__(self, other)

    __hash__ = str.__hash__


def test_a_thundering_herd_pushed_while_the_head_drains_costs_n_log_n_comparisons():
    # 20,000 jobs due at one instant, pushed 100 at a time with a peek and a pop in between, as
    # a silo loading a shard while its fire loop runs. Re-sorting the head slot after each push
    # into it made about 117 comparisons per job here (growing with n); a sort costs ~log2(n).
    n = 20_000
    rng = random.Random(3)
    keys = [CountingKey(f"{rng.getrandbits(64):016x}") for _ in range(n)]
    q: JobQueue[None] = JobQueue(clock=FakeClock(SLOT))
    CountingKey.compared = 0
    out: list[str] = []
    for start in range(0, n, 100):
        for key in keys[start:start + 100]:
            q.push(key, SLOT, None)
        q.next_due()
        out += [k for _, k, _ in q.pop_due(limit=1)]
    out += [k for _, k, _ in q.pop_due()]
    assert CountingKey.compared < 30 * n, CountingKey.compared / n
    assert len(out) == n and sorted(out) == sorted(keys)
    assert out[200:] == sorted(out[200:])  # after the pushes, one ordered drain


def test_ever_earlier_pushes_each_peeked_cost_no_more_memory_than_unpeeked_ones():
    # A client scheduling reminders latest first while the fire loop peeks after each push: every
    # push is the new head, so every slot is ordered once. The order must not stay behind.
    keys = [f"j{i:04}" for i in range(900)]

    def bytes_per_job(peek: bool) -> float:
        gc.collect()
        tracemalloc.start()
        q: JobQueue[None] = JobQueue(clock=FakeClock(0))
        for i, key in enumerate(keys):
            q.push(key, SLOT - (i << SLOT_SHIFT), None)  # each alone in a slot before the last
            if peek:
                assert q.next_due() == SLOT - (i << SLOT_SHIFT)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert len(q) == len(keys)
        return held / len(keys)

    assert bytes_per_job(peek=True) <= bytes_per_job(peek=False) + 16


# Random interleavings against a reference model: a dict of live entries, sorted on demand.
# Dues cluster on a few values in three slots, so ties and pushes into the head are common;
# small MERGE_CAP values make runs seal, chunk and renumber with few jobs.
DUES = [SLOT + d for d in (0, 1, 1, 2, 7)] + [SLOT + (1 << SLOT_SHIFT) + d for d in (0, 3)] + [SLOT - 5]
head_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.lists(st.tuples(st.integers(0, 40), st.sampled_from(DUES)), min_size=1, max_size=12)),
        st.tuples(st.just("cancel"), st.integers(0, 40)),
        st.tuples(st.just("pop"), st.sampled_from([SLOT - 10, SLOT, SLOT + 1, SLOT + 5, SLOT + (2 << SLOT_SHIFT)]),
                  st.one_of(st.none(), st.integers(1, 6))),
        st.tuples(st.just("peek")),
    ),
    max_size=80,
)


@given(head_ops, st.sampled_from([2, 3, 8, 4_096]))
@settings(max_examples=400, deadline=None)
def test_any_interleaving_matches_a_sorted_reference(script, merge_cap):
    with mock.patch.object(queue_order, "MERGE_CAP", merge_cap):
        q: JobQueue[tuple[int, int]] = JobQueue(clock=FakeClock())
        model: dict[str, tuple[int, tuple[int, int]]] = {}  # key -> (due, item)
        version = 0
        for op in script:
            if op[0] == "push":
                for k, due in op[1]:
                    version += 1
                    q.push(f"k{k:02}", due, (k, version))
                    model[f"k{k:02}"] = (due, (k, version))
            elif op[0] == "cancel":
                assert q.cancel(f"k{op[1]:02}") == (model.pop(f"k{op[1]:02}", None) is not None)
            elif op[0] == "pop":
                _, now, limit = op
                due = sorted((d, key, item) for key, (d, item) in model.items() if d <= now)
                expected = due if limit is None else due[:limit]
                assert q.pop_due(now, limit) == expected
                for _, key, _ in expected:
                    del model[key]
            else:  # a peek; otherwise arrivals may pile up unsorted over several operations
                assert q.next_due() == min((d for d, _ in model.values()), default=None)
            assert len(q) == len(model)
        for key, (due, item) in model.items():
            assert q.get(key) == (due, item)
        assert q.pop_due(SLOT + (3 << SLOT_SHIFT)) == sorted((d, key, item) for key, (d, item) in model.items())


def test_a_forgotten_owner_fires_nothing_more_and_the_others_fire_in_order():
    q: JobQueue[list[object]] = JobQueue(clock=FakeClock())
    owners = {"a": object(), "b": object()}
    live: dict[str, dict[str, list[object]]] = {name: {} for name in owners}
    for name, owner in owners.items():
        keys = [f"{name}{i}" for i in range(5)]
        dues = [10 * i + (name == "b") for i in range(5)]
        items = [[due, owner] for due in dues]
        live[name] = dict(zip(keys, items, strict=True))
        q.push_bulk(keys, dues, items, live[name].get, lambda item: item[0], owner=owners[name])
    q.push("a2", 100, live["a"]["a2"])  # pushed alone again (a retry): replaces its bulk entry
    q.push("b9", 7, [7, owners["b"]])
    assert len(q) == 11 and q.get("a2") == (100, live["a"]["a2"])
    q.forget(owners["a"], lambda item: item[1] is owners["a"])
    assert len(q) == 6 and "a2" not in q and "a0" not in q
    assert [(d, k) for d, k, _ in q.pop_due(1_000)] == [(1, "b0"), (7, "b9"), (11, "b1"), (21, "b2"), (31, "b3"),
                                                        (41, "b4")]


def test_a_bulk_with_a_herd_comes_out_by_due_then_key_and_finds_each_job():
    rng = random.Random(3)
    keys = [f"k{i:04d}" for i in range(2_000)]
    rng.shuffle(keys)
    dues = [5 if i % 4 else rng.randrange(10) for i in range(len(keys))]  # most share one due
    items = {key: [due, None] for key, due in zip(keys, dues, strict=True)}
    q: JobQueue[list[object]] = JobQueue(clock=FakeClock())
    q.push_bulk(keys, dues, [items[k] for k in keys], items.get, lambda item: item[0])
    assert all(q.get(k) == (items[k][0], items[k]) for k in keys)
    assert q.cancel("k0001") and not q.cancel("k0001")
    out = q.pop_due(10, limit=700) + q.pop_due(10)
    assert [(d, k) for d, k, _ in out] == sorted((d, k) for k, (d, _) in items.items() if k != "k0001")


def test_schedule_batches_form_bulks_when_disjoint_in_any_order_and_are_queued_alone_when_they_interleave():
    q: JobQueue[list[object]] = JobQueue(clock=FakeClock())
    live: dict[str, list[object]] = {}
    owner = object()

    def batch(name: str, dues: list[int]) -> None:
        keys = [f"{name}{i}" for i in range(len(dues))]
        items = [[due, None] for due in dues]
        live.update(zip(keys, items, strict=True))
        q.push_bulk(keys, dues, items, live.get, lambda item: item[0], owner=owner, slot=1, disjoint_only=True)

    batch("b", [20, 21, 22])
    batch("a", [10, 11, 12])  # landed after a later batch: still its own bulk, no tuple per job
    assert len(q._bulks) == 2 and len(q._live) == 0
    batch("c", [15, 30])  # interleaves with both: queued alone, so pops never alternate bulks per job
    assert len(q._bulks) == 2 and len(q._live) == 2
    assert [k for _, k, _ in q.pop_due(100)] == ["a0", "a1", "a2", "c0", "b0", "b1", "b2", "c1"]


# Two shards of one silo may each hold a live copy of a job under one id (a flow step taken over
# twice, a retry that wrote its job again). The queue keeps one place per id: each copy must still
# come out, unless its shard let go of it, never two of one id in one batch, and none held back
# behind a copy due later. Items here are [due, copy, version]; ``live`` is what the shards hold.
copy_ops = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 4), st.integers(0, 2), st.integers(0, 50)),
        st.tuples(st.just("bulk"), st.lists(st.integers(0, 4), min_size=1, max_size=5, unique=True),
                  st.integers(0, 2), st.integers(0, 50)),
        st.tuples(st.just("take"), st.integers(0, 4), st.integers(0, 2)),
        st.tuples(st.just("gone"), st.integers(0, 4), st.integers(0, 2)),  # cancelled in its shard only
        st.tuples(st.just("pop"), st.integers(0, 50), st.one_of(st.none(), st.integers(1, 3))),
        st.tuples(st.just("forget"), st.integers(0, 2)),
    ),
    max_size=60,
)


@given(copy_ops)
@settings(max_examples=400, deadline=None)
def test_each_copy_of_an_id_comes_out_once_in_due_order_unless_its_shard_let_go_of_it(script):
    q: JobQueue[list[object]] = JobQueue(clock=FakeClock(), copy_of=lambda item: item[1])
    live: dict[tuple[str, int], list[object]] = {}
    q.restorable = lambda key, item: live.get((key, item[1])) is item  # type: ignore[index]
    version = 0

    def take_due(now: int, limit: int | None = None) -> None:
        batch = q.pop_due(now, limit)
        assert len({key for _, key, _ in batch}) == len(batch), f"two copies of one id in one batch: {batch}"
        for _, key, item in batch:
            assert live.pop((key, item[1]), None) is item, "a copy came out that its shard no longer holds"  # type: ignore[index]
        q.settle_aside(key for _, key, _ in batch)  # as the fire loop does once the batch started

    for op in script:
        if op[0] == "push":
            _, k, copy, due = op
            version += 1
            live[(f"k{k}", copy)] = item = [due, copy, version]
            q.push(f"k{k}", due, item)
        elif op[0] == "bulk":
            _, ks, copy, due = op
            keys = [f"k{k}" for k in ks]
            items = []
            for key in keys:
                version += 1
                live[(key, copy)] = item = [due, copy, version]
                items.append(item)
            q.push_bulk(keys, [due] * len(keys), items, lambda key, c=copy: live.get((key, c)),
                        lambda item: item[0], owner=copy)
        elif op[0] == "take":
            _, k, copy = op
            held = live.pop((f"k{k}", copy), None)
            taken = q.take(f"k{k}", lambda item, c=copy: item[1] == c)
            assert taken is None or held is None or taken[1] is held  # None: gone already, maybe set aside
        elif op[0] == "gone":  # set aside, or in a bulk: the queue learns of it when its turn comes
            held = live.pop((f"k{op[1]}", op[2]), None)
            queued = q.get(f"k{op[1]}")
            if queued is not None and queued[1] is held and q._live.get(f"k{op[1]}") is not None:
                q.cancel(f"k{op[1]}")  # pushed alone: only a cancel takes it off, as in a silo
        elif op[0] == "pop":
            take_due(op[1], op[2])
        else:
            copy = op[1]
            for held in [held for held in live if held[1] == copy]:
                del live[held]
            q.forget(copy, lambda item, c=copy: item[1] == c)
        for key, waiting in q.waiting_aside.items():  # none waits behind a copy due later
            queued = q.get(key)
            if queued is not None:
                assert all(queued[0] <= due for due, item in waiting if live.get((key, item[1])) is item), \
                    (key, queued, waiting)
    for _ in range(len(live) + 1):  # a copy aside comes out in the batch after its twin's
        take_due(10**6)
    assert not live, f"live copies never came out: {sorted(live)}"
    assert len(q) == 0


def test_a_copy_due_first_is_not_held_back_behind_one_pushed_later_for_later() -> None:
    q: JobQueue[list[object]] = JobQueue(clock=FakeClock(), copy_of=lambda item: item[1])
    early, late = [5, "b"], [10**9, "a"]
    q.push("k", 5, early)
    q.push("k", 10**9, late)  # another copy's retry, far off: it waits behind the earlier one
    assert q.pop_due(100) == [(5, "k", early)]
    q.settle_aside(["k"])
    assert q.get("k") == (10**9, late)


def test_a_look_at_the_head_that_queues_a_copy_set_aside_answers_with_it() -> None:
    q: JobQueue[list[object]] = JobQueue(clock=FakeClock(), copy_of=lambda item: item[1])
    held: dict[str, list[object]] = {"k": [5, "a"]}
    q.push_bulk(["k"], [5], [held["k"]], held.get, lambda item: item[0], owner="a")
    later = [10, "b"]
    q.push("k", 10, later)  # waits aside behind the copy due first
    del held["k"]  # that copy went in its shard: its bulk item is stale
    assert q.next_due() == 10  # not None: the fire loop would sleep with the other copy queued
    assert q.pop_due(10) == [(10, "k", later)]
