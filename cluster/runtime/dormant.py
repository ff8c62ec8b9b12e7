"""What a dormant shard's log says, kept between looks and brought up to date by its tail.

A dormant shard holds nothing per job, so a cancel, pause or lookup of one of its jobs folds its
log to look. Folding it whole every time made overwriting 10,000 jobs of one nightly window
replay that window's log 10,000 times (issue 25, point 3). Here the fold is kept, and each look
reads only what was appended since the last one (``storage.read_tail``): the log stays the
truth, including what another writer (a silo that claimed the shard meanwhile) appended, and
the fold is the fold of the log read whole. A generation rotated away or cut short is read whole.

The folds cost what a loaded shard costs per job, so they are kept within a budget of jobs,
least recently used first, and dropped once idle, loaded or no longer held.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING

from cluster.model.clock import Clock
from cluster.runtime.shardlog import ShardState
from storage import Store, read_log, read_tail

if TYPE_CHECKING:
    from cluster.runtime.shard import Shard

#: Jobs the kept folds of one silo may hold in all (the one in use is kept even when larger).
VIEW_BUDGET_JOBS = 500_000
#: Seconds a fold not looked at is kept.
VIEW_IDLE_S = 60.0


class DormantView:
    """The fold of one log, and where in it the next read starts."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.state: ShardState | None = None
        self.used_at = 0.0
        self._name = ""  # the generation folded
        self._end = 0  # the offset just past the last whole frame folded (a torn tail is read again)
        self._last_seq = -1
        self._lock = asyncio.Lock()  # one read and fold at a time: a tail folded twice would replay it twice
        self.tail_reads = 0
        self.whole_reads = 0

    @property
    def jobs(self) -> int:
        return 0 if self.state is None else len(self.state.live)

    async def refresh(self, store: Store) -> ShardState:
        """The fold of the log as it is now (a read of its tail, or of it whole)."""
        async with self._lock:
            if self.state is not None:
                tail = await read_tail(store, self._name, offset=self._end, after=self._last_seq)
                if tail is not None:
                    self.state.replay(tail.records())
                    self._end, self._last_seq = tail.decoded.end, tail.decoded.last_seq
                    self.tail_reads += 1
                    return self.state
            log = await read_log(store, self.base)
            self.state = ShardState().replay(log.records())
            self._name, self._end, self._last_seq = log.head.name, log.decoded.end, log.decoded.last_seq
            self.whole_reads += 1
            return self.state


class DormantViews:
    """The kept folds of the dormant shards a silo holds."""

    def __init__(self, store: Store, clock: Clock, budget_jobs: int = VIEW_BUDGET_JOBS,
                 idle_s: float = VIEW_IDLE_S) -> None:
        self._store = store
        self._clock = clock
        self._budget = budget_jobs
        self._idle = idle_s
        self._views: OrderedDict[Shard, DormantView] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._views)

    def view(self, shard: Shard) -> DormantView | None:
        return self._views.get(shard)

    async def state(self, shard: Shard) -> ShardState:
        """What ``shard``'s log says now, folded; the shard stays dormant.

        The state returned is this view's own and moves on with later looks: read what is needed
        from it before the next await.
        """
        view = self._views.get(shard)
        if view is None:
            view = self._views[shard] = DormantView(shard.base)
        self._views.move_to_end(shard)
        view.used_at = self._clock.monotonic()
        try:
            state = await view.refresh(self._store)
        except BaseException:
            if view.state is None and self._views.get(shard) is view:
                del self._views[shard]
            raise
        view.used_at = self._clock.monotonic()
        self.trim(keep=shard)
        return state

    def trim(self, keep: Shard | None = None) -> None:
        """Drop the folds of shards loaded or no longer held, idle ones, and the oldest over budget."""
        now = self._clock.monotonic()
        for shard, view in list(self._views.items()):
            if shard is not keep and (shard.loaded or shard.lost or now - view.used_at > self._idle):
                del self._views[shard]
        total = sum(view.jobs for view in self._views.values())
        for shard, view in list(self._views.items()):
            if total <= self._budget:
                break
            if shard is not keep:
                del self._views[shard]
                total -= view.jobs
