"""The shards a silo owns: its open shard per window, creating them, and letting them go.

Every new job goes into this silo's own *open* shard for its window, so silos never contend on
a write. A shard is sealed (no new jobs) once adopted or full, forgotten once drained and
deleted, and dropped when a fenced write shows another silo owns it now.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from cluster.model.clock import Clock
from cluster.model.errors import LeaseLapsed, SiloStopping
from cluster.model.options import ClusterOptions
from cluster.model.waiting import wait_bounded
from cluster.model.wire import timedelta_to_us as us
from cluster.runtime.dormant import DormantViews
from cluster.runtime.lease import Lease
from cluster.runtime.logowner import owner_of
from cluster.runtime.membership import Identity
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import RunTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import DUE, OWNER, RELEASED, landed_ids, shard_name
from cluster.runtime.shardmeta import ShardMeta
from storage import Fenced, LogCorrupted, LogFull, LogOptions, StorageError, Store, Unavailable, read_log

log = logging.getLogger("timeshard.silo")


class AddFailed(Exception):
    """Adding jobs failed with ``error``; ``shard`` is the shard the last try wrote into."""

    def __init__(self, error: Exception, shard: Shard) -> None:
        super().__init__(f"adding to {shard.base} failed: {error!r}")
        self.error = error
        self.shard = shard


def is_shards_copy(queued: tuple[int, list[Any]] | None, shard: Shard) -> bool:
    """Whether ``queued`` (what the timer queue holds under a job id: due time and entry) is
    ``shard``'s copy of the job; the queue keeps one entry per id, maybe another shard's."""
    return queued is not None and queued[1][OWNER] is shard


def copy_of(entry: list[Any]) -> str:
    """Which copy of its job a live ``entry`` is, for the timer queue: its shard (any copy of it)."""
    return entry[OWNER].base


class ShardTable:
    """This silo's shards by name, and its open shard per due-time window."""

    def __init__(self, store: Store, options: ClusterOptions, clock: Clock, me: Identity, lease: Lease,
                 queue: JobQueue[list[Any]], runs: RunTable, metrics: SiloMetrics) -> None:
        self._store = store
        self._options = options
        self._clock = clock
        self._me = me
        self._lease = lease
        self._queue = queue
        self._runs = runs
        self._metrics = metrics
        self.log_options = LogOptions(linger=options.group_commit_linger.total_seconds(), rotate_blocks=options.max_blocks)
        self.shards: dict[str, Shard] = {}
        self._open: dict[int, Shard] = {}  # window start -> this incarnation's open shard
        self._opening: dict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self.pending: set[str] = set()  # shards this silo is creating or claiming right now
        self.views = DormantViews(store, clock)  # what held dormant shards' logs say, kept between looks
        self._counter = 0
        # Takes back a held shard whose log writer stopped on a corrupted log; True once it is
        # settled (replaced by a fresh claim, or lost to another silo). Set once adoption is wired.
        self.retake: Callable[[Shard], Awaitable[bool]] | None = None
        # Held shards whose writer the maintenance round could not settle: base -> (monotonic
        # time of its next try, the wait before that try), the wait doubling up to a cap.
        self._unsettled: dict[str, tuple[float, float]] = {}
        self._settling: set[str] = set()  # shards whose writer is being settled in the background
        # Called when a write that makes a shard ours (a create) or lets it go (a release) may or
        # may not have landed: only a listing finds out, so adoption runs a round soon.
        self.unsure: Callable[[], None] = lambda: None

    def __iter__(self) -> Any:
        return iter(list(self.shards.values()))

    def get(self, base: str) -> Shard | None:
        return self.shards.get(base)

    def open_for(self, window: int) -> Shard | None:
        """This silo's open shard for ``window``, if it has one."""
        return self._open.get(window)

    def holds(self, shard: Shard) -> bool:
        """Whether ``shard`` is held by this incarnation: not lost, not released, not of an older one."""
        return not shard.lost and shard.meta.owner == self._me.owner

    async def answers_for(self, shard: Shard, lease: Lease) -> bool:
        """Whether this silo's memory of ``shard``, which it holds, may answer a caller now.

        Under a valid lease no peer can have claimed the shard (``cluster.runtime.lease``), so
        memory is the truth. Past it (the silo was paused, or cut off from the store, and has
        not yet heard that it was declared dead) a peer may own the shard and have changed its
        log since, while memory still shows what was true before: a job paused there since
        would read "not paused", and a resume would leave it paused for good (found by the
        simulation, seed 349). Memory then answers only if the log still names this
        incarnation as its owner, read now; a log that names another owner, or is gone, proves
        the shard lost, and it is dropped as a fenced write drops it.

        Nor does memory answer while an append's answer is lost, or once its writer stopped: a
        resume that raised had landed, taken back from memory only, and a pause that then read
        "already paused" from memory was followed by the log's resume and a start (found by the
        simulation, seed 579). The writer is settled first (the shard taken back from its log if
        the append landed: the caller looks again); ``Unavailable`` while the store cannot say.
        """
        if (shard.writer.doubt_disowned or shard.writer.stopped is not None) and self.holds(shard):
            if not await self._settled(shard):
                raise Unavailable(f"shard {shard.base!r}: an append whose answer was lost is not settled yet")
            if self.shards.get(shard.base) is not shard or not self.holds(shard):
                return False
        if lease.valid and self.holds(shard):
            return True
        owner = await owner_of(self._store, shard.base)
        if self.shards.get(shard.base) is not shard or not self.holds(shard):
            return False  # dropped or replaced while we read: whoever asks looks again
        if owner == self._me.owner:
            return True
        self.drop(shard, f"owned by {owner or 'nobody (its log is gone)'}, found after this silo's lease lapsed")
        return False

    async def write_to_window(self, window: int, ops: list[list[Any]], *, queue: bool = True,
                              owner: str | None = None, lease_wait: float | None = None) -> Shard:
        """Append ADD ops to this silo's open shard for ``window``; queue them if it is loaded.

        ``AddFailed`` if they may not be durable: it names the shard they went into last, which
        may hold them all the same (an append whose answer was lost and whose log could not be
        read back), so the caller knows where to take them back from, even once that shard is
        no longer held here. ``owner``: the incarnation the call began under; ``SiloStopping``
        (nothing of this call durable) rather than write under the next one. ``lease_wait``:
        see ``open_shard``.
        """
        while True:
            shard = await self.open_shard(window, lease_wait=lease_wait)
            if owner is not None and shard.meta.owner != owner:
                # A retry's search takes a dead incarnation's shards as all its earlier try can
                # have written; carried on into a fresh shard of the next incarnation, the call
                # added a copy beside the retry's (simulator seed 2131 with flows).
                raise SiloStopping(f"{owner} was declared dead during this call")
            try:
                if await self._write_into(shard, ops, queue=queue):
                    return shard
            except Exception as exc:  # whatever it was, the caller must know where the ops went
                raise AddFailed(exc, shard) from exc

    async def _write_into(self, shard: Shard, ops: list[list[Any]], *, queue: bool) -> bool:
        """Append ``ops`` to ``shard``: True once durable there, False if they are surely not
        there and belong in a fresh shard; raises ``StorageError`` when that is not known."""
        shard.added_at = self._clock.monotonic()  # a write in doubt counts: a retry looks here too
        try:
            async with shard.gate.shared():
                if shard.lost or self.shards.get(shard.base) is not shard:
                    return False  # drained and deleted (or lost) while we waited: open a fresh one
                started = time.perf_counter()
                entries = await shard.write(ops)
                self._metrics.append_latency.observe(time.perf_counter() - started)
                # Not strict: a dormant shard returns no entries, and nothing is queued then.
                for op, entry in zip(ops, entries if queue else (), strict=False):
                    self._queue.push(op[1], entry[DUE], entry)
            return True
        except LogFull:
            self.seal(shard)  # full while dormant: later adds go to a fresh shard
            return False
        except Fenced:
            self.drop(shard, "fenced while adding jobs")
            # Durable there, its new owner fires them: writing again would fork.
            return await self._landed(shard, ops)
        except LogCorrupted:
            # Not acknowledged (the caller takes back what may have landed, from the shard
            # taken back); the next call writes again instead of failing for good.
            await self.taken_back(shard)
            raise

    async def _landed(self, shard: Shard, ops: list[list[Any]]) -> bool:
        """Whether ``ops`` (one append: all or none) landed in ``shard`` before another silo took it.

        The claim that fenced us replayed every append that landed before its CAS (an append
        after our last read moves the ETag and fails that CAS), so the log now says for good.
        """
        log = await read_log(self._store, shard.base)
        return bool(landed_ids(log.records(), {op[1] for op in ops}))

    async def taken_back(self, shard: Shard) -> bool:
        """Take back ``shard``, whose log writer stopped on a corrupted log; whether that is done.

        Done means the shard object is no longer held: replaced by a fresh claim of the same log
        (its jobs queued again), or lost to another silo. False while the store cannot answer:
        the caller tries again later, the old object still held so no job is left unowned.
        """
        if self.retake is None or self.shards.get(shard.base) is not shard:
            return self.shards.get(shard.base) is not shard
        return await self.retake(shard)

    def settle_writers(self) -> None:
        """The maintenance round's part: take back every held shard whose writer stopped, and
        settle every writer left in doubt, which may stop it (issue 24).

        Without it only a write into the shard does either, and none may come: a take-back that
        failed while the store was down left the shard held with a stopped writer, and a job
        that only its log holds (an in-doubt schedule undone from memory, or one a cancel would
        not queue again from a memory the log contradicts) never ran. A shard that cannot be
        settled yet is tried again after a wait that doubles from one round up to
        ``adoption_interval``; so once the store answers again, each is taken back within
        ``adoption_interval`` plus one round (``staging_interval``). Each runs in the background:
        a take-back carries out its log's moves, which retry until the store answers, and the
        round must go on meanwhile.
        """
        self._unsettled = {base: tries for base, tries in self._unsettled.items() if base in self.shards}
        for shard in self:
            if (shard.writer.stopped is None and not shard.writer.in_doubt) or shard.base in self._settling:
                continue
            if self._clock.monotonic() >= self._unsettled.get(shard.base, (0.0, 0.0))[0]:
                self._settling.add(shard.base)
                self._runs.spawn(self._settle_writer(shard))

    async def _settle_writer(self, shard: Shard) -> None:
        """Settle ``shard``'s writer, or set when it is tried again (see ``settle_writers``)."""
        try:
            settled = await self._settled(shard)
        finally:
            self._settling.discard(shard.base)
        if settled:
            self._unsettled.pop(shard.base, None)
            return
        wait = self._unsettled.get(shard.base, (0.0, 0.0))[1]
        wait = min(self._options.adoption_interval.total_seconds(),
                   max(self._options.staging_interval.total_seconds(), 2 * wait))
        self._unsettled[shard.base] = (self._clock.monotonic() + wait, wait)

    async def _settled(self, shard: Shard) -> bool:
        """Whether ``shard``'s writer is settled now: its doubt resolved, or the shard taken back
        once it stopped (or no longer held); False while the store does not answer."""
        if self.shards.get(shard.base) is not shard:
            return True  # dropped or replaced meanwhile
        if shard.writer.stopped is None:
            try:
                await shard.writer.settle()
                return True
            except (Fenced, LogCorrupted):
                pass  # it stopped on what the doubt hid: taken back below
            except StorageError:
                return False
        return await self.taken_back(shard)

    @contextlib.asynccontextmanager
    async def retaking(self, base: str) -> AsyncIterator[None]:
        """Around an operator's action on shard ``base``: if its writer stops for good
        (``LogCorrupted``), take the shard back from its log before the error goes on, so that
        the caller's next try finds the job where the log says it is."""
        try:
            yield
        except LogCorrupted:
            shard = self.shards.get(base)
            if shard is not None:
                await self.taken_back(shard)
            raise

    def replace(self, old: Shard, new: Shard) -> bool:
        """Hold ``new``, a fresh claim of ``old``'s log by this silo, in ``old``'s place.

        ``old`` is dropped (its queued jobs forgotten; runs of it write into a fenced log and
        are discarded); ``new`` stays the open shard of the windows ``old`` was open for.
        """
        windows = [window for window, open_shard in self._open.items() if open_shard is old]
        self.drop(old, "its log no longer holds what its writer wrote: taken back")
        if not self.add(new):
            return False
        for window in windows:
            self._open[window] = new
        return True

    async def open_shard(self, window: int, *, lease_wait: float | None = None) -> Shard:
        """This silo's open shard for ``window``, created if it has none.

        Created under a valid lease only, and held only once the lease holds after the create
        returned. Past its lease a silo may be declared dead and its shards searched and claimed
        by a peer taking over its work; a shard whose create lands after that search escapes
        it, and what the silo adds there runs beside the taker's copy (simulator seed 1489 with
        flows: a step ran twice). A lease valid after the create returned proves the create
        landed before anyone could declare this silo dead: either the lease the create began
        under had not ended, or a heartbeat renewed it since, which no peer had marked dead.
        ``lease_wait``: how long (s) a caller waits for that, all told; then ``LeaseLapsed``,
        nothing added (None: for as long as it takes, as firing does).
        """
        shard = self._open.get(window)
        if shard is not None:
            return shard
        deadline = None if lease_wait is None else asyncio.get_running_loop().time() + lease_wait
        await self._me.wait_joined()  # a shard created meanwhile would carry the dead incarnation
        await self._lease_holds(deadline)
        async with self._opening[window]:
            shard = self._open.get(window)
            if shard is not None:
                return shard
            self._counter += 1
            base = shard_name(window, f"{self._me.silo_id}.{self._me.incarnation}", self._counter)
            meta = ShardMeta(self._me.owner, window, window + us(self._options.shard_duration))
            self.pending.add(base)
            try:
                shard = await Shard.create(self._store, base, meta, self.log_options)
                await self._lease_holds(deadline)  # still pending: our own adoption keeps off it
            except (StorageError, LeaseLapsed):
                # Landed all the same? It is ours then, empty, and our adoption takes it (or,
                # once we are declared dead, a peer does).
                self.unsure()
                raise
            finally:
                self.pending.discard(base)
            if window - us(self._options.lookahead) > self._clock.now_us():
                shard.state = None  # beyond the lookahead: dormant, nothing held per job
            if self.add(shard):
                self._open[window] = shard
            return shard  # if refused, the caller finds it unheld and opens a fresh one

    async def _lease_holds(self, deadline: float | None) -> None:
        """Return once the lease holds; ``LeaseLapsed`` if it does not by ``deadline`` (loop time)."""
        if self._lease.valid:
            return
        if deadline is None:
            await self._lease.wait_valid()
            return
        try:
            await wait_bounded(self._lease.wait_valid(), max(0.0, deadline - asyncio.get_running_loop().time()))
        except TimeoutError:
            raise LeaseLapsed(f"{self._me.owner}'s lease lapsed and was not renewed in time to create a shard") from None

    def add(self, shard: Shard) -> bool:
        """Hold ``shard`` (just created or claimed); False if it carries an older incarnation.

        A create or claim that was in flight while this silo rejoined finishes with the dead
        incarnation's owner tag: peers rightly take such a shard as an orphan, so holding it
        too would make two owners. It is left to them, and whoever asked opens a fresh one.
        That holds from the moment the silo learns it was declared dead, before the join that
        gives it a new tag has landed.
        """
        if self._me.rejoining or shard.meta.owner != self._me.owner:
            shard.lost = True
            log.warning("shard of an older incarnation not held", extra={"shard": shard.base, "owner": shard.meta.owner})
            return False
        shard.held_since = self._clock.monotonic()
        self.shards[shard.base] = shard
        self._metrics.shards_owned.set(len(self.shards))
        return True

    def seal(self, shard: Shard) -> None:
        """No new jobs go into ``shard`` (full, or its window's open shard changes)."""
        for window, open_shard in list(self._open.items()):
            if open_shard is shard:
                del self._open[window]

    def forget(self, shard: Shard) -> None:
        """Stop holding ``shard`` (deleted, or lost).

        Only that very copy: a fresh claim of its log may hold the name by now. Forgetting by
        name, a drained shard's delete that lost a race to its take-back from the log unheld
        the fresh copy, which went on firing unlisted: adoption took the log again, the copy it
        made was handed over, and the unlisted one still fired (found by the simulation, seed
        57302: two owners).
        """
        if self.shards.get(shard.base) is shard:
            del self.shards[shard.base]
        self.seal(shard)
        self._metrics.shards_owned.set(len(self.shards))

    def is_open(self, shard: Shard) -> bool:
        """Whether new jobs for some window go into ``shard``."""
        return any(open_shard is shard for open_shard in self._open.values())

    def drop(self, shard: Shard, why: str) -> None:
        """Another silo owns ``shard`` now (fencing): fire nothing more from it."""
        if shard.lost:
            return
        self.let_go(shard)
        log.warning("shard lost to another silo", extra={"shard": shard.base, "why": why})

    def let_go(self, shard: Shard) -> None:
        """Hold ``shard`` no more (released, or lost): fire nothing more from it."""
        if shard.lost:
            return
        shard.lost = True
        self.forget(shard)
        self._queue.forget(shard, lambda entry: entry[OWNER] is shard)
        for job_id, run in list(self._runs.staged.items()):
            if run.shard is shard:
                del self._runs.staged[job_id]

    def unqueue(self, shard: Shard, job_id: str) -> tuple[int, list[Any]] | None:
        """Take ``shard``'s copy of ``job_id`` off the timer queue: its due time and entry, or
        None if that copy is not queued.

        The queue keeps one entry per id, and it may be another shard's copy of the id (a flow
        step taken again puts its fixed id into a second shard of this silo: see
        ``RunTable.of_copy``), this one set aside behind it. That copy is left to fire: taken off
        by a pause or cancel of this one, it stayed live in its log, queued nowhere, and neither
        fired nor went.
        """
        return self._queue.take(job_id, lambda entry: entry[OWNER] is shard)

    def drop_all(self, why: str) -> None:
        for shard in list(self.shards.values()):
            self.drop(shard, why)

    def update_loaded_gauge(self) -> None:
        self._metrics.shards_loaded.set(sum(1 for s in self.shards.values() if s.loaded))

    async def release_all(self, which: Callable[[Shard], bool] = lambda _: True) -> int:
        """Clear the owner of every shard (a graceful stop), or of those ``which`` picks, so peers
        take them at once; how many were released."""
        released = 0
        for shard in [shard for shard in self.shards.values() if which(shard)]:
            with contextlib.suppress(StorageError):
                await shard.set_meta(shard.meta.with_owner(RELEASED))
                released += 1
        return released
