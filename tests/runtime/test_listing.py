"""Store traffic of adoption as a cluster grows (issue 28, point 3): real silos, their own loops,
on virtual time, with a store that counts List calls the way Azure bills them.

What an operator relies on: the List calls the cluster makes per adoption interval do not grow
with the windows scheduled far ahead, nor with the number of silos; and failing over does not
wait for a silo's turn to list. The loop is ``tests.sim.loop.VirtualLoop``: a minute of the
cluster's life costs a fraction of a second, and nothing depends on this machine's speed.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone

import pytest

from cluster.features import feature_hooks
from cluster.model.attempt import JobContext
from cluster.model.options import ClusterOptions
from cluster.model.wire import datetime_to_us
from cluster.runtime.shardlog import SHARD_PREFIX, shard_name, shards_before
from cluster.runtime.shardmeta import ShardMeta
from cluster.runtime.silo import Silo
from cluster.runtime.transport import Ping
from storage import (
    Appended,
    Fetched,
    LogInfo,
    LogPage,
    LogStat,
    MemoryStore,
    ServerTime,
    Store,
    Unavailable,
    generation_name,
)
from tests.runtime.harness import OPTIONS as HARNESS_OPTIONS
from tests.runtime.harness import T0, GatedStore, LocalTransport, ManualClock, item, job, make_parts
from tests.sim.loop import EPOCH_US, SimClock, VirtualLoop

#: Blobs one List Blobs call returns at most: a whole listing of n blobs is ceil(n / 5000) calls.
AZURE_PAGE = 5000
# Defaults but for one-minute windows: several lie within the 5-minute lookahead.
OPTIONS = ClusterOptions(shard_duration="1m")
WINDOW_US = int(OPTIONS.shard_duration.total_seconds() * 1e6)
INTERVAL_S = OPTIONS.adoption_interval.total_seconds()
WARM_UP_S = 10.0  # joins, first rounds and balancing settle
MEASURED_S = 40.0  # 20 adoption intervals: more than one full turn of 50 silos (17 intervals)


class CountingStore(MemoryStore):
    """A memory store whose silos each see it through ``seen_by``, which counts their List calls
    under ``shards/`` as Azure bills them: one a page, and a whole listing as many as it takes
    pages of 5,000."""

    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__()
        self.loop = loop
        self.calls: list[tuple[float, str]] = []  # (virtual time, silo) of each shard List call

    def seen_by(self, silo_id: str) -> Store:
        return _Counted(self, silo_id)

    def times(self) -> list[float]:
        return [at for at, _ in self.calls]


class _Counted(Store):
    """One silo's view of a ``CountingStore``."""

    def __init__(self, store: CountingStore, silo_id: str) -> None:
        self._store = store
        self._silo_id = silo_id

    def _count(self, prefix: str, blobs: int) -> None:
        if prefix.startswith(SHARD_PREFIX):
            self._store.calls += [(self._store.loop.time(), self._silo_id)] * max(1, math.ceil(blobs / AZURE_PAGE))

    async def list(self, prefix: str = "") -> list[LogInfo]:
        infos = await self._store.list(prefix)
        self._count(prefix, len(infos))
        return infos

    async def names(self, prefix: str = "") -> tuple[str, ...]:
        names = await self._store.names(prefix)
        self._count(prefix, len(names))
        return names

    async def list_page(self, prefix: str = "", *, after: str | None = None, limit: int) -> LogPage:
        page = await self._store.list_page(prefix, after=after, limit=limit)
        self._count(prefix, len(page.infos))
        return page

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        return await self._store.create(name, metadata)

    async def stat(self, name: str) -> LogStat:
        return await self._store.stat(name)

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        return await self._store.set_metadata(name, metadata, if_match)

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        return await self._store.append_block(name, payload, if_match)

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        return await self._store.fetch(name, offset)

    async def delete(self, name: str, if_match: str | None) -> None:
        await self._store.delete(name, if_match)

    async def server_time(self) -> ServerTime | None:
        return await self._store.server_time()


@dataclass
class Cluster:
    loop: VirtualLoop
    store: CountingStore
    transport: LocalTransport
    silos: dict[str, Silo]


@contextmanager
def virtual_loop() -> Iterator[VirtualLoop]:
    loop = VirtualLoop()
    asyncio.set_event_loop(loop)
    try:
        yield loop
    finally:
        tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        asyncio.set_event_loop(None)
        loop.close()


async def seed_far_future(store: MemoryStore, owners: list[str], windows: int) -> None:
    """``windows`` shard logs of windows a day and more ahead, each owned by a live silo: what
    jobs scheduled far ahead leave in the store."""
    first = EPOCH_US + 86_400_000_000
    for i in range(windows):
        window = first + i * WINDOW_US
        owner = owners[i % len(owners)]
        name = generation_name(shard_name(window, owner.replace("#", "."), 1), 0)
        await store.create(name, ShardMeta(owner, window, window + WINDOW_US).to_metadata())


