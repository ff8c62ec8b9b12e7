"""Fixtures shared by every test directory: one Azurite per session, a fresh container per test."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator

import pytest
import ray

from cluster.cli.silologs import SiloLogWatch
from storage.urls import CONNECTION_STRING_ENV
from tests.azurite import Azurite, start_azurite


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """A running in-memory Azurite; ``AZURE_STORAGE_CONNECTION_STRING`` points at it meanwhile.

    The variable is set for the whole session so that processes started by tests (Ray workers,
    CLIs) reach the same emulator through ``open_store("azure://...")``.
    """
    emulator = start_azurite()
    previous = os.environ.get(CONNECTION_STRING_ENV)
    os.environ[CONNECTION_STRING_ENV] = emulator.connection_string
    try:
        yield emulator
    finally:
        if previous is None:
            os.environ.pop(CONNECTION_STRING_ENV, None)
        else:
            os.environ[CONNECTION_STRING_ENV] = previous
        emulator.stop()


@pytest.fixture
def azure_store_url(azurite: Azurite) -> str:
    """``azure://<container>`` naming a container no other test uses (created on first use)."""
    return f"azure://ts-{uuid.uuid4().hex[:20]}"


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray for the whole session (Ray is a hard dependency: never skipped)."""
    try:
        ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, namespace=f"ts-tests-{uuid.uuid4().hex[:6]}")
    except Exception as exc:  # Ray is a hard dependency: never skip, under CI or not
        pytest.fail(f"Ray did not start: {exc!r}", pytrace=False)
    yield
    ray.shutdown()




@pytest.fixture(autouse=True)
def no_silo_exceptions(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail every cluster test whose silos logged an unhandled exception (killed ones included).

    Silos' stderr stays in Ray's worker logs even with ``log_to_driver=False``; a background task
    that dies, a loop's catch-all ``log.exception`` and asyncio's "never retrieved" all land there.
    """
    if "ray_session" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("ray_session")  # Ray first: its log folder is what we watch
    watch = SiloLogWatch()
    assert watch.logs_dir is not None, "Ray is running but its log folder was not found"
    yield
    time.sleep(0.3)  # a killed silo's last lines reach its log file
    faults = watch.faults()
    assert not faults, "a silo logged an unhandled exception:\n" + "\n".join(faults[:20])
