"""Typed errors of the job model: every one names the field and the rule it broke."""

from __future__ import annotations

import re
from collections.abc import Sequence


class ValidationError(ValueError):
    """Bad input from a user: ``field`` says where, ``rule`` says what was expected.

    Raised before anything is written, so catching it never leaves half a job behind.
    """

    def __init__(self, field: str, rule: str, value: object = None, *, accepted: str | None = None) -> None:
        self.field = field
        self.rule = rule
        self.value = value
        self.accepted = accepted
        message = f"{field}: {rule}"
        if value is not None:
            message += f" (got {_shown(value)})"
        if accepted:
            message += f"; accepted forms: {accepted}"
        super().__init__(message)


def _shown(value: object, limit: int = 200) -> str:
    """``repr(value)``, shortened: a hostile input may be megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 40]}... ({len(text)} characters)"


class InvalidTime(ValidationError):
    """A due time, ttl, delay or period that cannot be parsed or is out of range."""


class InvalidSchedule(ValidationError):
    """A schedule text that is not valid cron, ``@every`` or a named macro."""


class InvalidPolicy(ValidationError):
    """A failure or misfire policy whose parameters break a rule."""


class InvalidJob(ValidationError):
    """A job whose fields do not fit together (target, repeats, ttl, data ...)."""


class UnsupportedWireVersion(InvalidJob):
    """A job record written by a newer version of timeshard than the one reading it.

    Refused, never guessed at: a silo of this version neither accepts nor runs it.
    """


class UnsupportedStoreFormat(RuntimeError):
    """A store laid out by a newer version of timeshard than this silo's.

    A silo refuses to join such a store rather than guess at what it holds: it names the
    store's format and the newest this version reads, so the operator knows to upgrade the
    silos (or point them at another store). Not a ``ValidationError``: no input of the caller's
    is wrong, and retrying the same silo changes nothing.
    """

    def __init__(self, found: int, supported: int, written_by: str = "") -> None:
        self.found = found
        self.supported = supported
        self.written_by = written_by
        by = f" (written by {written_by})" if written_by else ""
        super().__init__(
            f"store format {found}{by} is newer than this timeshard reads (up to format {supported}): "
            "upgrade the silos to a version that reads it; nothing was changed in the store"
        )

    def __reduce__(self) -> tuple[object, ...]:  # crosses Ray (a silo's ready() to Cluster.start)
        return (type(self), (self.found, self.supported, self.written_by))


class AlreadyExists(RuntimeError):
    """A named job's name is taken in its (namespace, app_id) and ``overwrite`` was not set.

    A conflict, not bad input: the same call succeeds once the name is free (or with
    ``overwrite=True``, where the last write wins).
    """

    def __init__(self, name: str, app_id: str, namespace: str) -> None:
        self.name = name
        self.app_id = app_id
        self.namespace = namespace
        super().__init__(
            f"name: {name!r} is taken in namespace {namespace!r}, app_id {app_id!r}; "
            "pass overwrite=True to replace it, or delete it first"
        )


NameTaken = AlreadyExists


class SiloStopping(RuntimeError):
    """The silo is stopping gracefully and takes no new work; the client tries another."""


class LeaseLapsed(SiloStopping):
    """The silo's firing lease lapsed and was not renewed in time, so it wrote nothing of the
    call (a shard it creates past its lease may escape a peer taking over its work); the client
    tries another silo."""


class ClusterUnavailable(RuntimeError):
    """No silo answered: the cluster is down or every silo is restarting."""


class EarlierTryUnsettled(RuntimeError):
    """A retried schedule call cannot yet prove where its earlier try landed: a silo that may
    hold it is not yet proven dead. Nothing was written; the client asks again shortly.

    ``holders``: the incarnations ("s1#3") that hold a shard the earlier try may still reach,
    this silo's own included: only such a holder can settle its own shard (it knows whether a
    call of the earlier try is still under way in it). A client reaches it by asking every silo
    in turn; a silo taking over a flow step hands the step to it (``cluster.flows.progress``).
    ``settles``: the raising incarnation itself when it is such a holder (it found no call of the
    earlier try under way in it): travelling with the error (pickled with it), a client's retry
    names it settled from then on (``cluster.model.routing``). Not any other holder it names,
    an older incarnation of the same silo included."""

    def __init__(self, message: str, holders: Sequence[str] = (), settles: str | None = None) -> None:
        super().__init__(message)
        self.holders = tuple(holders)
        self.settles = settles


class ScheduleInDoubt(RuntimeError):
    """A schedule call failed, yet some of its jobs may still fire.

    ``may_fire`` maps each such job id to the shard that may hold it (None if unknown): pass a
    job with that ``shard`` to ``try_cancel_job`` to make sure, or treat those jobs as scheduled.
    Every other job of the call is not scheduled.
    """

    def __init__(self, message: str, may_fire: dict[str, str | None]) -> None:
        self.reason = message
        self.may_fire = dict(may_fire)
        super().__init__(f"{message}; {len(may_fire)} job(s) may still fire: {sorted(may_fire)[:10]}")

    def __reduce__(self) -> tuple[object, ...]:  # crosses Ray: rebuilt from both arguments
        return (type(self), (self.reason, self.may_fire))


class PutInDoubt(RuntimeError):
    """A named job's ``put`` failed after its registry entry was written, or while it was.

    ``name`` may point at the new generation (a whole job: durable, with its definition) or
    still at the one before; ``landed`` is True when it is known to point at the new one, whose
    older generation's cancel is then what was cut short. Either way no half-made job is
    visible. Put it again (``overwrite=True``) or delete it to settle: until one of them returns,
    the older generation may still start. Any other error of ``put`` means nothing was put.
    """

    def __init__(self, message: str, name: str, *, landed: bool = False) -> None:
        self.reason = message
        self.name = name
        self.landed = landed
        super().__init__(f"named job {name!r}: {message}")

    def __reduce__(self) -> tuple[object, ...]:
        return (_put_in_doubt, (self.reason, self.name, self.landed))


def _put_in_doubt(message: str, name: str, landed: bool) -> PutInDoubt:
    return PutInDoubt(message, name, landed=landed)


class PutManyFailed(RuntimeError):
    """Some jobs of a ``put_many`` call were not put: every job of the call was tried.

    ``put`` maps each name put to its ``NamedJob``; ``errors`` each other name to its error: a
    ``PutInDoubt`` may have landed, any other was not put.
    """

    def __init__(self, put: dict[str, object], errors: dict[str, BaseException]) -> None:
        self.put = dict(put)
        self.errors = dict(errors)
        first = next(iter(self.errors.items()))
        super().__init__(f"{len(self.errors)} of {len(self.put) + len(self.errors)} named jobs not put "
                         f"(first: {first[0]!r}: {first[1]!r})")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.put, self.errors))


class JobNotFound(LookupError):
    """The job to act on does not exist, or has nothing left to run: never scheduled, finished,
    cancelled or deleted. Raised by trigger, pause and resume; nothing is written."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__(f"{what}: no such job (never scheduled, or already finished, cancelled or deleted)")

    def __reduce__(self) -> tuple[object, ...]:  # crosses Ray: rebuilt from its argument
        return (type(self), (self.what,))


