"""One set of limits for every job: each hostile input gets a typed error naming its field."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cluster.model.errors import InvalidJob, InvalidPolicy, InvalidSchedule, InvalidTime, ValidationError
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.limits import DEFAULT_LIMITS, MAX_REPEATS, JobLimits, code_allowed
from cluster.model.options import ClusterOptions
from cluster.model.policies import FailurePolicy
from cluster.model.schedules import Schedule
from cluster.model.times import parse_duration, parse_time

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
ACTOR = Target.actor("handler")
HUGE = "9" * 5000


def create(**kwargs):
    kwargs.setdefault("now", NOW)
    kwargs.setdefault("due", "10s")
    return ScheduledJob.create(kwargs.pop("target", ACTOR), kwargs.pop("name", None), **kwargs)


@pytest.mark.parametrize(("kwargs", "error", "field", "rule"), [
    ({"schedule": "@every 1us", "due": None}, InvalidSchedule, "schedule", "at least 1s"),
    ({"schedule": "@every 999ms", "due": None}, InvalidSchedule, "schedule", "at least 1s"),
    ({"due": datetime(1, 1, 1, tzinfo=timezone.utc)}, InvalidTime, "due", "now - 10 minutes"),
    ({"due": NOW - timedelta(minutes=11)}, InvalidTime, "due", "now - 10 minutes"),
    ({"schedule": "@every 1s", "repeats": 2**64}, InvalidJob, "repeats", f"at most {MAX_REPEATS}"),
    ({"metadata": {"k": "x" * 3_000_000}}, InvalidJob, "data", "more than the limit"),
    ({"name": "n" * 300_000}, InvalidJob, "data", "more than the limit"),
    ({"data": {(1, 2): 3}}, InvalidJob, "data", "dict keys"),
    ({"data": "\ud800"}, InvalidJob, "data", "msgpack-encodable"),
    ({"name": "a\ud800"}, InvalidJob, "name", "lone surrogates"),
    ({"metadata": {"k": "\udc00"}}, InvalidJob, "metadata", "lone surrogates"),
    ({"schedule": "0 " + HUGE + " * * * *", "due": None}, InvalidSchedule, "schedule", "longer than 1000"),
    ({"schedule": "0 99999 * * * *", "due": None}, InvalidSchedule, "minute", "outside 0-59"),
    ({"schedule": "*/" + "9" * 900 + " * * * * *", "due": None}, InvalidSchedule, "second", "positive number"),
    ({"due": HUGE + "s"}, InvalidTime, "due", "longer than 30 digits"),
    ({"due": "2030-01-01T00:00:00." + "1" * 5000 + "Z"}, InvalidTime, "due", "longer than 30 digits"),
    ({"schedule": "@every " + "9" * 40 + "s", "due": None}, InvalidSchedule, "schedule", "longer than 30 digits"),
])
def test_each_limit_is_a_typed_error_naming_its_field(kwargs, error, field, rule):
    with pytest.raises(error) as info:
        create(**kwargs)
    assert info.value.field == field
    assert rule in str(info.value)
    assert len(str(info.value)) < 2000  # a hostile input is quoted shortened, not echoed whole


def test_a_job_at_the_limits_is_accepted():
    job = create(schedule="@every 1s", repeats=MAX_REPEATS, due=NOW - timedelta(minutes=9),
                 metadata={"k": "x" * 100_000})
    assert job.schedule is not None and job.schedule.period == timedelta(seconds=1)
    assert job.repeats == MAX_REPEATS


def test_durations_and_periods_refuse_huge_numbers_with_their_own_error():
    with pytest.raises(InvalidTime, match="longer than 30 digits"):
        parse_duration(HUGE + "s")
    with pytest.raises(InvalidTime, match="longer than 30 digits"):
        parse_time("P" + HUGE + "D", NOW)
    with pytest.raises(InvalidSchedule):
        Schedule.parse("@every " + HUGE + "s")


def test_scheduling_imports_grain_classes_and_retry_functions():
    """Checked when scheduled (``resolved`` given): a path that does not import, names a function
    instead of a class, or a retry function with the wrong signature is refused up front."""
    cases = [
        (create(target=Target.grain("nosuchmod.x:Grain", 1)), InvalidJob, "target.cls", "cannot be imported"),
        (create(target=Target.grain("os.path:join", 1)), InvalidJob, "target.cls", "must name a class"),
        (create(failure_policy=FailurePolicy.callable("nosuch.mod:decide")), InvalidPolicy, "failure_policy",
         "cannot be imported"),
        (create(failure_policy=FailurePolicy.callable("json:dumps")), InvalidPolicy, "failure_policy",
         "must take (ctx, exc)"),
        (create(failure_policy=FailurePolicy.callable("os:sep")), InvalidPolicy, "failure_policy",
         "does not name a function"),
    ]
    for job, error, field, rule in cases:
        with pytest.raises(error) as info:
            DEFAULT_LIMITS.check(job, NOW, resolved=set())
        assert (info.value.field, rule in str(info.value)) == (field, True), str(info.value)


def test_a_good_grain_class_resolves_once_per_batch():
    job = create(target=Target.grain("handlers.builtin:Recorder", 1))
    resolved: set[str] = set()
    DEFAULT_LIMITS.check(job, NOW, resolved=resolved)
    assert resolved == {"handlers.builtin:Recorder"}


def test_the_allow_list_refuses_code_outside_it_before_importing_anything():
    limits = ClusterOptions(allowed_code_prefixes=["handlers"]).job_limits()
    ok = create(target=Target.grain("handlers.builtin:Recorder", 1))
    limits.check(ok, NOW, resolved=set())
    outside = create(target=Target.grain("os.path:join", 1))
    with pytest.raises(InvalidJob, match=r"target.cls: module must start with one of \['handlers'\]"):
        limits.check(outside, NOW)  # refused by prefix alone, as a silo without the code would
    policy = create(failure_policy=FailurePolicy.callable("subprocess:run"))
    with pytest.raises(InvalidPolicy, match="module must start with"):
        limits.check(policy, NOW)


@pytest.mark.parametrize(("path", "prefixes", "allowed"), [
    ("myapp.grains:G", ("myapp",), True),
    ("myapp:G", ("myapp",), True),
    ("myapp.grains:G", ("myapp.",), True),
    ("myapplication:G", ("myapp",), False),  # a prefix is a package, not a string prefix
    ("os:system", ("myapp", "handlers"), False),
    ("anything:G", None, True),
])
def test_code_prefixes_match_whole_packages(path, prefixes, allowed):
    assert code_allowed(path, prefixes) is allowed


def test_cluster_options_set_the_limits_and_validate_them():
    limits = ClusterOptions(min_period="5s").job_limits()
    assert limits == JobLimits(min_period=timedelta(seconds=5))
    with pytest.raises(InvalidSchedule, match="at least 5s"):
        create(schedule="@every 2s", due=None, limits=limits)
    with pytest.raises(ValidationError) as info:
        ClusterOptions(allowed_code_prefixes="myapp")
    assert info.value.field == "allowed_code_prefixes"
    with pytest.raises(ValidationError) as info:
        ClusterOptions(min_period="0s")
    assert info.value.field == "min_period"
