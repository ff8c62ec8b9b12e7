"""The client: schedule and cancel jobs from any driver or actor. Picklable; hand it around.

Validation happens here, in the caller's process, so bad input raises a typed error before
anything is written. A call goes to one silo (round-robin, ``cluster.model.routing``); if that silo
is dead or restarting, the call moves on to the next without the caller noticing. A schedule
call returns only once every job's ``add`` is durable, and a schedule call sent again after a
silo died during it names that silo, so no job gets a second copy.
"""

from __future__ import annotations

import asyncio
import dataclasses
import getpass
import random
import socket
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import ray

from cluster.flows.api import Flows
from cluster.flows.model import FLOW_META
from cluster.model.chase import Chase
from cluster.model.errors import (
    ClusterUnavailable,
    EarlierTryUnsettled,
    InvalidJob,
    JobNotFound,
    SiloStopping,
    one_line,
    unwrapped,
)
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ClusterOptions
from cluster.model.pause import PauseRecord, check_by, check_note
from cluster.model.routing import Router, SiloCall, SiloLost, SiloRefused
from cluster.model.trigger import triggered_run
from cluster.model.wire import datetime_to_us, pack, unpack
from cluster.named.api import NamedJobs
from cluster.named.reminders import Reminders
from cluster.runtime.membership import SILO_PREFIX

_SPEC_FIELDS = ("target", "name", "due", "data", "metadata", "schedule", "repeats", "ttl", "failure_policy", "misfire",
                "jitter", "not_before", "not_after", "exclude", "overlap")
# Seconds between looks at which silos exist: new ones get calls, removed ones no longer do.
SILO_REFRESH_S = 30.0
# At most this often when a silo turns out to be gone.
SILO_REFRESH_ON_MISS_S = 1.0


__all__ = ["Client", "ClusterUnavailable"]


