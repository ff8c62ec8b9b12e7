"""The job model: what to call (``Target``), when, with what, and how often (``ScheduledJob``).

A job is validated once, when it is created, and then travels as a compact msgpack list through
the shard log. Replay (``ScheduledJob.from_wire``) trusts the log and rebuilds the job without
re-validating: it runs for every job whenever a shard is loaded.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from cluster.model.errors import InvalidJob, InvalidTime, UnsupportedWireVersion
from cluster.model.evolve import evolve
from cluster.model.ids import new_job_id, new_job_ids
from cluster.model.jobfields import check_label, metadata_of, normalized_data, schedule_of, with_max_bytes
from cluster.model.limits import DEFAULT_LIMITS, JobLimits
from cluster.model.occurrences import Misfire, Overlap
from cluster.model.policies import DEFAULT_FAILURE_POLICY, FailurePolicy, PolicyLike
from cluster.model.schedules import Schedule
from cluster.model.shape import (
    DEFAULT_NEXT_FIRES,
    NO_EXCLUSIONS,
    Bounds,
    Exclusions,
    allowed_from,
    jitter_offset_us,
    next_fire_times,
    parse_bound,
    parse_exclusions,
    parse_jitter,
)
from cluster.model.times import ACCEPTED_TIMES, parse_time, require_aware, utc_now
from cluster.model.wire import (
    check_code_path,
    datetime_to_us,
    memoized,
    qualified_name,
    timedelta_to_us,
    us_to_datetime,
)

__all__ = ["Target", "ScheduledJob", "JobHead", "new_job_id", "new_job_ids", "grain_actor_name", "DEFAULT_MAX_DATA_BYTES",
           "WIRE_VERSION"]

DEFAULT_MAX_DATA_BYTES = 256 * 1024
WIRE_VERSION = 1
_OVERLAPS = frozenset(policy.value for policy in Overlap)


@dataclass(frozen=True)
class Target:
    """Where a job is delivered: a named Ray actor, or a grain (a virtual actor activated on demand).

    ``name`` is always the Ray actor name the call goes to; for a grain it is derived from the
    class path and key (see ``grain_actor_name``).
    """

    kind: str
    name: str
    namespace: str | None = None
    key: str | None = None
    cls_path: str | None = None

    @classmethod
    def actor(cls, name: str, namespace: str | None = None) -> Target:
        """Return a target that calls the existing named Ray actor ``name`` (in ``namespace``)."""
        check_label(name, "target.name")
        if namespace is not None:
            check_label(namespace, "target.namespace")
        return cls("actor", name, namespace)

    @classmethod
    def grain(cls, cls_or_path: type | str, key: str | int) -> Target:
        """Return a target that activates ``cls_or_path`` for ``key`` as a named actor on first use.

        A class (or Ray actor class) is stored as its ``module:QualName`` path; a path may also be
        given as text (``pkg.mod:Name`` or ``pkg.mod.Name``). ``key`` is stored as text.
        """
        if isinstance(cls_or_path, str):
            path = check_code_path(cls_or_path)
        else:
            is_class = isinstance(cls_or_path, type) or hasattr(cls_or_path, "__ray_actor_class__")
            path = qualified_name(cls_or_path) if is_class else None
        if path is None:
            raise InvalidJob(
                "target.cls",
                "must be a module-level class of an importable module or its path 'package.module:Class'",
                cls_or_path,
            )
        if isinstance(key, bool) or not isinstance(key, (str, int)):
            raise InvalidJob("target.key", "must be a str or an int", key)
        key = str(key)
        check_label(key, "target.key")
        return cls("grain", grain_actor_name(path, key), None, key, path)

    @functools.cached_property
    def routing_key(self) -> str:
        """Return a key equal for exactly the jobs that go to the same actor, for batching calls."""
        # \x1f cannot occur in a name (control characters are rejected), so the join is unambiguous.
        return f"{self.kind}\x1f{self.namespace or ''}\x1f{self.name}"

    def to_wire(self) -> list[Any]:
        """Return a msgpack-ready list that ``Target.from_wire`` turns back into an equal target."""
        if self.kind == "grain":
            return ["grain", self.cls_path, self.key]
        return ["actor", self.name, self.namespace]

    @classmethod
    def from_wire(cls, obj: Any, memo: dict[Any, Any] | None = None) -> Target:
        """Return the target ``to_wire`` encoded (no re-validation); once per distinct target with a ``memo``."""
        if memo is not None and isinstance(obj, list) and len(obj) == 3:
            key = (Target, obj[0], obj[1], obj[2])
            try:
                target: Target | None = memo.get(key)
            except TypeError:  # an unhashable part: not a target this silo wrote, decoded without the memo
                return cls.from_wire(obj)
            if target is None:
                target = memo[key] = cls.from_wire(obj)
            return target
        kind = obj[0] if isinstance(obj, (list, tuple)) and len(obj) == 3 else None
        if kind == "actor":
            return cls("actor", obj[1], obj[2])
        if kind == "grain":
            return cls("grain", grain_actor_name(obj[1], obj[2]), None, obj[2], obj[1])
        raise InvalidJob("target", "unknown target kind on the wire; kinds: actor, grain", obj)


def grain_actor_name(cls_path: str, key: str) -> str:
    """Return the Ray actor name grain ``cls_path`` is activated under for ``key``."""
    return f"grain:{cls_path}:{key}"


class JobHead(NamedTuple):
    """What a silo needs of a packed job to fire it and to record a plain success: not the whole job.

    ``ScheduledJob.head_from_wire`` reads it and refuses exactly the records ``from_wire``
    refuses, so a job whose head reads is a job that decodes.
    """

    target: Target
    ttl_us: int | None  # no occurrence at or after it
    metadata: dict[str, str]
    recurring: bool  # has a schedule
    retry_always: bool  # its failure policy runs it again after a success too
    overlap: str = "allow_all"  # its overlap policy (see ``Overlap``)


_UTC_MIN_US = datetime_to_us(datetime.min.replace(tzinfo=timezone.utc))
_UTC_MAX_US = datetime_to_us(datetime.max.replace(tzinfo=timezone.utc))


def _checked_us(value: Any) -> int:
    """``value`` as wire microseconds, raising where ``us_to_datetime`` would (it is called only then)."""
    if type(value) is int and _UTC_MIN_US <= value <= _UTC_MAX_US:
        return value
    return datetime_to_us(us_to_datetime(value))


@dataclass(frozen=True)
class ScheduledJob:
    """A durable job: call ``target`` at ``due``, then at each ``schedule`` time while allowed.

    Build one with ``ScheduledJob.create``, which validates everything; the fields are:

    - ``id``: unique id (``new_job_id()``); ``name``: optional user name (named jobs);
    - ``target``: the actor or grain to call; ``due``: first fire time (aware UTC);
    - ``data``: msgpack-encodable payload, exactly as a replay returns it (lists, not tuples);
    - ``metadata``: ``str -> str``; ``schedule``: recurrence or None for a one-shot job;
    - ``repeats``: how many occurrences may end (succeeded or given up), None = unbounded;
    - ``ttl``: absolute expiry (aware UTC), no occurrence at or after it;
    - ``failure_policy``: None means ``DEFAULT_FAILURE_POLICY`` at use (see ``retry_policy``);
    - ``generation``: bumped by an overwrite, so a stale definition never fires again;
    - ``created_at``: when the job was created; ``misfire``: ``fire_once`` | ``fire_all`` | ``skip``;
    - ``jitter``: each occurrence fires up to this much after its time, never before (see
      ``cluster.model.shape``); ``not_before`` / ``not_after``: no occurrence outside them;
      ``exclude``: occurrences matching these cron expressions or dates are skipped.
    - ``overlap``: what becomes of occurrences due while an earlier one is in flight (``Overlap``).

    Frozen (``data`` and ``metadata`` must not be mutated in place); hashed by ``id``.
    """

    id: str
    name: str | None
    target: Target
    due: datetime
    data: Any
    metadata: dict[str, str]
    schedule: Schedule | None
    repeats: int | None
    ttl: datetime | None
    failure_policy: FailurePolicy | None
    created_at: datetime
    generation: int = 0
    misfire: str = "fire_once"
    jitter: timedelta = timedelta(0)
    not_before: datetime | None = None
    not_after: datetime | None = None
    exclude: Exclusions = NO_EXCLUSIONS
    overlap: str = "allow_all"
    # Where the job lives (the shard log's name), set by the client once the job is durable so
    # that try_cancel_job can find it. Not part of the job's definition: not stored, not compared.
    shard: str | None = field(default=None, compare=False)

    def __hash__(self) -> int:
        # data and metadata are unhashable; equal jobs share an id, so hashing it is consistent.
        return hash(self.id)

    @classmethod
    def create(
        cls,
        target: Target,
        name: str | None = None,
        *,
        due: datetime | str | Any = None,
        data: Any = None,
        metadata: Mapping[str, str] | None = None,
        schedule: Schedule | str | None = None,
        repeats: int | None = None,
        ttl: datetime | str | Any = None,
        failure_policy: PolicyLike | None = None,
        misfire: Misfire | str = Misfire.FIRE_ONCE,
        jitter: timedelta | str | None = None,
        not_before: datetime | str | None = None,
        not_after: datetime | str | None = None,
        exclude: Any = None,
        overlap: Overlap | str = Overlap.ALLOW_ALL,
        generation: int = 0,
        job_id: str | None = None,
        now: datetime | None = None,
        max_data_bytes: int | None = None,
        limits: JobLimits = DEFAULT_LIMITS,
    ) -> ScheduledJob:
        """Return a validated job; bad input raises ``InvalidJob`` (or another ``ValidationError``).

        ``due`` and ``ttl`` accept anything ``parse_time`` does, relative forms counting from
        ``now`` (default: the current UTC time). Without ``due``, a recurring job first fires at
        the schedule's first time after ``now``. An actor-reminder period ``R4/PT3S`` as the
        schedule means ``@every 3s`` with ``repeats=4``. ``repeats`` and ``ttl`` need a schedule;
        ``ttl`` must come after ``due``; ``misfire`` is ``fire_once`` (default), ``fire_all`` or
        ``skip``; ``overlap`` is ``allow_all`` (default), ``skip``, ``buffer_one``, ``buffer_all`` or
        ``cancel_other`` (see ``Overlap``). ``jitter`` (a duration up to 366 days) delays each
        occurrence by a deterministic offset within it; ``not_before`` / ``not_after`` (times, as
        ``due``) bound the occurrences and ``exclude`` (cron text, dates or ``YYYY-MM-DD`` text, or
        a list of them) skips matching ones — these three need a schedule, and move ``due`` to the
        first occurrence they allow (see ``cluster.model.shape``). The job must also meet
        ``limits`` (minimum period, earliest start, size of data, metadata and name together — ``max_data_bytes`` overrides that one —, importable grain
        classes and retry functions; see ``JobLimits``).
        """
        if max_data_bytes is not None:
            limits = with_max_bytes(limits, max_data_bytes)
        now = utc_now() if now is None else require_aware(now, field="now")
        if not isinstance(target, Target):
            raise InvalidJob("target", "must be a Target (Target.actor(...) or Target.grain(...))", target)
        if name is not None:
            check_label(name, "name")
        if job_id is None:
            job_id = new_job_id()
        else:
            check_label(job_id, "id")
        parsed_schedule, period_repeats = schedule_of(schedule)
        if period_repeats is not None:
            if repeats is not None and repeats != period_repeats:
                rule = f"disagrees with the schedule's repeat count {period_repeats}"
                raise InvalidJob("repeats", rule, repeats)
            repeats = period_repeats
        if due is None:
            if parsed_schedule is None:
                raise InvalidJob("due", "is required for a job without a schedule", accepted=ACCEPTED_TIMES)
            first = parsed_schedule.next_after(now)
        else:
            first = parse_time(due, now, field="due")
        overlap_policy = Overlap.parse(overlap)
        if parsed_schedule is None:
            for field_name, value in (("repeats", repeats), ("ttl", ttl)):
                if value is not None:
                    raise InvalidJob(field_name, "needs a schedule (a one-shot job fires once)", value)
            if overlap_policy is not Overlap.ALLOW_ALL:
                raise InvalidJob("overlap", "needs a schedule (a one-shot job never overlaps itself)", overlap)
        if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
            raise InvalidJob("repeats", "must be None (unbounded) or an int >= 1", repeats)
        spread = timedelta(0) if jitter is None else parse_jitter(jitter)
        bounds = _bounds(parsed_schedule, not_before, not_after, exclude, now)
        if bounds != _NO_BOUNDS:
            first = _first_allowed(parsed_schedule, first, bounds)
        expiry = None if ttl is None else parse_time(ttl, now, field="ttl")
        if expiry is not None:
            # ttl bounds fire times, jitter included: firing expires an occurrence that starts past it.
            first_us = datetime_to_us(first)
            fire = us_to_datetime(first_us + jitter_offset_us(job_id, first_us, timedelta_to_us(spread)))
            if expiry <= fire:
                raise InvalidJob("ttl", f"must be after due ({fire.isoformat()})", expiry.isoformat())
        if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
            raise InvalidJob("generation", "must be an int >= 0", generation)
        # Every field set here, as the frozen dataclass's __init__ would (one object.__setattr__
        # a field: ~4 us a job, a tenth of a named put's CPU on its client).
        job = object.__new__(cls)
        job.__dict__.update(
            id=job_id,
            name=name,
            target=target,
            due=first,
            data=normalized_data(data),
            metadata=metadata_of(metadata),
            schedule=parsed_schedule,
            repeats=repeats,
            ttl=expiry,
            failure_policy=None if failure_policy is None else FailurePolicy.coerce(failure_policy),
            created_at=now,
            generation=generation,
            misfire=Misfire.parse(misfire).value,
            jitter=spread,
            not_before=bounds.not_before,
            not_after=bounds.not_after,
            exclude=bounds.exclude,
            overlap=overlap_policy.value,
            shard=None,
        )
        limits.check(job, now)  # imports are checked when it is scheduled
        return job

    @property
    def retry_policy(self) -> FailurePolicy:
        """Return the failure policy in force: the job's own, or ``DEFAULT_FAILURE_POLICY``."""
        return FailurePolicy.coerce(self.failure_policy)

    @property
    def recurring(self) -> bool:
        """Return whether the job has a schedule (fires more than once unless bounded)."""
        return self.schedule is not None

    @property
    def bounds(self) -> Bounds:
        """Return the job's bounds and exclusions, as ``cluster.model.shape.allowed_from`` takes them."""
        return Bounds(self.not_before, self.not_after, self.exclude)

    @property
    def shaped(self) -> bool:
        """Return whether bounds or exclusions may skip or end occurrences (jitter aside)."""
        return self.not_before is not None or self.not_after is not None or bool(self.exclude)

    def fire_us(self, scheduled_us: int) -> int:
        """Return when (µs) the occurrence scheduled at ``scheduled_us`` fires: later by its jitter."""
        if not self.jitter:
            return scheduled_us
        return scheduled_us + jitter_offset_us(self.id, scheduled_us, timedelta_to_us(self.jitter))

    @property
    def first_fire(self) -> datetime:
        """Return when the first occurrence fires: ``due``, later by its jitter."""
        return self.due if not self.jitter else us_to_datetime(self.fire_us(datetime_to_us(self.due)))

    def next_fires(self, now: datetime, *, count: int = DEFAULT_NEXT_FIRES, paused: bool = False,
                   pending: int = 1) -> list[datetime]:
        """Return the next ``count`` fire times after ``now`` (none while ``paused``), honouring
        bounds, exclusions, jitter, ``ttl`` and ``repeats``; ``pending`` is the number of the
        occurrence to come (1: none has ended yet)."""
        left = None if self.repeats is None else self.repeats - (pending - 1)
        return next_fire_times(self.id, self.schedule, self.due, require_aware(now, field="now"), bounds=self.bounds,
                               jitter=self.jitter, ttl=self.ttl, left=left, count=count, paused=paused)

    def _options_wire(self) -> dict[str, Any] | None:
        """The record's optional 15th element: the options that differ from their defaults, or None."""
        options: dict[str, Any] = {}
        if self.jitter:
            options["jitter_us"] = timedelta_to_us(self.jitter)
        if self.not_before is not None:
            options["not_before_us"] = datetime_to_us(self.not_before)
        if self.not_after is not None:
            options["not_after_us"] = datetime_to_us(self.not_after)
        if self.exclude:
            options["exclude"] = self.exclude.wire
        if self.overlap != "allow_all":
            options["overlap"] = self.overlap
        return options or None

    def evolve(self, **changes: Any) -> ScheduledJob:
        """``dataclasses.replace(self, **changes)`` without its generic walk of the 20 fields
        (3 us a call, 0.5 here; a named put made several, on its owner and its client alike)."""
        return evolve(self, **changes)

    def to_wire(self) -> list[Any]:
        """Return the compact msgpack-ready list the shard log stores; ``from_wire`` inverts it.

        Fourteen elements, and a fifteenth (a dict of short keys) only when an option differs
        from its default (jitter, bounds, exclusions, overlap): a job without options costs no
        byte more than before options existed, and records written before them still replay.
        """
        record = [
            WIRE_VERSION,
            self.id,
            self.name,
            self.target.to_wire(),
            datetime_to_us(self.due),
            self.data,
            self.metadata,
            None if self.schedule is None else self.schedule.text,
            self.repeats,
            None if self.ttl is None else datetime_to_us(self.ttl),
            None if self.failure_policy is None else self.failure_policy.to_wire(),
            datetime_to_us(self.created_at),
            self.generation,
            self.misfire,
        ]
        options = self._options_wire()
        if options is not None:
            record.append(options)
        return record

    @classmethod
    def from_wire(cls, obj: Any, memo: dict[Any, Any] | None = None) -> ScheduledJob:
        """Return the job ``to_wire`` encoded, as read back from the log (no re-validation).

        Pass one ``memo`` dict across a replay: each distinct schedule and failure policy is then
        parsed once instead of once per job (schedules and policies are immutable).
        """
        _check_record(obj)
        (_, job_id, name, target, due, data, metadata, schedule, repeats, ttl, policy, created, generation,
         misfire) = obj[:14]
        options = _NO_OPTIONS if len(obj) == 14 else _options_from_wire(obj[14], memo)
        return _made(
            cls,
            job_id,
            name,
            Target.from_wire(target, memo),
            us_to_datetime(due),
            data,
            metadata,
            None if schedule is None else memoized(memo, schedule, Schedule.parse, schedule),
            repeats,
            None if ttl is None else us_to_datetime(ttl),
            None if policy is None else FailurePolicy.from_wire(policy, memo),
            us_to_datetime(created),
            generation,
            misfire,
            *options,
            None,  # shard
        )


    @staticmethod
    def head_from_wire(obj: Any, memo: dict[Any, Any]) -> JobHead:
        """Return what firing needs of the job ``to_wire`` encoded, without building the job.

        Raises for exactly the records ``from_wire`` raises for (the same checks, the same
        errors), so a silo that fires on the head sets aside the same unreadable jobs as before.
        Schedules, policies and targets are parsed once per distinct value through ``memo``.
        """
        _check_record(obj)
        target, due, metadata, schedule, ttl, policy, created = obj[3], obj[4], obj[6], obj[7], obj[9], obj[10], obj[11]
        routed = Target.from_wire(target, memo)
        _checked_us(due)
        if schedule is not None:
            memoized(memo, schedule, Schedule.parse, schedule)
        ttl_us = None if ttl is None else _checked_us(ttl)
        in_force = DEFAULT_FAILURE_POLICY if policy is None else FailurePolicy.from_wire(policy, memo)
        _checked_us(created)
        overlap = _options_from_wire(obj[14], memo)[4] if len(obj) > 14 else "allow_all"
        return JobHead(routed, ttl_us, metadata, schedule is not None, in_force.strategy == "always", overlap)


