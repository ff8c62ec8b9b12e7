"""Silo hooks during a store outage: told apart from bugs, and never let through the fence."""

from __future__ import annotations

import logging

import pytest

from cluster.runtime.hooks import SiloHooks, admits, call_hooks
from storage import InvalidMetadata, Unavailable


class Outage(SiloHooks):
    async def maintain(self) -> None:
        raise Unavailable("list 'registry/': store unavailable after 8 attempts")

    async def admit(self, event):  # type: ignore[no-untyped-def]
        raise Unavailable("stat 'registry/bucket-3': store unavailable")


class Broken(SiloHooks):
    async def maintain(self) -> None:
        raise RuntimeError("a bug")


class Counting(SiloHooks):
    def __init__(self) -> None:
        self.calls = 0

    async def maintain(self) -> None:
        self.calls += 1


async def test_a_hook_that_meets_a_store_outage_is_a_warning_and_the_hooks_after_it_still_run(caplog: pytest.LogCaptureFixture):
    after = Counting()
    with caplog.at_level(logging.WARNING, logger="timeshard.silo"):
        await call_hooks([Outage(), after], "maintain")
    # The drill's log watcher fails a run on any logged traceback: an outage is expected weather
    # (the next maintenance round tries again), so it is a warning naming the error, without one.
    [record] = caplog.records
    assert record.levelno == logging.WARNING and record.exc_info is None
    assert "store unavailable" in record.error and record.method == "maintain"  # type: ignore[attr-defined]
    assert after.calls == 1


async def test_a_hook_that_raises_anything_else_is_still_logged_as_a_failure_with_its_traceback(caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.WARNING, logger="timeshard.silo"):
        await call_hooks([Broken()], "maintain")
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info is not None


async def test_an_admit_that_cannot_reach_the_store_leaves_the_attempt_undecided():
    # Fails closed: the admit is the generation fence, so "cannot tell" never runs the attempt.
    assert await admits([Outage()], object()) is None  # type: ignore[arg-type]


class Buggy(SiloHooks):
    async def maintain(self) -> None:
        raise InvalidMetadata("metadata of 9 KiB: a hook's bug, not the store's weather")


async def test_a_hook_bug_raised_as_a_storage_error_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    # Only a store that cannot be reached is weather: a refused write is the hook's own bug.
    with caplog.at_level(logging.WARNING, logger="timeshard.silo"):
        await call_hooks([Buggy()], "maintain")
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info, f"{record.levelname}: {record.getMessage()}"
