"""Triggered runs of named jobs on registry buckets (issue 25 point 5), without Ray.

``named_registry="buckets"`` (the default). What a caller relies on: ``trigger`` runs the
current generation once now and the run counts in its status (marked triggered); once a
``put`` or ``delete`` of the name returned, a triggered run of an older generation does not
start, even one admitted just before. Each on the memory and the file store.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cluster.model.trigger import TRIGGERED_FROM
from cluster.runtime.hooks import AttemptEvent, SiloHooks
from tests.named.bucket_cluster import TARGET, Cluster

STORES = ["memory", "file"]


class HeldBeforeSend(SiloHooks):
    """Holds each triggered attempt between its admission and its call going out."""

    def __init__(self) -> None:
        self.admitted, self.release = asyncio.Event(), asyncio.Event()

    async def attempt_started(self, event: AttemptEvent) -> None:
        if TRIGGERED_FROM in event.job.metadata:
            self.admitted.set()
            await self.release.wait()


@pytest.mark.parametrize("kind", STORES)
async def test_a_triggered_run_starts_now_and_counts_in_the_status(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    tick = await jobs.put("tick", target=TARGET, schedule="@every 1h")
    run = await jobs.trigger("tick")
    await c.fire(1)
    assert c.starts.log == [run.id]
    await c.flush_status()
    got = await jobs.get("tick")
    assert got is not None and got.job.id == tick.job.id
    assert got.status.successful == 1 and got.status.history[0].triggered


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("replace", ["put", "delete"])
async def test_a_triggered_run_admitted_before_an_overwrite_or_delete_does_not_start_after_it_returns(
        kind: str, replace: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    c.parts["a"].hooks.append(held := HeldBeforeSend())
    jobs = c.jobs()
    await jobs.put("tick", target=TARGET, schedule="@every 1h")
    run = await jobs.trigger("tick")
    firing = asyncio.ensure_future(c.fire(1))
    await asyncio.wait_for(held.admitted.wait(), 10)  # admitted: the entry listed it to retire
    if replace == "put":
        call = asyncio.ensure_future(jobs.put("tick", target=TARGET, schedule="@every 1h", overwrite=True))
    else:
        call = asyncio.ensure_future(jobs.delete("tick"))
    await asyncio.sleep(0.05)
    held.release.set()
    await call
    c.starts.log.append("returned")
    await firing
    await c.fire(2)
    assert run.id not in c.starts.after("returned")


@pytest.mark.parametrize("kind", STORES)
async def test_a_triggered_run_of_a_replaced_generation_is_refused(kind: str, tmp_path: Path) -> None:
    c = await Cluster.start(kind, tmp_path)
    jobs = c.jobs()
    await jobs.put("tick", target=TARGET, schedule="@every 1h")
    run = await jobs.trigger("tick")
    await jobs.put("tick", target=TARGET, schedule="@every 1h", overwrite=True)  # before the run came due
    await c.fire(2)
    assert run.id not in c.starts.log
