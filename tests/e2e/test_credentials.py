"""The Azure account key never travels through Ray: not in the state API, Ray's files, or status.

Silos read the credential on their own node: from the environment the Ray node was started with,
or from a secret file named in the store URL. The driver's environment holds the connection
string too, as an operator's shell does after ``export AZURE_STORAGE_CONNECTION_STRING=...``:
nothing may carry it from there to the silos. ``credentials_probe`` does the Ray part.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks._azurite import ACCOUNT_KEY
from storage.urls import CONNECTION_STRING_ENV, CONNECTION_STRING_FILE_ENV
from tests.azurite import Azurite

pytestmark = [pytest.mark.ray, pytest.mark.azurite]

REPO = Path(__file__).resolve().parents[2]
# A prefix of the key survives any quoting (base64 letters and digits only): it finds the key
# whole, cut short, URL-escaped or inside a serialized runtime env.
NEEDLE = ACCOUNT_KEY[:32]


def files_holding(folder: Path, needle: bytes) -> list[str]:
    found = []
    for root, _, names in os.walk(folder):
        for name in names:
            path = Path(root, name)
            try:
                if path.is_file() and needle in path.read_bytes():
                    found.append(str(path.relative_to(folder)))
            except OSError:
                continue  # a log rotated away while we walked
    return found


def test_the_account_key_is_in_no_ray_state_ray_file_or_status(azurite: Azurite, azurite_secret_file: Path,
                                                               tmp_path: Path) -> None:
    assert NEEDLE in azurite.connection_string
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", CONNECTION_STRING_FILE_ENV)}
    env[CONNECTION_STRING_ENV] = azurite.connection_string
    env["PYTHONPATH"] = str(REPO)  # this checkout's code in the probe, its silos and its CLI calls
    out = tmp_path / "shown.json"
    probe = subprocess.run([sys.executable, "-m", "tests.e2e.credentials_probe", str(out), str(azurite_secret_file)],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert probe.returncode == 0, probe.stderr[-4000:]
    result = json.loads(out.read_text())
    shown: dict[str, str] = result["shown"]

    # Both clusters' silos reached Azurite (the probe fired a job on each), and the state API saw them.
    assert "SiloActor" in shown["state API actors"] and '"runtime_env' in shown["state API tasks"], shown.keys()
    assert all(NEEDLE not in url for url in result["urls"].values())
    leaks = [where for where, text in shown.items() if NEEDLE in text]
    assert not leaks, f"the account key is shown by: {leaks}"

    logs = Path(result["logs_dir"])
    assert any(logs.glob("worker-*.err")), f"no worker logs in {logs}"
    # The whole session folder: the logs, and whatever else Ray keeps next to them.
    leaking_files = files_holding(logs.parent, NEEDLE.encode())
    assert not leaking_files, f"the account key is written in Ray's files under {logs.parent}: {leaking_files[:10]}"
    assert NEEDLE not in probe.stdout + probe.stderr, "the key was printed by the driver"
