"""The dashboard's overview and shards pages against fake statuses: the charts' math (rates across a
silo restart, lateness quantiles from buckets, the kept window), alerts, one reading shared by all
requests, and loaded and dormant shards apart. No Ray, no browser."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from cluster.cli.ui import UiSource, make_app
from cluster.cli.ui.overview import alerts, silo_row
from cluster.cli.ui.sampler import SAMPLER, Sampler, Series, quantile
from cluster.runtime.metrics import LATENESS_BOUNDS, Histogram


def silo(silo_id: str, incarnation: int, fired: int, lateness: list[float] | None = None,
         **more: Any) -> dict[str, Any]:
    """A healthy silo's status whose counters say ``fired`` fires, with ``lateness`` observed."""
    late = Histogram(None, LATENESS_BOUNDS)
    late.observe_many(lateness or [])
    return {"silo_id": silo_id, "owner": f"{silo_id}#{incarnation}", "lease_age": 0.2, "lease_left": 1.4,
            "heartbeat_interval_s": 0.5, "shards": [], "quarantined": [], "parked": {}, "damaged": {},
            "clock": {"exceeded": False},
            "counters": {"fired": fired, "lateness_buckets": late.cumulative(), "lateness_count": late.count},
            **more}


def test_fires_per_second_sum_silos_and_a_restart_counts_from_zero_never_negative() -> None:
    series = Series(keep=600, interval=2)
    assert series.add(0, 1000, [silo("a", 1, 100), silo("b", 1, 50)]) is None  # where counting starts
    point = series.add(2, 1002, [silo("a", 1, 120), silo("b", 1, 54)])
    assert point is not None and point.fires_per_s == pytest.approx(12.0)  # (20 + 4) / 2 s
    # a restarted (incarnation 2, counters from 0: 6 fires); b missed this reading
    point = series.add(4, 1004, [silo("a", 2, 6), {"silo_id": "b", "error": "GetTimeoutError()"}])
    assert point is not None and point.fires_per_s == pytest.approx(3.0)
    # b answers again: its 16 fires since t=2 spread over the 4 s since it last answered
    point = series.add(6, 1006, [silo("a", 2, 10), silo("b", 1, 70)])
    assert point is not None and point.fires_per_s == pytest.approx(2.0 + 4.0)
    point = series.add(8, 1008, [{"silo_id": "a", "error": "x"}, {"silo_id": "b", "error": "x"}])
    assert point is not None and point.fires_per_s is None  # nobody answered: no figure, not 0


def test_lateness_quantiles_interpolate_within_buckets_like_histogram_quantile() -> None:
    uniform = [(i + 0.5) / 10_000 for i in range(1000)]  # 1000 fires spread evenly over 0..100 ms
    series = Series()
    series.add(0, 0, [silo("a", 1, 5, [0.003] * 5)])
    point = series.add(2, 2, [silo("a", 1, 1005, [0.003] * 5 + uniform)])  # only this interval's counts
    assert point is not None
    assert point.lateness_p50_ms == pytest.approx(50.0) and point.lateness_p99_ms == pytest.approx(99.0)
    quiet = series.add(4, 4, [silo("a", 1, 1005, [0.003] * 5 + uniform)])
    assert quiet is not None and (quiet.fires_per_s, quiet.lateness_p50_ms, quiet.lateness_p99_ms) == (0, None, None)
    # Above every bound: the highest finite one, as Prometheus answers.
    assert quantile(0.99, ((1.0, 0), (30.0, 0), (float("inf"), 4))) == 30.0
    # Across a restart the new incarnation's buckets count whole.
    restarted = series.add(6, 6, [silo("a", 2, 2, [0.3, 0.3])])
    assert restarted is not None and 250 < restarted.lateness_p50_ms <= 500  # type: ignore[operator]


def test_the_series_keeps_only_the_last_minutes() -> None:
    series = Series(keep=10, interval=2)
    for i in range(30):
        series.add(2 * i, 1000 + 2 * i, [silo("a", 1, 10 * i)])
    times = [p.t for p in series.points()]
    assert times[-1] == 1058 and times[0] >= 1058 - 10 and len(times) <= 6


