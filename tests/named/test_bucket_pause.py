"""Pause and resume of named jobs on registry buckets (issue 25 point 5), without Ray.

``named_registry="buckets"`` (the default). What a caller relies on: once ``pause``
returned nothing of the job starts until ``resume``, and ``get`` shows the pause (who, why,
since) from the name's status at its bucket's owner; ``pause_all`` covers an app_id or a whole
namespace. Each on the memory and the file store.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.named.bucket_cluster import TARGET, Cluster

STORES = ["memory", "file"]


@pytest.mark.parametrize("kind", STORES)
async def test_nothing_starts_while_paused_get_shows_it_and_resume_fires_again(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    tick = await jobs.put("tick", target=TARGET, schedule="@every 1s")
    await c.fire(1)
    assert c.starts.log == [tick.job.id]
    paused = await jobs.pause("tick", note="disk full", by="ops@host")
    c.starts.log.append("paused")
    status = paused.status
    assert status.paused and status.paused_note == "disk full" and status.paused_by == "ops@host"
    got = await jobs.get("tick")
    assert got is not None and got.status.paused and got.status.paused_since == status.paused_since
    await c.fire(3)
    assert c.starts.after("paused") == []
    resumed = await jobs.resume("tick")
    assert not resumed.status.paused and resumed.status.paused_note is None
    await c.fire(2)
    assert tick.job.id in c.starts.after("paused")


@pytest.mark.parametrize("kind", STORES)
async def test_pause_all_covers_an_app_id_or_a_whole_namespace(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path, silos=("a", "b"))
    await c.maintain()
    jobs = c.jobs()
    for name, app in (("a", "billing"), ("b", "billing"), ("c", "default"), ("d", "billing2")):
        await jobs.put(name, target=TARGET, schedule="@every 1h", app_id=app)
    assert await jobs.pause_all(app_id="billing", note="freeze") == 2
    assert await jobs.pause_all() == 2  # the rest of the namespace: c, and d of billing2 (not billing's again)
    for name, app in (("a", "billing"), ("b", "billing"), ("c", "default"), ("d", "billing2")):
        got = await jobs.get(name, app_id=app)
        assert got is not None and got.status.paused, name
    assert await jobs.resume_all(app_id="billing") == 2
    assert not (await jobs.get("a", app_id="billing")).status.paused  # type: ignore[union-attr]
    assert (await jobs.get("c")).status.paused  # type: ignore[union-attr]