class Client:
    """Schedules and cancels jobs on a running cluster. See DESIGN.md for every argument.

    ``call_silo`` stands in for Ray (a simulation's silos): it makes one call to one silo and
    raises ``SiloRefused`` or ``SiloLost`` as Ray's failures map to them here; ``start`` is the
    first silo of the round-robin (random otherwise). A client so made does not pickle its
    ``call_silo``: copies elsewhere call through Ray.
    """

    def __init__(self, namespace: str, silo_ids: Sequence[str], options: ClusterOptions, *, attempts: int = 40,
                 call_silo: SiloCall | None = None, start: int | None = None) -> None:
        self.namespace = namespace
        self.silo_ids = list(silo_ids)
        self.options = options
        self._attempts = attempts
        if start is None:
            start = random.randrange(len(self.silo_ids)) if self.silo_ids else 0
        self._router = Router(self.silo_ids, call_silo or self._call_silo, attempts=attempts, start=start)
        self._one_call: SiloCall = call_silo or self._call_silo
        self._on_ray = call_silo is None  # otherwise the silos are the caller's, not Ray's named actors
        self._handles: dict[str, Any] = {}
        self._pending: list[Any] | None = None  # schedule calls waiting to share the next Ray call
        self._pending_loop: asyncio.AbstractEventLoop | None = None
        self._flushes: set[asyncio.Task[None]] = set()
        self._jobs: Any = None
        self._refreshed = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "silo_ids": self.silo_ids, "options": self.options, "attempts": self._attempts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["namespace"], state["silo_ids"], state["options"], attempts=state["attempts"])  # type: ignore[misc]

    @property
    def jobs(self) -> NamedJobs:
        """Named jobs (Dapr Jobs API): ``put``, ``get``, ``delete``, ``list``, ``delete_prefix``."""
        if self._jobs is None:
            self._jobs = NamedJobs(self)
        return self._jobs

    @property
    def reminders(self) -> Reminders:
        """Actor reminders, kept as named jobs: ``register``, ``unregister``, ``list``."""
        return Reminders(self.jobs)

    async def describe(self) -> dict[str, Any]:
        """What the silos run on: ``store_url``, ``options``, ``namespace``."""
        return dict(await self._call("describe"))

    @property
    def flows(self) -> Flows:
        """Flows (Volcano JobFlow): ``submit``, ``get``, ``cancel``, ``list``, ``page``; see ``cluster.flows``.

        Each access is a new ``Flows``; keep one to poll ``page`` cheaply (it remembers what it read)."""
        return Flows(self)

    # -- scheduling --------------------------------------------------------------------------

    async def schedule_job(
        self,
        target: Target,
        name: str | None = None,
        due: Any = None,
        *,
        data: Any = None,
        metadata: Mapping[str, str] | None = None,
        schedule: Any = None,
        repeats: int | None = None,
        ttl: Any = None,
        failure_policy: Any = None,
        misfire: str = "fire_once",
        jitter: Any = None,
        not_before: Any = None,
        not_after: Any = None,
        exclude: Any = None,
        overlap: str = "allow_all",
    ) -> ScheduledJob:
        """Schedule one job; returns it once its ``add`` is durable (``job.shard`` says where).

        ``jitter``, ``not_before``, ``not_after`` and ``exclude`` shape its occurrences (see
        ``ScheduledJob.create`` and the README's "Operator controls").
        """
        (job,) = await self.schedule_jobs([{
            "target": target, "name": name, "due": due, "data": data, "metadata": metadata,
            "schedule": schedule, "repeats": repeats, "ttl": ttl, "failure_policy": failure_policy,
            "misfire": misfire, "jitter": jitter, "not_before": not_before, "not_after": not_after,
            "exclude": exclude, "overlap": overlap,
        }])
        return job

    async def schedule_jobs(self, specs: Iterable[Mapping[str, Any]]) -> list[ScheduledJob]:
        """Schedule many jobs in one durable batch; each spec has ``schedule_job``'s arguments.

        All specs are validated first: one bad spec raises and none is written.
        """
        now = datetime.now(timezone.utc)
        return await self.submit_jobs([self._build(spec, now, i) for i, spec in enumerate(specs)])

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        """Durably add jobs already built by ``ScheduledJob.create``; returns them with ``shard`` set."""
        if not jobs:
            return []
        limits, now, resolved = self.options.job_limits(), datetime.now(timezone.utc), set[str]()
        for job in jobs:
            limits.check(job, now, resolved=resolved)  # the cluster's limits, before anything is written
        items = [(job.id, datetime_to_us(job.first_fire), pack(job.to_wire())) for job in jobs]
        shards = await self._schedule_coalesced(items)
        return [dataclasses.replace(job, shard=shard) for job, shard in zip(jobs, shards, strict=True)]

    async def _schedule_coalesced(self, items: list[tuple[str, int, bytes]]) -> list[str]:
        """Send ``items``, sharing one Ray call with every schedule call made in the same tick.

        Many tasks of one process calling ``schedule_job`` at once would otherwise pay one Ray
        round trip and one storage append each; joined, they pay one of each per tick.
        """
        loop = asyncio.get_running_loop()
        if self._pending is None or self._pending_loop is not loop:
            self._pending, self._pending_loop = [], loop
            task = loop.create_task(self._flush(self._pending))
            self._flushes.add(task)
            task.add_done_callback(self._flushes.discard)
        future: asyncio.Future[list[str]] = loop.create_future()
        self._pending.append((items, future))
        return await future

    async def _flush(self, pending: list[tuple[list[tuple[str, int, bytes]], asyncio.Future[list[str]]]]) -> None:
        await asyncio.sleep(0)  # one tick: callers scheduling concurrently join this call
        if self._pending is pending:
            self._pending = None
        try:
            self._refresh_silos(SILO_REFRESH_S)
            shards = await self._router.schedule([item for items, _ in pending for item in items])
        except BaseException as exc:
            for _, future in pending:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        start = 0
        for items, future in pending:
            if not future.done():
                future.set_result(shards[start : start + len(items)])
            start += len(items)

    def _build(self, spec: Mapping[str, Any], now: datetime, index: int) -> ScheduledJob:
        unknown = set(spec) - set(_SPEC_FIELDS)
        if unknown:
            raise TypeError(f"job spec {index}: unknown field(s) {sorted(unknown)}; fields: {', '.join(_SPEC_FIELDS)}")
        if "target" not in spec:
            raise TypeError(f"job spec {index}: 'target' is required")
        fields = {k: v for k, v in spec.items() if k != "target" and v is not None}
        return ScheduledJob.create(self.resolve_target(spec["target"]), now=now, limits=self.options.job_limits(),
                                   **fields)

    def resolve_target(self, target: Any) -> Any:
        """Return ``target`` with a bare actor name placed in the caller's Ray namespace."""
        if isinstance(target, Target) and target.kind == "actor" and target.namespace is None:
            # A bare actor name means the caller's namespace, where the caller created it.
            return Target.actor(target.name, _current_namespace() or self.namespace)
        return target

    # -- cancelling ----------------------------------------------------------------------------

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        """Cancel ``job``; True if it was pending and will not start again, False if it was
        already gone (done, cancelled or never known). Safe to call more than once."""
        if job.shard is None:
            raise ValueError("job.shard: this job was not returned by schedule_job; cannot locate it")
        answer, _ = await self._at_owner(job, "cancel")
        return answer == "cancelled"

    # -- triggering ---------------------------------------------------------------------------

    async def trigger_job(self, job: ScheduledJob) -> ScheduledJob:
        """Run ``job`` once now, out of band, without moving its schedule; returns the run.

        The run is a one-shot job due now carrying ``job``'s current definition under an id of
        its own (see ``cluster.model.trigger``): durable once this returns, cancellable with
        ``try_cancel_job(run)``. A recurring job's next occurrence stays where it was; a
        one-shot job that has not fired yet still fires at its time too. Raises ``JobNotFound``
        (a ``LookupError``) if ``job`` is done, cancelled or unknown.
        """
        if job.shard is None:
            raise ValueError("job.shard: this job was not returned by schedule_job; cannot locate it")
        packed = await self._find(job)
        if packed is None:
            raise JobNotFound(f"job {job.id}")
        current = ScheduledJob.from_wire(unpack(packed))
        if FLOW_META in current.metadata:
            # A copy would be recorded as the step's own attempt and move its flow on.
            raise InvalidJob("job", "is a step of a flow, which runs and retries its steps itself; "
                                    "trigger_job runs plain and named jobs", job.id)
        (run,) = await self.submit_jobs([triggered_run(current, datetime.now(timezone.utc))])
        return run

    async def _find(self, job: ScheduledJob) -> bytes | None:
        """``job``'s packed definition as its shard holds it now, following its moves; None if gone."""
        assert job.shard is not None
        shard: str = job.shard
        silo = _creator_of(shard)
        chase = Chase()
        while chase.going():
            answer, info = await chase.ask(self._call("find_job", shard, job.id, prefer=silo))
            chase.answered((answer, info if answer == "moved" else None))
            if answer == "found":
                return bytes(info)
            if answer == "absent":
                return None
            if answer == "moved" and info:
                shard, silo = info, _creator_of(info)
                await chase.onward(info)
                continue
            # "gone": drained and deleted after the job moved on. Look in every shard from the
            # job's first window on (rare: old handles of recurring jobs).
            duration = self.options.shard_duration // timedelta(microseconds=1)
            due = datetime_to_us(job.due)
            for other, owner in await self._call("shards_from", due - due % duration):
                answer, info = await self._call("find_job", other, job.id, prefer=owner.rpartition("#")[0])
                if answer == "found":
                    return bytes(info)
            return None
        raise ClusterUnavailable(f"could not follow job {job.id} {chase.gave_up()}")
    # -- pausing -------------------------------------------------------------------------------

    async def pause_job(self, job: ScheduledJob, note: str | None = None, *, by: str | None = None) -> bool:
        """Pause ``job``: it does not start again until ``resume_job``, across failovers.

        True if this call paused it, False if it was paused already (that pause, its note and
        who made it, stay). An attempt already running finishes; nothing new starts. ``note``
        (at most 200 characters) and ``by`` (who pauses; default ``user@host``) are kept with
        the pause. ``JobNotFound`` (a ``LookupError``) if the job has nothing left to run;
        a bad ``note`` or ``by`` raises ``ValidationError`` and writes nothing.
        """
        changed, _ = await self.set_paused(job, True, note=note, by=by)
        return changed

    async def resume_job(self, job: ScheduledJob) -> bool:
        """Resume a paused ``job``; True if it was paused. Occurrences missed meanwhile follow its
        misfire policy, and a one-shot job already due fires at once. ``JobNotFound`` if the job
        has nothing left to run."""
        changed, _ = await self.set_paused(job, False)
        return changed

    async def set_paused(self, job: ScheduledJob, paused: bool, *, note: str | None = None,
                         by: str | None = None) -> tuple[bool, PauseRecord | None]:
        """Pause or resume ``job``: (whether this call changed it, the pause now in force or None)."""
        if paused:
            note = check_note(note)
            by = check_by(default_pauser() if by is None else by)
            answer, info = await self._at_owner(job, "pause", note, by)
        else:
            answer, info = await self._at_owner(job, "resume")
        if answer == "absent":
            raise JobNotFound(f"job {job.id}")
        if answer in ("paused", "already_paused"):
            return answer == "paused", PauseRecord.from_wire(info)
        return answer == "resumed", None

    async def _at_owner(self, job: ScheduledJob, method: str, *args: Any, search: bool = True,
                        chase: Chase | None = None) -> tuple[str, Any]:
        """Call ``method(shard, job.id, *args)`` on the silo owning ``job``'s shard, following its
        moves; the first answer that is neither a forward nor "not the owner". A shard gone is
        searched for (``search``), else answered as ("not_owner", None). ``chase``: the
        following this is part of (a search's), whose time it shares (``cluster.model.chase``)."""
        if job.shard is None:
            raise InvalidJob("job.shard", "this job was not returned by schedule_job; cannot locate it")
        shard: str = job.shard
        silo = _creator_of(shard)
        chase = chase or Chase()
        while chase.going():
            answer, info = await chase.ask(self._call(method, shard, job.id, *args, prefer=silo))
            chase.answered((answer, info))
            if answer == "moved" and info:
                shard, silo = info, _creator_of(info)
                await chase.onward(info)  # along a recurring job's chain: one shard per window it ran through
            elif answer == "not_owner" and info is None:
                # The shard is gone: drained and deleted after the job moved on. Look in every
                # shard from the job's first window on (rare: old handles of recurring jobs).
                return await self._at_owner_by_search(job, method, *args, chase=chase) if search else (answer, info)
            elif answer == "not_owner":
                owner = info.rpartition("#")[0]
                silo = owner if owner in self.silo_ids else None
                if silo is None:
                    # Released, or its owner lost and not yet adopted (its lease must run out
                    # first): ask again, backing off, rather than spend the chase at once.
                    await chase.back_off()
                else:
                    await chase.onward((shard, info))  # at once; named again (not adopted yet), after a backoff
            else:
                return answer, info
        raise ClusterUnavailable(f"could not reach the owner of job {job.id} {chase.gave_up()}")

    async def _at_owner_by_search(self, job: ScheduledJob, method: str, *args: Any, chase: Chase) -> tuple[str, Any]:
        duration = self.options.shard_duration // timedelta(microseconds=1)
        due = datetime_to_us(job.due)
        for shard, owner in await chase.ask(self._call("shards_from", due - due % duration)):
            # Timed as the chase's own asks are: a cancel here may wait long for a run to end.
            answer, info = await chase.ask(self._call(method, shard, job.id, *args, prefer=owner.rpartition("#")[0]))
            if answer == "not_owner" and info is not None:
                # The shard is there, its owner another silo or being replaced (adopted): asked
                # where it is held now, as any call is. Passed over, a job it holds would be
                # answered absent, and a cancel (a put's of the generation it replaces) not made.
                answer, info = await self._at_owner(dataclasses.replace(job, shard=shard), method, *args,
                                                    search=False, chase=chase)
            if answer not in ("absent", "moved", "not_owner"):
                return answer, info
        return "absent", None

    # -- calling silos -------------------------------------------------------------------------

    def _handle(self, silo_id: str) -> Any:
        handle = self._handles.get(silo_id)
        if handle is None:
            handle = ray.get_actor(SILO_PREFIX + silo_id, namespace=self.namespace)
            self._handles[silo_id] = handle
        return handle

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any:
        """One call to silo ``silo_id``, not tried elsewhere: for a call only that silo may answer
        (a named put at its bucket's owner). ``SiloRefused``: nothing done; ``SiloLost``: unknown."""
        self._refresh_silos(SILO_REFRESH_S)
        return await self._one_call(silo_id, method, args)

    async def _call(self, method: str, *args: Any, prefer: str | None = None) -> Any:
        self._refresh_silos(SILO_REFRESH_S)
        return await self._router.call(method, *args, prefer=prefer)

    def _refresh_silos(self, older_than: float) -> None:
        """Route to the silos that exist now, if the last look is ``older_than`` seconds old."""
        if not self._on_ray or time.monotonic() - self._refreshed < older_than or not ray.is_initialized():
            return
        self._refreshed = time.monotonic()
        try:
            ids = running_silo_ids(self.namespace)
        except Exception:  # Ray's GCS did not answer: keep routing to the silos known
            return
        if ids:
            self.silo_ids = ids
            self._router.update(ids)

    async def _call_silo(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        """One Ray call to one silo, its failures told apart for the router (see ``routing``)."""
        try:
            handle = self._handle(silo_id)
        except ValueError as exc:  # not registered (yet): restarting, never started, or removed
            self._refresh_silos(SILO_REFRESH_ON_MISS_S)
            raise SiloRefused(f"silo {silo_id} is not registered") from exc
        try:
            return await getattr(handle, method).remote(*args)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
            self._handles.pop(silo_id, None)
            raise SiloLost(f"silo {silo_id} was lost during {method}: {one_line(exc)}") from exc
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, (SiloStopping, EarlierTryUnsettled)):  # raised before doing anything
                raise SiloRefused(f"silo {silo_id}: {one_line(exc.cause)}",
                                  getattr(exc.cause, "settles", None)) from exc
            error = unwrapped(exc)
        # The silo's own error, raised here rather than in the handler above: Ray's wrapper (its
        # coloured header, the actor's repr) is then not chained to it; the silo's traceback is.
        raise error


def default_pauser() -> str:
    """Who a pause is by when the caller does not say: ``user@host`` of this process."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container without one)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"[:128]


def running_silo_ids(namespace: str) -> list[str]:
    """The silo ids with a live named actor in ``namespace``, in id order ("2" before "10")."""
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a["namespace"] == namespace and a["name"].startswith(SILO_PREFIX)]
    return sorted((n[len(SILO_PREFIX):] for n in names), key=lambda s: (len(s), s))


def _current_namespace() -> str | None:
    try:
        return ray.get_runtime_context().namespace
    except Exception:
        return None


def _creator_of(shard: str) -> str | None:
    # shards/<window>-<silo id>.<incarnation>-<counter>
    try:
        return shard.rsplit("-", 2)[1].rsplit(".", 1)[0]
    except IndexError:
        return None