#: The project's errors whose message says all a user needs, in one line: the command line prints
#: them so, without a traceback (``StorageError``, from the layer below, is printed so too).
ONE_LINE_ERRORS: tuple[type[BaseException], ...] = (
    ValidationError, UnsupportedStoreFormat, AlreadyExists, SiloStopping, ClusterUnavailable, EarlierTryUnsettled,
    ScheduleInDoubt, PutInDoubt, PutManyFailed, JobNotFound,
)


# -- errors that crossed Ray ----------------------------------------------------------------------
# Ray wraps what a remote call raised in a ``RayTaskError`` whose text starts with terminal colour
# codes and the actor's repr. These helpers recognise it by name, so the model stays Ray-free.

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
_RAY_TASK_ERROR = ("ray.exceptions", "RayTaskError")


def plain(text: str) -> str:
    """``text`` without terminal escape codes (Ray colours the headers of its tracebacks)."""
    return _ANSI.sub("", text)


def one_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message, plain; its type's name if it has none."""
    return _first_line(exc) or type(exc).__name__


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in plain(str(exc)).splitlines() if line.strip()), "")


def raised_remotely(exc: BaseException) -> BaseException | None:
    """What a Ray call raised where it ran, if ``exc`` is Ray's wrapper of it (through nested
    calls: a handler that awaited another actor); None if ``exc`` is not such a wrapper."""
    found = None
    for _ in range(8):  # a chain of calls is short; a cause that wraps itself must not hang us
        if not any((c.__module__, c.__name__) == _RAY_TASK_ERROR for c in type(exc).__mro__):
            break
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException) or cause is exc:
            break
        found = exc = cause
    return found


class RemoteTraceback(Exception):
    """Where an error crossing Ray was raised: that process's traceback, as plain text.

    Set as the ``__cause__`` of the error a client raises (as ``concurrent.futures`` does for a
    worker process's error), so a printed traceback shows both, while ``str(error)`` stays the
    one-line reason a program logs or a command line prints.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'


def unwrapped(exc: BaseException) -> BaseException:
    """The error a Ray call raised remotely, with the remote traceback (plain) as its cause;
    ``exc`` itself if it is not Ray's wrapper of one."""
    cause = raised_remotely(exc)
    if cause is None:
        return exc
    cause.__cause__ = RemoteTraceback(plain(str(exc)))  # also hides Ray's wrapper as its context
    return cause


def describe(exc: BaseException) -> str:
    """``Type: reason`` in one plain line, for a status table or a log: what Ray raised is
    described by the error it carries."""
    error = raised_remotely(exc) or exc
    reason = _first_line(error)
    return f"{type(error).__name__}: {reason}" if reason else type(error).__name__


def failure(exc: BaseException) -> tuple[str, str]:
    """(message, type name) of a job's failure as its status shows them: the error a Ray call
    inside the handler raised rather than Ray's wrapper of it, without colour codes."""
    error = raised_remotely(exc) or exc
    return plain(str(error)) or repr(error), type(error).__name__
