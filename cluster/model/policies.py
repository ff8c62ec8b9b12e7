"""Failure policies: when a failed (or, with ``always``, finished) attempt of a job runs again.

Every policy answers one question in virtual time: given that ``attempts`` attempts of this
occurrence were made and the last one was *due* at ``last_attempt``, when is the next attempt,
or ``None`` to give up? Computing from the scheduled time of the attempt, not from the wall
clock, keeps retry times identical across a slow silo, a restart or a failover (Dapr's
``last_attempted``).

Build policies with the ``FailurePolicy`` constructors; each kind is a small frozen dataclass:

==========================================  ==================================================
``FailurePolicy.drop()``                    never retry (Dapr ``Drop``)
``FailurePolicy.constant(delay)``           wait ``delay`` every time (Dapr ``Constant``)
``FailurePolicy.cron(schedule)``            retry at the schedule's next time
``FailurePolicy.backoff(base, max, f)``     retry k waits ``min(max, base * f ** (k-1))`` (Volcano)
``FailurePolicy.formula(min, max, s, b)``   ``min(max, min + s * b ** consecutive_failures)``
``FailurePolicy.callable(fn)``              ``fn(ctx, exc) -> datetime | timedelta | None`` (Orleans)
==========================================  ==================================================

``max_retries=None`` retries forever; ``max_retries=n`` allows ``n`` retries after the first
attempt. ``strategy`` is Volcano's: ``on_failure`` (default) retries failures only, ``always``
runs again after a success too (up to ``max_retries``), ``never`` disables retries.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from operator import attrgetter
from typing import TYPE_CHECKING, Any, ClassVar

from cluster.model.errors import InvalidPolicy
from cluster.model.schedules import Schedule
from cluster.model.times import ACCEPTED_DURATIONS, parse_duration, require_aware
from cluster.model.wire import (
    check_code_path,
    memoized,
    qualified_name,
    resolve_code_path,
    timedelta_to_us,
    us_to_timedelta,
)

__all__ = [
    "FailurePolicy",
    "DropPolicy",
    "ConstantPolicy",
    "CronPolicy",
    "BackoffPolicy",
    "FormulaPolicy",
    "CallablePolicy",
    "STRATEGIES",
    "DEFAULT_FAILURE_POLICY",
    "PolicyLike",
]

STRATEGIES = ("on_failure", "always", "never")
_VOLCANO_NAMES = {"OnFailure": "on_failure", "Always": "always", "Never": "never"}
_ONE_SECOND = timedelta(seconds=1)

RetryDecider = Callable[[Any, BaseException | None], datetime | timedelta | None]


class FailurePolicy:
    """A rule for the next attempt of a job occurrence; build one with the constructors below.

    Each kind is a frozen, hashable dataclass subclass holding its parameters and implementing
    ``wait`` (a computed delay) or ``_retry_time``; all round-trip exactly through ``to_wire`` /
    ``FailurePolicy.from_wire``. ``decide`` is what a silo calls; ``next_retry`` is its pure-time
    form for every kind but ``callable``.
    """

    # Declared here, defined as dataclass fields (or class constants) by every kind; the base
    # holds no fields so that each kind lists its own parameters first.
    __slots__ = ()
    kind: ClassVar[str]
    if TYPE_CHECKING:
        # Read-only to the type checker, so a kind may fix them as class constants (DropPolicy).
        @property
        def max_retries(self) -> int | None: ...

        @property
        def strategy(self) -> str: ...

        # Every kind is a dataclass (``fields()`` works on each).
        __dataclass_fields__: ClassVar[dict[str, Any]]

    # -- constructors -------------------------------------------------------------------

    @staticmethod
    def drop() -> DropPolicy:
        """Return the policy that never retries: a failed attempt ends the occurrence."""
        return DropPolicy()

    @staticmethod
    def constant(
        delay: timedelta | str, max_retries: int | None = None, *, strategy: str = "on_failure"
    ) -> ConstantPolicy:
        """Return a policy that retries ``delay`` after each attempt."""
        delay = _positive_duration(delay, "delay")
        return ConstantPolicy(delay, _max_retries(max_retries), _strategy(strategy, max_retries))

    @staticmethod
    def cron(
        schedule: Schedule | str, max_retries: int | None = None, *, strategy: str = "on_failure"
    ) -> CronPolicy:
        """Return a policy that retries at the schedule's first time strictly after each attempt."""
        if not isinstance(schedule, Schedule):
            if not isinstance(schedule, str):
                raise InvalidPolicy("schedule", "must be a Schedule or schedule text", schedule)
            schedule = Schedule.parse(schedule)
        return CronPolicy(schedule, _max_retries(max_retries), _strategy(strategy, max_retries))

    @staticmethod
    def backoff(
        base_delay: timedelta | str = "30s",
        max_delay: timedelta | str = "5m",
        factor: float = 2.0,
        max_retries: int | None = None,
        *,
        strategy: str = "on_failure",
    ) -> BackoffPolicy:
        """Return a policy whose retry k (1-based) waits ``min(max_delay, base_delay * factor**(k-1))``.

        ``factor=1`` is Volcano's ``Constant`` backoff, ``factor=2`` its ``Exponential``.
        """
        base = _positive_duration(base_delay, "base_delay")
        cap = _duration(max_delay, "max_delay")
        if cap < base:
            raise InvalidPolicy("max_delay", f"must be at least base_delay ({base})", cap)
        growth = _real(factor, "factor")
        if growth < 1.0:
            raise InvalidPolicy("factor", "must be a finite number >= 1 (delays never shrink)", factor)
        return BackoffPolicy(base, cap, growth, _max_retries(max_retries), _strategy(strategy, max_retries))

    @staticmethod
    def formula(
        min_period: timedelta | str,
        max_period: timedelta | str,
        scale: timedelta | str | float = 0,
        base: float = 0.0,
        max_retries: int | None = None,
        *,
        strategy: str = "on_failure",
    ) -> FormulaPolicy:
        """Return a policy waiting ``min(max_period, min_period + scale * base**consecutive_failures)``.

        ``consecutive_failures`` counts the failures before the current one (0 after the first
        attempt). Rule: ``1 s <= min_period <= max_period``; ``scale`` is a duration (a number
        means seconds) and ``scale, base >= 0``, so every wait lies in ``[min_period, max_period]``.
        """
        low = _duration(min_period, "min_period")
        if low < _ONE_SECOND:
            raise InvalidPolicy("min_period", "must be at least 1s", low)
        high = _duration(max_period, "max_period")
        if high < low:
            raise InvalidPolicy("max_period", f"must be at least min_period ({low})", high)
        if isinstance(scale, (int, float)) and not isinstance(scale, bool):
            if not math.isfinite(scale) or scale < 0:
                raise InvalidPolicy("scale", "must be a finite duration >= 0", scale)
            scale = timedelta(seconds=scale)
        step = _duration(scale, "scale")
        growth = _real(base, "base")
        retries = _max_retries(max_retries)
        return FormulaPolicy(low, high, step, growth, retries, _strategy(strategy, max_retries))

    @staticmethod
    def callable(
        fn: RetryDecider | str, max_retries: int | None = None, *, strategy: str = "on_failure"
    ) -> CallablePolicy:
        """Return a policy that asks ``fn(ctx, exc)`` for the next attempt (Orleans ``ShouldRetry``).

        ``fn`` returns an aware datetime, a timedelta after the last attempt, or None to give up.
        It must be a module-level function (or its ``"module:qualname"`` path): the shard log
        stores the path so that any silo can replay it. Lambdas, closures, bound methods and
        functions in ``__main__`` are rejected.
        """
        if isinstance(fn, str):
            path = check_code_path(fn)
            if path is None:
                raise InvalidPolicy("failure_policy", "a path must look like 'package.module:function'", fn)
        else:
            path = qualified_name(fn) if callable(fn) else None
            if path is None or not _resolves_to(path, fn):
                raise InvalidPolicy(
                    "failure_policy",
                    "a callable policy must be a module-level function of an importable module "
                    "(not a lambda, closure, bound method or a function in __main__)",
                    fn,
                )
        return CallablePolicy(path, _max_retries(max_retries), _strategy(strategy, max_retries))

    @staticmethod
    def coerce(value: PolicyLike | None) -> FailurePolicy:
        """Return ``value`` as a policy: None gives ``DEFAULT_FAILURE_POLICY``, a function wraps it."""
        if value is None:
            return DEFAULT_FAILURE_POLICY
        if isinstance(value, FailurePolicy):
            return value
        if callable(value):
            return FailurePolicy.callable(value)
        raise InvalidPolicy(
            "failure_policy", "must be a FailurePolicy, a function (ctx, exc) -> datetime | None, or None", value
        )

    # -- decisions ------------------------------------------------------------------------

    def should_retry(self, succeeded: bool, attempts: int) -> bool:
        """Return whether the occurrence runs again after its ``attempts``-th attempt ended so.

        ``on_failure`` retries failures, ``always`` also re-runs successes, ``never`` stops;
        in every case at most ``max_retries`` retries follow the first attempt.
        """
        _check_attempts(attempts)
        if self.strategy == "never" or (succeeded and self.strategy != "always"):
            return False
        return self.max_retries is None or attempts <= self.max_retries

    def decide(
        self,
        attempts: int,
        last_attempt: datetime,
        *,
        succeeded: bool = False,
        ctx: Any = None,
        exc: BaseException | None = None,
    ) -> datetime | None:
        """Return the virtual time of the next attempt (never before ``last_attempt``), None to give up.

        This is what a silo calls: ``ctx`` (the JobContext) and ``exc`` (what the handler raised)
        reach a callable policy; the other kinds depend on ``attempts`` and ``last_attempt`` only.
        """
        last_attempt = require_aware(last_attempt, field="last_attempt")
        if not self.should_retry(succeeded, attempts):
            return None
        return self._retry_time(attempts, last_attempt, ctx, exc)

    def next_retry(self, attempts: int, last_attempt: datetime) -> datetime | None:
        """Return when attempt ``attempts + 1`` runs after a failure at virtual time ``last_attempt``.

        ``attempts`` (>= 1) counts the attempts made of this occurrence; None means give up.
        A callable policy needs the handler's context: use ``decide`` for it.
        """
        return self.decide(attempts, last_attempt)

    def wait(self, attempts: int) -> timedelta:
        """Return the wait after attempt ``attempts`` (for kinds that wait a computed duration)."""
        raise TypeError(f"a {self.kind} policy has no fixed wait")

    def _retry_time(self, attempts: int, last: datetime, ctx: Any, exc: BaseException | None) -> datetime | None:
        # Kinds that do not wait a computed duration (cron, callable) override this.
        return last + self.wait(attempts)

    # -- wire -----------------------------------------------------------------------------

    def to_wire(self) -> list[Any]:
        """Return a msgpack-ready list that ``FailurePolicy.from_wire`` turns back into an equal policy."""
        spec = _WIRE_FIELDS[type(self)]
        return [self.kind, *(getattr(self, n) if enc is None else enc(getattr(self, n)) for n, enc, _ in spec)]

    @staticmethod
    def from_wire(obj: Any, memo: dict[Any, Any] | None = None) -> FailurePolicy:
        """Return the policy ``to_wire`` encoded; trusts the log and does not re-validate.

        Pass the same ``memo`` dict across a replay to decode each distinct policy once
        (policies are immutable, so jobs may share one).
        """
        try:
            cls = _KINDS[obj[0]]
        except (TypeError, IndexError, KeyError):
            kinds = ", ".join(_KINDS)
            raise InvalidPolicy("failure_policy", f"unknown policy on the wire; kinds: {kinds}", obj) from None
        key = None if memo is None else tuple(obj)  # policy wire forms hold scalars only
        return memoized(memo, key, _decode, cls, obj)


