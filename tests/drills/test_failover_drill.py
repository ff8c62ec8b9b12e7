"""A short failover drill in every test run: SIGKILL silos at random, SIGSTOP one, count.

The long drill (20 kills) runs on demand: ``timeshard drill --kills 20 --pause``.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from cluster import Cluster
from cluster.cli.drill import DRILL_OPTIONS, run_drill

pytestmark = pytest.mark.ray


@pytest.fixture(params=["file", pytest.param("azure", marks=pytest.mark.azurite)])
def drill_store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'store'}"
    return str(request.getfixturevalue("azure_store_url"))


async def test_kills_and_a_pause_lose_nothing_and_the_paused_silo_is_fenced(ray_session, drill_store, tmp_path):
    cluster = Cluster.start(drill_store, silos=3, namespace=f"drill-{uuid.uuid4().hex[:6]}", options=DRILL_OPTIONS)
    try:
        report = await run_drill(cluster, tmp_path / "out", kills=2, pause=True, rate=120, seed=11, progress=False)
        statuses = cluster.status()
    finally:
        cluster.shutdown(graceful=False)

    assert report.lost == 0, report.lost_jobs[:5]
    assert report.early == 0
    assert report.zombie_fires == 0, "the paused silo fired after it was declared dead"
    # Duplicates are allowed (at least once); nearly all must be re-runs of attempts that were in
    # flight at a kill or pause. A few others show up on a loaded 2-core machine (two live silos
    # firing one job once, see the drill's unexplained_duplicates): bounded here, not hidden.
    assert report.duplicates - report.explained_duplicates <= report.jobs // 100, report.unexplained_duplicates
    assert len(report.failover_s) >= 1 and max(report.failover_s) < 10
    # The paused incarnation learned it was declared dead and came back as a new incarnation;
    # the shards it had were taken over, and no shard ends up claimed by two silos.
    pause = next(e for e in report.events if e.kind == "pause")
    now = next(s for s in statuses if s.get("silo_id") == pause.silo)
    assert now["owner"] != pause.owner
    held = [shard["name"] for status in statuses for shard in status.get("shards", [])]
    assert len(held) == len(set(held)), "a shard is owned by two silos"
    assert (tmp_path / "out" / "drill-timeline.png").stat().st_size > 10_000
