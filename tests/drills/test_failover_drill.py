"""Failover drills in every test run, with the default options: kills and a pause, and a restart storm.

The long drills run on demand: ``timeshard drill --kills 20 --pause`` and ``timeshard drill --storm 30``.
"""

from __future__ import annotations

import uuid

import pytest

from cluster import Cluster
from cluster.cli.drill import DRILL_OPTIONS, run_drill
from cluster.cli.drill_analysis import DELIVERY_S, IN_FLIGHT_S, STORM_ACK_FLOOR, STORM_ACK_RATE, DrillReport
from cluster.model.options import ClusterOptions

pytestmark = pytest.mark.ray


def assert_safe(report: DrillReport) -> None:
    """What a user relies on after any failure: each check with what broke it, and the history
    of the shard involved (owners as seen in the store) and the events, to diagnose it from."""
    events = [(e.kind, round(e.at, 3), e.owner) for e in report.events]
    if report.unexplained_duplicates:
        first = report.unexplained_duplicates[0]
        events.append(("owners of " + first[0][0], 0, repr(report.history_of(first[0][0]))))
    if report.two_owner_examples:
        shard = report.two_owner_examples[0][1]
        events.append(("owners of " + shard, 0, repr(report.history_of(shard))))
    assert report.observer_errors == 0, f"the store watcher failed: {report.observer_error_examples}"
    assert report.lost == 0, f"{report.lost} acknowledged jobs never fired: {report.lost_jobs[:5]}"
    assert report.early == 0, f"fires before the due time acknowledged (job, started, due): {report.early_examples[:5]}"
    assert not report.unacknowledged_fires, f"jobs neither acknowledged nor in doubt fired: {report.unacknowledged_fires[:5]}"
    assert report.other_duplicates == 0, (
        f"{report.other_duplicates} duplicates not explained by a run whose outcome the log lacks at a kill or pause "
        f"(shard, then runs as owner, started, due): {report.unexplained_duplicates[:5]}; events {events}")
    assert report.two_owner_fires == 0, (
        f"{report.two_owner_fires} fires by an owner after another took its shard "
        f"(job, shard, owner, started, superseded at): {report.two_owner_examples[:5]}; events {events}")
    assert report.zombie_fires == 0, f"fires after a kill or declared death: {report.zombie_examples[:5]}"
    # The windows that excused a re-run or a late call, justified by this run's own measurements.
    assert report.in_flight_window_ok, (
        f"{report.explained_by_window} re-runs excused by the {IN_FLIGHT_S} s in-flight window, which this run does not "
        f"justify: start to durable outcome {_spread(report.durable_s)}; {len(report.window_appends)} appends of no "
        f"proven writer placed, for {sum(len(e.shards) for e in report.hits)} shards hit")
    assert report.delivery_window_ok, (
        f"{len(report.delivery_excused)} batches (owner, arrived after the hit, jobs) excused by the {DELIVERY_S} s "
        f"delivery window in {len(report.hits)} hits: {report.delivery_excused[:5]}; silo send to handler "
        f"{_spread(report.delivery_s)}")
    assert not report.silo_faults, report.silo_faults[:5]


def test_drills_use_the_default_options():
    assert ClusterOptions() == DRILL_OPTIONS


async def test_kills_and_a_pause_lose_nothing_and_the_paused_silo_is_fenced(ray_session, drill_store, tmp_path):
    cluster = Cluster.start(drill_store, silos=3, namespace=f"drill-{uuid.uuid4().hex[:6]}", options=DRILL_OPTIONS)
    try:
        report = await run_drill(cluster, tmp_path / "out", kills=2, pause=True, rate=100, seed=11, progress=False)
        statuses = cluster.status()
    finally:
        cluster.shutdown(graceful=False)

    assert_safe(report)
    # Every shard a killed silo held with jobs falling due is taken over, within the README's bound.
    assert not report.unmeasured_kills, f"shards never taken over after a kill: {report.unmeasured_kills}"
    assert report.failover_s and max(report.failover_s) <= report.failover_bound_s, report.failover_s
    print(f"drill: {report.duplicates} duplicates in {sum(e.kind == 'kill' for e in report.events)} kills and a pause "
          f"({report.explained_by_log} by the log, {report.explained_by_window} by the window); failover per shard "
          f"{sorted(report.failover_s)} s; start to durable outcome {_spread(report.durable_s)}; "
          f"silo send to handler {_spread(report.delivery_s)}, {len(report.delivery_excused)} late calls excused")
    # The paused incarnation was declared dead while stopped and came back as a new incarnation.
    assert report.paused_declared_dead_s is not None, "the paused silo was never declared dead"
    # ...while jobs of its shards fell due: the fence had something to keep it from firing.
    assert report.paused_jobs_due > 0, "no job of the paused silo fell due while it was stopped"
    pause = next(e for e in report.events if e.kind == "pause")
    now = next(s for s in statuses if s.get("silo_id") == pause.silo)
    assert now["owner"] != pause.owner
    assert (tmp_path / "out" / "drill-timeline.png").stat().st_size > 10_000


async def test_a_restart_storm_loses_nothing(ray_session, drill_store, tmp_path):
    """A silo SIGKILLed every 1-2 s under load, Ray restarting it each time (issue 12)."""
    cluster = Cluster.start(drill_store, silos=3, namespace=f"storm-{uuid.uuid4().hex[:6]}", options=DRILL_OPTIONS)
    try:
        report = await run_drill(cluster, tmp_path / "out", storm_s=10, storm_kills=5, rate=100, seed=5,
                                 progress=False)
    finally:
        cluster.shutdown(graceful=False)

    kills = [round(e.at - report.events[0].at, 2) for e in report.events if e.kind == "kill"]
    assert len(kills) >= 5, f"the storm killed at {kills} s only"
    assert_safe(report)
    load = report.storm_load
    assert load is not None
    print(f"storm: {sum(e.kind == 'kill' for e in report.events)} kills; offered {load.offered}, acknowledged "
          f"{load.acknowledged}, in doubt {len(load.in_doubt)}, refused {load.refused}; {report.duplicates} duplicates "
          f"({report.explained_by_log} by the log, {report.explained_by_window} by the window); failover per shard "
          f"{_spread(report.failover_s)}; start to durable outcome {_spread(report.durable_s)}; "
          f"silo send to handler {_spread(report.delivery_s)}, {len(report.delivery_excused)} late calls excused")
    # Told something the client promises, every call: acknowledged, in doubt, or refused outright.
    assert not load.unexpected, f"schedule calls failed in ways the client does not promise: {load.unexpected[:5]}"
    # Two of three silos are up at any moment and the client routes around the one being killed.
    assert load.acknowledged >= STORM_ACK_FLOOR * load.offered and load.acknowledged >= STORM_ACK_RATE * load.duration, (
        f"the storm acknowledged {load.acknowledged} of {load.offered} jobs offered in {load.duration:.0f} s "
        f"({len(load.in_doubt)} in doubt, {load.refused} refused)")


def _spread(values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "none"
    return (f"p50 {ordered[len(ordered) // 2]:.3f} s, p99 {ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]:.3f} s, "
            f"max {ordered[-1]:.3f} s over {len(ordered)}")
