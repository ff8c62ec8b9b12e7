"""A shard as its owning silo holds it: the fenced log writer, the metadata, the live jobs.

A shard is *dormant* (writes go to its log, nothing is held per job) until its window nears; then
it is *loaded*: its log is read and folded into live jobs, which the silo queues. Writes apply to
the in-memory state when submitted and return once durable, which is what the log writer's
rotation needs: its snapshot must cover every record submitted so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.runtime.logowner import read_to_claim
from cluster.runtime.shardlog import SHARD_FRAMES, ShardState
from cluster.runtime.shardmeta import ShardMeta
from storage import (
    Damage,
    LogFull,
    LogOptions,
    LogState,
    LogWriter,
    StorageError,
    Store,
    describe_damage,
    keep_damaged,
    read_log,
)

log = logging.getLogger("timeshard.silo")


@dataclass
class ShardDamage:
    """What replay found wrong with a shard's log, and where a copy of that log is kept.

    ``ranges`` are bad stretches in the middle of the log (``lost`` records the writer had
    numbered there); ``unreadable`` records read whole but not usable as operations.
    """

    ranges: tuple[Damage, ...]
    lost: int
    unreadable: int
    kept_as: str
    counted: bool = False  # in the silo's metrics already


async def read_shard(store: Store, base: str, shard: Shard | None = None,
                     expected_owner: str | None = None) -> tuple[LogState, ShardState]:
    """Read shard log ``base`` and fold it into live jobs (``shard`` their owner), frame by frame as it
    is decoded: plain ADDs typed (``SHARD_FRAMES``), one frame's records in memory at a time.

    With ``expected_owner``, read to take it over from that owner (``read_to_claim``). Records
    replay set aside are logged here; what the read found damaged is the caller's (``_keep_damage``).
    """
    state = ShardState(owner=shard)
    if expected_owner is None:
        log_state = await read_log(store, base, reader=SHARD_FRAMES, fold=state.fold_frame)
    else:
        log_state = await read_to_claim(store, base, expected_owner, SHARD_FRAMES, state.fold_frame)
    state.report_unreadable(base)
    return log_state, state


async def _keep_damage(store: Store, shard: Shard, log_state: LogState, state: ShardState) -> None:
    """Keep a copy of the log ``state`` was folded from if anything in it is bad.

    Raises ``StorageError`` when that copy cannot be written, so nothing goes on (a claim, a
    compaction) that could delete the only evidence; the caller tries again later.
    """
    decoded = log_state.decoded
    if decoded.damaged or state.unreadable:
        why = describe_damage(decoded) or f"{len(state.unreadable)} records unreadable"
        kept = await keep_damaged(store, log_state, why)
        shard.damage = ShardDamage(decoded.damaged, decoded.lost, len(state.unreadable), kept)
        log.error("shard log damaged: replayed what could be read, kept a copy", extra={
            "shard": shard.base, "damage": why, "lost": decoded.lost, "unreadable": len(state.unreadable),
            "kept_as": kept})
    if decoded.torn is not None:
        log.warning("shard log has a torn tail", extra={"shard": shard.base, "offset": decoded.torn.offset,
                                                       "reason": decoded.torn.reason})


class Gate:
    """Many shared holders at once, or one exclusive holder; a waiting exclusive goes first.

    Writes to a shard hold it shared, so concurrent writes still coalesce into one block; loading
    holds it exclusive, so no write lands between reading the log and queueing what it held.
    """

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextlib.asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
            self._shared += 1
        try:
            yield
        finally:
            async with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        async with self._cond:
            self._waiting += 1
            try:
                await self._cond.wait_for(lambda: not self._exclusive and not self._shared)
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            async with self._cond:
                self._exclusive = False
                self._cond.notify_all()


class Shard:
    """One shard owned by this silo."""

    def __init__(self, base: str, meta: ShardMeta, writer: LogWriter) -> None:
        self.base = base
        self.meta = meta
        self.writer = writer
        self.state: ShardState | None = None
        self.gate = Gate()
        self.lost = False  # fenced: another silo owns it now
        self.held_since = 0.0  # monotonic, set by the shard table when it starts holding it
        self.added_at = 0.0  # monotonic, when a schedule call last wrote here (``retry_window``)
        self.damage: ShardDamage | None = None  # what replay found bad in its log, if anything
        self.unreadable: dict[str, str] = {}  # job id -> why its job cannot be decoded (kept, never run)
        # While it is being handed over (``balance``): its due jobs, held back instead of started.
        self.leaving: list[tuple[int, str, list[Any]]] | None = None
        # Until when (monotonic) work its previous owner sent may still start at a handler: that
        # owner's lease, when the shard was claimed before it surely ended, kept for every later
        # copy this silo makes of its log (``Adoption._sends_until``).
        self.sent_before_until = float("-inf")

    def __repr__(self) -> str:
        return f"Shard({self.base!r}, loaded={self.loaded}, jobs={self.live_count})"

    @property
    def loaded(self) -> bool:
        return self.state is not None

    @property
    def live_count(self) -> int:
        return -1 if self.state is None else len(self.state.live)

    @classmethod
    async def create(cls, store: Store, base: str, meta: ShardMeta, options: LogOptions) -> Shard:
        """A new, empty shard; it counts as loaded, having nothing to replay."""
        shard = cls.__new__(cls)
        writer = await LogWriter.create(store, base, meta.to_metadata(), snapshot=shard.snapshot, options=options)
        shard.__init__(base, meta, writer)  # type: ignore[misc]
        shard.state = ShardState(owner=shard)
        return shard

    @classmethod
    async def claim(cls, store: Store, base: str, take: Callable[[ShardMeta], ShardMeta], expected_owner: str,
                    options: LogOptions) -> Shard:
        """Take over ``base`` from ``expected_owner`` by CAS with ``take(metadata read)``, and load it.

        The new metadata is made from what the read returned, the same version the CAS is
        conditional on, so what the last owner wrote down (its firing mark) is not missed.
        ``Fenced`` if someone was faster — also when the winner's claim landed between our
        listing and our read, which the ETag alone cannot tell from an unclaimed log.
        """
        shard = cls.__new__(cls)
        log, state = await read_shard(store, base, shard, expected_owner)
        meta = take(ShardMeta.from_metadata(log.metadata))
        shard.__init__(base, meta, None)  # type: ignore[misc]
        await _keep_damage(store, shard, log, state)
        shard.writer = await LogWriter.claim(store, log, meta.to_metadata(), snapshot=shard.snapshot, options=options)
        shard.state = state
        return shard

    async def load(self, store: Store) -> ShardState:
        """Read the log and fold it into live jobs (the caller holds the gate exclusive)."""
        log_state, state = await read_shard(store, self.base, self)
        await _keep_damage(store, self, log_state, state)
        self.state = state
        return state

    def snapshot(self) -> list[Any]:
        # Called by the writer at rotation. A dormant shard has no state to snapshot: the write
        # fails with LogFull and the silo seals it and opens a fresh shard for the window.
        if self.state is None:
            raise LogFull(f"shard {self.base!r} is dormant and full; it will be sealed")
        return self.state.snapshot()

    async def write(self, ops: Sequence[list[Any]]) -> list[Any]:
        """Apply ``ops`` to the live state now, return once durable; entries ADD/RETRY touched.

        Applied at submit, because a rotation's snapshot must cover every record submitted so
        far; taken back if the write fails, so memory never holds what the log does not: a
        failed cancel leaves its job live, a failed schedule leaves no phantom job behind.
        """
        state = self.state
        if state is None:
            await self.writer.append_many(ops)
            return []
        touched, before = state.apply_undoably(ops)
        try:
            await self.writer.append_many(ops)
        except StorageError:
            # Not on cancellation: a cancelled caller's ops stay queued in the writer and land.
            if self.state is state:
                state.undo(before, touched)
                # Should the append land after all, the writer stops and the shard is taken back
                # from its log (found by the simulation, seed 3507: a move landed behind a lost
                # answer, undone here, so a cancel answered "cancelled" while the move lived on).
                self.writer.disown_doubt()
            raise
        return touched

    async def set_meta(self, meta: ShardMeta) -> None:
        await self.writer.set_metadata(meta.to_metadata())
        self.meta = meta