@dataclass(frozen=True)
class DropPolicy(FailurePolicy):
    """Never retry: a failed attempt ends the occurrence (Dapr's ``Drop``)."""

    kind: ClassVar[str] = "drop"
    max_retries: ClassVar[int | None] = 0
    strategy: ClassVar[str] = "never"  # so should_retry always says no


@dataclass(frozen=True)
class ConstantPolicy(FailurePolicy):
    """Retry ``delay`` after each attempt (Dapr's ``Constant``)."""

    kind: ClassVar[str] = "constant"
    delay: timedelta
    max_retries: int | None = None
    strategy: str = "on_failure"

    def wait(self, attempts: int) -> timedelta:
        """Return ``delay``, whatever the attempt."""
        return self.delay


@dataclass(frozen=True)
class CronPolicy(FailurePolicy):
    """Retry at the schedule's first time strictly after the last attempt."""

    kind: ClassVar[str] = "cron"
    schedule: Schedule
    max_retries: int | None = None
    strategy: str = "on_failure"

    def _retry_time(self, attempts: int, last: datetime, ctx: Any, exc: BaseException | None) -> datetime | None:
        return self.schedule.next_after(last)


@dataclass(frozen=True)
class BackoffPolicy(FailurePolicy):
    """Retry k waits ``min(max_delay, base_delay * factor ** (k-1))`` (Volcano's backoff)."""

    kind: ClassVar[str] = "backoff"
    base_delay: timedelta
    max_delay: timedelta
    factor: float = 2.0
    max_retries: int | None = None
    strategy: str = "on_failure"

    def wait(self, attempts: int) -> timedelta:
        """Return the wait before retry number ``attempts`` (1-based)."""
        return _bounded_growth(timedelta(0), self.base_delay, self.factor, attempts - 1, self.max_delay)


