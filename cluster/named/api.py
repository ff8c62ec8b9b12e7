"""Named jobs (Dapr Jobs API) on ``client.jobs``: put, get, list, delete — by name, with a status.

A name is unique per ``(namespace, app_id)`` (both default to ``"default"``). Every ``put`` makes
a new **generation**: a new job with a new id (the generation id) and ``generation`` one higher.
``put`` validates everything first, schedules the new job durably, points the registry entry at
it by compare-and-swap (the entry carries the definition, so the two become visible together),
and cancels the previous generation through its shard's owner (following it through failovers)
before it returns. Puts and deletes made concurrently in one process share those writes
(``cluster.named.writes``), and ``put_many`` puts many jobs in one go. So once ``put`` or
``delete`` has returned, no occurrence of an older generation starts. An older generation whose
cancel was cut short (the caller died) stays listed in the entry and is cancelled by the next
``put`` or ``delete`` of that name.

``trigger`` runs a job once now without moving its schedule (``cluster.model.trigger``).

Status (``NamedJob.status``) is written by the silos as attempts start and end (see
``cluster.named.hooks``).

``pause`` and ``resume`` act on the current generation through its shard's owner, as a cancel
does; the pause itself lives in the shard's log (so it holds across failovers), and the entry's
status mirrors what the log answered, so ``get`` shows it without asking a silo. An overwrite
starts a new generation, unpaused.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from cluster.model.errors import InvalidJob, JobNotFound, PutManyFailed, ValidationError
from cluster.model.jobs import DEFAULT_MAX_DATA_BYTES, ScheduledJob, Target, new_job_ids
from cluster.model.limits import DEFAULT_LIMITS, JobLimits
from cluster.model.pause import check_by, check_note
from cluster.model.ports import JobSubmitter
from cluster.model.times import utc_now
from cluster.model.trigger import triggered_run
from cluster.model.wire import datetime_to_us, us_to_datetime
from cluster.named.attempts import paused as paused_status
from cluster.named.attempts import paused_change
from cluster.named.bucketclient import BucketNames
from cluster.named.registry import (
    NAMED_MARK,
    RESERVED_METADATA,
    Entry,
    JobStatus,
    check_name,
    check_scope,
    entry_key,
    key_in_scope,
    namespace_prefix,
    read_entry,
    scope_prefix,
    update_entry,
)
from cluster.named.writes import PutRequest, PutWriter, locator, read_definition
from storage import Fenced, NotFound, Store, open_store

__all__ = ["NamedJob", "NamedJobPage", "NamedJobs", "MAX_PAGE", "DEFAULT_SCOPE", "EARLIEST_START", "MIN_PERIOD", "parse_target", "TARGET_FORMS"]

DEFAULT_SCOPE = "default"
#: A start time further in the past than this is a mistake, not a catch-up (every job's limit).
EARLIEST_START = DEFAULT_LIMITS.earliest_start
MIN_PERIOD = DEFAULT_LIMITS.min_period
TARGET_FORMS = "Target.actor(...), Target.grain(...), 'actor:NAME', 'actor:NAME@RAY_NAMESPACE', 'grain:module:Class/KEY'"
_PUT_ATTEMPTS = 8
_PAUSES_AT_ONCE = 16  # pause_all / resume_all: jobs paused concurrently
#: The most jobs one ``list_page`` returns: each costs one definition read.
MAX_PAGE = 1000


@dataclass(frozen=True)
class NamedJob:
    """A named job as ``get`` and ``list`` return it: its current definition and its status."""

    name: str
    namespace: str
    app_id: str
    generation: int  # counts the puts since the name was (re)created; job.id is the generation id
    job: ScheduledJob  # the current generation, with job.shard set
    status: JobStatus
    updated_at: datetime  # when this generation was put

    @property
    def metadata(self) -> dict[str, str]:
        """The metadata given to ``put`` (without timeshard's own keys)."""
        return {k: v for k, v in self.job.metadata.items() if not k.startswith(RESERVED_METADATA)}


@dataclass(frozen=True)
class NamedJobPage:
    """One page of ``list_page``: its jobs, and ``next``, the name to pass as ``after`` (None: the end)."""

    items: tuple[NamedJob, ...]
    next: str | None


def parse_target(value: Any) -> Target:
    """Return ``value`` as a Target: a Target, or text such as ``actor:mailer`` (see TARGET_FORMS)."""
    if isinstance(value, Target):
        if value.kind not in ("actor", "grain"):
            raise InvalidJob("target.kind", "unknown target kind; kinds: actor, grain", value.kind)
        return value
    if not isinstance(value, str):
        raise InvalidJob("target", "must be a Target or target text", value, accepted=TARGET_FORMS)
    kind, sep, rest = value.partition(":")
    if not sep or not rest:
        raise InvalidJob("target", "must look like KIND:WHAT", value, accepted=TARGET_FORMS)
    if kind == "actor":
        name, at, namespace = rest.rpartition("@") if "@" in rest else (rest, "", "")
        return Target.actor(name, namespace if at else None)
    if kind == "grain":
        path, slash, key = rest.rpartition("/")
        if not slash or not key:
            raise InvalidJob("target", "a grain needs a key: grain:module:Class/KEY", value, accepted=TARGET_FORMS)
        return Target.grain(path, key)
    raise InvalidJob("target.kind", "unknown target kind; kinds: actor, grain", kind, accepted=TARGET_FORMS)


class NamedJobs:
    """Schedule, look up, list, replace and delete jobs by name. ``client.jobs`` is one.

    ``max_data_bytes`` (256 KiB) bounds the packed ``data`` of a job; build
    ``NamedJobs(client, max_data_bytes=...)`` for another limit. The registry lives in the
    silos' store, which this process opens itself (an Azure store needs its credential here too).
    """

    def __init__(self, client: JobSubmitter, *, max_data_bytes: int = DEFAULT_MAX_DATA_BYTES,
                 store_url: str | None = None) -> None:
        self.client = client
        self.max_data_bytes = max_data_bytes
        self._store_url = store_url  # the silos' store; asked of the cluster when None
        self._stores: dict[int, Store] = {}  # per event loop: a store's connections belong to one
        self._writers: dict[int, PutWriter | BucketNames] = {}  # per event loop, as the stores
        # The cluster's limits, made once per options object: ``job_limits()`` builds them (~2 us a put).
        self._limits: tuple[Any, JobLimits] | None = None

    async def _store(self) -> Store:
        loop = id(asyncio.get_running_loop())
        store = self._stores.get(loop)
        if store is None:
            if self._store_url is None:
                self._store_url = str((await self.client.describe())["store_url"])
            store = self._stores[loop] = open_store(self._store_url)
        return store

    async def close(self) -> None:
        """Release the store connections this object opened (optional; the process exit does it)."""
        stores, self._stores, self._writers = self._stores, {}, {}
        for store in stores.values():
            await store.close()

    # -- put ---------------------------------------------------------------------------------

    async def put(
        self,
        name: str,
        *,
        target: Target | str,
        schedule: Any = None,
        due_time: Any = None,
        repeats: int | None = None,
        ttl: Any = None,
        data: Any = None,
        metadata: Mapping[str, str] | None = None,
        failure_policy: Any = None,
        jitter: Any = None,
        not_before: Any = None,
        not_after: Any = None,
        exclude: Any = None,
        overlap: str = "allow_all",
        overwrite: bool = False,
        app_id: str = DEFAULT_SCOPE,
        namespace: str = DEFAULT_SCOPE,
    ) -> NamedJob:
        """Schedule the job ``name``; returns it once durable and every older generation is cancelled.

        Without ``overwrite`` a taken name raises ``AlreadyExists``; with it the last write wins.
        Bad input raises a ``ValidationError`` naming the field and the rule, and writes nothing.
        ``schedule`` and ``failure_policy`` take what ``schedule_job`` takes (an actor-reminder
        period ``R4/PT3S`` too); ``due_time`` and ``ttl`` take what ``parse_time`` takes;
        ``jitter``, ``not_before``, ``not_after``, ``exclude`` and ``overlap`` (``allow_all``,
        ``skip``, ``buffer_one``, ``buffer_all``, ``cancel_other``) what ``ScheduledJob.create`` takes.
        """
        key = _key(name, app_id, namespace)
        now = utc_now()
        shape = {"jitter": jitter, "not_before": not_before, "not_after": not_after, "exclude": exclude,
                 "overlap": overlap}
        job = self._build(name, key, target, schedule, due_time, repeats, ttl, data, metadata, failure_policy, now,
                          shape)
        self._check_limits(job, now)
        # The built job's id is fresh and unused: the put's try id (a second id cost a random
        # read, ~20 us a put on a loaded host).
        entry, new = await (await self._writer()).put(
            PutRequest(key, name, app_id, namespace, job, overwrite, datetime_to_us(now), try_id=job.id))
        return NamedJob(name, namespace, app_id, new.generation, new, entry.status, now)

    async def put_many(self, specs: Iterable[Mapping[str, Any]]) -> list[NamedJob]:
        """Put many jobs: each spec holds ``put``'s arguments, ``name`` included; returns them in order.

        Every spec is validated first: bad input raises a ``ValidationError`` (its field prefixed
        with ``specs[i].``) and writes nothing, as does a name given twice. The jobs are then put
        together, each as ``put`` puts it (its own generation, its own last-write-wins), sharing
        the writes. If some are not put, ``PutManyFailed`` says which were and why each other was
        not, once every put of the call has ended.
        """
        now = utc_now()
        now_us = datetime_to_us(now)
        listed = list(specs)
        ids = new_job_ids(len(listed))  # one read of the system's randomness for the call
        scopes: dict[tuple[str, str], str] = {}  # (namespace, app_id) -> their checked prefix
        asks: list[PutRequest] = []
        keys: set[str] = set()
        for i, spec in enumerate(listed):
            try:
                ask = self._ask(spec, now, now_us, ids[i], scopes)
            except ValidationError as exc:
                raise type(exc)(f"specs[{i}].{exc.field}", exc.rule, exc.value, accepted=exc.accepted) from None
            if ask.key in keys:
                raise ValidationError(f"specs[{i}].name", "appears twice in this call", ask.name)
            keys.add(ask.key)
            asks.append(ask)
        results = await (await self._writer()).put_many(asks)
        done: dict[str, NamedJob] = {}
        errors: dict[str, BaseException] = {}
        for ask, result in zip(asks, results, strict=True):
            if isinstance(result, BaseException):
                errors[ask.name] = result
            else:
                entry, new = result
                done[ask.name] = NamedJob(ask.name, ask.namespace, ask.app_id, new.generation, new, entry.status, now)
        if errors:
            raise PutManyFailed(dict(done), errors)
        return list(done.values())

    def _ask(self, spec: Mapping[str, Any], now: datetime, now_us: int, job_id: str,
             scopes: dict[tuple[str, str], str]) -> PutRequest:
        """A put_many spec, validated as ``put`` validates its arguments; its job's id is ``job_id``."""
        if not isinstance(spec, Mapping):
            raise InvalidJob("spec", "must be a mapping of put's arguments", spec)
        unknown = sorted(set(spec) - _PUT_FIELDS)
        if unknown:
            raise InvalidJob("spec", f"unknown field(s) {unknown}; fields: {', '.join(sorted(_PUT_FIELDS))}")
        if "target" not in spec or "name" not in spec:
            raise InvalidJob("spec", "'name' and 'target' are required", sorted(spec))
        name, app_id = spec["name"], spec.get("app_id", DEFAULT_SCOPE)
        namespace, overwrite = spec.get("namespace", DEFAULT_SCOPE), spec.get("overwrite", False)
        if not isinstance(overwrite, bool):
            raise InvalidJob("overwrite", "must be True or False", overwrite)
        key = _key(name, app_id, namespace, scopes)
        shape = {k: spec[k] for k in ("jitter", "not_before", "not_after", "exclude", "overlap") if k in spec}
        job = self._build(name, key, spec["target"], spec.get("schedule"), spec.get("due_time"), spec.get("repeats"),
                          spec.get("ttl"), spec.get("data"), spec.get("metadata"), spec.get("failure_policy"), now,
                          shape, job_id)
        self._check_limits(job, now)
        return PutRequest(key, name, app_id, namespace, job, overwrite, now_us, try_id=job.id)

    def _check_limits(self, job: ScheduledJob, now: datetime) -> None:
        """The cluster's limits, checked before the put is queued: one job breaking them must
        not fail the round it would share with others."""
        options = getattr(self.client, "options", None)
        if options is None:
            return
        if self._limits is None or self._limits[0] is not options:
            self._limits = (options, options.job_limits())
        self._limits[1].check(job, now, resolved=set())

    async def _buckets(self) -> BucketNames | None:
        """The registry buckets' client when names are kept in them (the default), else None."""
        writer = await self._writer()
        return writer if isinstance(writer, BucketNames) else None

    async def _writer(self) -> PutWriter | BucketNames:
        loop = id(asyncio.get_running_loop())
        writer = self._writers.get(loop)
        if writer is None:
            options = getattr(self.client, "options", None)
            if options is not None and options.named_buckets and hasattr(self.client, "_at_silo"):
                writer = BucketNames(await self._store(), self.client, self.client)  # type: ignore[arg-type]
            else:
                writer = PutWriter(await self._store(), self.client)
            self._writers[loop] = writer
        return writer

    def _build(self, name: str, key: str, target: Any, schedule: Any, due_time: Any, repeats: Any, ttl: Any,
               data: Any, metadata: Mapping[str, str] | None, failure_policy: Any, now: datetime,
               shape: Mapping[str, Any] | None = None, job_id: str | None = None) -> ScheduledJob:
        if metadata is not None and not isinstance(metadata, Mapping):
            raise InvalidJob("metadata", "must be a mapping of str to str", metadata)
        reserved = sorted(k for k in metadata or {} if isinstance(k, str) and k.startswith(RESERVED_METADATA))
        if reserved:
            raise InvalidJob("metadata", f"keys starting with {RESERVED_METADATA!r} are reserved", reserved)
        try:
            job = ScheduledJob.create(
                self.client.resolve_target(parse_target(target)), name, due=due_time, data=data,
                metadata={**(metadata or {}), NAMED_MARK: key},
                schedule=schedule, repeats=repeats, ttl=ttl, failure_policy=failure_policy, now=now,
                max_data_bytes=self.max_data_bytes, job_id=job_id, **(shape or {}),
            )
        except ValidationError as exc:
            if exc.field != "due":
                raise
            raise type(exc)("due_time", exc.rule, exc.value, accepted=exc.accepted) from None
        return job

    async def _cancel(self, job_id: str, shard: str, due_us: int) -> None:
        await self.client.try_cancel_job(locator(job_id, shard, due_us))

    # -- reading -------------------------------------------------------------------------------

    async def get(self, name: str, *, app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> NamedJob | None:
        """Return the named job with its status, or None if there is no job of that name."""
        key = _key(name, app_id, namespace)
        store = await self._store()
        buckets = await self._buckets()
        if buckets is not None:  # the owner's durable entry, its definition inline
            entry = await buckets.get_entry(key)
            return None if entry is None else await self._named(store, entry, namespace, app_id)
        for _ in range(_PUT_ATTEMPTS):
            entry = await read_entry(store, key)
            if entry is None:
                return None
            found = await self._named(store, entry, namespace, app_id)
            if found is not None:
                return found
        raise Fenced(f"named job {name!r}: its generation kept changing while being read")

    async def list(self, prefix: str = "", *, app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> list[NamedJob]:
        """Return the jobs of ``(namespace, app_id)`` whose name starts with ``prefix``, by name."""
        if prefix:
            check_name(prefix, "prefix")
        check_scope(app_id, "app_id")
        check_scope(namespace, "namespace")
        if await self._buckets() is not None:
            listed: list[NamedJob] = []
            after: str | None = None
            while True:
                page = await self.list_page(prefix, after=after, limit=MAX_PAGE, app_id=app_id, namespace=namespace)
                listed += page.items
                if page.next is None:
                    return listed
                after = page.next
        store = await self._store()
        base = scope_prefix(namespace, app_id)
        infos = await store.list(entry_key(namespace, app_id, prefix) if prefix else base)
        entries = [Entry.from_metadata(info.name, info.metadata, info.etag) for info in infos
                   if "/" not in info.name[len(base):]]
        found = await asyncio.gather(*(self._named_again(store, e, namespace, app_id) for e in entries))
        return sorted((f for f in found if f is not None), key=lambda f: f.name)

    async def list_page(self, prefix: str = "", *, after: str | None = None, limit: int = 50,
                        app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> NamedJobPage:
        """Return one page of ``list``: at most ``limit`` jobs after the name ``after``, reading only theirs.

        Pass the page's ``next`` as ``after`` for the following page; ``next`` is None at the
        end. Jobs come in the registry's order: by name for names of letters, digits, ``-`` and
        ``_`` (the characters a store name keeps as they are); a name holding any other
        character sorts as its escape (``~XX``), after those. Only the page's definitions are
        read, so a page costs the same with 100 jobs in the scope as with 100,000 (on Azure,
        paging forward from the first page; see ``AzureStore.list_page``). A job deleted while
        its page is read is left out, so a page may hold fewer than ``limit`` jobs before the
        end. ``ValidationError`` names a bad ``limit`` (1 to ``MAX_PAGE``), ``prefix`` or ``after``.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ValidationError("limit", f"must be an int from 1 to {MAX_PAGE}", limit)
        base = _scope_of(namespace, app_id)
        start = _key_of(namespace, app_id, prefix, "prefix") if prefix else base
        cursor = None if after is None else _key_of(namespace, app_id, after, "after")
        store = await self._store()
        buckets = await self._buckets()
        if buckets is not None:
            listed, more = await buckets.page(start, cursor, limit)
            named = await asyncio.gather(*(self._named(store, e, namespace, app_id) for e in listed))
            return NamedJobPage(tuple(f for f in named if f is not None), listed[-1].name if more and listed else None)
        entries: list[Entry] = []
        while len(entries) < limit:
            page = await store.list_page(start, after=cursor, limit=limit - len(entries))
            entries += [Entry.from_metadata(info.name, info.metadata, info.etag) for info in page.infos
                        if "/" not in info.name[len(base):]]
            cursor = page.next
            if cursor is None:
                break
        found = await asyncio.gather(*(self._named_again(store, e, namespace, app_id) for e in entries))
        return NamedJobPage(tuple(f for f in found if f is not None),
                            None if cursor is None or not entries else entries[-1].name)

    async def count(self, prefix: str = "", *, app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> int:
        """Return how many jobs ``list`` would return, from the registry's names alone.

        No definition and no entry is read. With names in registry buckets (the default) each
        bucket's owner answers from its names in memory, on every store. With per-name entries
        the file and memory stores keep counts (one index row for a whole scope, a range of the
        index for a prefix); Azure lists the names, one List Blobs call per 5,000, so a page asks
        for it when its filters change, not on every refresh.
        """
        start = _key_of(namespace, app_id, prefix, "prefix") if prefix else _scope_of(namespace, app_id)
        buckets = await self._buckets()
        if buckets is not None:
            return await buckets.count(start)
        store = await self._store()
        return await store.count(start, nested=False)  # a name is escaped whole: a '/' below is no entry

    async def _named_again(self, store: Store, entry: Entry, namespace: str, app_id: str) -> NamedJob | None:
        """``entry`` as a NamedJob; one replaced meanwhile is read again, one deleted meanwhile is None."""
        found = await self._named(store, entry, namespace, app_id)
        if found is not None:
            return found
        with contextlib.suppress(Fenced):  # replaced again and again: left out of this page
            return await self.get(entry.name, app_id=app_id, namespace=namespace)
        return None

    async def _named(self, store: Store, entry: Entry, namespace: str, app_id: str) -> NamedJob | None:
        try:
            job = await read_definition(store, entry)
        except NotFound:
            return None  # replaced meanwhile and its definition deleted: read the entry again
        status = with_next_fires(entry.status, job, utc_now(), paused=entry.status.paused)
        return NamedJob(entry.name, namespace, app_id, entry.generation, replace(job, shard=entry.shard), status,
                        us_to_datetime(entry.updated_us))

    # -- triggering ----------------------------------------------------------------------------

    async def trigger(self, name: str, *, app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> ScheduledJob:
        """Run the job ``name`` once now, out of band; returns the run once it is durable.

        Its schedule does not move (a one-shot job that has not fired yet still fires at its
        time; one that has fired runs again), and the run counts in the name's status like any
        attempt: ``successful`` or ``failed``, ``history`` (marked ``triggered``). It runs the
        current generation's definition; once a ``put`` or ``delete`` of the name has returned,
        a triggered run of an older generation does not start. Raises ``JobNotFound`` (a
        ``LookupError``) if there is no job of that name.
        """
        key = _key(name, app_id, namespace)
        store = await self._store()
        buckets = await self._buckets()
        for _ in range(_PUT_ATTEMPTS):
            entry = await (read_entry(store, key) if buckets is None else buckets.get_entry(key))
            if entry is None:
                break
            try:
                job = await read_definition(store, entry)
            except NotFound:
                continue  # replaced meanwhile and its definition deleted: read the entry again
            (run,) = await self.client.submit_jobs([triggered_run(job, utc_now())])
            return run
        raise JobNotFound(f"named job {name!r} in namespace {namespace!r}, app_id {app_id!r}")

    # -- pausing -------------------------------------------------------------------------------

    async def pause(self, name: str, *, note: str | None = None, app_id: str = DEFAULT_SCOPE,
                    namespace: str = DEFAULT_SCOPE, by: str | None = None) -> NamedJob:
        """Pause the job ``name``: nothing of it starts until ``resume``, across failovers; returns it.

        An attempt already running finishes; its next attempt or occurrence waits. A job paused
        already keeps its pause (note, who, since). ``note`` (at most 200 characters) and ``by``
        (default ``user@host``) show in ``status``. ``JobNotFound`` (a ``LookupError``) if there
        is no such job or it has nothing left to run; bad input raises ``ValidationError`` and
        writes nothing.
        """
        note = check_note(note)
        if by is not None:
            check_by(by)
        return await self._set_paused(name, app_id, namespace, True, note, by)

    async def resume(self, name: str, *, app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> NamedJob:
        """Resume the paused job ``name``; returns it. Occurrences that came due while paused follow
        its misfire policy (``skip``, ``fire_once``, ``fire_all``); a one-shot job already due fires
        at once. ``JobNotFound`` if there is no such job."""
        return await self._set_paused(name, app_id, namespace, False, None, None)

    async def pause_all(self, *, app_id: str | None = None, namespace: str = DEFAULT_SCOPE,
                        note: str | None = None, by: str | None = None) -> int:
        """Pause every job of ``namespace`` (every app_id), or only those of ``app_id`` if given;
        returns how many this call paused (jobs paused already, or with nothing left to run, are
        left as they are)."""
        note = check_note(note)
        if by is not None:
            check_by(by)
        return await self._set_all_paused(app_id, namespace, True, note, by)

    async def resume_all(self, *, app_id: str | None = None, namespace: str = DEFAULT_SCOPE) -> int:
        """Resume every paused job of ``namespace``, or only those of ``app_id`` if given; returns
        how many this call resumed."""
        return await self._set_all_paused(app_id, namespace, False, None, None)

    async def _set_paused(self, name: str, app_id: str, namespace: str, paused: bool, note: str | None,
                          by: str | None) -> NamedJob:
        key = _key(name, app_id, namespace)
        store = await self._store()
        buckets = await self._buckets()
        entry = await (read_entry(store, key) if buckets is None else buckets.get_entry(key))
        if entry is None:
            raise JobNotFound(f"named job {name!r} in namespace {namespace!r}, app_id {app_id!r}")
        await self._apply_pause(store, entry, paused, note, by)
        found = await self.get(name, app_id=app_id, namespace=namespace)
        if found is None:
            raise JobNotFound(f"named job {name!r} (deleted meanwhile)")
        return found

    async def _apply_pause(self, store: Store, entry: Entry, paused: bool, note: str | None, by: str | None) -> bool:
        """Pause or resume ``entry``'s generation in its shard, then mirror the answer in its status."""
        where = locator(entry.job_id, entry.shard, entry.due_us)
        try:
            changed, record = await self.client.set_paused(where, paused, note=note, by=by)
        except JobNotFound:
            if paused:
                raise JobNotFound(f"named job {entry.name!r}") from None
            changed, record = False, None  # nothing left to resume: a stale status is cleared below
        buckets = await self._buckets()
        if buckets is not None:
            await buckets.change_status(entry.key, entry.job_id, paused_change(record))
        else:
            await update_entry(store, entry.key, entry.job_id, lambda e: _with_status(e, paused_status(e.status, record)), entry)
        return changed

    async def _set_all_paused(self, app_id: str | None, namespace: str, paused: bool, note: str | None,
                              by: str | None) -> int:
        check_scope(namespace, "namespace")
        if app_id is not None:
            check_scope(app_id, "app_id")
        store = await self._store()
        base = namespace_prefix(namespace) if app_id is None else scope_prefix(namespace, app_id)
        depth = 1 if app_id is None else 0  # slashes after the prefix in an entry's key
        buckets = await self._buckets()
        found = [Entry.from_metadata(info.name, info.metadata, info.etag) for info in await store.list(base)] \
            if buckets is None else await buckets.entries(base)
        entries = [e for e in found if e.key[len(base):].count("/") == depth]
        limit = asyncio.Semaphore(_PAUSES_AT_ONCE)

        async def one(entry: Entry) -> bool:
            async with limit:
                try:
                    return await self._apply_pause(store, entry, paused, note, by)
                except JobNotFound:
                    return False  # finished, or replaced meanwhile

        return sum(await asyncio.gather(*(one(e) for e in entries)))

    # -- deleting ------------------------------------------------------------------------------

    async def delete(self, name: str, *, app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> bool:
        """Delete the job ``name``: True if it existed. Once this returns, it does not start again."""
        key = _key(name, app_id, namespace)
        return await (await self._writer()).delete(key, name)

    async def delete_prefix(self, prefix: str, *, app_id: str = DEFAULT_SCOPE, namespace: str = DEFAULT_SCOPE) -> int:
        """Delete every job whose name starts with ``prefix`` (``""``: all of the scope); returns how many."""
        jobs = await self.list(prefix, app_id=app_id, namespace=namespace)
        deleted = await asyncio.gather(*(self.delete(j.name, app_id=app_id, namespace=namespace) for j in jobs))
        return sum(deleted)


def with_next_fires(status: JobStatus, job: ScheduledJob, now: datetime, *, paused: bool = False) -> JobStatus:
    """``status`` with ``next_fires`` computed from ``job``'s definition (see ``ScheduledJob.next_fires``).

    The occurrence to come is the one after the last that ended (an attempt's occurrence
    number is in the status), so ``repeats`` counts down; a finished job has none.
    """
    if status.finished:
        return status
    pending = 1
    running = status.current_attempt or status.last_attempt
    if running is not None:
        over = status.current_attempt is None and status.attempts == 0
        pending = running.occurrence + 1 if over else running.occurrence
    return replace(status, next_fires=job.next_fires(now, paused=paused, pending=pending))
def _with_status(entry: Entry, status: JobStatus | None) -> Entry | None:
    return None if status is None else replace(entry, status=status)


def _scope_of(namespace: str, app_id: str) -> str:
    return scope_prefix(check_scope(namespace, "namespace"), check_scope(app_id, "app_id"))


def _key_of(namespace: str, app_id: str, name: object, field: str) -> str:
    """The entry key of ``name`` (a prefix or a cursor), with a bad one reported as ``field``."""
    try:
        return entry_key(namespace, app_id, check_name(name, field))
    except ValidationError as exc:
        raise ValidationError(field, exc.rule, name) from None


def _key(name: str, app_id: str, namespace: str, scopes: dict[tuple[str, str], str] | None = None) -> str:
    """The entry key of ``name``; ``scopes`` keeps the scopes checked already (one ``put_many``'s)."""
    check_name(name)
    if scopes is None or type(namespace) is not str or type(app_id) is not str:
        return entry_key(check_scope(namespace, "namespace"), check_scope(app_id, "app_id"), name)
    prefix = scopes.get((namespace, app_id))
    if prefix is None:
        prefix = scopes[namespace, app_id] = scope_prefix(check_scope(namespace, "namespace"),
                                                          check_scope(app_id, "app_id"))
    return key_in_scope(prefix, name)


#: What ``put_many`` reads of a spec: ``put``'s arguments.
_PUT_FIELDS = frozenset({"name", "target", "schedule", "due_time", "repeats", "ttl", "data", "metadata", "failure_policy",
                         "jitter", "not_before", "not_after", "exclude", "overlap", "overwrite", "app_id", "namespace"})
