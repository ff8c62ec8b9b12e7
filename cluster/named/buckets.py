"""The registry buckets a silo owns, and puts decided by their owner (the default, issue 25 point 5).

Ownership is the shard's own (``cluster.runtime.logowner``): a bucket log names its owner in its
metadata; a silo creates a missing bucket or claims one whose owner is proven gone (released, or
ended with its lease run out), by compare-and-swap with the fenced writer the claim returns;
memory answers while the silo's lease holds, and past it only if the log still names this
incarnation. So a bucket changes hands within the bound a shard does.

Buckets rebalance as shards do (``cluster.runtime.logowner``'s policy): a silo holding more
than its fair share hands the excess over (``Buckets.hand_over``), one settled bucket at a
time, and asks the peers below their share to take it at once. A hand-over is clean: new calls
wait for its end (then go to the next owner); what the owner accepted before — puts and
deletes under way, status and retire records, appends in flight — lands in the log first; the
release is queued behind them on the log's writer, and a write tried after it is refused,
nothing applied (``BucketReleased``: the caller sends it to the next owner). A verdict is
answered from memory that is the log's durable state, so the generation fence holds across
the hand-over as across a takeover (``cluster.named.fence``).

A put reaches its bucket's owner, which decides from memory (taken: ``AlreadyExists``; else the
next generation), makes the round's jobs durable in its own shards, then appends the round's
``PUT`` records in one append: a name never points at a job that is not durable, and no entry
is read. The rest of what an owner answers (fence verdicts, deletes, status records, reads) is
``cluster.named.owned``; the callers' side is ``cluster.named.routed``. A store written with
names in per-name entries keeps them: a bucket's first owner takes in those that hash to it
before it answers anything (``HeldBucket.import_entries``). The simulator works them in a share
of its seeds (``tests.sim.buckets``).
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from cluster.model.errors import AlreadyExists, PutInDoubt
from cluster.model.jobs import ScheduledJob, new_job_id
from cluster.model.wire import datetime_to_us, pack, unpack
from cluster.named.bucket import PUT, BucketMeta, BucketState, bucket_base, bucket_of
from cluster.named.putwire import NotOwner, PutOutcome, WireOutcome, made_to_wire
from cluster.named.registry import REGISTRY_PREFIX, REPLACES_MARK, Entry
from cluster.named.writes import PutRequest
from cluster.runtime.lease import Lease
from cluster.runtime.logowner import (
    RELEASED,
    Owner,
    ReleasedSince,
    alive_count,
    fair_share,
    held_per_live_silo,
    owner_of,
    read_to_claim,
    release,
    settled_before,
)
from cluster.runtime.membership import Member
from storage import AlreadyExists as LogExists
from storage import Fenced, LogOptions, LogWriter, NotFound, StorageError, Store, gathered, list_logs

__all__ = ["BucketReleased", "Buckets", "merged", "repeated", "HeldBucket", "Schedule", "resent"]

log = logging.getLogger("timeshard.silo")

IMPORT_CHUNK = 500  # old entries a record append carries when a bucket takes them in
#: How long a hand-over waits for the puts and appends its bucket accepted to end (a schedule
#: call and an append: milliseconds); then the bucket is kept and handed over at a later round.
#: Short, as every call to the bucket waits meanwhile.
HAND_OVER_WAIT_S = 2.0
POLL_S = 0.01  # between looks at whether they ended

#: Makes ``(id, due_us, packed job)`` items (as ``Silo.schedule`` takes them) durable in the
#: owner's own shards; returns each one's shard, in order.
Schedule = Callable[[Sequence[tuple[str, int, bytes]]], Awaitable[list[str]]]
#: A put decided by its owner: its index in the call, its bucket, its new generation's job,
#: the entry it replaces, and that job packed (``ScheduledJob.to_wire``).
_Decided = tuple[int, "HeldBucket", ScheduledJob, Entry | None, bytes]


class HeldBucket:
    """One registry bucket as its owner holds it: the fenced writer and the entries."""

    def __init__(self, number: int, meta: BucketMeta, state: BucketState) -> None:
        self.number = number
        self.base = bucket_base(number)
        self.meta = meta
        self.state = state
        self.writer: LogWriter | None = None
        self.lost = False  # fenced: another silo owns it now
        self.busy: set[str] = set()  # keys in a put now: one put per name at a time
        self.settled = asyncio.Condition()  # notified when puts leave ``busy``
        self.held_since = float("-inf")  # when (monotonic) this silo took it: settled ones move (``hand_over``)
        # A hand-over under way: new calls wait for its end (``Buckets.answering``).
        self.leaving: asyncio.Future[None] | None = None
        self.closing = False  # its release is queued on the writer: no write may follow it

    @classmethod
    async def create(cls, store: Store, number: int, owner: str, options: LogOptions) -> HeldBucket:
        """A new, empty bucket owned by ``owner``; ``AlreadyExists`` (storage's) if another silo made it."""
        bucket = cls(number, BucketMeta(owner), BucketState())
        bucket.writer = await LogWriter.create(store, bucket.base, bucket.meta.to_metadata(),
                                               snapshot=bucket.state.snapshot, options=options)
        return bucket

    @classmethod
    async def claim(cls, store: Store, number: int, expected_owner: str, owner: str,
                    options: LogOptions) -> HeldBucket:
        """Take bucket ``number`` over from ``expected_owner`` by CAS and replay it; ``Fenced`` if beaten."""
        base = bucket_base(number)
        read = await read_to_claim(store, base, expected_owner)
        meta = BucketMeta.from_metadata(read.metadata).with_owner(owner)
        bucket = cls(number, meta, BucketState().replay_log(read.decoded, base))
        bucket.writer = await LogWriter.claim(store, read, meta.to_metadata(), snapshot=bucket.state.snapshot,
                                              options=options)
        return bucket

    async def import_entries(self, entries: Sequence[tuple[str, dict[str, str]]], count: int) -> None:
        """Take in the names of the per-name layout (``named_registry="entries"``) that hash to
        this bucket, before it answers anything; then record it done in the log's metadata. A
        name taken in already (an import cut short, replayed) is left as the bucket has it."""
        assert self.writer is not None
        mine = [[PUT, key, metadata] for key, metadata in entries
                if bucket_of(key, count) == self.number and key not in self.state.entries]
        for first in range(0, len(mine), IMPORT_CHUNK):
            await self.write(mine[first:first + IMPORT_CHUNK])
        self.meta = replace(self.meta, imported=True)
        await self.writer.set_metadata(self.meta.to_metadata())
        if mine:
            log.info("registry bucket imported the per-name entries", extra={"bucket": self.base, "names": len(mine)})

    async def free(self, key: str) -> None:
        """Return once no put of ``key`` is in progress on this bucket."""
        async with self.settled:
            while key in self.busy:
                await self.settled.wait()

    def write(self, records: list[list[Any]], made: Sequence[Entry] | None = None) -> Awaitable[None]:
        """Apply ``records`` to memory now and queue their append at once (so the log holds
        records in the order memory applied them); the awaitable ends once they are durable,
        and takes them back from memory if the append fails. ``made``: for ``PUT`` records
        only, each one's entry as replay reads it back (``BucketState.apply_all``)."""
        assert self.writer is not None
        if self.closing:
            # Queued after the release, it would land in a log that names no owner, or fail
            # fenced once a peer took it: refused whole, nothing applied (``BucketReleased``).
            refused: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            refused.set_exception(BucketReleased(self.base))
            return refused
        done = self.state.apply_all(records, made)
        keys = self.state.hold(done)
        appending = asyncio.ensure_future(self.writer.append_many(records))
        return asyncio.ensure_future(self._landed(appending, done, keys))  # settled even if its caller is gone

    async def _landed(self, appending: Awaitable[None], done: list[tuple[list[Any], Entry | None, Entry | None]],
                      keys: list[str]) -> None:
        assert self.writer is not None
        try:
            await appending
        except Exception:
            self.state.undo(done)
            self.state.settle(keys, done, landed=False)
            self.writer.disown_doubt()  # should it land after all, the writer stops: taken back from the log
            raise
        except BaseException:
            self.state.settle(keys, done, landed=False)
            raise
        self.state.settle(keys, done, landed=True)


class Buckets:
    """The registry buckets this silo owns: taking missing and orphaned ones, answering from memory."""

    def __init__(self, store: Store, owner: Owner, lease: Lease, count: int, schedule: Schedule,
                 options: LogOptions | None = None, interval_s: float = 2.0,
                 notify: Callable[[list[str]], None] | None = None) -> None:
        self._store = store
        self._owner = owner
        self._lease = lease
        self.count = count  # fixed per store: every client and silo hashes names among this many
        self._schedule = schedule
        self._options = options or LogOptions()
        self.held: dict[int, HeldBucket] = {}
        self._retaking: asyncio.Task[None] | None = None
        self._interval_s = interval_s  # the adoption interval: settling and waiting, as shards
        self._notify = notify  # asks peers to take buckets now (``named_take``), without waiting
        self._taking = asyncio.Lock()  # one round at a time: two would claim one bucket twice
        self._released = ReleasedSince()
        self.excess = 0  # buckets held beyond the fair share at the last round (``hand_over``)
        self.below_share: list[str] = []  # live peers below their share at the last round

    async def take(self, limit: int | None = None) -> int:
        """One round: create the buckets missing from the store and claim orphans, up to
        ``limit`` held (None: this silo's fair share among the live); returns how many it took.
        A bucket a peer released to hand it over goes to silos below their share; one at its
        share takes it only once it waited an adoption interval unclaimed (``ReleasedSince``)."""
        async with self._taking:
            return await self._take(limit)

    async def _take(self, limit: int | None) -> int:
        me = self._owner.me.owner  # who judges: a rejoin during the round voids its judgments
        for stale in [b for b in self.held.values() if b.meta.owner != me]:
            # Held under an earlier incarnation of this silo (declared dead, joined again): its
            # log is an orphan peers may take, and this incarnation claims it like any other;
            # kept, it filled the fair share, and a bucket nobody counted as free was never
            # taken (simulator seed 9, ``default,+buckets``).
            self.drop(stale, f"held under {stale.meta.owner}, an earlier incarnation than {me}")
        members = await self._owner.read_members()
        heads = {head.base: head for head in await list_logs(self._store, "registry/")}
        members = await self._owner.members_knowing([head.metadata for head in heads.values()], members)
        fair = fair_share_of(self.count, members)
        limit = fair if limit is None else limit
        now = self._owner.clock.monotonic()
        waited = self._released.waited([base for base, head in heads.items()
                                        if head.metadata.get("owner", RELEASED) == RELEASED], now, self._interval_s)
        old_entries: list[tuple[str, dict[str, str]]] | None = None  # listed once a round, if a bucket needs them
        took = 0
        for number in range(self.count):
            head = heads.get(bucket_base(number))
            # One whose log names this very incarnation is taken whatever the share: no peer
            # takes a live owner's bucket (simulator seed 525, ``default,+buckets``).
            if number in self.held or (len(self.held) >= limit and not (head and self._owner.mine(head.metadata))
                                       and not (head and head.base in waited)):
                continue
            try:
                if head is None:
                    bucket = await HeldBucket.create(self._store, number, me, self._options)
                elif self._owner.claimable(head.metadata, members):
                    bucket = await HeldBucket.claim(self._store, number, head.metadata.get("owner", RELEASED), me,
                                                    self._options)
                else:
                    continue
            except (Fenced, NotFound, LogExists):
                continue  # another silo was faster
            if not bucket.meta.imported:
                if old_entries is None:
                    old_entries = await entries_of_old_layout(self._store)
                try:
                    await bucket.import_entries(old_entries, self.count)
                except StorageError as exc:  # held by no one in memory: taken again from its log next round
                    log.warning("registry bucket not imported yet", extra={"bucket": bucket.base, "error": repr(exc)})
                    continue
            if self._owner.me.rejoining or self._owner.me.owner != me:
                # Made under an incarnation declared dead meanwhile: peers take it as an orphan,
                # so holding it too would make two owners (as ``ShardTable.add`` refuses a shard).
                bucket.lost = True
                break
            bucket.held_since = self._owner.clock.monotonic()
            self.held[number] = bucket
            took += 1
            log.info("registry bucket taken", extra={"bucket": bucket.base, "entries": len(bucket.state.entries)})
        self._measure_shares(heads, members, fair)
        return took

    def _measure_shares(self, heads: Mapping[str, Any], members: Mapping[str, Member], fair: int) -> None:
        """Note how many buckets this silo holds beyond ``fair`` and which live peers hold fewer
        than ``fair`` (as the round's listing shows them)."""
        held, _ = held_per_live_silo((head.metadata.get("owner", RELEASED) for head in heads.values()), members)
        me = self._owner.me.silo_id
        self.excess = max(0, len(self.held) - fair)
        self.below_share = sorted(silo for silo, count in held.items() if silo != me and count < fair)

    async def hand_over(self) -> int:
        """Hand the buckets held beyond the fair share (``excess``, at the last round) over to
        peers below theirs, one at a time, settled ones first (held ``SETTLE_ROUNDS`` intervals,
        so a bucket does not bounce), fewest names first (the cheapest for the next owner to
        replay); then ask those peers to take them at once. How many were released. One call at
        a time: ``NamedJobHooks`` runs it as its one hand-over task."""
        if self.excess <= 0 or not self.below_share:
            return 0
        settled = settled_before(self._owner.clock.monotonic(), self._interval_s)
        movable = sorted((b for b in self.held.values() if b.held_since <= settled and not b.lost
                          and b.leaving is None), key=lambda b: (len(b.state.entries), b.number))
        released = 0
        for bucket in movable[:self.excess]:
            released += await self.release(bucket, "handed over to a silo below its fair share")
        if released:
            self.excess -= released
            if self._notify is not None:
                self._notify(self.below_share)
        return released

    def bucket_for(self, key: str) -> int:
        return bucket_of(key, self.count)

    def drop(self, bucket: HeldBucket, why: str, *, retake: bool = False) -> None:
        """Answer nothing more from ``bucket``: another silo owns it now (fencing), or (``retake``)
        an append to it failed, and it is claimed again from its log at once, so that memory is
        what the log holds before it answers again (``take``: a log naming this incarnation is its own)."""
        if self.held.get(bucket.number) is bucket:
            del self.held[bucket.number]
        if not bucket.lost:
            bucket.lost = True
            log.warning("registry bucket dropped", extra={"bucket": bucket.base, "why": why})
        if retake and (self._retaking is None or self._retaking.done()):
            self._retaking = asyncio.get_running_loop().create_task(self._retake())

    async def _retake(self) -> None:
        try:
            await self.take()
        except Exception as exc:  # the next maintenance round takes it
            log.warning("registry bucket not taken again yet", extra={"error": repr(exc)})

    async def answering(self, number: int) -> HeldBucket | None:
        """Bucket ``number`` if this silo's memory of it may answer a caller now (as
        ``ShardTable.answers_for`` decides for a shard); None if it is not ours."""
        bucket = self.held.get(number)
        if bucket is None or bucket.lost:
            return None
        if bucket.leaving is not None:
            # Being handed over: what it accepted lands first, then it is released or kept.
            await asyncio.shield(bucket.leaving)
            return await self.answering(number)
        if self._lease.valid and bucket.meta.owner == self._owner.me.owner:
            return bucket
        owner = await owner_of(self._store, bucket.base)
        if self.held.get(number) is not bucket:
            return None
        if owner == self._owner.me.owner:
            return bucket
        self.drop(bucket, f"owned by {owner or 'nobody (its log is gone)'}, found after this silo's lease lapsed")
        return None

    async def settled(self, keys: Sequence[str]) -> dict[int, HeldBucket | None]:
        """The buckets of ``keys`` (None: not answered for here) once no put or delete of any of
        ``keys`` is in progress. Returns right after a pass that found none busy, with no await
        since: the caller marks its own keys busy before its next await. Waiting while holding
        some names (each in turn) deadlocked two calls naming the same two in opposite orders."""
        while True:
            answering = {number: await self.answering(number) for number in {self.bucket_for(k) for k in keys}}
            # One whose hand-over began while another was awaited: asked again, which waits for it.
            waited = any(b is not None and b.leaving is not None for b in answering.values())
            for key in keys:
                bucket = answering[self.bucket_for(key)]
                if bucket is not None and key in bucket.busy:
                    await bucket.free(key)
                    waited = True
            if not waited:
                return answering

    async def release_all(self) -> int:
        """Name no owner on every bucket held (a graceful stop), so peers take them at once."""
        released = 0
        for bucket in list(self.held.values()):
            released += await self.release(bucket, "released", retake=False)
        return released

    async def release(self, bucket: HeldBucket, why: str, *, retake: bool = True) -> bool:
        """Let ``bucket`` go cleanly: new calls wait (``answering``); the puts, deletes and
        appends it accepted end, durable or answered (up to ``HAND_OVER_WAIT_S``, else it is
        kept); then its owner is set to ``RELEASED`` behind them on the log's writer, and every
        write tried after that is refused (``BucketReleased``). Whether it was released.
        ``retake``: a release the store failed is taken back at once if it did not land (not
        by a silo stopping: peers take it once its lease ran out)."""
        if bucket.leaving is not None or bucket.lost:
            return False
        bucket.leaving = asyncio.get_running_loop().create_future()
        released = False
        try:
            deadline = self._owner.clock.monotonic() + HAND_OVER_WAIT_S
            while bucket.busy or bucket.state.inflight:
                if bucket.lost or self._owner.clock.monotonic() > deadline:
                    return False
                await asyncio.sleep(POLL_S)
            if bucket.lost or self.held.get(bucket.number) is not bucket or bucket.meta.owner != self._owner.me.owner:
                return False
            assert bucket.writer is not None
            bucket.closing = True  # from here on, nothing is appended after the release
            landed = await release(bucket.writer.set_metadata(bucket.meta.with_owner(RELEASED).to_metadata()),
                                   bucket.base)
            if landed is False:
                self.drop(bucket, "fenced while releasing it")
                return False
            released = True
            if landed is None:
                # Let go either way; if it did not land, the log still names this silo, which
                # takes it back at once (``take``: a log naming this incarnation is its own).
                self.drop(bucket, "its release may not have landed", retake=retake)
            else:
                self._forget(bucket)
            log.info("registry bucket released", extra={"bucket": bucket.base, "why": why,
                                                        "entries": len(bucket.state.entries), "unsure": landed is None})
            return True
        finally:
            if not released and not bucket.lost:
                bucket.closing = False
            leaving, bucket.leaving = bucket.leaving, None
            if leaving is not None and not leaving.done():
                leaving.set_result(None)

    def _forget(self, bucket: HeldBucket) -> None:
        """Answer nothing more from ``bucket``: it is released."""
        if self.held.get(bucket.number) is bucket:
            del self.held[bucket.number]
        bucket.lost = True

    async def put_many(self, asks: Sequence[PutRequest], wire: list[WireOutcome | None] | None = None
                       ) -> list[PutOutcome]:
        """Make the puts ``asks`` (distinct names, all of buckets this silo answers for): each
        one's entry and job, or its error, in order; ``wire``, if given, gets the answer on the
        wire of each put made (``outcome_to_wire``'s, from what its record was built of).

        Decided from memory; the jobs made durable first, then every ``PUT`` of the round in
        one append per bucket, so a name never points at a job that is not durable. A job whose
        ``PUT`` failed stays unpointed at (never cleared by the fence); its put raises
        ``PutInDoubt`` when the append's outcome is unknown.
        """
        later = repeated([ask.key for ask in asks])
        if later:  # a name twice in one call: one after the other, as two calls would be (never waits on itself)
            first = await self.put_many([a for i, a in enumerate(asks) if i not in later])
            rest = await self.put_many([asks[i] for i in sorted(later)])
            return merged(len(asks), later, first, rest)
        out: list[PutOutcome | None] = [None] * len(asks)
        decided: list[_Decided] = []
        # A put of one of these names in progress decides first (its outcome counts); then all
        # are decided with no await between, so a call never holds a name while it waits for another.
        answering = await self.settled([ask.key for ask in asks])
        for i, ask in enumerate(asks):
            bucket = answering[self.bucket_for(ask.key)]
            if bucket is None or bucket.lost:
                out[i] = NotOwner(ask.key)
                continue
            old = bucket.state.entries.get(ask.key)
            seen = resent(ask, old) if ask.resend else None
            if seen is not None:
                out[i] = seen
                continue
            if old is not None and not ask.overwrite:
                out[i] = AlreadyExists(ask.name, ask.app_id, ask.namespace)
                continue
            job = _next_generation(ask, old)
            bucket.busy.add(ask.key)
            decided.append((i, bucket, job, old, pack(job.to_wire())))  # inline whatever its size: a record has no 8 KiB bound
        try:
            await self._land(asks, decided, out, wire)
        finally:
            for i, bucket, *_ in decided:
                bucket.busy.discard(asks[i].key)
            for bucket in {id(b): b for _, b, *_ in decided}.values():
                async with bucket.settled:
                    bucket.settled.notify_all()
        return [o if o is not None else RuntimeError("no outcome") for o in out]

    async def _land(self, asks: Sequence[PutRequest], decided: list[_Decided], out: list[PutOutcome | None],
                    wire: list[WireOutcome | None] | None) -> None:
        if not decided:
            return
        try:
            with gathered():  # the round is the batch: its shard writes it without lingering for more
                # Each job as packed for its record: packing it again for the call cost ~10% of a round.
                shards = await self._schedule([(job.id, datetime_to_us(job.first_fire), packed)
                                               for _, _, job, _, packed in decided])
        except Exception as exc:
            for i, *_ in decided:
                out[i] = exc  # no entry points at these jobs: the fence never clears them
            return
        by_bucket: dict[int, list[tuple[int, Entry, ScheduledJob, dict[str, str], bytes]]] = {}
        for (i, bucket, job, old, packed), shard in zip(decided, shards, strict=True):
            job = job.evolve(shard=shard)
            fire = job.first_fire
            entry, metadata = Entry.new_generation_stored(
                asks[i].key, job.generation, job.id, shard, datetime_to_us(fire), asks[i].now_us, fire,
                () if old is None else (old.retired(), *old.retire), base64.b64encode(packed).decode("ascii"))
            by_bucket.setdefault(bucket.number, []).append((i, entry, job, metadata, packed))
        held = {bucket.number: bucket for _, bucket, *_ in decided}
        # Memory takes each entry as built rather than parsing back the metadata just made of
        # it: the same entry (a new generation's status has no history for ``_fitting`` to
        # drop; ``tests/named/test_bucket_owner.py`` holds memory to the log's replay).
        results = await asyncio.gather(*(held[number].write([[PUT, e.key, m] for _, e, _, m, _ in rows],
                                                            [e for _, e, _, _, _ in rows])
                                         for number, rows in by_bucket.items()), return_exceptions=True)
        for (number, rows), result in zip(by_bucket.items(), results, strict=True):
            if isinstance(result, BaseException):
                # Fenced, or in doubt: memory took the records back, the log may hold them.
                self.drop(held[number], f"its append failed ({result!r})", retake=True)
            for i, entry, job, metadata, packed in rows:
                if isinstance(result, BaseException):
                    out[i] = PutInDoubt(f"its bucket's append failed ({result!r})", asks[i].name)
                else:
                    out[i] = (entry, job)
                    if wire is not None and asks[i].brief:
                        wire[i] = made_to_wire(entry, job)
                    elif wire is not None:
                        wire[i] = ("ok", metadata, packed)  # the wire form of a job has no shard


def repeated(keys: Sequence[str]) -> set[int]:
    """The indexes of ``keys`` that repeat an earlier one."""
    seen: set[str] = set()
    later: set[int] = set()
    for i, key in enumerate(keys):
        if key in seen:
            later.add(i)
        seen.add(key)
    return later


def merged(count: int, later: set[int], first: Sequence[Any], rest: Sequence[Any]) -> list[Any]:
    """Answers of the items not in ``later`` (``first``) and of those in it (``rest``), back in order."""
    firsts, rests = iter(first), iter(rest)
    return [next(rests) if i in later else next(firsts) for i in range(count)]


async def entries_of_old_layout(store: Store) -> list[tuple[str, dict[str, str]]]:
    """Every entry of the per-name layout (``names/<ns>/<app>/<name>``): its key and metadata."""
    return [(info.name, dict(info.metadata)) for info in await store.list(REGISTRY_PREFIX)
            if info.name.count("/") == 3 and "gen" in info.metadata and "job" in info.metadata]


class BucketReleased(LookupError):
    """A write tried once its bucket's release was queued: refused, nothing applied; its caller
    answers "not the owner", and the item goes to the bucket's next owner."""

    def __init__(self, base: str) -> None:
        super().__init__(f"registry bucket {base!r} was released: ask its next owner")
        self.base = base


def _next_generation(ask: PutRequest, old: Entry | None) -> ScheduledJob:
    """The job of ``ask``'s new generation: 1 for a free name, else the next, marked with the
    job it replaces (the fence refuses it once the name points elsewhere). Its id is the put's
    ``try_id`` on a first send; a resend that found no trace of its first send takes a fresh
    one, as that send's job may be durable, unpointed at, in a dead owner's shard, or may have
    been pointed at, replaced and retired: one id would then name two generations."""
    job_id = new_job_id() if ask.resend else ask.try_id
    if old is None:
        return ask.job.evolve(id=job_id, generation=1)
    return ask.job.evolve(id=job_id, generation=old.generation + 1,
                   metadata={**ask.job.metadata, REPLACES_MARK: old.job_id})


def resent(ask: PutRequest, entry: Entry | None) -> PutOutcome | None:
    """What a resend of ``ask`` answers from what its first send left in ``entry`` (the bucket
    as its log holds it: a round's ``PUT`` is appended only once its job is durable, so an
    entry naming the first send's job names a whole one); None: no trace, so it is made as a
    new put. The first send made and still named: that put, whatever ``overwrite`` says. Made
    and replaced since: in doubt (landed). A create-only put whose name another job holds: in
    doubt, not ``AlreadyExists``, as its first send may have made it and a later put replaced
    it, its retired job's cancel confirmed and off the list since."""
    if entry is None:
        return None
    if entry.job_id == ask.try_id and entry.definition is not None:  # a round's PUT always carries it
        job = ScheduledJob.from_wire(unpack(base64.b64decode(entry.definition)))
        return entry, replace(job, id=entry.job_id, shard=entry.shard)
    if any(r.job_id == ask.try_id for r in entry.retire):
        return PutInDoubt("its bucket's owner did not answer; the put was made, then replaced by a later put",
                          ask.name, landed=True)
    if not ask.overwrite:
        return PutInDoubt("its bucket's owner did not answer, and the name is taken: by this put, replaced "
                          "since, or by another", ask.name)
    return None


# -- over the wire: a put sent to its bucket's owner, and its answer -------------------------------

def fair_share_of(count: int, members: Mapping[str, Member]) -> int:
    """The most buckets one live silo takes of ``count``: the even split among the live, rounded up."""
    return fair_share(count, alive_count(members))