@dataclass(frozen=True)
class FormulaPolicy(FailurePolicy):
    """Wait ``min(max_period, min_period + scale * base ** consecutive_failures)``."""

    kind: ClassVar[str] = "formula"
    min_period: timedelta
    max_period: timedelta
    scale: timedelta
    base: float
    max_retries: int | None = None
    strategy: str = "on_failure"

    def wait(self, attempts: int) -> timedelta:
        """Return the wait after attempt ``attempts``: ``attempts - 1`` failures came before it."""
        return _bounded_growth(self.min_period, self.scale, self.base, attempts - 1, self.max_period)


@dataclass(frozen=True)
class CallablePolicy(FailurePolicy):
    """Ask a module-level function ``fn(ctx, exc)`` for the next attempt (Orleans ``ShouldRetry``).

    ``path`` (``module:qualname``) is imported when a decision is needed, so a log written by one
    process replays in another. ``max_retries`` and ``strategy`` still bound the calls.
    """

    kind: ClassVar[str] = "callable"
    path: str
    max_retries: int | None = None
    strategy: str = "on_failure"

    @property
    def function(self) -> RetryDecider:
        """Return the function ``path`` names, importing its module if needed."""
        try:
            fn = resolve_code_path(self.path)
        except (ImportError, AttributeError) as exc:
            raise InvalidPolicy("failure_policy", f"cannot import the retry function: {exc}", self.path) from exc
        if not callable(fn):
            raise InvalidPolicy("failure_policy", "the retry path does not name a function", self.path)
        decider: RetryDecider = fn  # callable, checked; its signature is the author's promise
        return decider

    def next_retry(self, attempts: int, last_attempt: datetime) -> datetime | None:
        """Not available: the function needs the handler's context and exception; call ``decide``."""
        raise TypeError(
            f"a callable failure policy ({self.path}) decides from (ctx, exc): "
            "call decide(attempts, last_attempt, ctx=..., exc=...)"
        )

    def _retry_time(self, attempts: int, last: datetime, ctx: Any, exc: BaseException | None) -> datetime | None:
        answer = self.function(ctx, exc)
        if answer is None:
            return None
        if isinstance(answer, timedelta):
            answer = last + answer
        elif not isinstance(answer, datetime) or answer.utcoffset() is None:
            rule = f"{self.path} must return an aware datetime, a timedelta or None"
            raise InvalidPolicy("failure_policy", rule, answer)
        # An answer in the past means "as soon as possible", which in virtual time is the last attempt.
        return max(answer.astimezone(timezone.utc), last)


