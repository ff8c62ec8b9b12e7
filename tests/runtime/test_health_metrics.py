"""The two counters the alert rules judge a silo's health by: heartbeats that got through (a silo
is counted live while they rise) and rounds the store cut short."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.runtime.harness import OPTIONS, GatedStore, make_parts


async def test_each_heartbeat_that_gets_through_counts_once() -> None:
    parts = await make_parts()
    joined = parts.metrics.heartbeats.value
    assert joined == 1  # the join wrote the row
    for _ in range(3):
        await parts.heartbeat.beat()
    assert parts.metrics.heartbeats.value == joined + 3


async def test_a_heartbeat_the_store_fails_counts_as_a_store_error_and_not_as_a_heartbeat(
        caplog: pytest.LogCaptureFixture) -> None:
    store = GatedStore()
    parts = await make_parts(store, options=OPTIONS.with_(heartbeat_interval="20ms", suspicion_timeout="1s"))
    store.fail_next("set_metadata", 2, prefix="members/")
    before = parts.metrics.heartbeats.value
    with caplog.at_level(logging.WARNING, logger="timeshard.silo"):
        loop = asyncio.create_task(parts.heartbeat.run())
        while parts.metrics.heartbeats.value < before + 2:  # noqa: ASYNC110  polled: a counter, no event to wait on
            await asyncio.sleep(0.01)
        await parts.heartbeat.halt(loop)
    failed = [r for r in caplog.records if r.getMessage() == "heartbeat failed"]
    assert len(failed) >= 1
    assert parts.metrics.store_errors.value == len(failed)
