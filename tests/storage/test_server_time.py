"""Each store tells its clock (issue 12, point 10): what silos measure their skew against."""

from __future__ import annotations

import time

import storage
from storage import MemoryStore


async def test_a_store_reads_its_clock_while_the_call_is_in_flight(store: storage.Store, store_kind: str) -> None:
    before = time.time_ns() // 1000
    reading = await store.server_time()
    after = time.time_ns() // 1000
    if store_kind == "memory":
        assert reading is None  # no clock of its own: its users' clocks are taken as its
        return
    assert reading is not None
    # Azure's Date header (Azurite's too) is whole seconds; the file store is this host's clock.
    assert reading.resolution_us == (1_000_000 if store_kind == "azure" else 1)
    assert reading.at_us % reading.resolution_us == 0
    assert reading.at_us <= after and before < reading.at_us + reading.resolution_us


async def test_a_memory_store_given_a_clock_reports_that_clock() -> None:
    store = MemoryStore(clock=lambda: 1_234_567)
    assert await store.server_time() == storage.ServerTime(1_234_567, 1)