PolicyLike = FailurePolicy | RetryDecider

_KINDS: dict[str, type[FailurePolicy]] = {
    cls.kind: cls for cls in (DropPolicy, ConstantPolicy, CronPolicy, BackoffPolicy, FormulaPolicy, CallablePolicy)
}

# How a field of each annotated type crosses the wire: (encode, decode); None passes it as is.
# Times become integer microseconds and schedules their text, so the wire form is exact. Keys are
# annotation strings (this module uses ``from __future__ import annotations``); the round-trip
# tests fail if a field type is missing here.
_CODECS: dict[str | type[Any], tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]] = {
    "timedelta": (timedelta_to_us, us_to_timedelta),
    "Schedule": (attrgetter("text"), Schedule.parse),
}
# Per kind, its fields in wire order (the kind's parameters, then max_retries and strategy).
_WIRE_FIELDS: dict[type[FailurePolicy], tuple[tuple[str, Any, Any], ...]] = {
    cls: tuple((f.name, *_CODECS.get(f.type, (None, None))) for f in fields(cls)) for cls in _KINDS.values()
}


def _decode(cls: type[FailurePolicy], obj: list[Any]) -> FailurePolicy:
    # Not strict: a wire form with fewer trailing fields takes the kind's defaults for the rest.
    return cls(*(v if dec is None else dec(v) for (_, _, dec), v in zip(_WIRE_FIELDS[cls], obj[1:], strict=False)))