_FIELD_ORDER = tuple(f.name for f in dataclasses.fields(ScheduledJob))


def _made(cls: type[ScheduledJob], *values: Any) -> ScheduledJob:
    """``cls(*values)`` (every field, in order) without the frozen ``__init__``'s setattr a field."""
    job = object.__new__(cls)
    job.__dict__.update(zip(_FIELD_ORDER, values, strict=True))
    return job


def _check_record(obj: Any) -> None:
    """Raise unless ``obj`` is a job record of this wire version (a newer one says so)."""
    if isinstance(obj, (list, tuple)) and obj and type(obj[0]) is int and obj[0] > WIRE_VERSION:
        raise UnsupportedWireVersion("job", f"written in wire version {obj[0]}; this version reads up to "
                                            f"{WIRE_VERSION}: upgrade this silo to run it")
    if not isinstance(obj, (list, tuple)) or len(obj) not in (14, 15) or obj[0] != WIRE_VERSION:
        raise InvalidJob("job", f"not a job record of wire version {WIRE_VERSION}", obj)
    if len(obj) == 15:
        options = obj[14]
        if not isinstance(options, dict):
            raise InvalidJob("job", "options (the 15th element) must be a map", options)
        if options.get("overlap", "allow_all") not in _OVERLAPS:
            # Refused, never guessed at: a policy this version does not know is not run as another.
            raise InvalidJob("overlap", "is not an overlap policy this version knows", options.get("overlap"),
                             accepted=", ".join(sorted(_OVERLAPS)))


