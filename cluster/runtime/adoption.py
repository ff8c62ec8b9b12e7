"""Adoption: which shards are orphans, and claiming them by compare-and-swap on their metadata.

A shard is an orphan when its owner is gone: released by a graceful stop, an incarnation that
was replaced, or one marked dead or leaving. Silos claim orphans within the lookahead a fair
share per round, with a budget that ramps up, so a lone survivor of a mass failure takes the
load on step by step. A claimed shard is sealed: it takes no new jobs. A shard adopted too
often is *poisoned*: something in it may be killing its owners, so it is left alone.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.model.wire import timedelta_to_us
from cluster.runtime.loading import Loading
from cluster.runtime.membership import DEAD, LEAVING, Identity, Member, Membership, parse_owner
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.ownership import ShardTable
from cluster.runtime.shard import Shard
from cluster.runtime.shardlog import RELEASED, SEALED, SHARD_PREFIX, ShardMeta
from storage import Fenced, NotFound, StorageError, Store, list_logs

log = logging.getLogger("timeshard.silo")

# Shards one silo claims per adoption round at first; doubled each round that leaves orphans.
INITIAL_CLAIM_BUDGET = 4
MAX_CLAIM_BUDGET = 4096


def is_orphan(metadata: Mapping[str, str], members: Mapping[str, Member]) -> bool:
    """Whether the shard whose log metadata is ``metadata`` has no live owner in ``members``."""
    owner = metadata.get("owner", RELEASED)
    if owner == RELEASED:
        return True
    parsed = parse_owner(owner)
    if parsed is None:
        return True
    silo_id, incarnation = parsed
    member = members.get(silo_id)
    if member is None:
        return True  # never registered
    if member.incarnation > incarnation:
        return True  # that incarnation was replaced (a Ray restart)
    if member.incarnation < incarnation:
        # The owner is newer than our snapshot of the table (read before the shard list): it
        # joined and claimed meanwhile. Only an owner proven gone makes an orphan.
        return False
    # A silent silo is orphaned only once declared dead by CAS (see the heartbeat), so a silo
    # that was merely slow learns it from its own failed heartbeat and stops firing.
    return member.status in (DEAD, LEAVING)


def claims_this_round(orphans: int, alive: int, budget: int) -> int:
    """How many of ``orphans`` one of ``alive`` silos claims now: its fair share, within budget."""
    share = -(-orphans // max(alive, 1))  # rounded up; leftovers go next round
    return min(share, budget)


def next_budget(orphans: int, budget: int) -> int:
    """The claim budget for the next round: back to the start when none are left, else doubled
    while this round could not take them all."""
    if not orphans:
        return INITIAL_CLAIM_BUDGET
    return min(MAX_CLAIM_BUDGET, budget * 2) if orphans > budget else budget


class Adoption:
    """Finds orphaned shards and claims them for this silo."""

    def __init__(self, store: Store, options: ClusterOptions, clock: Clock, me: Identity, shards: ShardTable,
                 loading: Loading, metrics: SiloMetrics, rng: random.Random) -> None:
        self._store = store
        self._options = options
        self._clock = clock
        self._me = me
        self._shards = shards
        self._loading = loading
        self._metrics = metrics
        self._rng = rng  # seeded in tests, so a simulated run replays exactly
        self._budget = INITIAL_CLAIM_BUDGET
        self.poisoned: dict[str, str] = {}  # shard -> its owner when it was found poisoned

    async def adopt_orphans(self) -> int:
        """Claim orphaned shards within the lookahead: a fair share per round, budget ramping up."""
        members = await Membership(self._store).members()
        horizon = self._clock.now_us() + timedelta_to_us(self._options.lookahead)
        candidates: list[tuple[str, ShardMeta]] = []
        for head in await list_logs(self._store, SHARD_PREFIX):
            if self._busy(head.base):
                continue
            try:
                meta = ShardMeta.from_metadata(head.metadata)
            except (KeyError, ValueError):
                continue
            if meta.window_start > horizon or not self._claimable(head.metadata, members):
                continue
            if meta.adopted_count >= self._options.max_adopted_count:
                if head.base not in self.poisoned:
                    self.poisoned[head.base] = meta.owner
                    log.error("poisoned shard left alone", extra={"shard": head.base, "adopted": meta.adopted_count})
                continue
            candidates.append((head.base, meta))
        alive = sum(1 for m in members.values() if m.status not in (DEAD, LEAVING))
        take = claims_this_round(len(candidates), alive, self._budget)
        self._budget = next_budget(len(candidates), self._budget)
        self._rng.shuffle(candidates)  # silos racing for the same orphans mostly pick different ones
        claimed = 0
        for base, meta in candidates[:take]:
            claimed += await self.claim(base, meta) is not None
        return claimed

    async def claim_for_cancel(self, shard_base: str) -> Shard | None:
        """Claim an orphaned shard that a cancel needs, even beyond the lookahead."""
        members = await Membership(self._store).members()
        for head in await list_logs(self._store, shard_base):
            if head.base == shard_base and not self._busy(head.base) and self._claimable(head.metadata, members):
                return await self.claim(head.base, ShardMeta.from_metadata(head.metadata))
        return None

    def _claimable(self, metadata: Mapping[str, str], members: Mapping[str, Member]) -> bool:
        """An orphan, or a shard of this very incarnation that it does not hold (the caller
        checked): a claim or create whose CAS landed although the call failed. No peer takes
        that one, since its owner is alive, so unless we take it its jobs never fire."""
        return metadata.get("owner") == self._me.owner or is_orphan(metadata, members)

    def _busy(self, base: str) -> bool:
        """Held, or being created or claimed by this silo right now."""
        return self._shards.get(base) is not None or base in self._shards.pending

    async def claim(self, base: str, meta: ShardMeta) -> Shard | None:
        """Take ``base`` (last seen as ``meta``) by CAS, load it and queue its jobs; None if beaten."""
        if self._busy(base):
            return None  # taken meanwhile by another round of ours (a cancel, the heartbeat)
        failed = meta.owner not in (RELEASED, self._me.owner)
        new_meta = meta.with_owner(self._me.owner, state=SEALED, adopted_count=meta.adopted_count + failed)
        self._shards.pending.add(base)
        try:
            shard = await Shard.claim(self._store, base, new_meta, meta.owner, self._shards.log_options)
        except (Fenced, NotFound):
            return None  # another silo was faster
        except StorageError as exc:
            log.warning("could not claim shard", extra={"shard": base, "error": repr(exc)})
            return None
        finally:
            self._shards.pending.discard(base)
        if not self._shards.add(shard):
            return None  # we rejoined while claiming: the claim carries the dead incarnation
        self._metrics.adopted.inc()
        log.info("shard adopted", extra={"shard": base, "from": meta.owner, "jobs": shard.live_count})
        async with shard.gate.exclusive():
            self._loading.settle_misfires(shard)
            self._loading.queue_loaded(shard, adopted=failed)
        return shard

    async def forgive(self) -> None:
        """Reset ``adopted_count`` of shards held long enough: their jobs did not kill us.

        Poisoning is for a shard whose jobs crash each silo that loads it; a shard adopted a few
        times because silos died of other causes (a drill, a lost node) must not end up poisoned.
        """
        now = self._clock.monotonic()
        for shard in self._shards:
            if shard.meta.adopted_count and now - shard.held_since > self._options.poison_forgiveness.total_seconds():
                try:
                    await shard.set_meta(ShardMeta(**{**shard.meta.__dict__, "adopted_count": 0}))
                except Fenced:
                    self._shards.drop(shard, "fenced while resetting its adoption count")
                except StorageError:
                    pass
