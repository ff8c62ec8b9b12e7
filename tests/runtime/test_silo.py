"""A whole silo in-process: clock, transport and store passed in, no Ray; jobs fire and stop releases."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

import pytest

from cluster.model.clock import SYSTEM_CLOCK
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.shardlog import RELEASED, SHARD_PREFIX
from cluster.runtime.silo import Silo
from storage import MemoryStore, list_logs
from tests.runtime.harness import OPTIONS, LocalTransport, Recorder, item, job


class Seen(SiloHooks):
    def __init__(self) -> None:
        self.ended: list[str] = []

    async def attempt_ended(self, event, end) -> None:  # type: ignore[no-untyped-def]
        self.ended.append(event.job.id)


async def test_a_silo_built_with_a_local_transport_fires_its_jobs_and_releases_its_shards_on_stop() -> None:
    store, transport, seen = MemoryStore(), LocalTransport(), Seen()
    transport.handlers["h"] = recorder = Recorder()
    silo = Silo("0", "memory://", OPTIONS.with_(heartbeat_interval="100ms", suspicion_timeout="1s"), "test",
                hooks=lambda _store, _view: [seen], transport=transport, clock=SYSTEM_CLOCK, store=store)
    assert (await silo.ready())["owner"] == "0#1"
    window = OPTIONS.shard_duration.total_seconds()
    left = window - time.time() % window
    if left < 0.5:  # the jobs' 300 ms would straddle two windows, two shards (1 run in 30 failed so)
        await asyncio.sleep(left)
    now = datetime.now(timezone.utc)
    jobs = [job(due=timedelta(milliseconds=200 + 50 * i), now=now, schedule=None) for i in range(3)]
    shards = await silo.schedule([item(j) for j in jobs])
    assert len(set(shards)) == 1
    for _ in range(100):
        if len(recorder.ran) == 3:
            break
        await asyncio.sleep(0.05)
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted(j.id for j in jobs)
    assert all(datetime.now(timezone.utc) >= ctx.scheduled_for for ctx in recorder.ran)
    for _ in range(20):
        if len(seen.ended) == 3:
            break
        await asyncio.sleep(0.05)
    assert sorted(seen.ended) == sorted(j.id for j in jobs)  # hooks passed in hear every outcome
    stopped = await silo.stop()
    assert stopped == {"released": 1, "unfinished": 0}
    assert {h.metadata["owner"] for h in await list_logs(store, SHARD_PREFIX)} == {"-"}


def test_a_silo_whose_first_join_and_adoption_fail_joins_once_the_store_answers() -> None:
    """Found by the simulation: a storage fault in the join (or the first adoption round) ended
    ``_start``, so the silo answered pings, and so was never replaced, while serving nothing."""
    from random import Random

    from tests.runtime.harness import GatedStore
    from tests.sim.loop import SimClock, VirtualLoop

    loop = VirtualLoop()

    async def main() -> dict[str, object]:
        store = GatedStore()
        store.fail_next("stat", 1)  # the join's first read of its membership row
        store.fail_next("list", 1)  # the first adoption round, once joined
        silo = Silo("s", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=LocalTransport(),
                    clock=SimClock(loop), store=store, rng=Random(1))  # type: ignore[arg-type]
        info = await asyncio.wait_for(silo.ready(), 30)
        await silo.stop()
        return info

    try:
        assert loop.run_until_complete(main())["owner"] == "s#1"
    finally:
        loop.close()


def test_a_silo_whose_first_reading_of_the_store_clock_fails_fires_nothing_early() -> None:
    """Found by the simulation (issue 12 point 10): the first ``server_time`` failed, so the silo
    fired on its own clock, 2 s ahead of the store's, until its next reading: early by up to 2 s."""
    from random import Random

    from tests.runtime.harness import GatedStore
    from tests.sim.loop import SimClock, VirtualLoop, true_now_us

    loop = VirtualLoop()
    fired_at: list[int] = []

    async def main() -> None:
        store = GatedStore(MemoryStore(clock=lambda: true_now_us(loop)))
        store.fail_next("server_time", 1)
        transport = LocalTransport()

        async def record(_ctx) -> None:  # type: ignore[no-untyped-def]
            fired_at.append(true_now_us(loop))

        transport.handlers["h"] = record
        silo = Silo("s", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=transport,
                    clock=SimClock(loop, skew_us=2_000_000), store=store, rng=Random(1))  # type: ignore[arg-type]
        await asyncio.wait_for(silo.ready(), 30)
        due = datetime.fromtimestamp((true_now_us(loop) + 500_000) / 1e6, timezone.utc)
        j = job(due=due, now=due - timedelta(seconds=1))
        await silo.schedule([item(j)])
        await asyncio.sleep(5)
        await silo.stop()
        assert fired_at and fired_at[0] >= true_now_us_of(due)

    def true_now_us_of(when: datetime) -> int:
        return int(when.timestamp() * 1_000_000)

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()


@pytest.mark.parametrize("stop_timeout", [None, 0.05], ids=["default", "a deadline before the lease ends"])
async def test_a_silo_stopped_just_after_adopting_from_an_exited_silo_releases_that_shard_only_once_its_sends_end(
        stop_timeout: float | None) -> None:
    """Ray restarted silo 0 after a SIGKILL: its second incarnation adopted the first one's shard
    at once (the process is gone), while what the first sent ahead may still start at a handler
    until its lease ends. Stopped within that lease, it released the shard at once; its next
    owner, claiming a released shard, knows of no lease to wait out, and answers a cancel
    "cancelled" while that send may still start. The shard is released once the lease is over,
    even by a stop whose own deadline comes first."""
    store = ReleaseTimes()
    options = OPTIONS.with_(heartbeat_interval="100ms", suspicion_timeout="1s")

    def start(transport: LocalTransport) -> Silo:
        return Silo("0", "memory://", options, "test", hooks=lambda _store, _view: [], transport=transport,
                    clock=SYSTEM_CLOCK, store=store)

    first = start(LocalTransport())
    await first.ready()
    (base,) = await first.schedule([item(job(due=timedelta(seconds=4), now=datetime.now(timezone.utc)))])
    for task in first._tasks:  # SIGKILL
        task.cancel()
    second = start(LocalTransport(predecessors_exited=True))
    await second.ready()
    adopted = second._r.shards.get(base)
    assert adopted is not None and adopted.sent_before_until > SYSTEM_CLOCK.monotonic()
    await (second.stop() if stop_timeout is None else second.stop(timeout=stop_timeout))
    assert store.released[base] >= adopted.sent_before_until, \
        f"released {adopted.sent_before_until - store.released[base]:.3f} s before the dead owner's lease ended"
    assert {h.metadata["owner"] for h in await list_logs(store, SHARD_PREFIX)} == {"-"}


class ReleaseTimes(MemoryStore):
    """Notes when (monotonic) each log's owner was cleared: a release."""

    def __init__(self) -> None:
        super().__init__()
        self.released: dict[str, float] = {}

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        etag = await super().set_metadata(name, metadata, if_match)
        if metadata.get("owner") == RELEASED:
            self.released.setdefault(name.split("~")[0], SYSTEM_CLOCK.monotonic())  # the log, not its generation
        return etag
