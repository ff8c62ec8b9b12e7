"""Adoption: which shards are orphans, and claiming them by compare-and-swap on their metadata.

A shard is an orphan when its owner is proven gone: released by a graceful stop, or an
incarnation that was replaced or marked dead or leaving *and* that provably fires no more — its
process exited, or its lease ran out (``membership.Departures``). Silos claim orphans within the lookahead a fair
share per round, with a budget that ramps up, so a lone survivor of a mass failure takes the
load on step by step. A claimed shard is sealed: it takes no new jobs.

A round lists only the shards whose window starts within the lookahead: shard names sort by
window, so the listing stops there (``list_logs_between``), however many windows lie beyond.
And not every silo lists every ``adoption_interval``: ``adoption_listers`` of them do, in turn
(``Adoption.round_due``), so the cluster's List calls stay flat as silos are added. What makes
orphans is heard without listing — a departure or join in the membership table every silo reads
at each heartbeat, a peer's notice, a write of our own whose outcome is unknown — and starts a
round at once on each silo that heard it, so failover waits on no silo's turn. Every orphan is claimed,
however often its owners died: a claim counts the last owner's death if it died while the
shard was firing, and a shard whose owners keep dying so runs in quarantine
(``cluster.runtime.quarantine``) — never left alone with its jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import zlib
from collections.abc import Awaitable, Callable, Mapping

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.model.waiting import wait_bounded
from cluster.model.wire import timedelta_to_us
from cluster.runtime.loading import Loading
from cluster.runtime.logowner import Owner, ReleasedSince, fair_share, held_per_live_silo, orphan_at
from cluster.runtime.membership import (
    DEAD,
    LEAVING,
    SILENT,
    Departures,
    Identity,
    Member,
    parse_owner,
)
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.moves import Moves
from cluster.runtime.ownership import ShardTable
from cluster.runtime.quarantine import Quarantine, claimed_meta
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import RELEASED, SHARD_PREFIX, shards_before
from cluster.runtime.shardmeta import ShardMeta
from storage import Fenced, NotFound, StorageError, Store, list_logs
from storage.generations import LogHead, list_logs_between

log = logging.getLogger("timeshard.silo")

# Shards one silo claims per adoption round at first; doubled each round that leaves orphans.
INITIAL_CLAIM_BUDGET = 4
MAX_CLAIM_BUDGET = 4096
# Logs a round's first List call asks for beyond those the last round found within the lookahead
# (and a quarter more): one call answers it, without thousands of logs of later windows.
FIRST_PAGE_MARGIN = 64


def claims_this_round(orphans: int, alive: int, budget: int) -> int:
    """How many of ``orphans`` one of ``alive`` silos claims now: its fair share, within budget."""
    return min(fair_share(orphans, alive), budget)  # rounded up; leftovers go next round


def next_budget(orphans: int, budget: int) -> int:
    """The claim budget for the next round: back to the start when none are left, else doubled
    while this round could not take them all."""
    if not orphans:
        return INITIAL_CLAIM_BUDGET
    return min(MAX_CLAIM_BUDGET, budget * 2) if orphans > budget else budget


def stride(alive: int, listers: int) -> int:
    """Adoption intervals between one silo's turns to list, so that ``listers`` of ``alive``
    silos list each interval: 1 (every interval) while there are no more silos than that."""
    return max(1, -(-alive // listers))


def my_turn(slot: int, rank: int, every: int) -> int:
    """The latest interval ``<= slot`` that is the turn of the silo ranked ``rank``, ``every``
    intervals apart."""
    return slot - (slot - rank) % every


def _ended(before: tuple[int, str, int] | None, now: tuple[int, str, int]) -> bool:
    """Whether a silo's row went from ``before`` to ``now`` (incarnation, status, ended
    through) by an incarnation ending: replaced, declared dead or leaving, or proven ended."""
    if before is None:
        return False
    (was, was_status, was_ended), (inc, status, ended) = before, now
    return inc > was or ended > was_ended or (status in (DEAD, LEAVING) and was_status not in (DEAD, LEAVING))


class ClaimInDoubt(StorageError):
    """A claim of this silo's is under way: until it lands, the shard's old writer is not fenced."""


class Adoption:
    """Finds orphaned shards and claims them for this silo."""

    def __init__(self, store: Store, options: ClusterOptions, clock: Clock, me: Identity, shards: ShardTable,
                 loading: Loading, quarantine: Quarantine, metrics: SiloMetrics, rng: random.Random,
                 moves: Moves, departures: Departures) -> None:
        self._store = store
        self._options = options
        self._clock = clock
        self._me = me
        self._shards = shards
        self._loading = loading
        self._quarantine = quarantine
        self._metrics = metrics
        self._rng = rng  # seeded in tests, so a simulated run replays exactly
        self._moves = moves
        self._budget = INITIAL_CLAIM_BUDGET
        self._departures = departures
        self.owner = Owner(store, clock, me, departures)  # the judge of logs, shared with the registry's buckets
        self.recheck_at: float | None = None  # when (monotonic) a shard seen waiting for a lease becomes an orphan
        self._retaking = asyncio.Lock()  # one retake at a time: two would fence each other's claim
        self.excess = 0  # shards held beyond the fair share at the last round (``balance`` hands them over)
        self._claims_failed = 0  # claims the store failed (not beaten): an adoption round stops at one
        self._released_since = ReleasedSince()  # released shards, and when each was first seen unclaimed
        # Shard -> until when (monotonic) what an owner it was claimed from sent may still start
        # (``sends_until``): kept for every copy this silo makes of its log, not the first alone.
        self._sent_before: dict[str, float] = {}
        self._sent_before_cap = 64  # entries kept before the ended ones are swept out
        # When to list (``round_due``): the live silos last read, and what of their rows a
        # departure or join changes; the interval of this silo's last round; whether it heard
        # something that calls for a round at once, or left work for the next interval.
        self._alive: list[str] = []
        self._roster: dict[str, tuple[int, str, int]] | None = None
        self._listed_slot = self._slot()
        self._last_tick = clock.monotonic()
        self._soon = False
        self._calls = 0  # counts the calls for a round at once (``look_soon``), so a round answers only those before it
        self._leftover = False
        self._listed = 0  # logs within the lookahead at the last round: the next asks for a little more
        self._members: Mapping[str, Member] = {}  # the membership table last read
        #: A read of the table showed an incarnation end (replaced, dead, leaving) since the last
        #: round: a round runs at once, on every silo that read it (``round_due``, ``wait_for_round``).
        self.departure_heard = False
        self._woken = asyncio.Event()
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep  # a test waits on a clock of its own

    @property
    def taking_back(self) -> bool:
        """Whether a shard is being taken back from its own log right now."""
        return self._retaking.locked()

    async def adopt_orphans(self) -> int:
        """Claim orphaned shards within the lookahead: a fair share per round, budget ramping up.

        Shards released by a peer handing them over (``balance``) go to silos below their fair
        share first; others take them only if they are still unclaimed an adoption interval
        later. Sets ``excess``: how many shards this silo holds beyond its fair share.
        """
        me = self._me.owner  # who judges: a rejoin during the round voids its judgments
        members = await self.read_members()
        self.departure_heard = False  # this round takes what that made orphans
        self._woken.clear()
        now = self._clock.monotonic()
        self.recheck_at = None
        calls = self._calls  # what asked for a round up to the read above, which this one answers once it has listed
        horizon = self._clock.now_us() + timedelta_to_us(self._options.lookahead)
        candidates: list[tuple[str, ShardMeta]] = []
        released: list[tuple[str, ShardMeta]] = []
        heads = await list_logs_between(self._store, SHARD_PREFIX, end=shards_before(horizon + 1),
                                        first_page=self._listed + self._listed // 4 + FIRST_PAGE_MARGIN)
        self._listed = len(heads)
        self._listed_slot = self._slot()
        self._soon = self._calls != calls  # a failed listing leaves them asking, and one made meanwhile
        members = await self.owner.members_knowing([head.metadata for head in heads], members, self.read_members)
        ahead: list[tuple[LogHead, ShardMeta]] = []  # the shards within the lookahead
        for head in heads:
            try:
                meta = ShardMeta.from_metadata(head.metadata)
            except (KeyError, ValueError):
                continue
            if meta.window_start <= horizon:
                ahead.append((head, meta))
        held, unheld = held_per_live_silo([meta.owner for _, meta in ahead], members)
        alive = len(held)  # every live silo is a key of ``held``
        for head, meta in ahead:
            if self._busy(head.base):
                continue
            if self._mine(head.metadata):
                candidates.append((head.base, meta))
                continue
            since = orphan_at(head.metadata, members, self._departures)
            if since is None or now < since:
                if since is not None:  # its owner's lease is still running out: look again then
                    self.recheck_at = since if self.recheck_at is None else min(self.recheck_at, since)
                continue
            (released if meta.owner == RELEASED else candidates).append((head.base, meta))
        fair = fair_share(sum(held.values()) + unheld, alive)
        mine = held.get(self._me.silo_id, 0)
        candidates += self._released_to_take(released, below_share=mine < fair, now=now)
        take = claims_this_round(len(candidates), alive, self._budget)
        self._budget = next_budget(len(candidates), self._budget)
        self._rng.shuffle(candidates)  # silos racing for the same orphans mostly pick different ones
        claimed = 0
        failed = self._claims_failed
        for base, meta in candidates:
            # Beaten to one (a peer picked it too), the next is claimed at once, not an interval
            # later: failover waits on no lost race. A store that fails a claim ends the round.
            if claimed == take or self._claims_failed != failed:
                break
            claimed += await self.claim(base, meta, judged_by=me) is not None
        self.excess = max(0, mine + claimed - fair)
        # Orphans left for later (the budget, a share for peers) or released shards waiting
        # their interval: look again each interval until none are left, turn or no turn.
        self._leftover = len(candidates) > claimed or len(released) > 0
        return claimed

    def round_due(self) -> bool:
        """Whether the maintenance loop should run an adoption round now (it asks each tick).

        While no more silos live than ``adoption_listers``, every ``adoption_interval`` (and when
        a dead peer's lease runs out), as always. Beyond that, each silo lists on its turn —
        every ``stride``-th interval, ranked among the live silos by id, so that about
        ``adoption_listers`` list each interval — and at once whenever it heard something that
        makes orphans (``look_soon``); each interval while its last round left work behind.
        Any round of this silo (a peer's notice, a declared death) counts as its turn.
        """
        now = self._clock.monotonic()
        if self.recheck_at is not None and now >= self.recheck_at:  # a dead peer's lease runs out
            return self._tick(now)
        if self.departure_heard:  # orphans, or soon: failover waits on no interval, however few the silos
            return self._tick(now)
        interval_passed = now - self._last_tick >= self._options.adoption_interval.total_seconds()
        every = stride(len(self._alive), self._options.adoption_listers)
        if every == 1:
            return interval_passed and self._tick(now)
        if self._soon or (self._leftover and interval_passed):
            return self._tick(now)
        me = self._me.silo_id  # ranked among the live silos; not in the table read (yet): a stable place
        rank = self._alive.index(me) if me in self._alive else zlib.crc32(me.encode())
        return my_turn(self._slot(), rank, every) > self._listed_slot and self._tick(now)

    def start_rounds(self) -> float:
        """Count adoption intervals from now (the maintenance loop starts); returns now."""
        self._last_tick = self._clock.monotonic()
        return self._last_tick

    def _tick(self, now: float) -> bool:
        self._last_tick = now
        return True

    async def wait_for_round(self, tick: float) -> None:
        """Sleep ``tick`` seconds, or less: until a read of the membership table (a heartbeat's)
        shows a peer's incarnation ended. The maintenance loop waits here between its rounds, so
        the orphans of a death a peer declared are claimed at the beat that read it, not up to an
        adoption interval later; the heartbeat itself stays a short round."""
        if not self._woken.is_set():
            with contextlib.suppress(TimeoutError):
                await wait_bounded(self._woken.wait(), tick)
        self._woken.clear()

    def look_soon(self) -> None:
        """Run a round at the next tick: something may have left an orphan no listing has seen
        yet (a claim or create of ours whose outcome is unknown, a peer's departure)."""
        self._soon = True
        self._calls += 1

    def _slot(self) -> int:
        """The adoption interval the wall clock is in, counted alike on every silo (up to skew)."""
        return self._clock.now_us() // timedelta_to_us(self._options.adoption_interval)

    def _heard(self, members: Mapping[str, Member]) -> None:
        """Note the live silos, and whether one departed or joined since the last read."""
        roster = {silo: (m.incarnation, m.status, m.ended_through) for silo, m in members.items()}
        if self._roster is not None and roster != self._roster:
            self.look_soon()  # an incarnation ended (orphans), or one joined (a new fair share)
            before = self._roster
            if any(_ended(before.get(silo), now) for silo, now in roster.items()):
                self.departure_heard = True
                self._woken.set()
        self._roster = roster
        self._alive = sorted(silo for silo, m in members.items() if m.status not in (DEAD, LEAVING))

    def _released_to_take(self, released: list[tuple[str, ShardMeta]], *, below_share: bool,
                          now: float) -> list[tuple[str, ShardMeta]]:
        """The released shards this silo may claim: all when below its fair share, else those
        left unclaimed for an adoption interval (so none waits for good)."""
        waited = self._released_since.waited([base for base, _ in released], now,
                                             self._options.adoption_interval.total_seconds())
        if below_share:
            return released
        return [(base, meta) for base, meta in released if base in waited]

    async def claim_for_cancel(self, shard_base: str) -> Shard | None:
        """Claim an orphaned shard that a cancel needs, even beyond the lookahead."""
        return await self._claim_named(shard_base, proof=False)

    async def claim_to_fence(self, shard_base: str) -> Shard | None:
        """Claim an orphaned shard whose log a move's settle reads as proof (``Moves``), even
        beyond the lookahead: the shard, or None if it is no orphan (another incarnation's claim
        fenced its earlier writers). ``StorageError`` while a claim is in doubt — ours still under
        way, or failed in the store — since only a claim that landed stops an ADD its orphaned
        writer has on the way: read before, the log proved nothing. A paused silo's ADD landed
        after such a read, while the move was decided again into a fresh shard: one occurrence
        ran from both (simulator seed 256531, every kind)."""
        return await self._claim_named(shard_base, proof=True)

    async def _claim_named(self, shard_base: str, *, proof: bool) -> Shard | None:
        me = self._me.owner
        members = await self.read_members()
        heads = [head for head in await list_logs(self._store, shard_base) if head.base == shard_base]
        members = await self.owner.members_knowing([head.metadata for head in heads], members, self.read_members)
        for head in heads:
            if proof and head.base in self._shards.pending:
                raise ClaimInDoubt(f"a claim of {shard_base!r} by this silo is under way")
            if not self._busy(head.base) and self.claimable(head.metadata, members):
                return await self.claim(head.base, ShardMeta.from_metadata(head.metadata), judged_by=me, proof=proof)
        return None

    async def read_members(self) -> dict[str, Member]:
        """The membership table, noting for each ended incarnation when we first saw it end."""
        members = await self.owner.read_members()
        self._heard(members)
        self._members = members
        return members

    def orphaned(self, metadata: Mapping[str, str], members: Mapping[str, Member]) -> bool:
        """Whether the shard whose log metadata is ``metadata`` is an orphan now (``members`` from ``read_members``)."""
        return self.owner.orphaned(metadata, members)

    def claimable(self, metadata: Mapping[str, str], members: Mapping[str, Member]) -> bool:
        """An orphan now, or a shard of this very incarnation that it does not hold (the caller checked)."""
        return self.owner.claimable(metadata, members)

    def _mine(self, metadata: Mapping[str, str]) -> bool:
        """Owned by this very incarnation (``Owner.mine``): unless we take it (the caller checked
        we do not hold it) its jobs never fire."""
        return self.owner.mine(metadata)

    def _busy(self, base: str) -> bool:
        """Held, or being created or claimed by this silo right now."""
        return self._shards.get(base) is not None or base in self._shards.pending

    async def claim(self, base: str, meta: ShardMeta, *, judged_by: str, proof: bool = False) -> Shard | None:
        """Take ``base`` (last seen as ``meta``) by CAS, load it and queue its jobs; None if beaten.

        ``judged_by`` is the incarnation that found ``base`` claimable. After a rejoin that
        judgment is void: "our own shard" meant the old incarnation's, which the new one may take
        only as an orphan, once proven. The claim is then not made, or (if the rejoin lands
        while it is in flight) made under the old tag, which is not held (``ShardTable.add``).
        ``proof``: a claim the store failed raises, rather than None (``claim_to_fence``).
        """
        me = judged_by
        if self._busy(base) or self._me.owner != me:
            return None  # taken meanwhile by another round of ours (a cancel, the heartbeat), or rejoined
        failed = meta.owner not in (RELEASED, me)
        self._sends_until(base, meta.owner)  # before the CAS: a claim in doubt may have landed
        self._shards.pending.add(base)
        try:
            shard = await Shard.claim(self._store, base, lambda seen: claimed_meta(seen, me), meta.owner,
                                      self._shards.log_options)
        except (Fenced, NotFound):
            return None  # another silo was faster
        except StorageError as exc:
            log.warning("could not claim shard", extra={"shard": base, "error": repr(exc)})
            self._claims_failed += 1
            self.look_soon()  # it may have landed: then the shard is ours, and no peer takes it
            if proof:
                raise
            return None
        finally:
            self._shards.pending.discard(base)
        shard.sent_before_until = self._sends_until(base, meta.owner)
        if not self._shards.add(shard):
            return None  # we rejoined while claiming: the claim carries the dead incarnation
        self._metrics.adopted.inc()
        log.info("shard adopted", extra={"shard": base, "from": meta.owner, "jobs": shard.live_count})
        self._report_deaths(shard)
        async with shard.gate.exclusive():
            settling = self._loading.settle_misfires(shard)
            self._loading.queue_loaded(shard, adopted=failed, settling=settling)
        # Moves its writer decided but may not have carried out: carried out now, exactly once.
        await self._moves.settle_all(shard, self._loading.queue_entry)
        return shard

    def _sends_until(self, base: str, owner: str) -> float:
        """Until when (monotonic) work sent by an owner ``base`` was claimed from may still start:
        ``owner``'s lease left over, or that of an owner this silo claimed it from before.

        Every copy of the shard this silo holds waits that out, not only the first claim's: a
        copy taken back from its log (its writer stopped), or claimed again as this silo's own
        (a claim whose answer was lost) reads a log that names this silo, not the dead owner
        whose sends may still wait at a handler.
        """
        now = self._clock.monotonic()
        until = max(self._lease_left_over(owner), self._sent_before.pop(base, float("-inf")))
        if until > now:
            self._sent_before[base] = until
            if len(self._sent_before) > self._sent_before_cap:  # amortised: a mass failover claims thousands
                self._sent_before = {name: end for name, end in self._sent_before.items() if end > now}
                self._sent_before_cap = 2 * len(self._sent_before) + 64
        return until

    def _lease_left_over(self, owner: str) -> float:
        """Until when (monotonic) the lease of ``owner``, whose shard we just claimed, may still run.

        A claim waits out the lease of an owner only suspected gone, but not of one proven gone:
        its process exited (Ray's word, this host's process table) or a new incarnation replaced
        it. Work it sent ahead may still wait at a handler until that lease ends, and only the
        lease stops it: nobody is left to withdraw it (found by the simulation, seed 142958: a
        run started 0.15 s after the adopter answered "paused"). A silo declared dead for its
        silence held no lease by then; a released shard's owner settled its sends itself.
        """
        parsed = parse_owner(owner)
        if parsed is None:
            return float("-inf")
        silo_id, incarnation = parsed
        member = self._members.get(silo_id)
        if member is None or (member.incarnation == incarnation and member.cause == SILENT):
            return float("-inf")
        over = self._departures.lease_over_at(silo_id, incarnation)
        return float("-inf") if over is None else over

    async def sent_before_over(self, shard: Shard) -> None:
        """Return once nothing the previous owner of ``shard`` sent can start any more: at once
        but for a shard claimed while that owner's lease may still run (``_lease_left_over``).

        A cancel or pause of the shard's jobs waits for this before it answers, so what the
        client is told holds for what the dead owner sent, too.
        """
        while (left := shard.sent_before_until - self._clock.monotonic()) > 0:  # noqa: ASYNC110
            await self.sleep(left)

    async def retake(self, shard: Shard) -> bool:
        """Take back our own ``shard`` whose writer stopped on a corrupted log; True once settled.

        The normal claim path, on a log whose owner is this very incarnation: read it, keep a
        copy of a damaged generation aside, claim it by CAS (which fences the stopped writer) and
        rewrite it at the next append; then the old object is dropped, and every job the log
        holds is queued again — also the ones whose runs were in flight, as their outcomes go
        to a fenced writer. So nothing the log holds is lost, and no run waits for good on a
        writer that will never write again. Settled also when another silo holds the shard now.
        False while the store does not answer: the old object stays held, tried again later.

        The moves its log decided are carried out once the claim is done, outside the lock that
        keeps claims one at a time: a move's target may be a shard whose writer stopped too,
        which is taken back on the way, and taking it back under that lock waited on itself for
        good (found by the simulation, seed 43587: the run stayed in flight, its job never ran again).
        """
        try:
            new = await self._reclaim(shard)
        except StorageError as exc:
            log.warning("could not take back a shard whose log was corrupted",
                        extra={"shard": shard.base, "error": repr(exc)})
            return False
        if new is None:
            return True
        await self._moves.settle_all(new, self._loading.queue_entry)
        return True

    async def _reclaim(self, shard: Shard) -> Shard | None:
        """``retake``'s claim, one at a time (two would fence each other's): the fresh shard held
        in ``shard``'s place, its jobs queued; None when there is none to settle (another silo
        holds the shard, a caller took it back first, or this silo rejoined meanwhile).
        ``StorageError`` while the store does not answer, ``shard`` still held."""
        async with self._retaking:
            if self._shards.get(shard.base) is not shard:
                return None  # taken back (or lost) by a caller that got here first
            try:
                new = await Shard.claim(self._store, shard.base, lambda seen: seen.with_owner(self._me.owner),
                                        self._me.owner, self._shards.log_options)
            except (Fenced, NotFound):
                self._shards.drop(shard, "its log was corrupted, and another silo holds it now")
                return None
            new.sent_before_until = self._sends_until(shard.base, self._me.owner)
            if not self._shards.replace(shard, new):
                return None  # we rejoined meanwhile: the shard is an orphan, claimed by whoever is first
            log.error("shard log corrupted under its writer: taken back", extra={"shard": shard.base,
                                                                                "jobs": new.live_count})
            async with new.gate.exclusive():
                settling = self._loading.settle_misfires(new)
                self._loading.queue_loaded(new, settling=settling)
            return new

    def _report_deaths(self, shard: Shard) -> None:
        meta, limit = shard.meta, self._options.max_adopted_count
        if not meta.deaths and not meta.suspects:
            return
        self._quarantine.update_gauges()
        parked = self._quarantine.parked_jobs(shard)
        extra = {"shard": shard.base, "owner_deaths": meta.deaths, "parked": parked}
        if meta.deaths >= limit:
            log.error("shard in quarantine: its owners died while it fired", extra=extra)
        elif parked:
            log.error("shard adopted with parked jobs: they killed the owners that fired them", extra=extra)
        else:
            log.warning("shard adopted from an owner that died while it fired", extra=extra)