def _check_attempts(attempts: int) -> None:
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise InvalidPolicy("attempts", "must be an int >= 1 (the attempts made so far)", attempts)


def _max_retries(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidPolicy("max_retries", "must be None (retry forever) or an int >= 0", value)
    return value


def _strategy(value: str, max_retries: int | None) -> str:
    strategy = _VOLCANO_NAMES.get(value, value) if isinstance(value, str) else value
    if strategy not in STRATEGIES:
        raise InvalidPolicy("strategy", f"must be one of {', '.join(STRATEGIES)}", value)
    if strategy == "always" and max_retries is None:
        # "always" re-runs after success; unbounded, that is a recurring job without a schedule.
        rule = "strategy 'always' needs a finite max_retries (use a schedule to repeat forever)"
        raise InvalidPolicy("max_retries", rule)
    return strategy


def _duration(value: object, field: str) -> timedelta:
    if not isinstance(value, (timedelta, str)):
        raise InvalidPolicy(field, "must be a duration", value, accepted=ACCEPTED_DURATIONS)
    return parse_duration(value, field=field)  # rejects negative durations


def _positive_duration(value: timedelta | str, field: str) -> timedelta:
    td = _duration(value, field)
    if td <= timedelta(0):
        # A zero wait would retry a failing target in a tight loop.
        raise InvalidPolicy(field, "must be positive", td)
    return td


def _real(value: float, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidPolicy(field, "must be a finite number >= 0", value)
    # Always a float, so that 2 and 2.0 give the same wire form.
    return float(value)


def _bounded_growth(offset: timedelta, scale: timedelta, base: float, exponent: int, cap: timedelta) -> timedelta:
    """Return ``min(cap, offset + scale * base**exponent)`` to the microsecond; huge powers give ``cap``."""
    cap_us = timedelta_to_us(cap)
    try:
        grown = timedelta_to_us(offset) + timedelta_to_us(scale) * base**exponent
    except OverflowError:
        return cap
    return us_to_timedelta(round(min(cap_us, grown)))  # grown may be inf


def _resolves_to(path: str, fn: Any) -> bool:
    """Return whether importing ``path`` gives ``fn`` back, as it will in a silo replaying the log."""
    try:
        return resolve_code_path(path) is fn
    except (ImportError, AttributeError):
        return False


DEFAULT_FAILURE_POLICY: FailurePolicy = FailurePolicy.backoff(
    base_delay="1s", max_delay="1m", factor=2.0, max_retries=5
)
"""The policy of a job that names none: 5 retries at 1 s, 2 s, 4 s, 8 s, 16 s (31 s in all).

A durable scheduler that drops an occurrence on the first transient blip (an actor restarting,
a network hiccup) loses exactly the work it exists to keep, so ``drop`` is wrong here (Dapr's
jobs API does not drop either: with no policy it retries 3 times 1 s apart, dapr/dapr
``tests/integration/suite/daprd/jobs/failurepolicy/noset/allfail.go``). Retrying forever would loop on a poisoned job. Exponential backoff from 1 s rides
out restarts that take seconds without hammering a struggling target, and five retries bound
the cost of a job that can never succeed to about half a minute.
"""
