"""Fenced logs with generations and a group-committing writer, on top of any ``Store``.

A log called ``base`` is stored as generations ``base~00000000``, ``base~00000001``, ...
(fixed width, so lexical order is generation order). Rotation writes a snapshot into a new
generation marked ``log_pending``, then commits by a compare-and-swap that sets ``log_next``
on the old one; the current generation is the highest one that is not pending, or that an
existing generation points at. A generation left behind by a writer fenced mid-rotation is
pending and unpointed, so readers ignore it and the next claimer deletes it.

Metadata keys starting with ``log_`` belong to this module; callers see and set the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .appends import append_verified, cas_metadata, cas_metadata_until_known, landed_append, stat_or_fenced
from .base import Appended, LogInfo, Store
from .batching import LogOptions, is_gathered
from .damage import describe_damage, keep_damaged
from .errors import (
    AlreadyExists,
    Fenced,
    LandedAfterFailure,
    LogCorrupted,
    LogFull,
    NotFound,
    RecordTooLarge,
    StorageError,
)
from .generations import (
    NEXT_KEY,
    PENDING_KEY,
    SEPARATOR,
    LogState,
    claim_metadata,
    current_head,
    generation_name,
    split_name,
    user_metadata,
)
from .records import FRAME_OVERHEAD, encode_frame, pack

#: Returns the live state as records; called synchronously at the moment of rotation.
Snapshot = Callable[[], Iterable[Any]]

@dataclass
class _Submission:
    """Records to append (``packed``), or one ``action`` that must run between blocks."""

    packed: list[bytes]
    future: asyncio.Future[Any]
    action: Callable[[], Awaitable[Any]] | None = None
    written: int = 0  # records of this submission already durable in the current generation
    gathered: bool = False  # its caller batched it already: no linger for it (``gathered()``)


@dataclass
class _Uncertain:
    frame: bytes
    size: int
    etag: str
    count: int


class LogWriter:
    """The single writer of one log: group commit, exactly-once blocks, rotation, fencing.

    Get one with ``create`` (a new log) or ``claim`` (take over a log you read with
    ``read_log``). ``append`` resolves once the record is durable; ``Fenced`` means another
    writer claimed the log: every waiting append gets it and the writer is done.

    ``snapshot`` returns the live state as records and is called at rotation, synchronously,
    with appends still queued: it must include every record passed to ``append`` so far
    (apply a record to your state when you submit it). Queued records are then covered by the
    snapshot and not written again. Without ``snapshot`` the writer raises ``LogFull`` at the
    limit instead of rotating.

    A writer never stays in doubt for good. After an append whose answer was lost and whose log
    could not be read back, it acknowledges nothing until the store answers again; its next
    write first re-reads the log (``stat``, then the tail if needed) and learns whether the block
    landed and whether it still owns the log: still owner, it resumes; claimed by another writer,
    every caller gets ``Fenced``; log cut short or rewritten, every caller gets ``LogCorrupted``
    (the owner takes the log back with ``claim``, which keeps the damaged generation aside);
    landed after its callers took back what it carried (``disown_doubt``), every caller gets
    ``LandedAfterFailure`` and the owner reloads from the log the same way.
    A rotation's commit whose answer was lost is asked about until the store answers: the
    records its snapshot covers are neither acknowledged nor failed while it may have landed.
    Nothing is acknowledged that is not durable where the writer framed it.
    """

    def __init__(self, store: Store, base: str, generation: int, raw_metadata: dict[str, str], etag: str, *,
                 size: int, blocks: int, last_seq: int, snapshot: Snapshot | None, options: LogOptions) -> None:
        self._store = store
        self._base = base
        self._generation = generation
        self._raw = raw_metadata
        self._etag = etag
        self._size = size
        self._blocks = blocks
        self._last_seq = last_seq
        self._snapshot = snapshot
        self._options = options
        self._queue: deque[_Submission] = deque()
        self._task: asyncio.Task[None] | None = None
        self._failed: StorageError | None = None
        self._closed = False
        self._must_rotate = False
        self._waking: asyncio.Future[None] | None = None  # ends the linger under way early
        self._uncertain: _Uncertain | None = None
        self._disowned = False  # the callers of the append in doubt took back what it carried
        # A committed rotation's last steps, owed when they failed: the new generation's final
        # metadata (that very dict, so a CAS that landed unseen is recognised) and the old one's delete.
        self._unfinished: tuple[dict[str, str], str, str] | None = None
        self.rotations = 0
        self.blocks_written = 0

    # -- getting a writer -----------------------------------------------------------------

    @classmethod
    async def create(cls, store: Store, base: str, metadata: Mapping[str, str], *,
                     snapshot: Snapshot | None = None, options: LogOptions = LogOptions()) -> LogWriter:
        """Create log ``base`` (generation 0) and return its writer; ``AlreadyExists`` if taken."""
        if current_head(base, await store.list(base + SEPARATOR)) is not None:
            raise AlreadyExists(f"log {base!r} already exists")
        raw = claim_metadata(metadata)
        etag = await store.create(generation_name(base, 0), raw)
        return cls(store, base, 0, raw, etag, size=0, blocks=0, last_seq=-1, snapshot=snapshot, options=options)

    @classmethod
    async def claim(cls, store: Store, state: LogState, metadata: Mapping[str, str], *,
                    snapshot: Snapshot | None = None, options: LogOptions = LogOptions()) -> LogWriter:
        """Take over the log read as ``state`` by setting ``metadata`` under its ETag.

        ``Fenced`` if the log changed since it was read: read it again and decide again.
        A log with a torn or corrupt tail is moved to a new generation before the next append.
        So is a damaged one (bad frames before whole ones), after a copy of it is kept with
        ``keep_damaged``: the claim fails if that copy cannot be written, so compaction never
        deletes the only evidence.
        """
        decoded = state.decoded
        if (decoded.torn is not None or decoded.damaged) and snapshot is None:
            bad = decoded.torn or decoded.damaged[0]
            where = "a bad tail" if decoded.torn is not None else "damaged frames"
            raise StorageError(f"log {state.head.base!r} has {where} ({bad.reason} at {bad.offset}); "
                               "claim it with snapshot= so it can be rewritten")
        if decoded.damaged:
            await keep_damaged(store, state, describe_damage(decoded))
        raw = claim_metadata(metadata)
        etag = await cas_metadata(store, state.head.name, raw, state.etag, size=state.size)
        writer = cls(store, state.head.base, state.head.generation, raw, etag, size=state.size,
                     blocks=state.blocks, last_seq=decoded.last_seq, snapshot=snapshot, options=options)
        writer._must_rotate = decoded.torn is not None or bool(decoded.damaged)
        await writer._delete_other_generations()
        return writer

    # -- what callers see ------------------------------------------------------------------

    @property
    def base(self) -> str:
        return self._base

    @property
    def name(self) -> str:
        """Store name of the generation being written."""
        return generation_name(self._base, self._generation)

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def etag(self) -> str:
        return self._etag

    @property
    def metadata(self) -> dict[str, str]:
        return user_metadata(self._raw)

    @property
    def stopped(self) -> StorageError | None:
        """Why this writer stopped for good (``Fenced``, ``LogCorrupted``, ...), or None while it writes."""
        return self._failed

    @property
    def last_seq(self) -> int:
        """Sequence number of the last durable record (-1 for none)."""
        return self._last_seq

    @property
    def blocks(self) -> int:
        return self._blocks

    @property
    def size(self) -> int:
        return self._size

    @property
    def in_doubt(self) -> bool:
        """Whether an append's answer was lost and the log could not be read back since, with no
        write under way that would settle that first."""
        return self._uncertain is not None and self._task is None

    @property
    def doubt_disowned(self) -> bool:
        """Whether the log may hold records its callers' memory does not: an append's answer was
        lost, its callers took back what it carried (``disown_doubt``), and the log has not been
        read back since, a write under way or not."""
        return self._uncertain is not None and self._disowned

    async def settle(self) -> None:
        """Settle what the next write would settle first (a doubt, a rotation's last steps), now.

        A doubt is otherwise settled only when something writes again, which may never come: an
        append that landed after its callers took it back (``disown_doubt``) holds records only
        the log knows, and they wait until the writer stops on it and the log is taken back.
        Raises as an append would: ``Fenced``, ``LogCorrupted``, or ``StorageError`` while the
        store does not answer.
        """
        await self._submit([])

    async def append(self, record: Any) -> None:
        """Append one msgpack-able record; return once it is durable."""
        await self.append_many((record,))

    async def append_many(self, records: Iterable[Any]) -> None:
        """Append records in order, in one block when they fit; return once all are durable."""
        packed = [pack(r) for r in records]
        limit = self._options.max_block_bytes - FRAME_OVERHEAD
        for p in packed:
            if len(p) > limit:
                raise RecordTooLarge(f"log {self._base!r}: a record of {len(p)} bytes exceeds one block ({limit})")
        if packed:
            await self._submit(packed)

    async def set_metadata(self, metadata: Mapping[str, str]) -> str:
        """Replace the caller's metadata under the writer's ETag, after the appends before it."""
        raw = claim_metadata(metadata)

        async def action() -> str:
            self._etag = await cas_metadata(self._store, self.name, raw, self._etag, size=self._size)
            self._raw = raw
            return self._etag

        return str(await self._submit([], action))

    async def rotate(self) -> None:
        """Write a new generation from the snapshot now (normally done at the limits)."""
        self._check_open()
        self._must_rotate = True
        await self._submit([])

    async def _submit(self, packed: list[bytes], action: Callable[[], Awaitable[Any]] | None = None) -> Any:
        # Writes go through one queue and one task: a single append (or metadata change) is in
        # flight per log, each chained on the ETag the previous one returned.
        self._check_open()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        gathered = is_gathered()
        self._queue.append(_Submission(packed, future, action, gathered=gathered))
        if gathered and self._waking is not None and not self._waking.done():
            self._waking.set_result(None)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"log-writer:{self._base}")
        return await future

    def disown_doubt(self) -> None:
        """Say that the callers of a failed append took back what it carried (from their memory).

        If that append is in doubt (its answer was lost and the log could not be read back) and
        turns out to have landed, the writer then stops with ``LandedAfterFailure`` instead of
        appending after it: the log would hold records its callers' memory no longer does.
        Call it from the ``except`` around the append, before any other await: the writer
        settles a doubt only on its next flush, which runs after the failed callers have resumed.
        """
        self._disowned = self._uncertain is not None

    async def close(self) -> None:
        """Wait for queued appends, then refuse new ones."""
        await self._drain()
        self._closed = True

    # -- the flusher: the only task that writes ---------------------------------------------

    def _check_open(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._closed:
            raise StorageError(f"log writer for {self._base!r} is closed")

    async def _drain(self) -> None:
        while self._task is not None:
            await asyncio.shield(self._task)

    def _fail(self, exc: StorageError) -> None:
        self._failed = exc
        self._fail_queue(exc)

    def _fail_queue(self, exc: BaseException) -> None:
        while self._queue:
            future = self._queue.popleft().future
            if not future.done():
                future.set_exception(exc)

    async def _run(self) -> None:
        pause = self._options.linger
        try:
            while self._queue and self._failed is None:
                await self._linger(pause)
                # Only an idle log's first block waits out the linger: what queued behind a
                # block in flight has waited for it already, and waiting again only delays it.
                pause = 0.0
                try:
                    await self._flush_once()
                except (Fenced, LogCorrupted) as exc:
                    self._fail(exc)
                except StorageError as exc:
                    # Unavailable or permanent: the waiters of this round learn it; the writer
                    # stays usable and settles any doubt about the lost block first next time.
                    self._fail_queue(exc)
        except BaseException as exc:
            self._fail(StorageError(f"log writer for {self._base!r} stopped: {exc!r}"))
            raise
        finally:
            self._task = None

    async def _linger(self, pause: float) -> None:
        """Wait ``pause`` seconds for more records, less once a gathered batch is queued."""
        if pause <= 0 or any(sub.gathered for sub in self._queue):
            await asyncio.sleep(0)
            return
        loop = asyncio.get_running_loop()
        self._waking = waking = loop.create_future()
        timer = loop.call_later(pause, _wake, waking)
        try:
            await waking
        finally:
            timer.cancel()
            self._waking = None

    async def _flush_once(self) -> None:
        if self._unfinished is not None:
            await self._finish_rotation()  # before any write: its ETag is the one to write under
        if self._uncertain is not None:
            await self._settle_uncertain()
        head = self._queue[0]
        if head.action is not None and not self._must_rotate:
            self._queue.popleft()
            try:
                result = await head.action()
            except BaseException as exc:
                if not head.future.done():
                    head.future.set_exception(exc)
                raise
            if not head.future.done():
                head.future.set_result(result)
            return
        if not head.packed and not self._must_rotate:
            self._complete(self._queue.popleft())  # a rotate() request already served
            return
        block, takes = self._next_block()
        if self._must_rotate or (block and self._over_limits(len(block))):
            await self._rotate()
            return
        self._uncertain = _Uncertain(block, self._size, self._etag, sum(takes))
        try:
            result = await append_verified(self._store, self.name, block, self._etag, self._size, self._raw)
        except LogFull:
            self._uncertain = None
            self._must_rotate = True  # the store's own limit came first
            return
        except Fenced:
            self._uncertain = None
            raise
        if result.size != self._size + len(block):
            # The block did not land where it was framed for: the log is not what this writer
            # wrote (cut short or rewritten behind its back), so what it acknowledged before may
            # be gone. Acknowledge nothing more; whoever loads the log next sees the damage.
            self._uncertain = None
            raise LogCorrupted(f"log {self._base!r}: a block framed for offset {self._size} ended at {result.size}, "
                             f"not {self._size + len(block)}")
        self._advance(result, sum(takes))
        for count in takes:
            sub = self._queue[0]
            sub.written += count
            if sub.written == len(sub.packed):
                self._complete(self._queue.popleft())

    def _next_block(self) -> tuple[bytes, list[int]]:
        budget = self._options.max_block_bytes - FRAME_OVERHEAD
        parts: list[bytes] = []
        takes: list[int] = []
        for sub in self._queue:
            if not sub.packed:
                break
            count = 0
            for p in sub.packed[sub.written:]:
                if len(p) > budget:
                    break
                parts.append(p)
                budget -= len(p)
                count += 1
            takes.append(count)
            if sub.written + count < len(sub.packed):
                break
        while takes and takes[-1] == 0:
            takes.pop()
        return (encode_frame(self._last_seq + 1, parts) if parts else b""), takes

    def _over_limits(self, block_size: int) -> bool:
        return self._blocks + 1 > self._options.rotate_blocks or self._size + block_size > self._options.rotate_bytes

    def _advance(self, result: Appended, records: int) -> None:
        self._etag, self._size, self._blocks = result.etag, result.size, result.blocks
        self._last_seq += records
        self._uncertain = None
        self.blocks_written += 1

    @staticmethod
    def _complete(sub: _Submission) -> None:
        if not sub.future.done():
            sub.future.set_result(None)

    async def _settle_uncertain(self) -> None:
        doubt = self._uncertain
        assert doubt is not None
        landed = await landed_append(self._store, self.name, doubt.frame, doubt.etag, doubt.size, self._raw)
        disowned, self._disowned = self._disowned, False
        if landed is None:
            self._uncertain = None  # it never landed; its waiters were told Unavailable
            return
        self._advance(landed, doubt.count)
        if disowned:
            raise LandedAfterFailure(f"log {self._base!r}: an append reported failed had landed, "
                                     "after its callers took back what it carried")

    # -- rotation -----------------------------------------------------------------------------

    async def _rotate(self) -> None:
        if self._snapshot is None:
            raise LogFull(f"log {self._base!r} reached its limits and the writer has no snapshot to rotate with")
        # Taken together, with no await between: the snapshot covers exactly these records, every
        # one submitted so far, those queued behind a metadata change too (applied at submit, they
        # are in it). Left queued, they failed with that change while the new generation held
        # them: their callers took back from memory what the log keeps (a cancel "failed", and
        # its job ran after its removal was durable: simulation seed 263574); or, the change done,
        # they were written again after the snapshot. The changes run after, in their order.
        covered = [sub for sub in self._queue if sub.action is None]
        self._queue = deque(sub for sub in self._queue if sub.action is not None)
        try:
            packed = [pack(r) for r in self._snapshot()]
            await self._switch_to_new_generation(packed)
        except BaseException as exc:
            for sub in covered:
                if not sub.future.done():
                    sub.future.set_exception(exc)
            raise
        self._must_rotate = False
        self.rotations += 1
        try:
            await self._finish_rotation()
        except Fenced:
            raise
        except StorageError:
            pass  # finished before the next write instead
        finally:
            for sub in covered:
                self._complete(sub)  # durable since the commit, whatever the last step did

    async def _finish_rotation(self) -> None:
        """Clear the committed generation's pending mark, then delete the one it replaced.

        Only in this order: the old generation's pointer is what makes a pending one current.
        ``Fenced`` when a claimer took the new generation first (it cleared the mark itself).
        """
        assert self._unfinished is not None
        final, old_name, old_etag = self._unfinished
        self._etag = await cas_metadata(self._store, self.name, final, self._etag, size=self._size)
        self._raw = final
        self._unfinished = None
        with contextlib.suppress(StorageError):
            await self._store.delete(old_name, old_etag)

    async def _switch_to_new_generation(self, packed: list[bytes]) -> None:
        store, old_name = self._store, self.name
        user = user_metadata(self._raw)
        taken = [s[1] for i in await store.list(self._base + SEPARATOR) if (s := split_name(i.name)) and s[0] == self._base]
        generation = max(taken, default=self._generation) + 1
        pending = claim_metadata(user, **{PENDING_KEY: "1"})
        etag = await store.create(generation_name(self._base, generation), pending)
        new_name = generation_name(self._base, generation)
        size = blocks = 0
        seq = self._last_seq + 1
        budget = self._options.max_block_bytes - FRAME_OVERHEAD
        if any(len(record) > budget for record in packed):
            # A record no block can hold would never be written: the loop below appended empty
            # frames until the store's block limit (a shard's snapshot is one record, so a shard
            # holding more than a block of live jobs could not rotate). Refused as too big instead.
            with contextlib.suppress(StorageError):
                await store.delete(new_name, etag)
            raise LogFull(f"log {self._base!r}: a snapshot record of {max(map(len, packed))} bytes exceeds one block ({budget})")
        start = 0
        while start < len(packed):
            end, used = start, 0
            while end < len(packed) and used + len(packed[end]) <= budget:
                used += len(packed[end])
                end += 1
            frame = encode_frame(seq, packed[start:end])
            result = await append_verified(store, new_name, frame, etag, size, pending)
            etag, size, blocks = result.etag, result.size, result.blocks
            seq += end - start
            start = end
        if blocks >= self._options.rotate_blocks:
            with contextlib.suppress(StorageError):
                await store.delete(new_name, etag)
            raise LogFull(f"log {self._base!r}: the snapshot alone takes {blocks} blocks, the rotation limit")
        # The commit point: only the owner of the old generation's ETag can point it forward.
        pointer = {**self._raw, NEXT_KEY: str(generation)}
        try:
            old_etag = await cas_metadata_until_known(store, old_name, pointer, self._etag, size=self._size)
        except Fenced:
            with contextlib.suppress(StorageError):
                await store.delete(new_name, etag)
            raise
        # Committed: readers and claimers find the new generation, snapshot and all, so the
        # records it covers are durable whatever fails next. Failing them here made their
        # callers take back what the log holds (found by the simulation, seed 1829: a move
        # decided again in a rotation that failed after this point was carried out twice).
        self._generation, self._raw, self._etag = generation, pending, etag
        self._size, self._blocks, self._last_seq = size, blocks, seq - 1
        self._unfinished = (claim_metadata(user), old_name, old_etag)

    async def delete(self) -> None:
        """Delete the whole log: every other generation first, then the current one at this
        writer's ETag (``Fenced`` if another writer took it). An older generation left behind
        (its own delete after a rotation is best effort) would point at a generation that no
        longer exists, and the log could never be read or claimed again; so if one cannot be
        deleted, neither is the current one, and the error is raised."""
        for info in await self._other_generations():
            with contextlib.suppress(NotFound):
                await self._store.delete(info.name, info.etag)
        await self._store.delete(self.name, if_match=self._etag)

    async def _delete_other_generations(self) -> None:
        """Remove superseded generations and ones abandoned mid-rotation (best effort: a fault
        here must not fail the claim or rotation whose write already landed)."""
        try:
            others = await self._other_generations()
        except StorageError:
            return
        for info in others:
            with contextlib.suppress(StorageError):
                await self._store.delete(info.name, info.etag)

    async def _other_generations(self) -> list[LogInfo]:
        """This log's generations but the one being written, listed while this writer still held
        the log: each is then superseded, or pending and left by a writer fenced mid-rotation
        (a later owner makes generations only after its claim, which the check would see), so
        deleting it at its listed ETag is safe. ``Fenced`` if the log is another writer's now.

        Without the check, a writer that stalled after its claim took the current generation of
        the owner that claimed the log from it meanwhile, and rotated it, for a leftover, and
        deleted it: every record gone (found by the simulation, seed 7838).
        """
        infos = await self._store.list(self._base + SEPARATOR)
        others = [info for info in infos
                  if (split := split_name(info.name)) and split[0] == self._base and split[1] != self._generation]
        if others and (await stat_or_fenced(self._store, self.name)).metadata != self._raw:
            raise Fenced(f"log {self._base!r} was claimed by another writer")
        return others


def _wake(waking: asyncio.Future[None]) -> None:
    if not waking.done():
        waking.set_result(None)
