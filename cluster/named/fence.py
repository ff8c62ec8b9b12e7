"""The generation fence of named jobs, held without a registry write per attempt.

The promise: once ``put`` (overwrite) or ``delete`` of a name has returned, no attempt of an
older generation of it starts, nor of a stray copy: the job of a ``put`` that died before it
pointed the name at it, a schedule call that landed late, a second copy of a job in another shard.

**How.** A silo starts an attempt of a named job only once it has *cleared* the job: read the
name's registry entry and seen it point at that job id, and the attempt runs the copy in the
shard the entry names (a later occurrence, which the move protocol carried on from that copy,
clears by its id). The read is made off the firing path — when the job lands here
(``jobs_landed``; one landing in a window beyond the lookahead waits for its shard's load) or
its shard is loaded (``shard_loaded``) — and remembered; an attempt due before it is done waits
for it. A clearance holds while its job stays in this silo's memory of the shard, because:

1. the entry names every job it ever pointed at until that job's cancel is confirmed: ``put``
   moves the job it replaces into ``retire`` by the same compare-and-swap that points the name
   at the new one, and ``retire`` is carried from each entry into the next;
2. ``put`` and ``delete`` cancel the current job and every retired one through its shard's
   owner, following moves, before they return; and a job cancelled there ("cancelled", or
   "absent": done) does not start again (``Client.try_cancel_job``), and its owner forgets
   its clearance (``job_cancelled``);
3. a silo that loads a shard from its log (claimed, taken back, a dormant one read) judges its
   jobs afresh (``recheck``): the owner a put cancelled through may have been another silo, and
   the cancel's REMOVE may have been lost since to a damaged frame, which the README lets
   damage cost (the job is live in the log again; simulator seed 206727: a clearance this silo
   remembered from before it handed the shard over started the job, 6 s after the put returned).

Take a clearance read of entry version v that saw job J in shard X, and a ``put`` or ``delete``
P whose compare-and-swap wrote version w. If v < w, J was current at v, so at w it is named by
P's entry (1) or its cancel was confirmed already; P cancels it at X's owner before it returns
(2), after which no copy of J from X starts there; a silo loading X later reads the entry again
(3), at w or later, which refuses J. If v > w, J was put after P: no older generation.
A job the entry never pointed at, or a copy outside the shard it named, is never cleared, so it
never starts, before a put or after. (A copy of J outside X that reaches a later occurrence
without running would clear by id; only a second copy written by a retried schedule call could,
which ``cluster.runtime.scheduling`` rules out.)

An uncleared attempt is *deferred* (not started; asked again later) while its own ``put`` may
still point the name at it: the entry's generation is below the job's, or a first generation's
name does not exist yet. It is *refused* — its occurrence removed — once the entry shows a
newer generation or another job of the same one, or is gone for a later generation (the ``put``
that made it compares against an entry that no longer exists).

With names kept in registry buckets (``named_registry="buckets"``, the default) the read
is a question to the bucket's owner (``Clearance(ask=...)``, answered by
``cluster.named.owned``), batched per owner and tick; "the entry" above reads as "the bucket's
durable state", which the owner alone writes and answers from memory: a job is cleared iff it
names the job, and refused otherwise, since the owner knows every put still under way (it waits
for one of that name). Unanswered (the owner changing hands, or lost), the attempt is deferred.
A bucket changing hands keeps this true. Taken over from a dead owner, its log is what the next
owner answers from; handed over to a silo below its share (``Buckets.hand_over``), its owner
answers nothing while the hand-over waits for every put and delete of the bucket under way to
end and every record it accepted to be durable, then releases it behind them on the log's
writer and refuses every write after (nothing applied): when the next owner claims it, no put
of it is under way anywhere, and its memory holds every entry that was answered.

Triggered runs (``trigger``) are not named by the entry: each of their attempts still checks it
by a compare-and-swap at its start (``NamedJobHooks.admit``); they are rare and out of band.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable

from cluster.named.registry import Entry, read_entry
from storage import Store

__all__ = ["Ask", "Clearance", "judge"]

log = logging.getLogger("timeshard.named")

READS_AT_ONCE = 32  # registry reads in flight per silo for clearances
PREFETCH_BATCH = 256  # jobs judged per round of the prefetcher
FIRST_POLL_S = 0.005  # a put points its name at the job a moment after the job lands
MAX_POLL_S = 0.5
PREFETCH_FOR_S = 10.0  # then the job is judged again when it comes due
ADMIT_WAIT_S = 2.0  # an attempt waits this long for its put, then is deferred (asked again later)
CLEARED_LIMIT = 1_000_000  # remembered clearances (~100 B each); forgotten ones are read again


#: Asks the owner of a name's registry bucket about a job: ``(key, job id)`` -> the shard its
#: entry names (cleared), False (refused) or None (no answer now: deferred).
Ask = Callable[[str, str], Awaitable[str | bool | None]]


def judge(entry: Entry | None, job_id: str, generation: int, replaces: str | None = None) -> str | bool | None:
    """What ``entry`` says of job ``job_id`` of ``generation``: the shard it names (cleared),
    False (superseded: refuse) or None (not yet: its put may still point the name at it).
    ``replaces``: the job the entry named when that put read it (None: not known)."""
    if entry is not None and entry.job_id == job_id:
        return entry.shard
    if entry is None:
        # A first generation's put creates the entry after its job landed; a later one's put
        # compares against the entry it read, which is gone: it can never point at this job.
        return None if generation <= 1 else False
    if replaces is not None and entry.job_id != replaces:
        # Its put compares against an entry naming ``replaces`` and tries again with this job
        # only while the entry still names it; a name never names a job again once it stopped
        # (each try makes a fresh job). A lower generation here is a name deleted and put
        # anew, not the put still under way: deferred, it was asked forever (seed 71301).
        return False
    return None if entry.generation < generation else False


class Clearance:
    """Which named jobs this silo may start, found by registry reads made ahead of their due time."""

    def __init__(self, store: Store, ask: Ask | None = None) -> None:
        self._store = store
        self._ask = ask  # None: read the name's registry entry
        self._cleared: dict[str, str] = {}  # job id -> the shard the entry named
        self._reading: dict[str, object] = {}  # job id -> the latest read of its entry under way
        self._landed: dict[str, float] = {}  # job id -> when it landed here, while its put may still be under way
        self._waiting: list[tuple[float, int, str, str, int, float, float]] = []  # heap, see _prefetching
        self._seq = itertools.count()
        self._prefetcher: asyncio.Task[None] | None = None
        self._reads: asyncio.Semaphore | None = None

    def shard_of(self, job_id: str) -> str | None:
        """The shard the entry named when it was seen pointing at ``job_id``; None if not cleared (yet)."""
        return self._cleared.get(job_id)

    def forget(self, job_id: str) -> None:
        """``job_id`` ended or was cancelled: nothing of it starts again here."""
        self._cleared.pop(job_id, None)
        self._landed.pop(job_id, None)
        self._reading.pop(job_id, None)  # a read under way may predate the cancel: not remembered

    def recheck(self, key: str, job_id: str, generation: int) -> None:
        """Judge ``job_id`` afresh: its shard was just loaded from its log here, and a clearance
        remembered from before may name a job a put cancelled meanwhile (module docstring, 3)."""
        self._cleared.pop(job_id, None)
        self._reading.pop(job_id, None)
        self.prefetch(key, job_id, generation)

    def prefetch(self, key: str, job_id: str, generation: int, *, landed: bool = False) -> None:
        """Clear ``job_id`` in the background, polling until its put has pointed the name at it;
        ``landed``: the job was just added here by a schedule call (its put is under way)."""
        if job_id in self._cleared:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        if landed:
            if len(self._landed) >= CLEARED_LIMIT:
                self._landed.clear()
            self._landed[job_id] = now
        heapq.heappush(self._waiting, (now + FIRST_POLL_S, next(self._seq), key, job_id, generation, FIRST_POLL_S,
                                       now + PREFETCH_FOR_S))
        if self._prefetcher is None or self._prefetcher.done():
            self._prefetcher = loop.create_task(self._prefetching())

    async def verdict(self, key: str, job_id: str, generation: int, replaces: str | None = None) -> str | bool | None:
        """Judge ``job_id`` now (an attempt is due). One that landed here in the last
        ``ADMIT_WAIT_S`` waits that long for its put to point the name at it; any other is
        judged by one read (an attempt waiting would hold up the rest of its batch)."""
        shard = self._cleared.get(job_id)
        if shard is not None:
            return shard
        loop = asyncio.get_running_loop()
        give_up, delay = self._landed.get(job_id, 0.0) + ADMIT_WAIT_S, FIRST_POLL_S
        while True:
            verdict = await self._judge(key, job_id, generation, replaces)
            if verdict is not None or loop.time() + delay > give_up:
                return verdict
            await asyncio.sleep(delay)
            delay = min(2 * delay, MAX_POLL_S)

    async def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.cancel()
        self._waiting.clear()

    async def _judge(self, key: str, job_id: str, generation: int, replaces: str | None = None) -> str | bool | None:
        shard = self._cleared.get(job_id)
        if shard is not None:
            return shard
        token = self._reading[job_id] = object()
        try:
            if self._ask is not None:
                verdict = await self._ask(key, job_id)
            else:
                if self._reads is None:
                    self._reads = asyncio.Semaphore(READS_AT_ONCE)
                async with self._reads:
                    entry = await read_entry(self._store, key)
                verdict = judge(entry, job_id, generation, replaces)
        finally:
            current = self._reading.get(job_id) is token
            if current:
                del self._reading[job_id]
        if verdict is not None:
            self._landed.pop(job_id, None)
        if isinstance(verdict, str) and current:
            if len(self._cleared) >= CLEARED_LIMIT:
                self._cleared.clear()  # read again when due: costs reads, never safety
            self._cleared[job_id] = verdict
        return verdict

    async def _prefetching(self) -> None:
        """Judge waiting jobs as their time comes, a batch at a time; poll again the ones not pointed at yet."""
        loop = asyncio.get_running_loop()
        while self._waiting:
            wait = self._waiting[0][0] - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            now = loop.time()
            batch: list[tuple[float, int, str, str, int, float, float]] = []
            # Asking owners, those due within a first poll's time too: the jobs of one landing,
            # queued one by one as they were decoded, go in one batch (one call per owner).
            # (Reading entries, as before: the simulator's seeds keep their worlds.)
            until = now + (FIRST_POLL_S if self._ask is not None else 0.0)
            while self._waiting and self._waiting[0][0] <= until and len(batch) < PREFETCH_BATCH:
                batch.append(heapq.heappop(self._waiting))
            verdicts = await asyncio.gather(*(self._judge(key, job_id, gen) for _, _, key, job_id, gen, _, _ in batch),
                                            return_exceptions=True)
            for (_, _, key, job_id, gen, delay, until), verdict in zip(batch, verdicts, strict=True):
                if isinstance(verdict, BaseException):
                    log.debug("clearance read failed; judged again when due", extra={"job": job_id,
                                                                                     "error": repr(verdict)})
                elif verdict is None and loop.time() + delay < until:
                    delay = min(2 * delay, MAX_POLL_S)
                    heapq.heappush(self._waiting, (loop.time() + delay, next(self._seq), key, job_id, gen, delay,
                                                   until))