HEALTHY = silo("ok", 1, 0)


@pytest.mark.parametrize(("kind", "status"), [
    ("silo_down", {"silo_id": "s", "error": "RayActorError()"}),
    ("quarantined", silo("s", 1, 0, quarantined=["shard-a"], shards=[{"name": "shard-a", "owner_deaths": 3}])),
    ("parked", silo("s", 1, 0, parked={"shard-a": ["job-1", "job-2"]})),
    ("damaged", silo("s", 1, 0, damaged={"shard-a": {"lost": 4, "kept_as": "damaged/shard-a~0", "ranges": []}})),
    ("unreadable", silo("s", 1, 0, shards=[{"name": "shard-a", "unreadable": 2}])),
    ("clock_skew", silo("s", 1, 0, clock={"exceeded": True, "offset_low_s": 3.0, "offset_high_s": 3.1,
                                          "max_clock_skew_s": 1.0})),
    ("niced", silo("s", 1, 0, niceness=15)),  # Ray's default for workers: starved beside any busy process
    ("heartbeat", silo("s", 1, 0, lease_age=2.1, lease_left=-0.5)),  # lapsed: not firing
    ("heartbeat", silo("s", 1, 0, lease_age=2.0, lease_left=2.0)),  # 4 beats missed, lease still holds
])
def test_each_kind_of_trouble_is_one_alert_naming_the_silo(kind: str, status: dict[str, Any]) -> None:
    found = alerts([HEALTHY, status])
    assert [(a["kind"], a["silo"]) for a in found] == [(kind, "s")]
    assert found[0]["message"]
    if kind in ("quarantined", "parked", "damaged", "unreadable"):
        assert found[0]["shard"] == "shard-a"


def test_a_heartbeat_within_a_few_intervals_is_no_alert() -> None:
    """A slow heartbeat write now and then must not make the alert come and go."""
    assert alerts([silo("s", 1, 0, lease_age=1.4, lease_left=0.2)]) == []  # 2.8 intervals, lease holds
    assert alerts([HEALTHY]) == []


def test_a_restart_or_lapse_seen_between_readings_stays_an_alert_for_the_kept_minutes() -> None:
    """A rejoin or a late heartbeat is over by the next reading; the operator still sees it."""
    series = Series(keep=60, interval=2)
    series.add(0, 1000, [silo("a", 1, 0), silo("b", 1, 0, counters={"fired": 0, "lease_lapses": 2})])
    series.add(2, 1002, [silo("a", 1, 0), silo("b", 1, 0, counters={"fired": 0, "lease_lapses": 2})])
    assert series.events() == []  # a count that did not grow since the first reading is no news
    series.add(4, 1004, [silo("a", 2, 0), silo("b", 1, 0, counters={"fired": 0, "lease_lapses": 3})])
    found = alerts([silo("a", 2, 0), HEALTHY], series.events(), wall=1034)
    assert [(a["kind"], a["silo"]) for a in found] == [("restarted", "a"), ("heartbeat", "b")]
    assert "incarnation 2" in found[0]["message"] and "30 s ago" in found[0]["message"]
    assert "1 time" in found[1]["message"]
    series.add(66, 1066, [silo("a", 2, 0), silo("b", 1, 0, counters={"fired": 0, "lease_lapses": 3})])
    assert series.events() == []  # older than the kept window: gone


class Statuses:
    """A fake ``Cluster.status`` whose answers a test changes; counts its calls (from a thread)."""

    def __init__(self, answer: list[dict[str, Any]]) -> None:
        self.answer = answer
        self.calls = 0
        self._lock = threading.Lock()

    def __call__(self) -> list[dict[str, Any]]:
        with self._lock:
            self.calls += 1
        return self.answer


async def started(status: Callable[[], list[dict[str, Any]]], **options: Any) -> TestClient:
    client = TestClient(TestServer(make_app(UiSource(status=status, jobs=None), **options)))
    await client.start_server()
    return client


