"""The benchmark suite still runs end to end and reports every figure (goals are not tested here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.suite import NAMES

pytestmark = [pytest.mark.ray, pytest.mark.azurite, pytest.mark.timeout(240)]

FIGURES = [
    ("noop", "sequential_per_s"), ("noop", "concurrent_per_s"),
    *[(f"cluster_{kind}", *path) for kind in ("file", "azure") for path in (
        ("scheduling", "single_per_s"), ("scheduling", "concurrent_single_per_s"), ("scheduling", "batch_per_s"),
        ("triggers", "per_s"), ("lateness", "p50"), ("lateness", "p99"), ("lateness", "max"),
        ("lateness_high", "p99"), ("timer_floor", "1000", "p99"), ("timer_floor", "10000", "p99"))],
    ("failover", "p50"), ("replay", "file", "records_per_s"), ("replay", "azure", "records_per_s"),
    ("memory", "dormant", "bytes_per_job"), ("memory", "dormant", "mb_per_million"), ("memory", "loaded", "bytes_per_job"),
    ("asyncio_timer", "p99"), ("apscheduler", "schedule_per_s"), ("apscheduler", "bytes_per_job"),
    ("apscheduler", "lateness", "p99"),
]


def _get(data: dict, path: tuple[str, ...]) -> object:
    for key in path:
        data = data[key]
    return data


def test_quick_suite_reports_every_figure(tmp_path: Path) -> None:
    env = {**os.environ, "TIMESHARD_BENCH_DIR": str(tmp_path)}
    env.pop("RAY_ADDRESS", None)  # its own local Ray, not one a test session started
    done = subprocess.run([sys.executable, "-m", "benchmarks.suite", "--quick"], env=env, capture_output=True,
                          text=True, timeout=220)
    assert done.returncode == 0, done.stderr[-4000:]

    data = json.loads((tmp_path / "suite.json").read_text())
    assert "errors" not in data["results"], data["results"].get("errors")
    assert data["quick"] is True and data["names"] == ["baselines", *[n for n in NAMES if n != "baselines"]]
    assert data["machine"]["cpus"] and data["machine"]["ray"]
    for path in FIGURES:
        value = _get(data["results"], path)
        assert isinstance(value, (int, float)) and value >= 0, (path, value)
    # Every run must have happened, not just left a zero behind.
    assert data["results"]["failover"]["measured"] == data["results"]["failover"]["kills"]
    for kind in ("file", "azure"):
        cluster = data["results"][f"cluster_{kind}"]
        assert cluster["triggers"]["executed"] == cluster["triggers"]["jobs"]
        assert cluster["lateness"]["executed"] == cluster["lateness"]["jobs"]
        assert cluster["lateness_high"]["executed"] == cluster["lateness_high"]["jobs"]
    assert data["results"]["apscheduler"]["lateness"]["executed"] == data["results"]["apscheduler"]["lateness"]["jobs"]

    table = (tmp_path / "RESULTS.md").read_text()
    assert len([line for line in table.splitlines() if line.startswith("| ")]) == 1 + len(data["table"]) == 11
    for suffix in ("scheduling", "triggers", "lateness", "failover", "replay", "memory"):
        assert (tmp_path / f"suite-{suffix}.png").stat().st_size > 0
