"""A silo's status counts each fire's lateness into cumulative buckets (the dashboard's p50/p99)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

from cluster.model.clock import SYSTEM_CLOCK
from cluster.runtime.metrics import LATENESS_BOUNDS
from cluster.runtime.silo import Silo
from storage import MemoryStore
from tests.runtime.harness import OPTIONS, LocalTransport, Recorder, add, fire_due, item, job, make_parts


async def test_lateness_buckets_count_each_fire_at_or_below_each_bound() -> None:
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    late_500ms, late_200ms = job(due=timedelta(seconds=1)), job(due=timedelta(seconds=1.3))
    on_time = job(due=timedelta(seconds=2))
    await add(parts, late_500ms, late_200ms, on_time)
    for step in (1.5, 0.5):  # fire at T0+1.5 s (two due, 0.5 s and 0.2 s late), then at T0+2 s (one due)
        parts.clock.advance(step)
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)
    assert len(recorder.ran) == 3
    counters = parts.metrics.snapshot()
    buckets = counters["lateness_buckets"]
    assert list(buckets) == [str(b) for b in LATENESS_BOUNDS] + ["+Inf"]
    assert (buckets["0.001"], buckets["0.1"], buckets["0.25"], buckets["0.5"], buckets["+Inf"]) == (1, 1, 2, 3, 3)
    assert counters["lateness_count"] == counters["fired"] == 3


async def test_status_reports_lateness_buckets_of_what_fired_and_each_shards_log_generation() -> None:
    transport = LocalTransport()
    transport.handlers["h"] = recorder = Recorder()
    silo = Silo("0", "memory://", OPTIONS.with_(heartbeat_interval="100ms", suspicion_timeout="1s"), "test",
                hooks=lambda _store, _view: [], transport=transport, clock=SYSTEM_CLOCK, store=MemoryStore())
    await silo.ready()
    now = datetime.now(timezone.utc)
    await silo.schedule([item(job(due=timedelta(milliseconds=100 + 20 * i), now=now)) for i in range(4)])
    for _ in range(100):
        if len(recorder.ran) == 4:
            break
        await asyncio.sleep(0.05)
    held = len(list(silo._r.shards))  # one or two: the four due times may straddle a window's edge
    for shard in silo._r.shards:  # compacted into its next generation, as at the log's size limit
        await shard.writer.rotate()
    status = await silo.status()
    await silo.stop()
    counters = status["counters"]
    cumulative = list(counters["lateness_buckets"].values())
    assert counters["fired"] == 4 and cumulative[-1] == 4 and cumulative == sorted(cumulative)
    assert status["heartbeat_interval_s"] == 0.1
    assert held >= 1 and [s["generation"] for s in status["shards"]] == [1] * held
