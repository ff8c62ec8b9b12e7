"""Failure policies: retry times in virtual time, retry limits, strategies and the exact wire form."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.model.errors import InvalidPolicy, InvalidTime
from cluster.model.policies import (
    DEFAULT_FAILURE_POLICY,
    CallablePolicy,
    FailurePolicy,
)
from cluster.model.schedules import Schedule
from cluster.model.wire import pack, unpack

T0 = datetime(2026, 10, 2, 15, 0, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)


def retry_in_a_minute(ctx, exc):
    """A module-level ShouldRetry: retry a minute later unless the handler said stop."""
    if isinstance(exc, PermissionError):
        return None
    return timedelta(minutes=1)


def retry_at_ctx_time(ctx, exc):
    return ctx["at"]


def retry_at_naive_time(ctx, exc):
    return datetime(2026, 1, 1)


class Policies:
    @staticmethod
    def retry_now(ctx, exc):
        return T0

    def bound(self, ctx, exc):
        return T0


def waits(policy: FailurePolicy, last: int) -> list[timedelta | None]:
    """The wait after attempts 1..last, each measured from the same virtual attempt time."""
    out = []
    for attempts in range(1, last + 1):
        at = policy.next_retry(attempts, T0)
        out.append(None if at is None else at - T0)
    return out


# --- the kinds ---------------------------------------------------------------------------


def test_drop_never_retries():
    policy = FailurePolicy.drop()
    assert policy.next_retry(1, T0) is None
    assert not policy.should_retry(False, 1)
    assert FailurePolicy.drop() == policy


def test_constant_retries_after_the_same_delay_from_the_last_virtual_attempt():
    policy = FailurePolicy.constant("5s", max_retries=2)
    assert policy.next_retry(1, T0) == T0 + 5 * S
    later = T0 + timedelta(hours=3)  # the silo was down: the retry still counts from the attempt time
    assert policy.next_retry(2, later) == later + 5 * S
    assert policy.next_retry(3, later) is None


def test_constant_accepts_timedelta_go_and_iso_durations_alike():
    expected = FailurePolicy.constant(timedelta(seconds=90))
    assert FailurePolicy.constant("1m30s") == expected and FailurePolicy.constant("PT1M30S") == expected


def test_without_max_retries_a_policy_retries_forever():
    policy = FailurePolicy.constant("1s")
    assert policy.next_retry(1_000_000, T0) == T0 + S


def test_backoff_doubles_from_base_delay_up_to_max_delay():
    policy = FailurePolicy.backoff("1s", "1m", factor=2.0)
    assert waits(policy, 8) == [S, 2 * S, 4 * S, 8 * S, 16 * S, 32 * S, 60 * S, 60 * S]


def test_backoff_with_factor_one_is_volcano_constant():
    assert waits(FailurePolicy.backoff("30s", "5m", factor=1), 3) == [30 * S] * 3


def test_backoff_defaults_are_volcanos_30s_and_5m():
    policy = FailurePolicy.backoff()
    assert (policy.base_delay, policy.max_delay, policy.factor) == (30 * S, 300 * S, 2.0)
    assert policy.next_retry(1, T0) == T0 + 30 * S


def test_backoff_far_past_the_cap_does_not_overflow():
    assert FailurePolicy.backoff("1s", "1h", factor=10.0).next_retry(10_000, T0) == T0 + timedelta(hours=1)


def test_formula_follows_min_plus_scale_times_base_to_the_consecutive_failures():
    policy = FailurePolicy.formula("1s", "1m", scale="2s", base=3)
    # consecutive failures before the current one: 0, 1, 2, 3 -> 1+2, 1+6, 1+18, 1+54 -> capped at 60
    assert waits(policy, 5) == [3 * S, 7 * S, 19 * S, 55 * S, 60 * S]


def test_formula_with_the_documented_defaults_waits_min_period():
    policy = FailurePolicy.formula("1s", "1s")
    assert waits(policy, 3) == [S, S, S]


def test_formula_scale_may_be_a_number_of_seconds():
    in_seconds = FailurePolicy.formula("1s", "1m", scale=2, base=3)
    assert in_seconds == FailurePolicy.formula("1s", "1m", scale="2s", base=3)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("500ms", "1m"), "min_period"),
        (("10s", "5s"), "max_period"),
        (("1s", "1m", -1, 2), "scale"),
        (("1s", "1m", "1s", -2), "base"),
        (("1s", "1m", "1s", float("inf")), "base"),
    ],
)
def test_formula_validation_names_the_field(args, field):
    with pytest.raises(InvalidPolicy) as err:
        FailurePolicy.formula(*args)
    assert err.value.field == field


def test_cron_retries_at_the_next_schedule_time_strictly_after_the_attempt():
    policy = FailurePolicy.cron("0 */5 * * * *", max_retries=3)
    assert policy.next_retry(1, T0 + timedelta(minutes=1, seconds=30)) == T0 + timedelta(minutes=5)
    assert policy.next_retry(2, T0 + timedelta(minutes=5)) == T0 + timedelta(minutes=10)
    assert policy.next_retry(4, T0) is None
    assert FailurePolicy.cron(Schedule.parse("0 */5 * * * *"), max_retries=3) == policy


def test_retry_times_are_utc_even_when_the_attempt_time_is_not():
    berlin = timezone(timedelta(hours=2))
    at = FailurePolicy.constant("1s").next_retry(1, T0.astimezone(berlin))
    assert at == T0 + S and at.utcoffset() == timedelta(0)


# --- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: FailurePolicy.constant("1s", max_retries=-1), "max_retries"),
        (lambda: FailurePolicy.constant("1s", max_retries=True), "max_retries"),
        (lambda: FailurePolicy.constant("0s"), "delay"),
        (lambda: FailurePolicy.constant(5), "delay"),
        (lambda: FailurePolicy.backoff("0s", "1m"), "base_delay"),
        (lambda: FailurePolicy.backoff("1m", "1s"), "max_delay"),
        (lambda: FailurePolicy.backoff("1s", "1m", factor=0.5), "factor"),
        (lambda: FailurePolicy.backoff("1s", "1m", factor=float("nan")), "factor"),
        (lambda: FailurePolicy.cron(42), "schedule"),
        (lambda: FailurePolicy.constant("1s", strategy="sometimes"), "strategy"),
        (lambda: FailurePolicy.constant("1s", strategy="always"), "max_retries"),
    ],
)
def test_bad_parameters_raise_invalid_policy_naming_the_field(build, field):
    with pytest.raises(InvalidPolicy) as err:
        build()
    assert err.value.field == field


def test_unreadable_durations_raise_invalid_time_naming_the_field():
    with pytest.raises(InvalidTime) as err:
        FailurePolicy.backoff("soon", "1m")
    assert err.value.field == "base_delay"


def test_attempts_must_count_at_least_the_first_attempt():
    with pytest.raises(InvalidPolicy) as err:
        FailurePolicy.constant("1s").next_retry(0, T0)
    assert err.value.field == "attempts"


def test_a_naive_last_attempt_is_rejected():
    with pytest.raises(InvalidTime) as err:
        FailurePolicy.constant("1s").next_retry(1, datetime(2026, 1, 1))
    assert err.value.field == "last_attempt"


# --- strategies ----------------------------------------------------------------------------


def test_on_failure_retries_failures_only():
    policy = FailurePolicy.constant("1s", max_retries=1)
    assert policy.strategy == "on_failure"
    assert policy.should_retry(False, 1)
    assert not policy.should_retry(True, 1)
    assert policy.decide(1, T0, succeeded=True) is None


def test_always_reruns_after_success_up_to_max_retries():
    policy = FailurePolicy.constant("1s", max_retries=2, strategy="always")
    assert policy.decide(1, T0, succeeded=True) == T0 + S
    assert policy.decide(2, T0, succeeded=False) == T0 + S
    assert policy.decide(3, T0, succeeded=True) is None


def test_never_disables_retries_whatever_the_policy():
    policy = FailurePolicy.backoff("1s", "1m", max_retries=10, strategy="never")
    assert policy.next_retry(1, T0) is None


def test_volcano_spellings_of_the_strategy_are_accepted():
    assert FailurePolicy.constant("1s", 1, strategy="Always") == FailurePolicy.constant("1s", 1, strategy="always")


# --- callables (Orleans ShouldRetry) ---------------------------------------------------------


def test_a_module_level_function_decides_from_ctx_and_exc():
    policy = FailurePolicy.callable(retry_in_a_minute)
    assert policy.path == f"{__name__}:retry_in_a_minute"
    assert policy.decide(1, T0, ctx={}, exc=RuntimeError("boom")) == T0 + timedelta(minutes=1)
    assert policy.decide(1, T0, ctx={}, exc=PermissionError("no")) is None


def test_a_callable_gets_the_context_and_its_answer_is_never_before_the_attempt():
    policy = FailurePolicy.callable(retry_at_ctx_time)
    at = T0 + timedelta(hours=1)
    assert policy.decide(1, T0, ctx={"at": at}) == at
    assert policy.decide(1, T0, ctx={"at": T0 - timedelta(days=1)}) == T0


def test_a_callable_returning_a_naive_time_is_an_error():
    with pytest.raises(InvalidPolicy):
        FailurePolicy.callable(retry_at_naive_time).decide(1, T0, ctx={})


def test_max_retries_bounds_a_callable_too():
    policy = FailurePolicy.callable(retry_in_a_minute, max_retries=1)
    assert policy.decide(2, T0, ctx={}, exc=RuntimeError()) is None


def test_next_retry_of_a_callable_asks_for_decide():
    with pytest.raises(TypeError, match="decide"):
        FailurePolicy.callable(retry_in_a_minute).next_retry(1, T0)


def test_static_methods_resolve_by_qualname():
    policy = FailurePolicy.callable(Policies.retry_now)
    assert policy.path == f"{__name__}:Policies.retry_now"
    assert policy.decide(1, T0) == T0


def test_functions_another_process_cannot_import_are_rejected():
    def closure(ctx, exc):
        return None

    def from_main(ctx, exc):
        return None

    from_main.__module__, from_main.__qualname__ = "__main__", "from_main"  # as if run as a script
    for fn in (lambda ctx, exc: None, closure, Policies().bound, from_main, object()):
        with pytest.raises(InvalidPolicy) as err:
            FailurePolicy.callable(fn)
        assert err.value.field == "failure_policy"


def test_a_path_is_resolved_only_when_a_decision_is_needed():
    policy = FailurePolicy.callable("no_such_module.retry:decide")
    with pytest.raises(InvalidPolicy, match="cannot import"):
        policy.decide(1, T0)
    with pytest.raises(InvalidPolicy):
        FailurePolicy.callable("not a path")


def test_coerce_fills_in_the_default_and_wraps_functions():
    assert FailurePolicy.coerce(None) is DEFAULT_FAILURE_POLICY
    assert FailurePolicy.coerce(retry_in_a_minute) == CallablePolicy(f"{__name__}:retry_in_a_minute")
    drop = FailurePolicy.drop()
    assert FailurePolicy.coerce(drop) is drop
    with pytest.raises(InvalidPolicy) as err:
        FailurePolicy.coerce("drop")
    assert err.value.field == "failure_policy"


def test_the_default_rides_out_half_a_minute_then_gives_up():
    assert waits(DEFAULT_FAILURE_POLICY, 6) == [S, 2 * S, 4 * S, 8 * S, 16 * S, None]


# --- wire ------------------------------------------------------------------------------------


def test_an_unknown_kind_on_the_wire_is_rejected():
    for obj in (["sometimes", 1], [], None):
        with pytest.raises(InvalidPolicy) as err:
            FailurePolicy.from_wire(obj)
        assert err.value.field == "failure_policy"


def test_policies_are_hashable_values():
    assert len({FailurePolicy.constant("1s"), FailurePolicy.constant("PT1S"), FailurePolicy.drop()}) == 2


# --- properties ------------------------------------------------------------------------------

durations = st.integers(1_000, 7 * 86_400 * 1_000_000).map(lambda us: timedelta(microseconds=us))
max_retries = st.none() | st.integers(0, 20)
schedules = st.sampled_from(["0 */5 * * * *", "@every 90s", "@hourly", "CRON_TZ=Europe/Berlin 0 30 2 * * *"])
attempt_times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(timezone.utc)
)


@st.composite
def backoffs(draw, retries=max_retries):
    low, high = sorted((draw(durations), draw(durations)))
    factor = draw(st.floats(1.0, 10.0))
    return FailurePolicy.backoff(low, high, factor, draw(retries))


@st.composite
def formulas(draw, retries=max_retries):
    low, high = sorted((draw(durations.filter(lambda d: d >= S)), draw(durations.filter(lambda d: d >= S))))
    scale = draw(st.integers(0, 10**9).map(lambda us: timedelta(microseconds=us)))
    base = draw(st.floats(0.0, 10.0))
    return FailurePolicy.formula(low, high, scale, base, draw(retries))


@st.composite
def strategy_and_retries(draw):
    strategy = draw(st.sampled_from(["on_failure", "always", "never"]))
    retries = draw(st.integers(0, 20) if strategy == "always" else max_retries)
    return {"max_retries": retries, "strategy": strategy}


time_policies = st.one_of(
    st.just(FailurePolicy.drop()),
    st.builds(lambda d, kw: FailurePolicy.constant(d, **kw), durations, strategy_and_retries()),
    st.builds(lambda s, kw: FailurePolicy.cron(s, **kw), schedules, strategy_and_retries()),
    backoffs(),
    formulas(),
)
any_policies = time_policies | st.builds(
    lambda fn, kw: FailurePolicy.callable(fn, **kw),
    st.sampled_from([retry_in_a_minute, retry_at_ctx_time, "some.module:decide"]),
    strategy_and_retries(),
)


@given(backoffs(), st.integers(1, 200))
def test_backoff_delays_never_shrink_and_never_pass_the_cap(policy, attempts):
    first, second = policy.wait(attempts), policy.wait(attempts + 1)
    assert policy.base_delay <= first <= second <= policy.max_delay


@given(formulas(), st.integers(1, 200))
def test_formula_waits_stay_within_min_and_max_period(policy, attempts):
    assert policy.min_period <= policy.wait(attempts) <= policy.max_period


@given(time_policies, st.integers(1, 40), attempt_times)
def test_retries_stop_exactly_after_max_retries(policy, attempts, last):
    retried = policy.next_retry(attempts, last) is not None
    allowed = policy.strategy != "never" and (policy.max_retries is None or attempts <= policy.max_retries)
    assert retried == allowed


@given(time_policies, st.integers(1, 40), attempt_times)
@settings(max_examples=200)
def test_a_retry_is_never_before_the_attempt_it_follows(policy, attempts, last):
    at = policy.next_retry(attempts, last)
    assert at is None or at > last


@given(any_policies)
def test_every_policy_round_trips_exactly_through_msgpack(policy):
    back = FailurePolicy.from_wire(unpack(pack(policy.to_wire())))
    assert back == policy and type(back) is type(policy) and hash(back) == hash(policy)
