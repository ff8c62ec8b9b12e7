"""``benchmarks.named_put --phases``: the profile a put-speed change is judged by times every
round's steps, and leaves the write path as it found it."""

from __future__ import annotations

import asyncio
from typing import Any

from benchmarks.named_put import STEPS, phases
from cluster.named.writes import PutWriter
from storage import MemoryStore
from tests.named.test_put_path import DUE, TARGET, jobs_on


async def test_phases_time_each_step_of_every_round_and_put_the_write_path_back() -> None:
    jobs, _ = await jobs_on(MemoryStore())
    before = {step: getattr(PutWriter, step) for step in (*STEPS, "_round")}
    profile: dict[str, Any] = {}
    with phases(profile):
        await asyncio.gather(*(jobs.put(f"n-{i}", target=TARGET, due_time=DUE) for i in range(10)))
    assert profile["rounds"] >= 1 and profile["rounds"] * profile["puts_per_round"] == 10
    assert set(profile["steps"]) == {"read", "schedule", "cancel_named", "point", "retire"}
    assert 0 < sum(s["share"] for s in profile["steps"].values()) <= 1.001
    assert {step: getattr(PutWriter, step) for step in before} == before
