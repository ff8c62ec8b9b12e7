"""The timer queue benchmark runs quickly, reports the thundering herd for both queues, and writes
only where it is told (a test run must leave the committed results alone)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import DEFAULT_RESULTS_DIR

pytestmark = pytest.mark.timeout(120)


def test_quick_queue_benchmark_reports_the_herd_into_a_scratch_dir(tmp_path: Path) -> None:
    committed = {p.name: p.stat().st_mtime_ns for p in DEFAULT_RESULTS_DIR.glob("queue*")}
    env = {**os.environ, "TIMESHARD_BENCH_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "benchmarks.queue", "--quick"], env=env, capture_output=True,
                          text=True, timeout=100)
    assert done.returncode == 0, done.stderr[-4000:]

    data = json.loads((tmp_path / "queue.json").read_text())
    herd = data["herd"]
    assert set(herd["shapes"]) == {"one instant", "one second"}
    for per_shape in herd["shapes"].values():
        assert list(per_shape) == [str(n) for n in herd["sizes"]]
        for per_size in per_shape.values():
            assert set(per_size) == {f"{q}, {p}" for q in ("timeshard JobQueue", "before issue 15")
                                     for p in ("interleaved", "bulk")}
            for run in per_size.values():
                assert not run["stopped"] and run["total_us_per_job"] > 0 and run["pop_due_us"]["count"] > 0
    assert herd["bytes_per_job"]["timeshard JobQueue"] > 0 and herd["growth"] > 0
    assert {g["figure"] for g in data["goals"]} >= {"pairs_per_s", "bytes_per_job", "herd_growth"}
    for name in ("queue.png", "queue-herd.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert {p.name: p.stat().st_mtime_ns for p in DEFAULT_RESULTS_DIR.glob("queue*")} == committed