async def test_one_reading_serves_the_sampler_and_every_request_within_the_interval() -> None:
    status = Statuses([silo("a", 1, 10, quarantined=["shard-x"], shards=[{"name": "shard-x", "loaded": True}])])
    client = await started(status, interval=3600)
    try:
        for _ in range(3):
            body = await (await client.get("/api/overview")).json()
            assert (await client.get("/api/shards")).status == 200
        assert status.calls == 1
        assert [a["kind"] for a in body["alerts"]] == ["quarantined"]
        assert set(body["series"]) == {"interval_s", "keep_s", "points"} and body["silos"][0]["silo_id"] == "a"
    finally:
        await client.close()


async def test_the_overview_answers_a_restart_seen_between_readings_as_an_alert() -> None:
    status = Statuses([silo("a", 1, 10)])
    client = await started(status, interval=0.05)
    try:
        assert (await (await client.get("/api/overview")).json())["alerts"] == []
        status.answer = [silo("a", 2, 0)]  # Ray restarted it, or its peers declared it dead and it rejoined
        await asyncio.sleep(0.1)
        status.answer = [silo("a", 2, 4)]
        await asyncio.sleep(0.1)
        body = await (await client.get("/api/overview")).json()
        assert [(a["kind"], a["silo"]) for a in body["alerts"]] == [("restarted", "a")]
    finally:
        await client.close()


async def test_a_reading_older_than_the_interval_is_taken_again_once_for_all_waiting() -> None:
    clock = [0.0]
    status = Statuses([silo("a", 1, 10)])

    async def read() -> list[dict[str, Any]]:
        return await asyncio.to_thread(status)

    sampler = Sampler(read, interval=2, monotonic=lambda: clock[0], wall=lambda: 1000 + clock[0])
    await asyncio.gather(*(sampler.latest() for _ in range(5)))
    assert status.calls == 1
    clock[0] = 2.0
    status.answer = [silo("a", 1, 30)]
    await asyncio.gather(*(sampler.latest() for _ in range(5)))
    assert status.calls == 2
    assert [p.fires_per_s for p in sampler.series.points()] == [10.0]
    # What the page's charts read: one value per svg.chart[data-metric], at t (epoch s).
    assert sampler.series.to_json()["points"] == [
        {"t": 1002.0, "fires_per_s": 10.0, "lateness_p50_ms": None, "lateness_p99_ms": None}]


async def test_the_sampler_reads_on_its_own_while_the_app_runs_and_stops_with_it() -> None:
    loop, third = asyncio.get_running_loop(), asyncio.Event()
    counted = Statuses([silo("a", 1, 0)])

    def status() -> list[dict[str, Any]]:
        answer = counted()
        if counted.calls == 3:
            loop.call_soon_threadsafe(third.set)
        return answer

    client = await started(status, interval=0.01)
    sampler = client.app[SAMPLER]
    try:
        await asyncio.wait_for(third.wait(), timeout=10)  # no request made: the loop read them
        assert sampler.task is not None and not sampler.task.done()
    finally:
        await client.close()
    assert sampler.task.done()


def shard(name: str, loaded: bool, jobs: int, generation: int) -> dict[str, Any]:
    return {"name": name, "state": "open", "loaded": loaded, "jobs": jobs if loaded else -1, "window_start": 0,
            "window_end": 1, "adopted_count": 0, "generation": generation}


async def test_loaded_and_dormant_shards_are_listed_apart_sorted_and_paged() -> None:
    shards = [shard(f"l{i}", True, i, i % 2) for i in range(5)] + [shard(f"d{i}", False, 0, 3 - i) for i in range(3)]
    client = await started(lambda: [silo("a", 1, 0, shards=shards)], page_size=2)
    try:
        loaded = await (await client.get("/api/shards?loaded=true&sort=-jobs")).json()
        assert (loaded["total"], [r["name"] for r in loaded["items"]]) == (5, ["l4", "l3"])
        dormant = await (await client.get("/api/shards?loaded=false&sort=generation&page=2")).json()
        assert (dormant["total"], dormant["pages"], [r["name"] for r in dormant["items"]]) == (3, 2, ["d0"])
        assert dormant["items"][0]["generation"] == 3
        every = await (await client.get("/api/shards")).json()
        assert every["total"] == 8
        assert (await client.get("/api/shards?loaded=maybe")).status == 400
    finally:
        await client.close()


