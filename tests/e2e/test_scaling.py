"""Silos that come and go on a running cluster: `cluster.silos` after a silo is gone for good,
`timeshard up --address ... --detach` scaling a running cluster, and clients following along."""

from __future__ import annotations

from datetime import timedelta

import pytest
import ray

from cluster import Target
from cluster.client import running_silo_ids
from tests.e2e.conftest import executions, wait_for
from tests.e2e.test_cli_jobs import timeshard

pytestmark = [pytest.mark.ray, pytest.mark.file_only]


async def test_cluster_silos_lists_what_exists_after_a_silo_is_gone_for_good(make_cluster):
    cluster = make_cluster(silos=3, keep=False)  # no keeper: it would start the silo again
    cluster.kill_silo("1", restart=False)
    await wait_for(lambda: "1" not in running_silo_ids(cluster.namespace))
    assert len(cluster.silos) == 2  # never raises because one is gone
    statuses = {s["silo_id"]: s for s in cluster.status()}
    assert "removed or killed" in statuses["1"]["error"]
    assert all(statuses[i]["node"] == ray.get_runtime_context().get_node_id() for i in ("0", "2"))


async def test_up_scales_a_running_cluster_and_clients_follow(make_cluster, recorder, store_url):
    name, handle = recorder
    cluster = make_cluster(silos=2)
    client = cluster.client()
    jobs = [await client.schedule_job(Target.actor(name), f"before-{k}", due=timedelta(seconds=2 + k / 10))
            for k in range(20)]

    address = ray.get_runtime_context().gcs_address
    grown = timeshard("up", "--detach", "--address", address, "--namespace", cluster.namespace, "--store", store_url, "--silos", "4")
    assert grown.returncode == 0, grown.stderr
    assert "scaled from 2 to 4 silos: added silos 2, 3" in grown.stdout
    assert running_silo_ids(cluster.namespace) == ["0", "1", "2", "3"]

    shrunk = timeshard("up", "--detach", "--address", address, "--namespace", cluster.namespace, "--store", store_url, "--silos", "1")
    assert shrunk.returncode == 0, shrunk.stderr
    assert "removed silos 1, 2, 3 (their shards handed over)" in shrunk.stdout
    assert running_silo_ids(cluster.namespace) == ["0"]

    # The client was made for silos 0 and 1; silo 1 is gone: it finds silo 0 on its own.
    late = await client.schedule_job(Target.actor(name), "after", due=timedelta(seconds=1))
    fired = await wait_for(lambda: _ran(handle, [j.id for j in jobs] + [late.id]), timeout=30)
    assert fired
    assert late.shard is not None and "-0." in late.shard


def _ran(handle, ids: list[str]) -> bool:
    done = {e["job_id"] for e in executions(handle)}
    return set(ids) <= done
