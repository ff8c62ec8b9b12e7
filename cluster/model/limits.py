"""One set of limits for every job, checked before anything is written.

``ScheduledJob.create`` checks a job against ``DEFAULT_LIMITS``; the client checks it again
against the cluster's own limits (``ClusterOptions.job_limits()``) when it is scheduled, and a
silo checks what it is sent before acknowledging it, so a job built elsewhere or sent over Ray
by any caller meets the same rules. Each broken rule is a typed error naming the field.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from cluster.model.errors import InvalidJob, InvalidPolicy, InvalidSchedule, InvalidTime
from cluster.model.times import format_duration
from cluster.model.wire import pack, resolve_code_path

if TYPE_CHECKING:
    from cluster.model.jobs import ScheduledJob

__all__ = ["JobLimits", "DEFAULT_LIMITS", "MAX_REPEATS", "code_allowed"]

#: Occurrence counters travel as msgpack ints and are counted up per occurrence: well inside 32 bits.
MAX_REPEATS = 2**31 - 1


@dataclass(frozen=True)
class JobLimits:
    """What a job may ask for.

    - ``min_period`` (1 s): the shortest ``@every`` period. Cron cannot go below a second
      either, and a sub-second recurring job costs a storage write per fire: a tight loop, not
      a schedule.
    - ``earliest_start`` (10 min): a first due time further in the past is a mistake (a wrong
      clock or unit), not a catch-up.
    - ``max_repeats`` (2**31 - 1).
    - ``max_bytes`` (256 KiB): the packed data, metadata and name together.
    - ``code_prefixes`` (None: any): module prefixes that grain classes and callable failure
      policies must come from, e.g. ``("myapp.", "handlers.")``. Silos import these paths, so
      this is the allow-list that keeps a store or Ray caller from naming any module.
    """

    min_period: timedelta = timedelta(seconds=1)
    earliest_start: timedelta = timedelta(minutes=10)
    max_repeats: int = MAX_REPEATS
    max_bytes: int = 256 * 1024
    code_prefixes: tuple[str, ...] | None = None

    def check(self, job: ScheduledJob, now: datetime, *, resolved: set[str] | None = None) -> None:
        """Raise a ``ValidationError`` naming the field if ``job`` breaks a limit.

        With ``resolved`` (the paths already checked in this batch, updated), grain classes and
        callable policies are imported to check they exist and have the right shape: that is
        what scheduling does. Without it only their prefixes are checked, for a job built in one
        process to be scheduled from another, and for a silo, which may not have the code.
        """
        if job.schedule is not None and job.schedule.period is not None and job.schedule.period < self.min_period:
            raise InvalidSchedule("schedule", f"period must be at least {format_duration(self.min_period)}", job.schedule.text)
        if job.due < now - self.earliest_start:
            raise InvalidTime("due", f"must not be earlier than now - {_human(self.earliest_start)}",
                              job.due.isoformat())
        if job.repeats is not None and job.repeats > self.max_repeats:
            raise InvalidJob("repeats", f"must be at most {self.max_repeats}", job.repeats)
        size = len(pack([job.name, job.data, job.metadata]))
        if size > self.max_bytes:
            raise InvalidJob("data", f"data, metadata and name pack to {size} bytes, more than the limit of "
                             f"{self.max_bytes}")
        if job.target.cls_path is not None:
            self.check_code(job.target.cls_path, "target.cls", InvalidJob)
            if resolved is not None and job.target.cls_path not in resolved:
                _require_class(job.target.cls_path)
                resolved.add(job.target.cls_path)
        path = getattr(job.failure_policy, "path", None)
        if isinstance(path, str):
            self.check_code(path, "failure_policy", InvalidPolicy)
            if resolved is not None and path not in resolved:
                _require_decider(path)
                resolved.add(path)

    def check_code(self, path: str, field: str, error: type[InvalidJob] | type[InvalidPolicy] = InvalidJob) -> None:
        """Raise ``error`` if ``path`` is outside ``code_prefixes``."""
        if not code_allowed(path, self.code_prefixes):
            raise error(field, f"module must start with one of {list(self.code_prefixes or ())}", path)


def code_allowed(path: str, prefixes: Sequence[str] | None) -> bool:
    """Whether ``module:name`` comes from a module under one of ``prefixes`` (None allows all)."""
    if prefixes is None:
        return True
    module = path.partition(":")[0] + "."
    return any(module.startswith(p if p.endswith(".") else p + ".") for p in prefixes)


def _require_class(path: str) -> None:
    obj = _resolve(path, "target.cls", InvalidJob)
    if not (isinstance(obj, type) or hasattr(obj, "__ray_actor_class__")):
        raise InvalidJob("target.cls", f"must name a class to activate, not a {type(obj).__name__}", path)


def _require_decider(path: str) -> None:
    fn = _resolve(path, "failure_policy", InvalidPolicy)
    rule = "the retry function must take (ctx, exc)"
    if not callable(fn):
        raise InvalidPolicy("failure_policy", "the retry path does not name a function", path)
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        raise InvalidPolicy("failure_policy", rule, path) from None
    except ValueError:
        pass  # no signature to read (a builtin): trust it


def _resolve(path: str, field: str, error: type[InvalidJob] | type[InvalidPolicy]) -> Any:
    try:
        return resolve_code_path(path)
    except Exception as exc:  # importing user code may raise anything
        raise error(field, f"cannot be imported here: {type(exc).__name__}: {exc}", path) from None


def _human(td: timedelta) -> str:
    """``10 minutes``, ``1 second``, ``90 seconds``: how an error message says a limit."""
    seconds = td.total_seconds()
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds:g} second{'s' if seconds != 1 else ''}"


DEFAULT_LIMITS = JobLimits()
