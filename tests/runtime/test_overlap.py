"""Overlap policies on a silo's roles, without Ray: a recurring ``@every 1s`` job whose handler
takes 2.5 s (the handler moves the manual clock), under each policy."""

from __future__ import annotations

from datetime import timedelta

import pytest

from cluster.model.attempt import JobContext
from cluster.model.wire import datetime_to_us
from cluster.named.hooks import ended
from cluster.named.registry import JobStatus
from cluster.runtime.hooks import AttemptEnd, AttemptEvent, SiloHooks
from cluster.runtime.membership import EXITED, Membership
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import DUE, OWNER, RETRY, SCHEDULED, ShardState
from storage import MemoryStore, read_log
from tests.runtime.harness import T0, T0_US, GatedStore, add, fire_due, job, make_parts, until_idle

RUN_S = 2.5  # each attempt takes this long: two or three occurrences of @every 1s come due meanwhile


class Slow:
    """A handler that takes ``RUN_S`` on the manual clock and notes the occurrences it ran."""

    def __init__(self, parts: Roles) -> None:
        self.parts = parts
        self.ran: list[float] = []  # scheduled_for, in seconds after T0
        self.started: list[float] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.ran.append((ctx.scheduled_for - T0).total_seconds())
        self.started.append((self.parts.clock.now_us() - T0_US) / 1e6)
        self.parts.clock.advance(RUN_S)


async def run_series(parts: Roles, fires: int) -> Slow:
    """Fire the job ``fires`` times, moving the clock to each next due time as a silo's loop would."""
    slow = parts.transport.handlers["h"] = Slow(parts)
    while len(slow.ran) < fires:
        due = parts.queue.next_due()
        assert due is not None, "the series stopped"
        if due > parts.clock.now_us():
            parts.clock.advance((due - parts.clock.now_us()) / 1e6)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)
    return slow


async def series(policy: str, fires: int = 4) -> tuple[Roles, Slow]:
    parts = await make_parts()
    j = job(schedule="@every 1s", overlap=policy)
    await add(parts, j)
    return parts, await run_series(parts, fires)


def overlap_counts(parts: Roles) -> tuple[int, int, int]:
    m = parts.metrics
    return m.overlap_skipped.value, m.overlap_buffered.value, m.overlap_cancelled.value


async def test_allow_all_keeps_todays_rule_and_counts_nothing() -> None:
    # Today: the next occurrence waits for the previous one to end; one due more than misfire_grace
    # (1 s) before that end was missed, and fire_once goes on after the end.
    parts, slow = await series("allow_all")
    assert slow.ran == [1, 4, 7, 10]
    assert overlap_counts(parts) == (0, 0, 0)


async def test_skip_runs_none_that_came_due_meanwhile_and_counts_each() -> None:
    parts, slow = await series("skip")
    assert slow.ran == [1, 4, 7, 10]  # 2 and 3 came due while 1 ran (1 to 3.5), and so on
    assert slow.started == [1, 4, 7, 10]
    assert overlap_counts(parts) == (8, 0, 0)  # 2, 3, 5, 6, 8, 9, 11, 12: counted as each run ends


async def test_buffer_one_starts_the_latest_as_the_running_one_ends() -> None:
    parts, slow = await series("buffer_one", 5)
    # 1 runs 1-3.5: 2 and 3 came due, 3 waits (2 skipped) and starts at 3.5; it runs to 6: 4, 5
    # and 6 came due, 6 waits; 6 runs 6-8.5, 7 and 8 came due ... Every run after the first waited.
    assert slow.ran == [1, 3, 6, 8, 11]
    assert slow.started == [1, 3.5, 6, 8.5, 11]
    assert overlap_counts(parts) == (1 + 2 + 1 + 2 + 1, 5, 0)


async def test_buffer_all_runs_every_occurrence_back_to_back_in_order() -> None:
    parts, slow = await series("buffer_all", 5)
    assert slow.ran == [1, 2, 3, 4, 5]
    assert slow.started == [1, 3.5, 6, 8.5, 11]
    assert overlap_counts(parts) == (0, 5, 0)  # the fifth run's successor waits too


async def test_buffer_all_skips_the_oldest_beyond_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    import cluster.model.occurrences as occurrences

    monkeypatch.setattr(occurrences, "BUFFER_ALL_LIMIT", 2)
    parts, slow = await series("buffer_all", 4)
    # 1 runs 1-3.5: 2, 3 wait; 2 runs 3.5-6: 3 to 6 wait, the bound keeps the newest, 5 and 6;
    # 5 runs 6-8.5: 6, 7, 8 wait, 6 is dropped; 7 runs 8.5-11: 8 to 11 wait, 8 and 9 are dropped.
    assert slow.ran == [1, 2, 5, 7]
    assert overlap_counts(parts)[0] == 2 + 1 + 2


async def test_a_buffered_occurrence_is_durable_before_it_starts() -> None:
    """What waits is the job's live entry in its shard log, due already: a silo that loads the
    log after a kill finds it and runs it; nothing of it lives only in memory."""
    parts = await make_parts()
    j = job(schedule="@every 1s", overlap="buffer_one")
    await add(parts, j)
    parts.transport.handlers["h"] = Slow(parts)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)  # 1 ran until 3.5: 3 waits
    queued = parts.queue.get(j.id)
    assert queued is not None
    due, entry = queued
    assert entry[SCHEDULED] == datetime_to_us(T0 + timedelta(seconds=3)) and due <= parts.clock.now_us()
    state = ShardState().replay((await read_log(parts.store, entry[OWNER].base)).records())
    assert state.live[j.id][SCHEDULED] == entry[SCHEDULED] and state.live[j.id][DUE] == entry[DUE]


