"""The one durable write path of named jobs: puts (new names and overwrites) and deletes,
group-committed.

A ``put`` is three writes, each shared by every put of its round:

1. **schedule** the new generation's job (one ``submit_jobs`` call for the round: one Ray call,
   one append per shard window);
2. **point** the name's entry at it by compare-and-swap — the entry holds the definition too
   (``Entry.definition``), so a name and its job become visible together — in one
   ``Store.write_metadata_many`` call for the round (the file store shares its fsyncs among them);
3. **retire** the generation it replaced: cancel it through its shard's owner (the fence's
   promise: once ``put`` returns, no attempt of an older generation starts, ``cluster.named.fence``),
   then take it off the entry's ``retire`` list, again one ``write_metadata_many`` for the round.

A delete cancels every job its entry names (the current generation and the retired ones),
then deletes the entry by compare-and-swap in the round's same ``write_metadata_many``; an
entry changed meanwhile (a status update, a newer put) is read again and the delete tried again.

A round takes what was queued in one event-loop tick (as ``Client`` coalesces schedule calls);
rounds overlap, but a name is in at most one round at a time, so two puts of one name never
race each other inside this process (across processes the compare-and-swap decides).

What a failed put leaves: before its entry is written, nothing visible (a job scheduled but
never pointed at is never cleared by the fence, so it never starts, and is cancelled when the
entry moved on meanwhile); an entry write that met anything but a refused precondition, or a
cancel that failed after the entry was written, raises ``PutInDoubt`` (the name points at a
whole job either way). A refused entry write is read again: the entry naming this try's job
means the store's retry of a write that landed was refused by that write itself (the put is
made); an entry that cannot be read again raises ``PutInDoubt`` too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from cluster.model.errors import AlreadyExists, ClusterUnavailable, PutInDoubt, ScheduleInDoubt
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.ports import JobSubmitter
from cluster.model.wire import datetime_to_us, pack, unpack, us_to_datetime
from cluster.named.registry import (
    INLINE_DEFINITION_CHARS,
    REPLACES_MARK,
    Entry,
    JobStatus,
    Retired,
    definition_key,
    read_entries,
    read_entry,
    update_entry,
)
from storage import AlreadyExists as LogExists
from storage import Fenced, MetadataWrite, NotFound, StorageError, Store

__all__ = ["PutWriter", "PutRequest", "PUT_ATTEMPTS", "read_definition", "delete_definition", "write_definition", "locator"]

log = logging.getLogger("timeshard.named")

PUT_ATTEMPTS = 8  # tries of one put while other writers keep changing its entry
_REFUSED = (Fenced, LogExists, NotFound)  # a write the store did not make


@dataclass(frozen=True)
class PutRequest:
    """One put as the caller asked it: ``job`` validated, without its id and generation yet.

    With registry buckets, ``try_id`` is the id the owner gives the new generation's job on
    the put's first send, and ``resend`` marks a send after one lost with its owner: the next
    owner tells by that id whether the first send was made (``Buckets.put_many``)."""

    key: str
    name: str
    app_id: str
    namespace: str
    job: ScheduledJob
    overwrite: bool
    now_us: int
    try_id: str = field(default_factory=new_job_id)
    resend: bool = False
    brief: bool = False  # its sender reads a made put's brief answer (``cluster.named.buckets.outcome_from_wire``)


@dataclass
class _Put:
    """One put in flight: what the caller asked, and where its current try stands."""

    ask: PutRequest
    future: asyncio.Future[tuple[Entry, ScheduledJob]]
    tries: int = 0
    entry: Entry | None = None  # the entry this try compares against
    known: bool = False  # ``entry`` is read (None: the name is free)
    job: ScheduledJob | None = None  # this try's job; scheduled once its shard is set
    definition: str | None = None  # inline, or None: in named-defs/

    @property
    def key(self) -> str:
        return self.ask.key

    @property
    def name(self) -> str:
        return self.ask.name

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def taken(self) -> AlreadyExists:
        return AlreadyExists(self.ask.name, self.ask.app_id, self.ask.namespace)


@dataclass
class _Delete:
    """One delete in flight: cancel what the entry names, then delete the entry if unchanged."""

    key: str
    name: str
    future: asyncio.Future[bool]
    tries: int = 0
    entry: Entry | None = None
    known: bool = False

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


_Op = _Put | _Delete


class PutWriter:
    """Group-commits the puts and deletes of one event loop (see the module docstring)."""

    def __init__(self, store: Store, client: JobSubmitter) -> None:
        self._store = store
        self._client = client
        self._queued: list[_Op] = []
        self._busy: set[str] = set()  # keys in a round now
        self._armed = False
        self._rounds: set[asyncio.Task[None]] = set()

    async def put(self, ask: PutRequest) -> tuple[Entry, ScheduledJob]:
        """Make the put ``ask``; returns the entry written and the job scheduled."""
        (result,) = await self.put_many([ask])
        if isinstance(result, BaseException):
            raise result
        return result

    async def put_many(self, asks: Sequence[PutRequest]) -> list[tuple[Entry, ScheduledJob] | BaseException]:
        """Make every put of ``asks`` (distinct names); each one's result or error, in order."""
        loop = asyncio.get_running_loop()
        puts = [_Put(ask, loop.create_future()) for ask in asks]
        self._queued.extend(puts)
        self._arm()
        return list(await asyncio.gather(*(p.future for p in puts), return_exceptions=True))

    async def delete(self, key: str, name: str) -> bool:
        """Delete the entry ``key`` once what it names is cancelled; True if it existed."""
        op = _Delete(key, name, asyncio.get_running_loop().create_future())
        self._queued.append(op)
        self._arm()
        return await op.future

    # -- rounds --------------------------------------------------------------------------------

    def _arm(self) -> None:
        if not self._armed and self._queued:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._start_round)  # one tick: callers of this one join

    def _start_round(self) -> None:
        self._armed = False
        taken: list[_Op] = []
        waiting: list[_Op] = []
        for p in self._queued:
            if p.key in self._busy:
                waiting.append(p)  # its name is in a round: after that one
            else:
                self._busy.add(p.key)
                taken.append(p)
        self._queued = waiting
        if taken:
            task = asyncio.get_running_loop().create_task(self._round(taken))
            self._rounds.add(task)
            task.add_done_callback(self._rounds.discard)

    async def _round(self, ops: list[_Op]) -> None:
        again: list[_Op] = []
        try:
            await self._read(ops)
            ready = [p for p in ops if isinstance(p, _Put) and self._try(p)]
            ready = await self._schedule(ready)
            deleting = await self._cancel_named([d for d in ops if isinstance(d, _Delete)])
            landed = await self._point(ready, deleting, again)
            await self._retire(landed)
        except BaseException as exc:
            for p in ops:
                p.fail(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            for p in ops:
                self._busy.discard(p.key)
            self._queued[:0] = [p for p in again if not p.future.done()]
            self._arm()

    async def _read(self, ops: list[_Op]) -> None:
        need = [p for p in ops if not p.known]
        found = await read_entries(self._store, [p.key for p in need]) if need else []
        for p, entry in zip(need, found, strict=True):
            if isinstance(entry, StorageError):
                p.fail(entry)  # nothing written yet
            else:
                p.entry, p.known = entry, True

    def _try(self, p: _Put) -> bool:
        """Give ``p`` this try's job (a new generation), unless it failed or its name is taken."""
        if p.future.done():
            return False
        if p.job is not None:
            return True  # its job is scheduled: only the entry changed meanwhile (a status update)
        if p.entry is not None and not p.ask.overwrite:
            p.fail(p.taken())
            return False
        if p.entry is None:
            p.job = replace(p.ask.job, id=new_job_id(), generation=1)
        else:
            # Kept on every retry of this job (``_refused`` keeps it only while the entry names
            # the same job): the fence refuses it once the entry names another (seed 71301).
            p.job = replace(p.ask.job, id=new_job_id(), generation=p.entry.generation + 1,
                            metadata={**p.ask.job.metadata, REPLACES_MARK: p.entry.job_id})
        packed = base64.b64encode(pack(p.job.to_wire())).decode("ascii")
        p.definition = packed if len(packed) <= INLINE_DEFINITION_CHARS else None
        return True

    async def _schedule(self, puts: list[_Put]) -> list[_Put]:
        """Schedule the jobs not scheduled yet, in one call; the puts whose job is durable."""
        new = [p for p in puts if p.job is not None and p.job.shard is None]
        if not new:
            return puts
        try:
            await asyncio.gather(*(write_definition(self._store, p.job) for p in new  # type: ignore[arg-type]
                                   if p.definition is None))
            scheduled = await self._client.submit_jobs([p.job for p in new if p.job is not None])
        except ScheduleInDoubt as exc:
            # Its jobs may have landed, but no entry points at them: the fence never clears them.
            error = ClusterUnavailable(f"not put: its job could not be scheduled ({exc.reason})")
            for p in new:
                p.fail(error)
            return [p for p in puts if p not in new]
        except Exception as exc:
            for p in new:
                p.fail(exc)  # nothing visible: no entry points at these jobs
            return [p for p in puts if p not in new]
        for p, job in zip(new, scheduled, strict=True):
            p.job = job
        return puts

    async def _cancel_named(self, deletes: list[_Delete]) -> list[_Delete]:
        """Cancel every job the entries of ``deletes`` name; the deletes whose entry is to go."""
        existing = []
        for d in deletes:
            if d.future.done():
                continue
            if d.entry is None:
                d.future.set_result(False)
            else:
                existing.append(d)
        cancelled = await asyncio.gather(*(self._cancel_all((d.entry.retired(), *d.entry.retire))
                                           for d in existing if d.entry is not None), return_exceptions=True)
        for d, result in zip(existing, cancelled, strict=True):
            if isinstance(result, BaseException):
                d.fail(result)  # the entry stays: deleting it again cancels them again
        return [d for d in existing if not d.future.done()]

    async def _point(self, puts: list[_Put], deletes: list[_Delete], again: list[_Op]) -> list[tuple[_Put, Entry]]:
        """Point each entry at its put's job, and delete the entries of ``deletes``, in one
        group-committed write; the puts written."""
        writes, news = [], []
        for p in puts:
            assert p.job is not None and p.job.shard is not None
            old = p.entry
            new = Entry(p.key, "", p.job.generation, p.job.id, p.job.shard, datetime_to_us(p.job.first_fire), p.ask.now_us,
                        JobStatus(next_fire=p.job.first_fire),
                        () if old is None else (old.retired(), *old.retire), p.definition)
            news.append(new)
            writes.append(MetadataWrite(p.key, new.metadata(), None if old is None else old.etag, create=old is None))
        writes += [MetadataWrite(d.key, None, d.entry.etag) for d in deletes if d.entry is not None]
        outcomes = await self._store.write_metadata_many(writes) if writes else []
        await self._deleted(deletes, outcomes[len(puts):], again)
        landed: list[tuple[_Put, Entry]] = []
        for p, new, outcome in zip(puts, news, outcomes[:len(puts)], strict=True):
            if isinstance(outcome, str):
                landed.append((p, replace(new, etag=outcome)))
            elif isinstance(outcome, _REFUSED):
                written = await self._refused(p, again)
                if written is not None:
                    landed.append((p, written))
            else:
                written = await self._settle(p, outcome or StorageError("no ETag"))
                if written is not None:
                    landed.append((p, written))
        return landed

    async def _deleted(self, deletes: list[_Delete], outcomes: Sequence[str | None | StorageError],
                       again: list[_Op]) -> None:
        """Answer each delete by its write: done, or tried again once the entry changed under it
        (a status update, or a put that made a newer generation to cancel)."""
        for d, outcome in zip(deletes, outcomes, strict=True):
            if outcome is None or isinstance(outcome, NotFound):
                if outcome is None and d.entry is not None:
                    for old in (d.entry.retired(), *d.entry.retire):
                        if old.external:
                            await delete_definition(self._store, old.job_id)
                if not d.future.done():  # its caller may have stopped waiting (cancelled)
                    d.future.set_result(True)
            elif not isinstance(outcome, Fenced):
                d.fail(outcome if isinstance(outcome, StorageError) else StorageError(repr(outcome)))
            elif d.tries >= 4 * PUT_ATTEMPTS:
                d.fail(Fenced(f"named job {d.name!r}: the entry kept changing while being deleted"))
            else:
                d.tries += 1
                d.known = False  # read again in its next round
                again.append(d)

    async def _refused(self, p: _Put, again: list[_Op]) -> Entry | None:
        """The entry changed under ``p``'s write: the entry written if that was ``p``'s own write
        (see below); else try again, with the same job if only its status changed, else after
        taking this try's job back."""
        p.tries += 1
        assert p.job is not None
        try:
            fresh = await read_entry(self._store, p.key)
        except Exception as exc:
            p.fail(PutInDoubt(f"its registry entry write was refused, and could not be read again to see "
                              f"whose write that was ({exc!r})", p.name))
            return None
        # A store retries a write whose answer it lost; the retry is refused by the write it
        # retries (a create by AlreadyExists, a compare-and-swap by Fenced). This try's job id
        # is the token telling that write from another put's (simulator seeds 818, 120113, 142700).
        if fresh is not None and fresh.job_id == p.job.id:
            return fresh
        same = fresh is not None and p.entry is not None and fresh.job_id == p.entry.job_id
        if not same:
            await self._abandon(p)
            if not p.ask.overwrite and fresh is not None:
                p.fail(p.taken())
                return None
        if p.tries >= PUT_ATTEMPTS:
            p.fail(Fenced(f"named job {p.name!r}: the entry kept changing under {PUT_ATTEMPTS} concurrent puts"))
            if same:
                await self._abandon(p)
            return None
        p.entry, p.known = fresh, True
        again.append(p)
        return None

    async def _abandon(self, p: _Put) -> None:
        """Take back a try's job no entry will point at (the fence never clears it: hygiene)."""
        job, definition, p.job = p.job, p.definition, None
        if job is None or job.shard is None:
            return
        with contextlib.suppress(Exception):
            await self._client.try_cancel_job(job)
            if definition is None:
                await delete_definition(self._store, job.id)

    async def _settle(self, p: _Put, error: StorageError) -> Entry | None:
        """An entry write of unknown outcome: the entry read again, if it shows ``p``'s job; else
        ``PutInDoubt`` (its job is left as it is: the write may still land, and then it runs)."""
        assert p.job is not None
        with contextlib.suppress(Exception):
            fresh = await read_entry(self._store, p.key)
            if fresh is not None and fresh.job_id == p.job.id:
                return fresh
        p.fail(PutInDoubt(f"its registry entry may or may not point at the new generation ({error!r})", p.name))
        return None

    async def _retire(self, landed: list[tuple[_Put, Entry]]) -> None:
        """Cancel what each landed entry retires, take those off its list, then answer the callers."""
        retiring = [(p, e) for p, e in landed if e.retire]
        cancelled = await asyncio.gather(*(self._cancel_all(e.retire) for _, e in retiring), return_exceptions=True)
        clear: list[tuple[_Put, Entry]] = []
        for (p, entry), result in zip(retiring, cancelled, strict=True):
            if isinstance(result, BaseException):
                p.fail(PutInDoubt(f"put, but an older generation's cancel failed: it may still start ({result!r})",
                                  p.name, landed=True))
            else:
                clear.append((p, entry))
        cleared = await self._clear(clear)
        for p, entry in landed:
            if not p.future.done():
                assert p.job is not None
                p.future.set_result((cleared.get(p.key, entry), p.job))
        for _, entry in clear:
            for old in entry.retire:
                if old.external:
                    await delete_definition(self._store, old.job_id)

    async def _cancel_all(self, retire: tuple[Retired, ...]) -> None:
        await asyncio.gather(*(self._client.try_cancel_job(locator(r.job_id, r.shard, r.due_us)) for r in retire))

    async def _clear(self, clear: list[tuple[_Put, Entry]]) -> dict[str, Entry]:
        """Empty the retire lists of ``clear``'s entries, in one write; a contended one is read again."""
        writes = [MetadataWrite(e.key, replace(e, retire=()).metadata(), e.etag) for _, e in clear]
        outcomes = await self._store.write_metadata_many(writes) if writes else []
        out: dict[str, Entry] = {}
        for (_, entry), outcome in zip(clear, outcomes, strict=True):
            if isinstance(outcome, str):
                out[entry.key] = replace(entry, retire=(), etag=outcome)
                continue
            done = {r.job_id for r in entry.retire}
            with contextlib.suppress(Exception):  # left listed: the next put or delete cancels them again
                written = await update_entry(self._store, entry.key, entry.job_id, without_retired(done))
                if written is not None:
                    out[entry.key] = written
        return out


def without_retired(done: set[str]) -> Callable[[Entry], Entry]:
    """The change taking the jobs ``done`` (cancel confirmed) off an entry's retire list."""
    return lambda e: replace(e, retire=tuple(r for r in e.retire if r.job_id not in done))


# -- definitions ------------------------------------------------------------------------------------

async def read_definition(store: Store, entry: Entry) -> ScheduledJob:
    """The definition of ``entry``'s generation: inline, or from ``named-defs/`` (NotFound: replaced meanwhile)."""
    if entry.definition is not None:
        return ScheduledJob.from_wire(unpack(base64.b64decode(entry.definition)))
    body, _ = await store.read(definition_key(entry.job_id))
    if not body:
        raise NotFound(f"definition of {entry.job_id} is not written yet")
    return ScheduledJob.from_wire(unpack(body))


async def write_definition(store: Store, job: ScheduledJob) -> None:
    """Write ``job``'s definition to ``named-defs/`` (one too long to be inline)."""
    name = definition_key(job.id)
    etag = await store.create(name, {})
    await store.append(name, pack(job.to_wire()), if_match=etag)


async def delete_definition(store: Store, job_id: str) -> None:
    with contextlib.suppress(NotFound):
        await store.delete(definition_key(job_id), if_match=None)


def locator(job_id: str, shard: str, due_us: int) -> ScheduledJob:
    """Return a stand-in job that says only where job ``job_id`` lives: all try_cancel_job reads."""
    due = us_to_datetime(due_us)
    return ScheduledJob(job_id, None, Target("actor", "-"), due, None, {}, None, None, None, None, due, shard=shard)
