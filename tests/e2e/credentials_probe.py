"""Run silos on Azurite in a Ray of their own, fire a job, and write down everything Ray and timeshard show.

``python -m tests.e2e.credentials_probe OUT.json SECRET_FILE`` with ``AZURE_STORAGE_CONNECTION_STRING``
set, as an operator's shell has it before ``ray start``: the Ray node inherits it (the per-node
environment method) and the driver holds it. One cluster reads the node's environment, the other
the secret file. Its own Ray because the state API needs the dashboard, which the tests' Ray lacks.
``tests/e2e/test_credentials.py`` searches the output and the Ray session folder for the key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import ray
from ray.util import state

from benchmarks._azurite import Azurite, free_port
from cluster import Cluster, Target
from cluster._cluster import start_or_join_ray
from cluster.cli.silologs import ray_logs_dir
from tests.e2e.conftest import FAST, RecorderActor

TIMESHARD = str(Path(sys.executable).with_name("timeshard"))
STATE_KINDS = ("actors", "tasks", "workers", "jobs", "nodes", "runtime_envs", "placement_groups", "objects",
               "cluster_events")


def as_text(value: Any) -> str:
    """``value`` (state API rows, dicts, options) as JSON text, nested dataclasses included."""
    def plain(v: Any) -> Any:
        return dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type) else repr(v)
    return json.dumps(value, default=plain)


def state_api(address: str) -> dict[str, str]:
    """What ``ray list <kind> --detail`` and the dashboard show, by kind."""
    return {
        f"state API {kind}": as_text(getattr(state, f"list_{kind}")(
            address=address, detail=True, limit=10_000, raise_on_missing_output=False))
        for kind in STATE_KINDS
    }


async def fire_one_job(cluster: Cluster, recorder: str, handle: Any, timeout: float = 30.0) -> None:
    job = await cluster.client().schedule_job(Target.actor(recorder), "credentials", due="300ms")
    deadline = time.monotonic() + timeout
    while job.id not in {r["job_id"] for r in await handle.executions.remote()}:
        if time.monotonic() > deadline:
            raise AssertionError(f"the job on {cluster.store_url} did not fire within {timeout} s")
        await asyncio.sleep(0.1)


def probe(secret_file: Path) -> dict[str, Any]:
    gcs = ray.get_runtime_context().gcs_address
    urls = {"node environment": f"azure://creds-env-{uuid.uuid4().hex[:8]}",
            "secret file": Azurite.store_url(f"creds-file-{uuid.uuid4().hex[:8]}", secret_file)}
    recorder = f"creds-recorder-{uuid.uuid4().hex[:6]}"
    handle = RecorderActor.options(name=recorder, num_cpus=0).remote()
    clusters = {how: Cluster.start(url, silos=2, namespace=f"creds-{uuid.uuid4().hex[:8]}", options=FAST, timeout=30)
                for how, url in urls.items()}
    shown: dict[str, str] = {}
    try:
        for cluster in clusters.values():
            asyncio.run(fire_one_job(cluster, recorder, handle))
        shown.update(state_api(gcs))
        for how, cluster in clusters.items():
            shown[f"Cluster.status ({how})"] = as_text(cluster.status())
            shown[f"describe ({how})"] = as_text([ray.get(s.describe.remote(), timeout=30) for s in cluster.silos])
            cli = subprocess.run([TIMESHARD, "status", "--json", "--namespace", cluster.namespace], capture_output=True,
                                 text=True, timeout=120, env={**os.environ, "RAY_ADDRESS": gcs})
            if cli.returncode != 0:
                raise AssertionError(f"timeshard status failed: {cli.stderr[-2000:]}")
            shown[f"timeshard status ({how})"] = cli.stdout + cli.stderr
    finally:
        for cluster in clusters.values():
            cluster.shutdown(graceful=False)
        ray.kill(handle)
    return {"shown": shown, "urls": urls, "logs_dir": ray_logs_dir()}


def main(argv: list[str]) -> int:
    out, secret_file = Path(argv[0]), Path(argv[1])
    start_or_join_ray("local", num_cpus=4, include_dashboard=True, dashboard_port=free_port(), log_to_driver=False,
                      configure_logging=False, namespace=f"creds-{uuid.uuid4().hex[:6]}")
    try:
        out.write_text(json.dumps(probe(secret_file)))
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
