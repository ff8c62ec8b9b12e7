"""Moving a recurring job to its next occurrence: one durable decision, carried out exactly once.

The decision is one append to the shard the occurrence ran from: a REMOVE(MOVED) that names the
target shard and carries the next occurrence. Until the next occurrence is known to be in the
target, the decision stays *pending* in the source, and whoever owns the source carries it out —
its writer, or the silo that adopts the source after a failover. Carrying it out is safe to
repeat: the ADD goes only into the target the decision names; it is skipped where the target
proves it landed (live, or ended or moved on since); and a target that cannot be written is
first fenced (claimed, if its writer is gone) and read, and only a target proven not to hold
the occurrence is replaced, by a new decision in the source. A target is never deleted while
a source of moves into it exists, so "the target is gone" means the move never landed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from cluster.model.errors import LeaseLapsed
from cluster.model.options import ClusterOptions
from cluster.model.wire import timedelta_to_us
from cluster.runtime.ownership import ShardTable
from cluster.runtime.runs import RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import MOVED, LiveJob, ShardState, add_op, remove_op, window_of
from storage import Fenced, LogCorrupted, LogFull, NotFound, StorageError, Store, list_logs, read_log

log = logging.getLogger("timeshard.silo")

FIRST_RETRY_DELAY = 0.2  # seconds before a move is tried again after a storage error; doubles
MAX_RETRY_DELAY = 5.0

# The next occurrence a decision carries: [due_us, packed job, occurrence, attempts, scheduled_us],
# and the job's pause record [note, by, since_us] if it is paused.
NEXT_DUE, NEXT_JOB, NEXT_OCCURRENCE, NEXT_ATTEMPTS, NEXT_SCHEDULED, NEXT_PAUSED = range(6)

#: Claims an orphaned shard by name for this silo; None if it is not an orphan or another was faster,
#: ``StorageError`` while a claim is in doubt (``Adoption.claim_to_fence``).
ClaimOrphan = Callable[[str], Awaitable["Shard | None"]]
#: Queues the entry a settled move landed (``Loading.queue_entry``).
QueueEntry = Callable[[str, LiveJob], None]


class MoveWaits(Exception):
    """A settle told not to wait would have had to: for a fresh target while the lease has
    lapsed, or for another settle of the same move. Nothing of it was written: still pending."""


class Moves:
    """Carries out the moves decided in shards this silo owns."""

    def __init__(self, store: Store, options: ClusterOptions, shards: ShardTable, runs: RunTable) -> None:
        self._store = store
        self._duration = timedelta_to_us(options.shard_duration)
        self._shards = shards
        self._runs = runs
        self.claim_orphan: ClaimOrphan | None = None  # set once adoption is wired (it settles claims here)
        # (source, job id) -> its settle under way. The shard object, not its name: a source taken
        # back from its log is a new object, whose claim settles its moves while the old one's wait.
        self._settling: dict[tuple[Shard, str], asyncio.Future[None]] = {}
        # Targets proven not to hold a move, kept from a settle that stopped for a wait to the
        # one that carries it on (``settle_all``): see ``settle``.
        self._abandoned: dict[tuple[Shard, str], set[str]] = {}

    async def settle(self, source: Shard, job_id: str, *, wait: bool = True) -> LiveJob | None:
        """Make the move of ``job_id`` decided in ``source`` land exactly once.

        Returns the next occurrence's live entry when it sits in a loaded shard this silo holds
        (the caller queues it), else None: held dormant, or by another silo, or ``source`` was
        lost meanwhile (its new owner settles the move), or another settle of it carried it out
        while this one waited (its caller queues the entry).

        One settle of a move at a time in a silo: a claim of the source settles its moves, and a
        cancel or an outcome reaching the source meanwhile settles the one it needs. The target
        read "does not hold it" is proof only against other silos (its claim fences them): a
        settle of ours whose claim of the target was under way wrote the ADD just after, while
        the other decided the move again into a new shard, so the job lived on in both (found by
        the simulation, seed 9963: a cancel followed it into the first and answered "cancelled").

        ``wait=False``: ``MoveWaits`` rather than wait for another settle of the move or for a
        lapsed lease to be renewed (see ``settle_all``).
        """
        key = (source, job_id)
        while (other := self._settling.get(key)) is not None:
            if not wait:
                raise MoveWaits(f"another settle of {job_id!r} is under way")
            await asyncio.shield(other)
        done = self._settling[key] = asyncio.get_running_loop().create_future()
        # Targets found not to hold the move: never written into after. A decision to go elsewhere
        # that failed may have landed (its answer lost), and then the log says elsewhere while
        # memory still names the old target: going back there would make a second chain.
        abandoned = self._abandoned.pop(key, set())
        try:
            return await self._settle(source, job_id, abandoned, wait)
        except MoveWaits:
            self._abandoned[key] = abandoned  # for the settle that carries it on
            raise
        finally:
            del self._settling[key]
            done.set_result(None)

    async def _settle(self, source: Shard, job_id: str, abandoned: set[str], wait: bool) -> LiveJob | None:
        delay = FIRST_RETRY_DELAY
        while not source.lost and source.state is not None:
            pending = source.state.pending.get(job_id)
            if pending is None:
                return None
            target_base, nxt = pending
            try:
                if target_base not in abandoned:
                    target = await self._fenced_target(target_base, job_id, nxt[NEXT_OCCURRENCE])
                    if isinstance(target, Shard):
                        took, entry = await self._add(target, source, job_id, nxt)
                        if took:
                            self._resolved(source, job_id, target_base)
                            return entry
                    elif target:
                        self._resolved(source, job_id, target_base)
                        return None
                    abandoned.add(target_base)
                await self._retarget(source, job_id, nxt, wait)
            except Fenced:
                continue  # the target was taken meanwhile: look again
            except StorageError as exc:
                if self._runs.closing:
                    return None  # the decision is durable: the next owner of the source settles it
                log.warning("move not settled yet, retrying", extra={"job": job_id, "error": repr(exc)})
                await asyncio.sleep(delay)
                delay = min(2 * delay, MAX_RETRY_DELAY)
        return None

    async def settle_all(self, source: Shard, queue: QueueEntry) -> None:
        """Settle every move pending in ``source`` (just claimed), handing what lands to ``queue``.

        Without waiting for the lease: claims run in the heartbeat's rounds, and in the start's
        before the heartbeat runs, and only the heartbeat renews the lease. A move that needs a
        fresh target while the lease has lapsed (created under a valid lease only:
        ``ShardTable.open_shard``), or that another settle is carrying out (which may wait so),
        is carried out in the background instead. Waited for here, the renewal never came: a
        silo resumed past its lease waited in its start's claims for the heartbeat that had not
        started yet, and never fired again nor heard it had been declared dead (simulator seed
        216088, every kind).
        """
        landed: list[tuple[str, LiveJob]] = []
        later: list[str] = []
        for job_id in list(source.state.pending if source.state is not None else ()):
            try:
                entry = await self.settle(source, job_id, wait=False)
            except MoveWaits:
                later.append(job_id)
                continue
            if entry is not None:
                landed.append((job_id, entry))
        for job_id, entry in landed:
            queue(job_id, entry)
        if later:
            self._runs.spawn(self._settle_later(source, later, queue))

    async def _settle_later(self, source: Shard, job_ids: list[str], queue: QueueEntry) -> None:
        """``settle_all``'s moves that had to wait, carried out waiting as long as it takes."""
        for job_id in job_ids:
            entry = await self.settle(source, job_id)
            if entry is not None:
                queue(job_id, entry)

    @staticmethod
    def _resolved(source: Shard, job_id: str, target_base: str) -> None:
        state = source.state
        if state is not None and state.pending.get(job_id, [None])[0] == target_base:
            del state.pending[job_id]  # durable in the target; the next snapshot leaves it out

    async def _fenced_target(self, base: str, job_id: str, occurrence: int) -> Shard | bool:
        """The target as a shard this silo holds, or whether it holds the move (read, fenced).

        Only the silo that decided a move writes its ADD; a target this silo does not hold was
        claimed from that silo since (which fences its writes), or is claimed now if orphaned.
        A claim in doubt raises (retried as an outage): the target is read only once fenced.
        """
        held = self._shards.get(base)
        if held is not None and not held.lost:
            return held
        if not any(head.base == base for head in await list_logs(self._store, base)):
            return False  # deleted: it never held this move, else the source would have kept it
        if self.claim_orphan is not None:
            claimed = await self.claim_orphan(base)
            if claimed is not None:
                return claimed
        try:
            state = ShardState().replay((await read_log(self._store, base)).records())
        except NotFound:
            return False  # deleted since we listed it: see above
        return state.holds_move(job_id, occurrence)

    async def _add(self, target: Shard, source: Shard, job_id: str, nxt: list[Any]) -> tuple[bool, LiveJob | None]:
        """ADD the next occurrence into ``target`` unless it holds it; (False, None) if it is full."""
        try:
            async with target.gate.shared():
                if target.lost or self._shards.get(target.base) is not target:
                    raise Fenced(f"shard {target.base!r} is no longer held")
                state = target.state
                if state is not None and state.holds_move(job_id, nxt[NEXT_OCCURRENCE]):
                    return True, state.live.get(job_id)
                if state is None and (await self._shards.views.state(target)).holds_move(job_id, nxt[NEXT_OCCURRENCE]):
                    # Dormant, and it holds the move already: a move settled again (its source taken
                    # back from its log, whose decision still names this target) must not add the
                    # occurrence once more, reviving a job cancelled here since.
                    return True, None
                op = add_op(job_id, nxt[NEXT_DUE], nxt[NEXT_JOB], nxt[NEXT_OCCURRENCE], nxt[NEXT_ATTEMPTS],
                            nxt[NEXT_SCHEDULED], source=source.base,
                            paused=nxt[NEXT_PAUSED] if len(nxt) > NEXT_PAUSED else None)
                entries = await target.write([op])
                return True, (entries[0] if entries else None)
        except LogFull:
            self._shards.seal(target)
            return False, None
        except Fenced:
            self._shards.drop(target, "fenced while moving a recurring job")
            raise
        except LogCorrupted:
            await self._shards.taken_back(target)  # retried into the shard taken back, not for good
            raise

    async def _retarget(self, source: Shard, job_id: str, nxt: list[Any], wait: bool) -> None:
        """Decide again, in ``source``: the named target is proven not to hold the move.

        Where ``source``'s own log cannot take it, the source is let go (fenced) or taken back
        from its log (its writer stopped): either way its next holder settles what the log says.
        ``wait=False``: ``MoveWaits`` if a fresh target needs a lease that has lapsed.
        """
        try:
            target = await self._shards.open_shard(window_of(nxt[NEXT_DUE], self._duration),
                                                   lease_wait=None if wait else 0.0)
        except LeaseLapsed:
            raise MoveWaits(f"{job_id!r} needs a fresh target, and the lease has lapsed") from None
        try:
            await source.write([remove_op(job_id, nxt[NEXT_OCCURRENCE] - 1, MOVED, target.base, nxt)])
        except Fenced:
            self._shards.drop(source, "fenced while moving a recurring job")
        except LogCorrupted:
            if not await self._shards.taken_back(source):
                raise

