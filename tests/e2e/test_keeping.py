"""The keeper holds the silo count on one node (the many-node drill is tests/drills/test_silo_keeping.py):
a silo removed for good is started again within a round, `timeshard status` shows target versus
live, a scale-down is not undone, a drain moves a node's silos, and a shutdown leaves nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time

import pytest
import ray

from cluster._keeper import KEEP_INTERVAL_S, SILO_START_S, keep_bound
from cluster.cli.jobs import _status_text, keeping_summary
from cluster.client import running_silo_ids
from tests.e2e.conftest import wait_for

pytestmark = [pytest.mark.ray, pytest.mark.file_only]


def _status_line(cluster) -> str:  # type: ignore[no-untyped-def]
    statuses = cluster.status()
    report = {"namespace": cluster.namespace, "store": cluster.store_url, "silos": statuses,
              "keeping": keeping_summary(cluster.keeping(), statuses)}
    return _status_text(report).splitlines()[2]


async def test_a_silo_removed_for_good_is_started_again_and_status_shows_target_and_live(make_cluster) -> None:
    cluster = make_cluster(silos=3)
    assert _status_line(cluster) == "silos 3 live, target 3"
    removed = time.monotonic()
    cluster.kill_silo("1", restart=False)  # Ray will not bring it back; the keeper must
    # A removed actor is seen within a round (no peer needs to declare it dead), then started.
    bound = KEEP_INTERVAL_S + SILO_START_S
    await wait_for(lambda: len(cluster.placement(timeout=1.0)) == 3, timeout=bound + 10)
    back = time.monotonic() - removed
    kept = await wait_for(lambda: (k := cluster.keeping()) and k["repairs"] and k, timeout=5)
    assert [r["silo"] for r in kept["repairs"]] == ["1"], kept
    assert back <= bound, f"silo 1 served again after {back:.1f} s (bound {bound} s)"
    assert _status_line(cluster) == "silos 3 live, target 3"
    print(f"keeper: a silo removed for good served again after {back:.2f} s (bound {bound:.1f} s)")


async def test_a_scale_down_is_not_undone_even_by_a_keeper_ray_restarted_and_a_shutdown_leaves_nothing(
        make_cluster) -> None:
    cluster = make_cluster(silos=3)
    assert cluster.scale(2)["removed"] == ["2"]
    await asyncio.sleep(3 * KEEP_INTERVAL_S)  # rounds that would start silo 2 again, were the target stale
    assert running_silo_ids(cluster.namespace) == ["0", "1"]
    kept = cluster.keeping()
    assert kept is not None and kept.get("target") == 2, kept
    # Ray restarts a keeper whose process died with the arguments it was created with (3 silos):
    # the target it keeps is the store's, the last scale.
    ray.kill(cluster.keeper(), no_restart=False)
    await wait_for(lambda: (k := cluster.keeping()) and "error" not in k and k["since"] > kept["since"]
                   and k["rounds"] >= 3, timeout=30)
    kept = cluster.keeping()
    assert kept is not None and kept.get("target") == 2 and running_silo_ids(cluster.namespace) == ["0", "1"], kept
    cluster.shutdown(graceful=False)
    await asyncio.sleep(3 * KEEP_INTERVAL_S)
    assert running_silo_ids(cluster.namespace) == [] and cluster.keeper() is None


async def test_a_drained_nodes_silos_stop_gracefully_and_the_keeper_waits_for_another_node(make_cluster) -> None:
    # One node here: a drained node's silos have nowhere else to go. They stop (their shards
    # handed over) and the keeper says why the count stays below target until the drain is undone.
    cluster = make_cluster(silos=2)
    node = ray.get_runtime_context().get_node_id()
    done = cluster.drain(node, timeout=10)
    assert done["stopped"] == ["0", "1"] and done["back_s"] is None
    kept = await wait_for(lambda: (k := cluster.keeping()) and k["waiting"] and "no alive Ray node" in k["waiting"] and k)
    assert kept["draining"] == [node] and kept["live"] == []
    assert "BELOW TARGET" in _status_line(cluster) and "0 live, target 2" in _status_line(cluster)
    assert ray.get(cluster.keeper().undrain.remote(node))  # type: ignore[union-attr]
    await wait_for(lambda: len(cluster.placement(timeout=1.0)) == 2, timeout=KEEP_INTERVAL_S + 2 * SILO_START_S + 10)


async def test_a_silo_hung_past_its_peers_patience_is_replaced_even_on_the_only_node(make_cluster) -> None:
    # Declared dead and not answering: to the keeper, lost with its node. A node whose silo it
    # removed is taken last, never instead of starting none: here it is the only node.
    cluster = make_cluster(silos=2)
    hung = next(s for s in cluster.status() if s["silo_id"] == "1")
    os.kill(hung["pid"], signal.SIGSTOP)
    try:
        bound = keep_bound(cluster.options)
        await wait_for(lambda: (p := cluster.placement(timeout=1.0)) and len(p) == 2
                       and (k := cluster.keeping()) and [r["silo"] for r in k["repairs"]] == ["1"], timeout=bound + 10)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(hung["pid"], signal.SIGCONT)
    now = next(s for s in cluster.status() if s["silo_id"] == "1")
    assert now["pid"] != hung["pid"] and now["owner"] != hung["owner"]
