"""The ``timeshard`` job commands, run as a user runs them: the console script in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from tests.e2e.conftest import executions, wait_for

pytestmark = pytest.mark.ray

TIMESHARD = str(Path(sys.executable).with_name("timeshard"))


def timeshard(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if ray.is_initialized():
        # The tests' own Ray, not whichever Ray on this machine started last ("auto" picks that).
        env["RAY_ADDRESS"] = ray.get_runtime_context().gcs_address
    return subprocess.run([TIMESHARD, *args], capture_output=True, text=True, timeout=120, env=env)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("timeshard"), result.stderr  # nothing else, not Ray's chatter
    return lines[0]


@pytest.mark.file_only
async def test_schedule_get_list_status_delete_through_the_command_line(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=1)
    ns = ["--namespace", cluster.namespace]
    target = f"actor:{name}@{ray.get_runtime_context().namespace}"

    made = timeshard("schedule", "nightly", "--target", target, "--schedule", "@every 1s", "--data", '{"k": 1}',
                     "--metadata", "team=ops", "--json", *ns)
    assert made.returncode == 0, made.stderr
    job = json.loads(made.stdout)
    assert job["name"] == "nightly" and job["generation"] == 1 and job["metadata"] == {"team": "ops"}

    taken = one_line_error(timeshard("schedule", "nightly", "--target", target, "--due-time", "1h", *ns))
    assert "taken" in taken and "overwrite" in taken
    bad = one_line_error(timeshard("schedule", "other", "--target", target, "--due-time", "tomorrow", *ns))
    assert "due_time" in bad

    await wait_for(lambda: executions(handle), timeout=20)
    got = timeshard("get", "nightly", "--json", *ns)
    assert got.returncode == 0 and json.loads(got.stdout)["job_id"] == job["job_id"]
    assert json.loads(got.stdout)["status"]["successful"] >= 1
    listed = timeshard("list", "night", *ns)
    assert listed.returncode == 0 and "nightly" in listed.stdout and "@every 1s" in listed.stdout
    status = timeshard("status", "--json", *ns)
    assert status.returncode == 0, status.stderr
    (silo,) = json.loads(status.stdout)["silos"]
    assert silo["shards"] and {"name", "state", "jobs", "window_start"} <= set(silo["shards"][0])

    hostile = {
        "schedule": ("--schedule", "0 " + "9" * 5000 + " * * * *"),
        "repeats": ("--schedule", "@every 1s", "--repeats", str(2**64)),
        "data": ("--due-time", "1h", *[a for i in range(3) for a in ("--metadata", f"k{i}={'x' * 100_000}")]),
        "due_time": ("--due-time", "9" * 5000 + "s"),
    }
    for field, args in hostile.items():
        error = one_line_error(timeshard("schedule", "hostile", "--target", target, *args, *ns))
        assert f"{field}:" in error and len(error) < 1000, error
    assert "no job named" in one_line_error(timeshard("get", "hostile", *ns))  # nothing was written

    triggered = timeshard("trigger", "nightly", "--json", *ns)
    assert triggered.returncode == 0, triggered.stderr
    run = json.loads(triggered.stdout)
    assert run["triggered_from"] == job["job_id"] and run["run_job_id"] != job["job_id"]
    await wait_for(lambda: any(r["job_id"] == run["run_job_id"] for r in executions(handle)), timeout=20)
    shown = await wait_for(lambda: "(triggered)" in (got := timeshard("get", "nightly", *ns)).stdout and got, timeout=20)
    assert "history       last" in shown.stdout
    assert "no such job" in one_line_error(timeshard("trigger", "hostile", *ns))

    deleted = timeshard("delete", "nightly", *ns)
    assert deleted.returncode == 0 and "deleted" in deleted.stdout
    assert "no job named" in one_line_error(timeshard("get", "nightly", *ns))


def test_usage_errors_exit_2_and_help_teaches_by_example():
    assert timeshard("schedule", "x").returncode == 2  # --target missing: argparse, no cluster needed
    shown = timeshard("schedule", "--help")
    assert shown.returncode == 0 and "examples:" in shown.stdout and "--schedule '@daily'" in shown.stdout


@pytest.mark.file_only
def test_an_unreachable_ray_is_a_one_line_failure_within_seconds():
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1"}
    result = subprocess.run([TIMESHARD, "get", "x"], capture_output=True, text=True, timeout=30, env=env)
    assert "cannot reach Ray" in one_line_error(result)


@pytest.mark.file_only
def test_a_store_without_its_credential_fails_before_ray_starts():
    env = {k: v for k, v in os.environ.items() if k != "AZURE_STORAGE_CONNECTION_STRING"}
    result = subprocess.run([TIMESHARD, "up", "--store", "azure://timeshard-test"], capture_output=True, text=True,
                            timeout=60, env=env)
    assert "no credential" in one_line_error(result)


def test_no_silos_in_the_namespace_is_a_one_line_failure(ray_session):
    assert "no timeshard silos" in one_line_error(timeshard("list", "--namespace", "nobody-here"))