_NO_BOUNDS = Bounds()
_NO_OPTIONS: tuple[Any, ...] = (timedelta(0), None, None, NO_EXCLUSIONS, "allow_all")


def _options_from_wire(obj: Any, memo: dict[Any, Any] | None) -> tuple[Any, ...]:
    """``(jitter, not_before, not_after, exclude, overlap)`` from a record's 15th element (trusted,
    but a record of another shape raises, as any malformed record does)."""
    if type(obj) is not dict:
        raise InvalidJob("job", "options of a job record must be a dict", obj)
    jitter = obj.get("jitter_us")
    not_before, not_after, exclude = obj.get("not_before_us"), obj.get("not_after_us"), obj.get("exclude")
    if exclude is not None:
        Exclusions.check_wire(exclude)  # before it keys the memo
    return (
        timedelta(0) if jitter is None else timedelta(microseconds=jitter),
        None if not_before is None else us_to_datetime(_checked_us(not_before)),
        None if not_after is None else us_to_datetime(_checked_us(not_after)),
        NO_EXCLUSIONS if exclude is None else memoized(memo, ("exclude", *exclude), Exclusions.from_wire, exclude, memo),
        obj.get("overlap", "allow_all"),
    )


def _bounds(schedule: Schedule | None, not_before: Any, not_after: Any, exclude: Any, now: datetime) -> Bounds:
    """The validated bounds and exclusions of a new job; they need a schedule to act on."""
    if not_before is None and not_after is None and exclude is None:
        return _NO_BOUNDS  # what the checks below make of three Nones
    lower = parse_bound(not_before, now, "not_before")
    upper = parse_bound(not_after, now, "not_after")
    skipped = parse_exclusions(exclude)
    if schedule is None:
        for field_name, value in (("not_before", lower), ("not_after", upper), ("exclude", skipped or None)):
            if value is not None:
                raise InvalidJob(field_name, "needs a schedule (a one-shot job has one time: choose it with due)",
                                 value)
    if lower is not None and upper is not None and upper < lower:
        raise InvalidTime("not_after", f"must not be before not_before ({lower.isoformat()})", upper.isoformat())
    return Bounds(lower, upper, skipped)


def _first_allowed(schedule: Schedule | None, first: datetime, bounds: Bounds) -> datetime:
    """The first occurrence from ``first`` on that ``bounds`` allow; raises if there is none."""
    shaped = allowed_from(schedule, first, bounds)
    if shaped.scheduled is not None:
        return shaped.scheduled
    if shaped.past_end:
        assert bounds.not_after is not None
        raise InvalidTime("not_after", "leaves no occurrence to fire: the first one allowed comes after it",
                          bounds.not_after.isoformat())
    raise InvalidJob("exclude", "excludes every occurrence of the schedule", bounds.exclude.wire)
