"""``timeshard ui`` as a user runs it: the console script serving a real cluster on Ray.

No browser here (``test_ui_browser`` drives one); this checks the command's wiring: it connects,
shows the silos and a named job, refuses a request without the token, a rebound Host and a forged
POST, and a pause through the dashboard reaches the store with its note and who.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import ray

from cluster import Flow, Step, Target
from tests.e2e.conftest import wait_for

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ui-test-token-0123456789"  # the dashboard refuses tokens under 16 characters


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve_ui() -> Iterator[Callable[[str], tuple[str, subprocess.Popen[str]]]]:
    started: list[subprocess.Popen[str]] = []

    def serve(namespace: str) -> tuple[str, subprocess.Popen[str]]:
        port = free_port()
        env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address, "TIMESHARD_UI_TOKEN": TOKEN,
               # This checkout's code, also when the venv was installed from another worktree.
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        started.append(subprocess.Popen([sys.executable, "-m", "cluster.cli", "ui", "--namespace", namespace, "--port", str(port)],
                                        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        return f"http://127.0.0.1:{port}", started[-1]

    yield serve
    for process in started:
        process.terminate()
        process.wait(timeout=30)


@pytest.mark.file_only
async def test_ui_shows_the_cluster_and_pauses_a_job(make_cluster, recorder, serve_ui) -> None:
    name, _ = recorder
    cluster = make_cluster(silos=2)
    jobs = cluster.client().jobs
    await jobs.put("nightly", target=f"actor:{name}@{ray.get_runtime_context().namespace}", schedule="@every 1h")
    base, process = serve_ui(cluster.namespace)
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async with aiohttp.ClientSession() as http:
        async def answers() -> bool:
            if process.poll() is not None:
                pytest.fail(f"timeshard ui exited {process.returncode}: {process.stderr.read() if process.stderr else ''}")
            try:
                async with http.get(f"{base}/api/overview", headers=auth) as r:
                    return r.status == 200
            except aiohttp.ClientConnectionError:
                return False

        await wait_for(answers, timeout=60, interval=0.5)
        async with http.get(f"{base}/api/overview") as r:
            assert r.status == 401
        async with http.get(f"{base}/api/overview", headers=auth) as r:
            silos = (await r.json())["silos"]
        assert sorted(s["silo_id"] for s in silos) == sorted(cluster.silo_ids)
        assert all(s["error"] is None and s["incarnation"] and s["lease_age"] is not None for s in silos)
        async with http.get(f"{base}/api/jobs?prefix=night", headers=auth) as r:
            assert [j["name"] for j in (await r.json())["items"]] == ["nightly"]
        async with http.get(f"{base}/api/shards", headers=auth) as r:
            assert (await r.json())["total"] >= 1
        # The real command's guards: a rebound name and a forged POST change nothing.
        async with http.get(f"{base}/api/jobs", headers={**auth, "Host": "rebind.example"}) as r:
            assert r.status == 421, await r.text()
        async with http.post(f"{base}/api/jobs/nightly/pause", headers={"Origin": "http://evil.example",
                                                                       "Sec-Fetch-Site": "cross-site"}) as r:
            assert r.status == 403, await r.text()
            assert r.headers["X-Frame-Options"] == "DENY"
        got = await jobs.get("nightly")
        assert got is not None and not got.status.paused
        async with http.post(f"{base}/api/jobs/nightly/pause", headers=auth, json={"note": "e2e"}) as r:
            assert r.status == 200, await r.text()

    got = await jobs.get("nightly")
    assert got is not None and got.status.paused and got.status.paused_note == "e2e"
    assert got.status.paused_by is not None and got.status.paused_by.endswith("(timeshard ui)")
    await jobs.close()


@pytest.mark.file_only
async def test_ui_shows_a_running_clusters_flow_with_its_steps_and_dependencies(make_cluster, recorder, serve_ui) -> None:
    name, _ = recorder
    cluster = make_cluster(silos=1)
    client = cluster.client()
    flow = Flow("ui-flow", [Step("extract", Target.actor(name)), Step("left", Target.actor(name), depends_on=["extract"]),
                            Step("right", Target.actor(name), depends_on=["extract"]),
                            Step("load", Target.actor(name), depends_on=["left", "right"])])
    await client.flows.submit(flow)
    base, process = serve_ui(cluster.namespace)
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async with aiohttp.ClientSession() as http:
        async def shown() -> dict[str, Any] | None:
            if process.poll() is not None:
                pytest.fail(f"timeshard ui exited {process.returncode}: {process.stderr.read() if process.stderr else ''}")
            try:
                async with http.get(f"{base}/api/flows/ui-flow", headers=auth) as r:
                    body = await r.json() if r.status == 200 else None
            except aiohttp.ClientConnectionError:
                return None
            return body if body is not None and body["state"] == "succeeded" else None

        body = await wait_for(shown, timeout=60, interval=0.5)
        steps = {s["name"]: s for s in body["steps"]}
        assert {n: (s["state"], s["attempts"], s["depends_on"]) for n, s in steps.items()} == {
            "extract": ("succeeded", 1, []), "left": ("succeeded", 1, ["extract"]),
            "right": ("succeeded", 1, ["extract"]), "load": ("succeeded", 1, ["left", "right"])}
        missing = {n: [k for k in ("started_at", "ended_at", "job_id") if not s[k]] for n, s in steps.items()}
        assert missing == {n: [] for n in steps}, "every step shows when it started and ended, and its job"
        at = {n: {k: datetime.fromisoformat(s[k]) for k in ("started_at", "ended_at")} for n, s in steps.items()}
        assert at["load"]["started_at"] >= max(at["left"]["ended_at"], at["right"]["ended_at"])
        async with http.get(f"{base}/api/flows?prefix=ui-&state=succeeded", headers=auth) as r:
            listed = (await r.json())["items"]
        assert [(f["name"], f["steps_done"], f["steps_total"]) for f in listed] == [("ui-flow", 4, 4)]
        async with http.post(f"{base}/api/flows/ui-flow/cancel", headers=auth) as r:
            assert r.status == 409, "a finished flow is not cancelled"


def ui_logged_to(log: Path, *args: str) -> subprocess.Popen[bytes]:
    """``timeshard ARGS`` (this checkout's code, with the test token) writing its stderr to ``log``."""
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address, "TIMESHARD_UI_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    with log.open("w") as err:
        return subprocess.Popen([sys.executable, "-m", "cluster.cli", *args], env=env, stdout=subprocess.DEVNULL, stderr=err)


@pytest.mark.file_only
async def test_ui_logs_each_action_with_who_and_why_and_never_the_token(make_cluster, recorder, tmp_path) -> None:
    """``timeshard -v ui``: its access log shows every request, its audit line each action; the token
    given as ``?token=`` or ``Authorization`` appears in neither."""
    name, _ = recorder
    cluster = make_cluster(silos=1)
    jobs = cluster.client().jobs
    await jobs.put("nightly", target=f"actor:{name}@{ray.get_runtime_context().namespace}", schedule="@every 1h")
    port, log = free_port(), tmp_path / "ui.log"
    process = ui_logged_to(log, "-v", "ui", "--namespace", cluster.namespace, "--port", str(port), "--user", "alice@ops")
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def answers() -> bool:
                if process.poll() is not None:
                    pytest.fail(f"timeshard ui exited {process.returncode}: {log.read_text()}")
                try:
                    async with http.get(f"{base}/?token={TOKEN}", allow_redirects=False) as r:
                        return r.status == 303
                except aiohttp.ClientConnectionError:
                    return False

            await wait_for(answers, timeout=60, interval=0.5)
            async with http.get(f"{base}/api/jobs?token={TOKEN}&prefix=night", allow_redirects=False) as r:
                assert r.status == 303 and TOKEN not in r.headers["Location"]
            async with http.post(f"{base}/api/jobs/nightly/pause", headers={"Authorization": f"Bearer {TOKEN}"},
                                 json={"note": "disk full on db-2"}) as r:
                assert r.status == 200, await r.text()
    finally:
        process.terminate()
        process.wait(timeout=30)
        await jobs.close()
    logged = log.read_text()
    assert TOKEN not in logged, logged
    assert '"GET /api/jobs" 303' in logged, "-v shows the access log"
    assert "pause job 'nightly' (namespace 'default', app_id 'default') by alice@ops (note: 'disk full on db-2'): done" in logged