async def start(loop: VirtualLoop, silos: int, far_windows: int, options: ClusterOptions = OPTIONS) -> Cluster:
    """``silos`` silos on one counting store, each holding a shard within the lookahead, with
    ``far_windows`` shards beyond it; returns once every silo is ready."""
    store = CountingStore(loop)
    transport = LocalTransport()
    ids = [f"s{i:02d}" for i in range(silos)]
    await seed_far_future(store, [f"{sid}#1" for sid in ids], far_windows)
    cluster = Cluster(loop, store, transport, {})
    for sid in ids:
        transport.alive[sid] = Ping.ALIVE
        cluster.silos[sid] = Silo(sid, "memory://", options, "listing", hooks=feature_hooks, transport=transport,
                                  clock=SimClock(loop), store=store.seen_by(sid), rng=random.Random(f"listing/{sid}"))
    for silo in cluster.silos.values():
        await silo.ready()
    for silo in cluster.silos.values():  # a shard of its own within the lookahead
        await silo._r.shards.open_shard(EPOCH_US - EPOCH_US % WINDOW_US + WINDOW_US)
    return cluster


def per_interval(calls: list[float], start: float, end: float) -> list[int]:
    """Shard List calls in each adoption interval from ``start`` to ``end`` (virtual seconds)."""
    counts = Counter(int((t - start) // INTERVAL_S) for t in calls if start <= t < end)
    return [counts.get(i, 0) for i in range(int((end - start) // INTERVAL_S))]


def measure(silos: int, far_windows: int) -> list[int]:
    """List calls per adoption interval of a steady cluster of ``silos`` silos."""
    with virtual_loop() as loop:
        async def run() -> list[int]:
            cluster = await start(loop, silos, far_windows)
            begin = loop.time() + WARM_UP_S
            await asyncio.sleep(WARM_UP_S + MEASURED_S)
            return per_interval(cluster.store.times(), begin, begin + MEASURED_S)
        return loop.run_until_complete(run())


@pytest.mark.parametrize("far_windows", [10, 10_000])
@pytest.mark.parametrize("silos", [3, 50])
def test_list_calls_per_interval_stay_flat_as_far_windows_and_silos_grow(silos: int, far_windows: int) -> None:
    """At most ``adoption_listers`` (3) List calls in any adoption interval, whether 10 or 10,000
    windows lie beyond the lookahead and whether 3 or 50 silos run; and no silo is left out of
    the listing for longer than its turn comes round."""
    counts = measure(silos, far_windows)
    print(f"silos={silos} far_windows={far_windows}: shard List calls per interval {counts}")
    assert max(counts) <= OPTIONS.adoption_listers, counts
    assert min(counts) >= 1, counts  # the cluster still looks every interval: orphans nobody heard of are found


def test_the_cluster_lists_about_as_often_with_50_silos_as_with_3() -> None:
    """Constant, not merely bounded: 50 silos list about as often in all as 3 do (each in turn),
    so an orphan nobody heard of is found about as soon."""
    few, many = sum(measure(3, 10)), sum(measure(50, 10))
    print(f"List calls in {MEASURED_S} s: 3 silos {few}, 50 silos {many}")
    assert few * 0.8 <= many <= few, (few, many)


@dataclass
class Loss:
    lateness: float  # the worst, in seconds
    looked: set[str]  # the silos that listed shards soon after: within the loss's detection, a beat and a tick
    live: set[str]


async def lateness_after_a_loss(loop: VirtualLoop, options: ClusterOptions, ping: Ping) -> Loss:
    """The worst lateness of jobs acknowledged by 5 of 50 silos, due over the 2 s after the
    node that ran those 5 is lost; and which silos looked for orphans soon after.

    Lost as a node is: their loops stop with their shards still their own, and Ray answers a
    ping of them with ``ping`` (``GONE``: reported dead, their lease waited out; ``UNKNOWN``:
    silent, found by suspicion). Each job is judged by the due time its client was told, at its
    first delivery.
    """
    cluster = await start(loop, 50, far_windows=10, options=options)
    fired: dict[str, float] = {}

    async def handler(ctx: JobContext) -> None:
        fired.setdefault(ctx.job.id, loop.time())

    cluster.transport.handlers["h"] = handler
    await asyncio.sleep(WARM_UP_S + 7 * INTERVAL_S)  # anywhere in the turns: the loss waits on none
    lost_at = loop.time()
    due: dict[str, float] = {}
    victims = [cluster.silos[f"s{i:02d}"] for i in range(1, 6)]
    for v, victim in enumerate(victims):
        mine = {f"j{v}.{i}": lost_at + 0.1 + i * 0.1 for i in range(20)}
        jobs = [replace(job(due=T0 + timedelta(seconds=at), now=T0 + timedelta(seconds=lost_at)), id=jid)
                for jid, at in mine.items()]
        await victim.schedule([item(j) for j in jobs])
        due.update(mine)
    for victim in victims:
        for task in victim._tasks:
            task.cancel()
        cluster.transport.alive[victim.silo_id] = ping
    await asyncio.sleep(30)
    assert fired.keys() == due.keys(), f"never fired: {sorted(due.keys() - fired.keys())}"
    # Declared dead at a peer's next beat (reported), or once silent past the suspicion timeout;
    # read by every peer at its next beat, which looks at its next maintenance tick.
    beat = options.heartbeat_interval.total_seconds()
    detected = beat if ping is Ping.GONE else options.suspicion_timeout.total_seconds() + beat
    soon = lost_at + detected + beat + options.staging_interval.total_seconds() + 0.5  # 0.5: store latency, rounded up
    return Loss(lateness=max(fired[jid] - at for jid, at in due.items()),
                looked={who for at, who in cluster.store.calls if lost_at < at <= soon},
                live=set(cluster.silos) - {v.silo_id for v in victims})


@pytest.mark.parametrize("ping", [Ping.GONE, Ping.UNKNOWN], ids=["reported", "silent"])
def test_a_lost_node_fails_over_as_fast_when_silos_list_in_turn(ping: Ping) -> None:
    """Listing in turn does not slow failover: every silo that reads the departures in the
    membership table looks at once, whether or not it is its turn; so the jobs of 5 silos lost
    with their node among 50 fire no later than when all 50 list every interval (as before),
    give or take a maintenance tick."""
    loss: dict[int, Loss] = {}
    for listers in (50, OPTIONS.adoption_listers):
        with virtual_loop() as loop:
            options = replace(OPTIONS, adoption_listers=listers)
            loss[listers] = loop.run_until_complete(lateness_after_a_loss(loop, options, ping))
    every, in_turn = loss[50], loss[OPTIONS.adoption_listers]
    print(f"worst lateness after losing 5 of 50 silos ({ping.name}): all listing {every.lateness:.2f} s, "
          f"{OPTIONS.adoption_listers} listing in turn {in_turn.lateness:.2f} s")
    assert not in_turn.live - in_turn.looked, f"did not look at once: {sorted(in_turn.live - in_turn.looked)}"
    assert in_turn.lateness <= every.lateness + OPTIONS.staging_interval.total_seconds(), (every, in_turn)


def test_shard_names_sort_like_their_windows_in_every_year() -> None:
    """A round stops listing at the first name past the lookahead, so a name that sorted out of
    its window's order would never be looked at: years before 1000 did (``%Y`` left them short),
    and a shard of year 999 — overdue, its jobs firing at once — sorted after this year's."""
    windows = [datetime_to_us(datetime(year, 1, 1, tzinfo=timezone.utc)) for year in (1, 999, 1000, 2030, 9999)]
    names = [shard_name(w, "s0.1", 1) for w in windows]
    assert sorted(names) == names
    assert all(shards_before(w) < name < shards_before(w + 1) for w, name in zip(windows, names, strict=True))


async def test_a_departure_heard_is_looked_for_until_a_listing_gets_through() -> None:
    """A silo that reads a departure looks for orphans at its next tick, whatever its turn; a
    round whose listing fails (a store outage) leaves it looking, and only a listing that got
    through answers it: else the orphans would wait for the silo's turn, up to
    ``ceil(silos / adoption_listers)`` intervals."""
    options = replace(HARNESS_OPTIONS, adoption_listers=1)  # 3 silos, each lists every third interval
    store, clock = GatedStore(), ManualClock()
    a, b, _ = [await make_parts(store, silo, clock=clock, options=options) for silo in ("a", "b", "c")]
    await a.adoption.adopt_orphans()
    assert not a.adoption.round_due()  # just looked: not again until its turn
    assert await b.heartbeat.declare_peer_dead("c")  # Ray reports c dead
    await a.adoption.read_members()  # a's next heartbeat reads the table
    assert a.adoption.round_due()
    store.fail_next("list_page", prefix=SHARD_PREFIX)
    with pytest.raises(Unavailable):
        await a.adoption.adopt_orphans()
    assert a.adoption.round_due(), "the departure was forgotten by a round that listed nothing"
    await a.adoption.adopt_orphans()
    assert not a.adoption.round_due()
