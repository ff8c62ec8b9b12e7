"""The main job, as a user runs it: `timeshard demo` ends with nothing lost and nothing early."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import ray

pytestmark = pytest.mark.ray


def test_the_demo_survives_a_silo_crash_and_loses_nothing(tmp_path: Path, ray_session: None) -> None:
    # The session's Ray, named: with none named the demo joins the Ray started last on this
    # machine, which may be a drill's on the other xdist worker.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    done = subprocess.run(
        [sys.executable, "-m", "cluster.cli", "demo", "--store", f"file://{tmp_path / 'demo'}", "--seconds", "8", "--jobs", "60"],
        capture_output=True, text=True, timeout=240, env=env, cwd=tmp_path,
    )
    out = done.stdout
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "killed silo 1" in out
    assert "NICED" not in out  # the Ray the demo starts runs its silos at normal priority
    assert re.search(r"one-shot jobs fired\s+60/60\n", out)
    assert re.search(r"\n\s+lost\s+0\n", out) and re.search(r"\n\s+early\s+0\n", out)
