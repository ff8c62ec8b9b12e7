"""Many machines, drilled in every test run: a Ray head and 3 worker nodes on this machine, one
silo per worker node; a whole node is lost under load, then the cluster scales up and down.

Runs ``timeshard drill --nodes 3`` in a process of its own (it starts its own multi-node Ray,
which cannot share this process with the session's Ray) with the default cluster options.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray


# On Azurite only: a node lost for good is a many-machine failure, and Azure is the store many
# machines share (the file store's fencing under kills is drilled by test_failover_drill).
@pytest.mark.azurite
def test_losing_a_node_and_scaling_under_load_lose_nothing(azure_store_url: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "drill", "--nodes", "3", "--store", azure_store_url,
                           "--rate", "150", "--seed", "5", "--out", str(out)],
                          capture_output=True, text=True, timeout=400)
    report_path = out / "node-drill.json"
    assert report_path.exists(), f"the drill wrote no report:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(report_path.read_text())
    drill = report["drill"]
    print(f"node loss: failover per shard {drill['failover_s']} s (bound {drill['failover_bound_s']} s); "
          f"{drill['duplicates']} duplicates ({drill['explained_by_log']} by the log, {drill['explained_by_window']} "
          f"by the window); scale-up "
          f"{report['scale_up_s']} s; rebalanced {report['rebalanced_s']} s after the new silos served")
    assert report["spread_ok"], f"silos not one per worker node: {report['placement']}"
    assert drill["observer_errors"] == 0, f"the store watcher failed: {drill['observer_error_examples']}"
    assert drill["lost"] == 0, f"{drill['lost']} acknowledged jobs never fired: {drill['lost_jobs'][:5]}"
    assert drill["early"] == 0, f"fires before the due time acknowledged: {drill['early_examples'][:5]}"
    assert not drill["unacknowledged_fires"], drill["unacknowledged_fires"][:5]
    assert drill["other_duplicates"] == 0, drill["unexplained_duplicates"][:5]
    assert drill["two_owner_fires"] == 0, drill["two_owner_examples"][:5]
    assert drill["zombie_fires"] == 0, drill["zombie_examples"][:5]
    # Each window that excused a re-run or a late call justified by this run's own measurements.
    assert drill["in_flight_window_ok"], (drill["explained_by_window"], max(drill["durable_s"], default=None),
                                          drill["window_appends"])
    assert drill["delivery_window_ok"], (drill["delivery_excused"][:5], max(drill["delivery_s"], default=None))
    assert not drill["silo_faults"], drill["silo_faults"][:5]
    # Per shard of the lost node's silo: each fired from elsewhere within the bound.
    assert drill["failover_s"] and not drill["unmeasured_kills"] and max(drill["failover_s"]) <= drill["failover_bound_s"], (
        f"the lost node's shards fired elsewhere after {drill['failover_s']} s "
        f"(bound {drill['failover_bound_s']} s; never taken over: {drill['unmeasured_kills']})")
    assert report["scaled_up_to"] == 5 and len(set(report["placement_after_scale"].values())) == 3, (
        f"scaled-up silos not spread over the 3 nodes left: {report['placement_after_scale']}")
    assert report["rebalanced_s"] is not None, "shards never rebalanced after the scale-up"
    assert report["scaled_down_to"] == 3
    assert report["ok"] and done.returncode == 0, done.stdout[-2000:]
