"""Issue 28, deliverable 1, drilled in every test run: every worker node replaced in turn under
load, as a node-image upgrade does (a Ray head and 3 workers on this machine, one silo each; 3
new nodes join; the old ones go one after another: drained as a preStop hook would, then lost
outright, then drained), while the keeper alone holds the silo count at its target.

Runs ``timeshard drill --nodes 3 --replace`` in a process of its own (it starts its own
multi-node Ray, which cannot share this process with the session's Ray), on the file store.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray


def test_replacing_every_node_in_turn_keeps_the_silo_count_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "drill", "--nodes", "3", "--replace",
                           "--store", f"file://{tmp_path / 'store'}", "--rate", "150", "--seed", "5", "--out", str(out)],
                          capture_output=True, text=True, timeout=400)
    report_path = out / "keep-drill.json"
    assert report_path.exists(), f"the drill wrote no report:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    report = json.loads(report_path.read_text())
    drill, steps = report["drill"], report["steps"]
    print("silo keeping: " + "; ".join(f"{s['how']} -> {report['target']} silos back in {s['back_s']} s "
                                       f"(bound {s['bound_s']} s)" for s in steps))
    assert drill["lost"] == 0, f"{drill['lost']} acknowledged jobs never fired: {drill['lost_jobs'][:5]}"
    assert drill["early"] == 0, f"fires before the due time acknowledged: {drill['early_examples'][:5]}"
    assert not drill["unacknowledged_fires"], drill["unacknowledged_fires"][:5]
    assert drill["other_duplicates"] == 0, drill["unexplained_duplicates"][:5]
    assert drill["two_owner_fires"] == 0, drill["two_owner_examples"][:5]
    assert drill["zombie_fires"] == 0, drill["zombie_examples"][:5]
    assert not drill["silo_faults"], drill["silo_faults"][:5]
    assert [s["how"] for s in steps] == ["drain", "lose", "drain"], steps
    for n, step in enumerate(steps, 1):
        assert step["silos"], f"step {n}: the node that went ran no silo, so the step proved nothing: {step}"
        assert step["bound_s"] > 0 and step["back_s"] is not None and step["back_s"] <= step["bound_s"], (
            f"step {n} ({step['how']} node {step['node'][:8]}): the silo count was back at {report['target']} "
            f"after {step['back_s']} s (bound {step['bound_s']} s); placement {step['placement']}")
        assert step["spread_ok"], f"step {n}: silos not one per worker node: {step['placement']}"
    assert report["ok"] and done.returncode == 0, done.stdout[-2000:]
