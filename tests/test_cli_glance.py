"""What a user sees first on the command line: `timeshard --version`, and `timeshard status` on 80 columns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from cluster.cli.jobs import _status_text

ROOT = Path(__file__).resolve().parent.parent
ALERTS = ("STAGED", "QUARANTINED", "PARKED", "DAMAGED", "CLOCK SKEW", "NICED")


def test_version_prints_the_installed_version() -> None:
    declared = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared
    done = subprocess.run([sys.executable, "-m", "cluster.cli", "--version"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"timeshard {declared[1]}"


def _shard(silo: int, hour: int, seq: int, *, loaded: bool, jobs: int, **more: Any) -> dict[str, Any]:
    # Shard names as silos make them: window start (UTC), silo.incarnation, sequence.
    return {"name": f"shards/20261127T{hour:02d}0000.000000Z-{silo}.1-{seq:06d}", "state": "open", "loaded": loaded,
            "jobs": jobs if loaded else -1, "window_start": 1795737600000000 + hour * 3_600_000_000,
            "window_end": 1795741200000000 + hour * 3_600_000_000, "adopted_count": 2, "generation": 0,
            "owner_deaths": 0, "quarantined": False, "suspects": 0, "parked": [], "unreadable": 0, "paused": 0, **more}


def _silo(silo: int, shards: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {"silo_id": str(silo), "owner": f"{silo}#12", "pid": 4_194_301,
            "node": "d748f62953d6446342d06d5e930aaea8b3e066f0c8a217981b79ce30", "queued": 1_234_567, "inflight": 10_000,
            "staged": 25, "staged_jobs": [], "shards": shards, "quarantined": [], "parked": {}, "damaged": {},
            "clock": {"offset_low_s": -0.0123, "offset_high_s": 0.0456, "store_clock": "azure", "exceeded": True,
                      "max_clock_skew_s": 0.5},
            "counters": {"lateness_mean_s": 12.345, "lateness_max_s": 123.456}, **more}


def test_status_fits_80_columns_but_for_alerts_which_stay_whole() -> None:
    killer = "65d9b52643a04776a5492156ce4b5c1a"
    report = {"namespace": "production-eu-west", "store": "azure://timeshard-jobs", "silos": [
        _silo(0, [_shard(0, h, h + 1, loaded=h < 2, jobs=250_000, paused=12 if h == 0 else 0) for h in range(4)],
              staged_jobs=[{"name": None, "job": killer, "target": "actor nobody@production-eu-west",
                            "since_us": 1795737600000000}]),
        _silo(1, [_shard(1, 0, 1, loaded=True, jobs=7, quarantined=True, owner_deaths=3, parked=[killer],
                         unreadable=2)], niceness=15),
        {"silo_id": "2", "error": "no Ray actor timeshard-silo-2: removed or killed"},
    ]}
    lines = _status_text(report).splitlines()
    long = [line for line in lines if len(line) > 80 and not line.lstrip().startswith(ALERTS)
            and "not answering" not in line]
    assert not long, "\n".join(long)
    # Every shard is a row of its silo's table, with its jobs ("-": dormant, not counted).
    rows = [line.split() for line in lines if line.startswith("  20261127T")]
    assert [(r[0], r[3]) for r in rows] == [
        ("20261127T000000.000000Z-0.1-000001", "250000"), ("20261127T010000.000000Z-0.1-000002", "250000"),
        ("20261127T020000.000000Z-0.1-000003", "-"), ("20261127T030000.000000Z-0.1-000004", "-"),
        ("20261127T000000.000000Z-1.1-000001", "7")]
    text = "\n".join(lines)
    assert "12 paused" in text and "2 UNREADABLE" in text
    # Alerts name what an operator copies into a command, in full.
    assert "QUARANTINED shard shards/20261127T000000.000000Z-1.1-000001: 3 owners died" in text
    assert f"PARKED job {killer} in shard shards/20261127T000000.000000Z-1.1-000001" in text
    assert f"STAGED job {killer}: waiting for actor nobody@production-eu-west since " in text
    assert sum(line.startswith("  CLOCK SKEW beyond max_clock_skew") for line in lines) == 2
    # A silo Ray runs niced (its default for workers) is said, with the setting that fixes it.
    assert [line for line in lines if line.startswith("  NICED")] == [
        "  NICED at 15: any busy process on its node takes the CPU first, and it may miss heartbeats and the "
        "failover bound; start Ray with RAY_worker_niceness=0"]
    # What the clock costs: jobs fire by the interval's low end, so up to its width late.
    assert sum(line == "  clock: store minus host in [-0.012s, +0.046s], jobs up to 57.9 ms late" for line in lines) == 2
