"""Jitter, bounds and exclusions in a silo (issue 16 points 4 and 5), without Ray: what a user
relies on is which occurrences start, when, and what the counters say."""

from __future__ import annotations

from datetime import timedelta

from cluster.model.jobs import ScheduledJob
from cluster.model.wire import datetime_to_us, timedelta_to_us
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import DUE, OCCURRENCE, SCHEDULED, ShardState
from storage import read_log
from tests.runtime.harness import T0, T0_US, Recorder, add, fire_due, job, make_parts, until_idle


def _entry(parts: Roles, job_id: str) -> list[object] | None:
    for shard in parts.shards:
        if shard.state is not None and job_id in shard.state.live:
            return shard.state.live[job_id]
    return None


async def _run_until(parts: Roles, seconds: float, step: float = 0.1) -> None:
    """Advance the clock by ``step`` up to ``seconds``, firing what is due at each step."""
    for _ in range(round(seconds / step)):
        parts.clock.advance(step)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)


async def test_an_excluded_occurrence_is_skipped_counted_and_the_next_one_fires() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    skipped = T0 + timedelta(seconds=2)
    # Every second, but never at second 2 of a minute: the occurrence at T0+2s is excluded.
    j = job(due=timedelta(seconds=1), schedule="@every 1s", exclude=f"{skipped.second} * * * * *")
    await add(parts, j)
    await _run_until(parts, 3.0)
    assert [ctx.scheduled_for for ctx in recorder.ran] == [T0 + timedelta(seconds=1), T0 + timedelta(seconds=3)]
    assert [ctx.occurrence for ctx in recorder.ran] == [1, 2]  # a skipped occurrence is not a fire
    assert parts.metrics.excluded.value == 1
    entry = _entry(parts, j.id)
    assert entry is not None and entry[SCHEDULED] == T0_US + 4_000_000


async def test_not_after_finishes_the_job_and_counts_the_occurrence_it_did_not_fire() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=1), schedule="@every 1s", not_after=T0 + timedelta(seconds=2, milliseconds=500))
    await add(parts, j)
    await _run_until(parts, 5.0)
    assert [ctx.scheduled_for for ctx in recorder.ran] == [T0 + timedelta(seconds=1), T0 + timedelta(seconds=2)]
    assert _entry(parts, j.id) is None  # finished: nothing left in any shard
    assert parts.metrics.out_of_bounds.value == 1
    assert parts.metrics.snapshot()["out_of_bounds"] == 1


async def test_not_before_moves_the_first_occurrence_up_on_the_schedules_grid() -> None:
    j = job(due=timedelta(seconds=1), schedule="@every 10s", not_before=T0 + timedelta(seconds=25))
    assert j.due == T0 + timedelta(seconds=31)  # 1, 11, 21 are before the bound; 31 is the grid's next


async def test_jittered_occurrences_start_within_the_window_after_their_time_and_the_grid_never_drifts() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    jitter = timedelta(milliseconds=500)
    j = job(due=timedelta(seconds=1), schedule="@every 1s", jitter=jitter)
    await add(parts, j)
    await _run_until(parts, 8.0, step=0.05)
    assert len(recorder.ran) >= 6
    offsets = []
    for ctx in recorder.ran:
        scheduled = T0 + timedelta(seconds=ctx.occurrence)  # the un-jittered grid: T0 + 1s, 2s, ...
        offset = ctx.scheduled_for - scheduled
        assert timedelta(0) <= offset <= jitter, (ctx.occurrence, offset)
        offsets.append(offset)
    assert len(set(offsets)) > 1  # spread, not one fixed delay
    entry = _entry(parts, j.id)
    assert entry is not None
    # The pending occurrence sits on the grid; only its fire time is jittered, as the model says.
    assert (entry[SCHEDULED] - T0_US) % 1_000_000 == 0
    assert entry[DUE] == j.fire_us(entry[SCHEDULED])  # type: ignore[arg-type]


async def test_a_jittered_job_is_added_at_its_jittered_time_and_a_reload_keeps_it() -> None:
    parts = await make_parts()
    j = job(due=timedelta(seconds=1), schedule="@every 1s", jitter="500ms")
    await add(parts, j)
    entry = _entry(parts, j.id)
    assert entry is not None and entry[SCHEDULED] == datetime_to_us(j.due) and entry[OCCURRENCE] == 1
    assert entry[DUE] == datetime_to_us(j.first_fire) > entry[SCHEDULED]
    # Another silo reading the same log (an adopter, a replay) sees the very same fire time.
    shard = next(iter(parts.shards))
    replayed = ShardState().replay((await read_log(parts.store, shard.base)).records())
    assert replayed.live[j.id][DUE] == entry[DUE]


def test_a_wire_record_of_a_jittered_job_round_trips_and_the_offset_is_the_same() -> None:
    j = job(due=timedelta(seconds=1), schedule="@every 1s", jitter="30s")
    back = ScheduledJob.from_wire(j.to_wire())
    assert back.jitter == timedelta(seconds=30)
    scheduled = datetime_to_us(j.due) + 7 * 1_000_000
    assert back.fire_us(scheduled) == j.fire_us(scheduled)
    assert 0 <= j.fire_us(scheduled) - scheduled <= timedelta_to_us(timedelta(seconds=30))


async def test_a_missed_occurrence_skipped_on_load_resumes_at_the_next_allowed_jittered_one() -> None:
    parts = await make_parts()
    excluded_at = T0 + timedelta(seconds=7)
    j = job(due=timedelta(seconds=1), schedule="@every 1s", misfire="skip", jitter="200ms",
            exclude=f"{excluded_at.second} * * * * *")
    await add(parts, j)
    parts.clock.advance(6.5)  # occurrences 1 s ... 6 s were missed while nobody fired
    shard = next(iter(parts.shards))
    assert parts.loading.settle_misfires(shard) == {j.id}
    await until_idle()  # the settling is written
    entry = _entry(parts, j.id)
    assert entry is not None
    assert entry[SCHEDULED] == T0_US + 8_000_000  # 7 s is excluded: the next allowed is 8 s
    assert entry[DUE] == j.fire_us(T0_US + 8_000_000)
    assert parts.metrics.excluded.value == 1
