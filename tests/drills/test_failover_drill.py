"""Failover drills in every test run, with the default options: kills and a pause, and a restart storm.

The long drills run on demand: ``timeshard drill --kills 20 --pause`` and ``timeshard drill --storm 30``.
"""

from __future__ import annotations

import uuid

import pytest

from cluster import Cluster
from cluster.cli.drill import DRILL_OPTIONS, run_drill
from cluster.cli.drill_analysis import DrillReport
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
    assert report.lost == 0, f"{report.lost} acknowledged jobs never fired: {report.lost_jobs[:5]}"
    assert report.early == 0, f"{report.early} fires before their due time"
    assert report.other_duplicates == 0, (
        f"{report.other_duplicates} duplicates not explained by an attempt in flight at a kill or pause "
        f"(shard, then runs as owner, started, due): {report.unexplained_duplicates[:5]}; events {events}")
    assert report.two_owner_fires == 0, (
        f"{report.two_owner_fires} fires by an owner after another took its shard "
        f"(job, shard, owner, started, superseded at): {report.two_owner_examples[:5]}; events {events}")
    assert report.zombie_fires == 0, f"fires after a kill or declared death: {report.zombie_examples[:5]}"
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
    # Every kill of a silo that held jobs still due is taken over, within the README's bound.
    assert not report.unmeasured_kills, f"kills never taken over: {report.unmeasured_kills}"
    assert report.failover_s and max(report.failover_s) <= report.failover_bound_s, report.failover_s
    # The paused incarnation was declared dead while stopped and came back as a new incarnation.
    assert report.paused_declared_dead_s is not None, "the paused silo was never declared dead"
    pause = next(e for e in report.events if e.kind == "pause")
    now = next(s for s in statuses if s.get("silo_id") == pause.silo)
    assert now["owner"] != pause.owner
    assert (tmp_path / "out" / "drill-timeline.png").stat().st_size > 10_000


async def test_a_restart_storm_loses_nothing(ray_session, drill_store, tmp_path):
    """A silo SIGKILLed every 1-2 s under load, Ray restarting it each time (issue 12)."""
    cluster = Cluster.start(drill_store, silos=3, namespace=f"storm-{uuid.uuid4().hex[:6]}", options=DRILL_OPTIONS)
    try:
        report = await run_drill(cluster, tmp_path / "out", storm_s=10, rate=100, seed=5, progress=False)
    finally:
        cluster.shutdown(graceful=False)

    assert sum(e.kind == "kill" for e in report.events) >= 5
    assert_safe(report)
