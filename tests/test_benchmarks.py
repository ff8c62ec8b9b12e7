"""The benchmark suite still runs end to end and reports every figure (goals are not tested here)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import DEFAULT_RESULTS_DIR
from benchmarks.suite import NAMES, RESULTS_PAGE

pytestmark = [pytest.mark.ray, pytest.mark.azurite, pytest.mark.timeout(330)]

FIGURES = [
    ("noop", "sequential_per_s"), ("noop", "concurrent_per_s"),
    *[(f"cluster_{kind}", *path) for kind in ("file", "azure") for path in (
        ("scheduling", "single_per_s"), ("scheduling", "concurrent_single_per_s"), ("scheduling", "batch_per_s"),
        ("triggers", "per_s"), ("lateness", "p50"), ("lateness", "p99"), ("lateness", "max"),
        ("lateness_high", "p99"), ("timer_floor", "1000", "p99"), ("timer_floor", "10000", "p99"))],
    *[("named", kind, *path) for kind in ("file", "azure") for path in (
        ("put_per_s",), ("put_many_per_s",), ("overwrite_per_s",), ("fire_named", "per_s"), ("fire_plain", "per_s"),
        ("fire_over_plain",), ("listing", "2000", "named: list_page(limit=50), first"),
        ("listing", "2000", "named: list_page(limit=50), deep"), ("listing", "2000", "named: count()"),
        ("listing", "2000", "paged: first page"))],
    ("failover", "p50"), ("replay", "file", "records_per_s"), ("replay", "azure", "records_per_s"),
    *[("memory", kind, key) for kind in ("dormant", "loaded") for key in ("intercept_mb", "r2", "schedule_per_s")],
    ("herd", "per_s"), ("herd", "growth"), ("herd", "lateness_ms", "p99"), ("herd", "queue", "per_s"),
    ("asyncio_timer", "p99"), ("apscheduler", "schedule_per_s"), ("apscheduler", "bytes_per_job"),
    ("apscheduler", "lateness", "p99"),
]
# Slopes: a dormant job's cost is about 0, so noise can make it slightly negative.
SLOPES = [("memory", kind, key) for kind in ("dormant", "loaded")
          for key in ("bytes_per_job", "mb_per_million", "objects_per_job", "blocks_per_job", "object_bytes_per_job")]


def _get(data: dict, path: tuple[str, ...]) -> object:
    for key in path:
        data = data[key]
    return data


def test_quick_suite_reports_every_figure(tmp_path: Path) -> None:
    # The published files only: a drill's scratch folder in there changes as drills run.
    published = [p for p in DEFAULT_RESULTS_DIR.iterdir() if p.is_file()]
    committed = {p: p.stat().st_mtime_ns for p in [*published, RESULTS_PAGE]}
    env = {**os.environ, "TIMESHARD_BENCH_DIR": str(tmp_path)}
    env["RAY_ADDRESS"] = "local"  # its own local Ray: not the session's, nor one another process runs here
    done = subprocess.run([sys.executable, "-m", "benchmarks.suite", "--quick"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    # A test run leaves the committed results and the published table (docs/benchmarks.md) alone.
    assert {p: p.stat().st_mtime_ns for p in [*published, RESULTS_PAGE]} == committed
    assert sorted(p for p in DEFAULT_RESULTS_DIR.iterdir() if p.is_file()) == sorted(published)

    data = json.loads((tmp_path / "suite.json").read_text())
    assert "errors" not in data["results"], data["results"].get("errors")
    assert data["quick"] is True and data["names"] == ["baselines", *[n for n in NAMES if n != "baselines"]]
    assert data["machine"]["cpus"] and data["machine"]["ray"]
    for path in FIGURES:
        value = _get(data["results"], path)
        assert isinstance(value, (int, float)) and value >= 0, (path, value)
    for path in SLOPES:
        value = _get(data["results"], path)
        assert isinstance(value, (int, float)) and math.isfinite(value), (path, value)
    # Every run must have happened, not just left a zero behind.
    assert data["results"]["failover"]["measured"] == data["results"]["failover"]["kills"]
    for kind in ("file", "azure"):
        cluster = data["results"][f"cluster_{kind}"]
        assert cluster["triggers"]["executed"] == cluster["triggers"]["jobs"]
        assert cluster["lateness"]["executed"] == cluster["lateness"]["jobs"]
        assert cluster["lateness_high"]["executed"] == cluster["lateness_high"]["jobs"]
        named = data["results"]["named"][kind]
        assert named["fire_named"]["executed"] == named["fire_plain"]["executed"] == named["jobs"]
    assert data["results"]["apscheduler"]["lateness"]["executed"] == data["results"]["apscheduler"]["lateness"]["jobs"]
    # Memory: a slope over four or more sizes, each measured; every herd ran to its last job.
    for kind in ("dormant", "loaded"):
        points = data["results"]["memory"][kind]["points"]
        assert len(points) >= 4 and all(p["rss"] > 0 and p["objects"] > 0 for p in points)
    for h in data["results"]["herd"]["herds"].values():
        assert h["executed"] == h["jobs"]

    table = (tmp_path / "RESULTS.md").read_text()
    assert len([line for line in table.splitlines() if line.startswith("| ")]) == 1 + len(data["table"]) == 28
    for suffix in ("scheduling", "triggers", "lateness", "failover", "replay", "memory", "memory-slope", "herd",
                   "herd-rate", "named"):
        assert (tmp_path / f"suite-{suffix}.png").stat().st_size > 0
