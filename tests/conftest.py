"""Fixtures shared by every test directory: one Azurite per session, a fresh container per test."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import ray

from cluster._cluster import start_or_join_ray
from cluster.cli.silologs import SiloLogWatch
from tests.azurite import Azurite, start_azurite


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    """A running in-memory Azurite, started by the first test that needs it."""
    emulator = start_azurite()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="session")
def azurite_secret_file(azurite: Azurite, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file holding Azurite's connection string, as an operator provides one to every node.

    The session's Ray may start before Azurite, and timeshard ships no credential through Ray:
    silo processes (and CLIs) reach the emulator by reading this file.
    """
    return azurite.write_connection_string(tmp_path_factory.mktemp("azurite") / "connection-string")


@pytest.fixture
def azure_store_url(azurite: Azurite, azurite_secret_file: Path) -> str:
    """``azure://<container>?connection_string_file=...`` naming a container no other test uses."""
    return azurite.store_url(f"ts-{uuid.uuid4().hex[:20]}", azurite_secret_file)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray for the whole session (Ray is a hard dependency: never skipped)."""
    try:
        start_or_join_ray("local", num_cpus=8, include_dashboard=False, log_to_driver=False,
                          namespace=f"ts-tests-{uuid.uuid4().hex[:6]}")
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
    # A test of a silo that must fail says how (e.g. refusing a store): only that failure is allowed.
    expected = [m.args[0] for m in request.node.iter_markers("silo_fails_with")]
    faults = [f for f in watch.faults() if not any(e in f for e in expected)]
    assert not faults, "a silo logged an unhandled exception:\n" + "\n".join(faults[:20])


# -- running on two cores -------------------------------------------------------------------------
# `make test` runs pytest-xdist with two workers and --dist loadgroup. Each group below runs on one
# worker, one test after another. "drills": what runs a whole benchmark or its own Ray (often
# multi-node), or bounds a time (a failover, a catch-up, a silo started again, a run's lateness),
# so that no two of them overlap each other. "ray": the other tests that run Ray or silos, on
# the worker's session Ray, which assert what happened, not how fast. The rest (the simulator,
# unit tests, storage on Azurite) fills in beside them.
_DRILL_DIRS = ("drills",)
_DRILL_FILES = ("test_benchmarks.py", "test_queue_benchmark.py", "test_cluster_restart.py", "test_keeping.py",
                "test_operator_overlap.py", "test_cancel_adoption.py")
_RAY_DIRS = ("e2e",)


def xdist_group_of(item: pytest.Item) -> str | None:
    """The group ``item`` runs in under `make test` (None: anywhere)."""
    path = Path(str(item.fspath))
    if path.parent.name in _DRILL_DIRS or path.name in _DRILL_FILES:
        return "drills"
    if ("ray_session" in getattr(item, "fixturenames", ()) or item.get_closest_marker("ray") is not None
            or path.parent.name in _RAY_DIRS):
        return "ray"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Fail the run if xdist stopped grouping: drills that measure timings would overlap, quietly."""
    if not getattr(session.config.option, "loadgroup", False):
        return  # not an xdist worker under --dist loadgroup
    lost = [item.nodeid for item in session.items
            if (group := xdist_group_of(item)) is not None and not item.nodeid.endswith(f"@{group}")]
    if lost:
        raise pytest.UsageError(f"--dist loadgroup did not group {len(lost)} tests (first: {lost[0]}); "
                                "pytest 9.2 with pytest-xdist 3.8 drops the group (pytest-xdist#1386)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print where the suite's time went: per worker, per group (each runs serially), and the
    files that took longest, each with its group."""
    by_worker: dict[str, float] = {}
    by_group: dict[str, float] = {}
    by_file: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            duration = getattr(report, "duration", None)
            if not isinstance(report, pytest.TestReport) or duration is None:
                continue
            worker = getattr(report, "node", None)
            name = getattr(getattr(worker, "gateway", None), "id", "main")
            by_worker[name] = by_worker.get(name, 0.0) + duration
            head, _, group = report.nodeid.rpartition("@")
            group = group if head and "]" not in group and "::" not in group else ""
            by_group[group] = by_group.get(group, 0.0) + duration
            where = report.nodeid.split("::")[0] + (f" (@{group})" if group else "")
            by_file[where] = by_file.get(where, 0.0) + duration
    if by_worker:
        workers = ", ".join(f"{name} {total:.0f} s" for name, total in sorted(by_worker.items()))
        groups = ", ".join(f"@{group} {total:.0f} s" for group, total in sorted(by_group.items()) if group)
        terminalreporter.write_line(f"test time per worker: {workers}; per group (one worker each, in turn): "
                                    f"{groups or 'none'}")
        slowest = sorted(by_file.items(), key=lambda item: -item[1])[:20]
        terminalreporter.write_line("slowest files: " + ", ".join(f"{where} {total:.0f} s" for where, total in slowest))
