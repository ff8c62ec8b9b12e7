"""A local Ray for the whole session, and a fresh cluster of silos per test, on file and Azurite."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster import Cluster, ClusterOptions
from handlers.builtin import Recorder

# Seconds-scale windows so tests cross shard boundaries, load dormant shards and adopt orphans.
FAST = ClusterOptions(
    shard_duration="2s",
    lookahead="1s",
    heartbeat_interval="200ms",
    suspicion_timeout="2s",
    adoption_interval="300ms",
    staging_interval="200ms",
    handler_timeout="10s",
    undeliverable_timeout="3s",
)

RecorderActor = ray.remote(Recorder)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Every cluster test runs on the file store; those whose behaviour could differ on Azure
    # (durability, fencing, failover) run on Azurite too. ``file_only`` marks the others (CLI
    # output, validation, status bookkeeping) to keep the suite within its time budget.
    if "store_url" in metafunc.fixturenames:
        kinds: list = ["file"]
        if not metafunc.definition.get_closest_marker("file_only"):
            kinds.append(pytest.param("azure", marks=pytest.mark.azurite))
        metafunc.parametrize("store_url", kinds, indirect=True)


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return f"file://{tmp_path / 'store'}"
    return str(request.getfixturevalue("azure_store_url"))


@pytest.fixture
def make_cluster(ray_session: None, store_url: str) -> Iterator[Callable[..., Cluster]]:
    started: list[Cluster] = []

    def make(silos: int = 2, keep: bool = True, **changes: Any) -> Cluster:
        cluster = Cluster.start(store_url, silos=silos, namespace=f"ts-{uuid.uuid4().hex[:8]}",
                                options=FAST.with_(**changes), keep=keep)
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        cluster.shutdown(graceful=False)


@pytest.fixture
def recorder(ray_session: None) -> Iterator[tuple[str, Any]]:
    """A Recorder handler actor under a unique name in the driver's namespace."""
    name = f"recorder-{uuid.uuid4().hex[:8]}"
    handle = RecorderActor.options(name=name, num_cpus=0).remote()
    ray.get(handle.executions.remote())
    yield name, handle
    ray.kill(handle)


async def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.1) -> Any:
    """Poll an async or sync predicate until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value) or isinstance(value, ray.ObjectRef):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value {value!r})")
        await asyncio.sleep(interval)


def silo_pid(cluster: Cluster, silo_id: str) -> int:
    return ray.get(cluster.silos[cluster.silo_ids.index(silo_id)].ready.remote(), timeout=60)["pid"]


def executions(handle: Any) -> list[dict[str, Any]]:
    return ray.get(handle.executions.remote())


__all__ = ["FAST", "RecorderActor", "wait_for", "silo_pid", "executions", "os"]