async def test_a_skip_is_counted_once_when_its_write_is_tried_again() -> None:
    store = GatedStore()
    parts = await make_parts(store)
    j = job(schedule="@every 1s", overlap="skip")
    await add(parts, j)
    parts.transport.handlers["h"] = Slow(parts)
    parts.clock.advance(1)
    parts.lease.renew(parts.clock.monotonic())
    # The outcome's first write fails (the append layer's own three tries); it is decided and written again.
    store.fail_next("append_block", 3)
    await fire_due(parts)
    assert overlap_counts(parts) == (2, 0, 0)
    queued = parts.queue.get(j.id)
    assert queued is not None and queued[1][SCHEDULED] == datetime_to_us(T0 + timedelta(seconds=4))


# --- cancel_other: the handler stops the running attempt as the next occurrence comes due ---------


async def settle() -> None:
    await until_idle()


async def fire_now(parts: Roles) -> None:
    """Take what is due and send it, without waiting for it to end (the handler runs on the clock)."""
    parts.lease.renew(parts.clock.monotonic())
    parts.firing.dispatch(parts.queue.pop_due(limit=parts.runs.room))
    await settle()


class Stubborn:
    """Runs until the manual clock has moved ``RUN_S`` on: a handler slower than its schedule."""

    def __init__(self, parts: Roles) -> None:
        self.parts = parts
        self.ran: list[float] = []
        self.ended: list[float] = []

    async def __call__(self, ctx: JobContext) -> None:
        self.ran.append((ctx.scheduled_for - T0).total_seconds())
        await self.parts.clock.sleep(RUN_S)
        self.ended.append((ctx.scheduled_for - T0).total_seconds())


async def test_cancel_other_stops_the_running_attempt_and_starts_the_next() -> None:
    parts = await make_parts()
    parts.transport.clock = parts.clock  # JobHandler's own batch code, on the manual clock
    handler = parts.transport.handlers["h"] = Stubborn(parts)
    j = job(schedule="@every 1s", overlap="cancel_other")
    (name,) = await add(parts, j)
    parts.clock.advance(1)
    await fire_now(parts)
    assert handler.ran == [1]
    assert parts.transport.stops == [{next(iter(parts.runs.inflight.values())).run_id: (T0_US + 2_000_000) / 1e6}]
    parts.clock.advance(0.5)
    await settle()
    assert parts.runs.inflight and parts.queue.get(j.id) is None  # still running; nothing due yet
    parts.clock.advance(0.5)  # 2 comes due: the handler stops 1, and 2 is queued, due at once
    await settle()
    assert handler.ended == [] and not parts.runs.inflight
    queued = parts.queue.get(j.id)
    assert queued is not None and queued[1][SCHEDULED] == T0_US + 2_000_000
    assert overlap_counts(parts) == (0, 1, 1)
    assert parts.metrics.failed.value == 0 and parts.metrics.retried.value == 0  # superseded, not failed
    assert not [op for op in (await read_log(parts.store, name)).records() if op[0] == RETRY]
    await fire_now(parts)
    assert handler.ran == [1, 2]
    parts.clock.advance(1)
    await settle()
    assert overlap_counts(parts) == (0, 2, 2)


async def test_cancel_other_lets_an_attempt_that_ends_in_time_succeed() -> None:
    parts = await make_parts()
    parts.transport.clock = parts.clock
    handler = parts.transport.handlers["h"] = Stubborn(parts)
    j = job(schedule="@every 5s", overlap="cancel_other")
    await add(parts, j)
    parts.clock.advance(1)
    await fire_now(parts)
    parts.clock.advance(RUN_S)
    await settle()
    assert handler.ended == [1] and parts.metrics.succeeded.value == 1
    assert overlap_counts(parts) == (0, 0, 0)
    queued = parts.queue.get(j.id)
    assert queued is not None and queued[0] == T0_US + 6_000_000  # on its grid, not early


# --- what a named job's status shows -----------------------------------------------------------------


class Ends(SiloHooks):
    def __init__(self) -> None:
        self.ends: list[AttemptEnd] = []

    async def attempt_ended(self, event: AttemptEvent, end: AttemptEnd) -> None:
        self.ends.append(end)


async def test_the_skips_reach_the_hooks_and_a_named_jobs_status() -> None:
    hook = Ends()
    parts = await make_parts(hooks=[hook])
    await add(parts, job(schedule="@every 1s", overlap="skip"))
    await run_series(parts, 2)
    assert [end.skipped for end in hook.ends] == [2, 2]
    status = JobStatus()
    event = AttemptEvent(job(), "r", 1, 1, T0, T0)
    for end in hook.ends:
        status = ended(status, event, end, "silo#1")
    assert status.overlap_skipped == 4
    assert JobStatus.from_json(status.to_json()).overlap_skipped == 4
    assert "osk" not in JobStatus().to_json()  # a job that skipped nothing keeps its entry's size
    assert JobStatus.from_json(JobStatus().to_json()).overlap_skipped == 0


async def test_a_buffered_occurrence_survives_its_silos_death() -> None:
    store = MemoryStore()
    victim = await make_parts(store, "v")
    j = job(schedule="@every 1s", overlap="buffer_one")
    await add(victim, j)
    victim.transport.handlers["h"] = Slow(victim)
    victim.clock.advance(1)
    victim.lease.renew(victim.clock.monotonic())
    await fire_due(victim)  # 1 ran until 3.5: 3 waits, due, in the victim's queue only ...
    await Membership(store).declare_dead(victim.me.row, EXITED)  # ... and the victim dies before starting it
    peer = await make_parts(store, "p", clock=victim.clock)
    assert await peer.adoption.adopt_orphans() >= 1
    slow = await run_series(peer, 1)
    assert slow.ran == [3] and slow.started == [3.5]
