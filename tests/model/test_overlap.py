"""Overlap policies in the model: validation, the wire's optional options element, and the
pure rule that decides what comes after an occurrence that ran past its successors."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cluster.model.errors import InvalidJob, ValidationError
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.occurrences import BUFFER_ALL_LIMIT, Overlap, Overlapped, overlapped
from cluster.model.schedules import Schedule
from cluster.model.wire import pack, unpack

UTC = timezone.utc
NOW = datetime(2030, 1, 1, tzinfo=UTC)
s = timedelta(seconds=1)
EVERY_1S = Schedule.parse("@every 1s")
EACH_SECOND = Schedule.parse("* * * * * *")  # cron, counted one fire at a time


def recurring(**kw: object) -> ScheduledJob:
    return ScheduledJob.create(Target.actor("h", "test"), schedule="@every 1s", now=NOW, **kw)  # type: ignore[arg-type]


# --- validation and wire -----------------------------------------------------------------------


@pytest.mark.parametrize("policy", [p.value for p in Overlap])
def test_every_policy_round_trips_through_the_wire(policy: str) -> None:
    job = recurring(overlap=policy)
    record = unpack(pack(job.to_wire()))
    assert ScheduledJob.from_wire(record) == job
    assert ScheduledJob.head_from_wire(record, {}).overlap == policy


def test_overlap_and_the_schedule_shape_share_the_options_element() -> None:
    job = recurring(overlap="buffer_one", jitter="200ms", not_after=NOW + timedelta(days=1),
                    exclude=["2030-01-02"])
    record = unpack(pack(job.to_wire()))
    assert len(record) == 15 and set(record[14]) == {"overlap", "jitter_us", "not_after_us", "exclude"}
    again = ScheduledJob.from_wire(record)
    assert again == job and (again.overlap, again.jitter) == ("buffer_one", timedelta(milliseconds=200))
    assert ScheduledJob.head_from_wire(record, {}).overlap == "buffer_one"


def test_the_default_costs_no_byte_and_old_records_replay() -> None:
    job = recurring()
    assert job.overlap == "allow_all"
    assert len(job.to_wire()) == 14  # exactly what a record written before overlap existed holds
    skip = recurring(overlap="skip", job_id=job.id)
    assert len(skip.to_wire()) == 15 and skip.to_wire()[14] == {"overlap": "skip"}
    assert ScheduledJob.from_wire(job.to_wire()).overlap == "allow_all"


def test_a_bad_policy_names_the_field_and_lists_the_policies() -> None:
    with pytest.raises(ValidationError) as caught:
        recurring(overlap="queue")
    assert caught.value.field == "overlap"
    for policy in ("allow_all", "skip", "buffer_one", "buffer_all", "cancel_other"):
        assert policy in str(caught.value)


def test_a_one_shot_job_takes_no_overlap_policy() -> None:
    with pytest.raises(InvalidJob) as caught:
        ScheduledJob.create(Target.actor("h", "test"), due=NOW + s, now=NOW, overlap="skip")
    assert caught.value.field == "overlap"


def test_a_policy_this_version_does_not_know_is_refused_on_replay() -> None:
    record = recurring(overlap="skip").to_wire()
    record[14] = {"overlap": "newer_policy"}
    with pytest.raises(InvalidJob):
        ScheduledJob.from_wire(record)
    with pytest.raises(InvalidJob):
        ScheduledJob.head_from_wire(record, {})


# --- the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize("schedule", [EVERY_1S, EACH_SECOND])
def test_no_overlap_leaves_the_next_occurrence_alone(schedule: Schedule) -> None:
    for policy in Overlap:
        assert overlapped(policy, schedule, NOW + s, NOW + 0.5 * s) == Overlapped(NOW + s, 0, False)


@pytest.mark.parametrize("schedule", [EVERY_1S, EACH_SECOND])
def test_skip_resumes_after_the_end_and_counts_what_came_due(schedule: Schedule) -> None:
    # The occurrence at 0 ran until 2.5 s: those at 1 and 2 came due meanwhile.
    assert overlapped(Overlap.SKIP, schedule, NOW + s, NOW + 2.5 * s) == Overlapped(NOW + 3 * s, 2, False)
    # One due exactly at the end came due while it ran too.
    assert overlapped(Overlap.SKIP, schedule, NOW + s, NOW + 2 * s) == Overlapped(NOW + 3 * s, 2, False)


@pytest.mark.parametrize("schedule", [EVERY_1S, EACH_SECOND])
@pytest.mark.parametrize("policy", [Overlap.BUFFER_ONE, Overlap.CANCEL_OTHER])
def test_buffer_one_runs_the_latest_at_once_and_skips_the_older(schedule: Schedule, policy: Overlap) -> None:
    assert overlapped(policy, schedule, NOW + s, NOW + 1.5 * s) == Overlapped(NOW + s, 0, True)
    assert overlapped(policy, schedule, NOW + s, NOW + 3.5 * s) == Overlapped(NOW + 3 * s, 2, True)


@pytest.mark.parametrize("schedule", [EVERY_1S, EACH_SECOND])
def test_buffer_all_runs_them_in_order_up_to_its_bound(schedule: Schedule) -> None:
    assert overlapped(Overlap.BUFFER_ALL, schedule, NOW + s, NOW + 3.5 * s) == Overlapped(NOW + s, 0, True)
    late = NOW + (BUFFER_ALL_LIMIT + 5.5) * s  # BUFFER_ALL_LIMIT + 5 came due: the 5 oldest are skipped
    assert overlapped(Overlap.BUFFER_ALL, schedule, NOW + s, late) == Overlapped(NOW + 6 * s, 5, True)


def test_nothing_past_the_ttl_is_queued_or_counted() -> None:
    ttl = NOW + 2 * s
    assert overlapped(Overlap.SKIP, EVERY_1S, NOW + s, NOW + 5.5 * s, ttl) == Overlapped(None, 2, False)
    assert overlapped(Overlap.BUFFER_ONE, EVERY_1S, NOW + s, NOW + 5.5 * s, ttl) == Overlapped(NOW + 2 * s, 1, True)


def test_a_replayed_series_skips_each_occurrence_once() -> None:
    """buffer_one with a handler taking 2.5 s on @every 1s: every occurrence is run or skipped, once."""
    start, ran, skipped = NOW, [NOW], 0
    for _ in range(20):
        plan = overlapped(Overlap.BUFFER_ONE, EVERY_1S, ran[-1] + s, start + 2.5 * s)
        assert plan.next_due is not None
        skipped += plan.skipped
        start = max(plan.next_due, start + 2.5 * s)
        ran.append(plan.next_due)
    assert len(ran) + skipped == (ran[-1] - NOW) // s + 1  # every grid point up to the last: run or skipped


def test_a_triggered_run_starts_now_whatever_shapes_the_job() -> None:
    from cluster.model.shape import NO_EXCLUSIONS
    from cluster.model.trigger import triggered_run

    job = recurring(overlap="skip", jitter="30s", not_after=NOW + timedelta(days=1), exclude=["2030-01-01"])
    run = triggered_run(job, NOW)
    assert run.due == NOW and run.schedule is None and run.first_fire == NOW  # not jittered
    assert (run.jitter, run.not_before, run.not_after, run.exclude, run.overlap) == (
        timedelta(0), None, None, NO_EXCLUSIONS, "allow_all")
    assert len(run.to_wire()) == 14  # nothing of the shape travels with it