def test_a_silo_row_shows_how_late_its_reading_of_the_stores_clock_makes_jobs() -> None:
    measured = {"store_clock": "measured", "offset_low_s": -0.0042, "offset_high_s": -0.0011, "width_s": 0.0031,
                "lateness_up_to_s": 0.0031, "exceeded": False, "timed_by": "kernel"}
    row = silo_row(silo("s", 1, 0, clock=measured))
    assert (row["clock_late_ms"], row["clock_offset_ms"], row["clock_store"]) == (3.1, [-4.2, -1.1], "measured")
    assert row["clock_timed_by"] == "kernel"  # an operator sees whether the event loop's delays count
    unmeasured = {"store_clock": "unmeasured", "offset_low_s": None, "offset_high_s": None, "width_s": None,
                  "lateness_up_to_s": None, "exceeded": False}
    assert silo_row(silo("s", 1, 0, clock=unmeasured))["clock_late_ms"] is None


async def test_the_overview_shows_target_versus_live_silos_and_alerts_below_target() -> None:
    """Issue 28: the dashboard shows the keeper's target beside the silos that answered; fewer is an alert."""
    status = Statuses([silo("a", 1, 10), silo("b", 1, 10)])
    keeper = {"target": 3, "live": ["a", "b"], "waiting": "starting silo(s) c", "draining": [], "repairs": []}
    client = TestClient(TestServer(make_app(UiSource(status=status, jobs=None, keeping=lambda: keeper), interval=0.05)))
    await client.start_server()
    try:
        body = await (await client.get("/api/overview")).json()
        assert (body["keeping"]["target"], body["keeping"]["live"]) == (3, 2)
        assert [(a["kind"], a["message"]) for a in body["alerts"]] == [
            ("below_target", "2 silo(s) live, target 3: starting silo(s) c")]
        status.answer = [silo("a", 1, 10), silo("b", 1, 10), {"silo_id": "c", "error": "no Ray actor silo-c"}]
        await asyncio.sleep(0.1)
        body = await (await client.get("/api/overview")).json()
        assert body["keeping"]["live"] == 2 and body["alerts"][0]["kind"] == "below_target"  # one not answering
        status.answer = [silo("a", 1, 10), silo("b", 1, 10), silo("c", 1, 0)]
        await asyncio.sleep(0.1)
        body = await (await client.get("/api/overview")).json()
        assert body["keeping"]["live"] == 3 and body["alerts"] == []
    finally:
        await client.close()
    plain = await started(Statuses([silo("a", 1, 10)]))
    try:
        assert (await (await plain.get("/api/overview")).json())["keeping"] is None  # a source without a keeper
    finally:
        await plain.close()


def test_status_shows_target_versus_live_silos_and_what_the_keeper_waits_for() -> None:
    from cluster.cli.jobs import _status_text, keeping_summary

    def first_lines(keeper: dict[str, Any] | None, statuses: list[dict[str, Any]]) -> list[str]:
        report = {"namespace": "n", "store": "s", "silos": [], "keeping": keeping_summary(keeper, statuses)}
        return _status_text(report).splitlines()[2:]

    up = [{"silo_id": "0"}, {"silo_id": "1"}, {"silo_id": "2", "error": "gone"}]
    keeper = {"target": 3, "waiting": "no alive Ray node has room for another silo", "draining": ["ab" * 20],
              "repairs": [{"silo": "1", "node": "cd" * 20, "at": 0.0, "start_s": 1.25}]}
    lines = first_lines(keeper, up)
    assert lines[0] == "silos 2 live, target 3  BELOW TARGET"
    assert lines[1] == "  keeper: no alive Ray node has room for another silo"
    assert lines[2] == "  draining node(s), no silo placed there: abababababab"
    assert lines[3].startswith("  keeper started silo 1 on node cdcdcdcdcdcd at ") and lines[3].endswith("(1.2 s to serve)")
    assert first_lines({"target": 2, "waiting": None, "draining": [], "repairs": []}, up) == ["silos 2 live, target 2"]
    assert first_lines(None, up)[0].startswith("silos 2 live, no target: no keeper runs")
