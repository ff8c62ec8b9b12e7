"""Upgrades: a store of the previous release opens and runs its jobs; a store of a newer one is refused."""

from __future__ import annotations

import asyncio
import json
import pickle
import shutil
from collections import Counter
from pathlib import Path

import pytest

from cluster.model.attempt import JobContext
from cluster.model.errors import UnsupportedStoreFormat
from cluster.model.wire import datetime_to_us
from cluster.runtime.membership import MEMBER_PREFIX
from cluster.runtime.silo import Silo
from cluster.runtime.store_format import FORMAT_LOG, STORE_FORMAT, check_store_format, read_format
from storage import FileStore, MemoryStore, ServerTime
from tests.runtime.harness import OPTIONS, LocalTransport, ManualClock, fire_due, make_parts, until_idle

RELEASE_0_1_0 = Path(__file__).resolve().parent.parent / "fixtures" / "release-0.1.0"


class ManualTimeFileStore(FileStore):
    """A file store whose clock is the test's manual one (its jobs are due in 2030), not this host's."""

    def __init__(self, root: str, clock: ManualClock) -> None:
        super().__init__(root)
        self._manual = clock

    async def server_time(self) -> ServerTime | None:
        return ServerTime(self._manual.now_us(), 1)


async def test_a_store_written_by_0_1_0_opens_and_runs_its_jobs_as_scheduled(tmp_path: Path) -> None:
    """tests/fixtures/release-0.1.0 was written by timeshard 0.1.0 (make_release_store.py): one silo
    scheduled one-shot jobs in two windows, a recurring job and a cancelled one, then stopped."""
    copy = tmp_path / "store"
    shutil.copytree(RELEASE_0_1_0, copy)
    expected = json.loads((copy / "expected.json").read_text())
    clock = ManualClock()
    store = ManualTimeFileStore(str(copy), clock)
    assert await read_format(store) is None  # 0.1.0 wrote no marker
    assert await check_store_format(store) == 1
    assert await read_format(store) == (1, "timeshard 0.1.0")  # marked now, as the format it is

    transport = LocalTransport()
    ran: Counter[str] = Counter()
    early: list[str] = []

    async def handler(ctx: JobContext) -> None:
        ran[ctx.job.id] += 1
        if clock.now_us() < datetime_to_us(ctx.scheduled_for):
            early.append(ctx.job.id)

    transport.handlers["h"] = handler
    parts = await make_parts(store, "1", clock=clock, transport=transport)
    for step in range(40):  # 20 s of the harness clock: both windows, every occurrence
        await parts.heartbeat.beat()  # renews the firing lease, as the heartbeat loop would
        if step % 4 == 0:  # every adoption_interval (2 s): released shards within the lookahead
            await parts.adoption.adopt_orphans()
        await parts.loading.load_due()
        await fire_due(parts)
        clock.advance(0.5)
        await until_idle()
    assert ran == expected["runs"]
    assert not set(expected["never"]) & set(ran)  # the cancel written by 0.1.0 holds
    assert early == []
    await store.close()


async def test_a_store_of_a_newer_format_is_refused_naming_both_versions_and_left_unchanged() -> None:
    store = MemoryStore()
    await store.create(FORMAT_LOG, {"format": str(STORE_FORMAT + 1), "written_by": "timeshard 9.0.0"})
    silo = Silo("0", "memory://", OPTIONS, "test", hooks=lambda _store, _view: [], transport=LocalTransport(),
                clock=ManualClock(), store=store)
    with pytest.raises(UnsupportedStoreFormat) as refused:
        await silo.ready()
    assert (refused.value.found, refused.value.supported) == (STORE_FORMAT + 1, STORE_FORMAT)
    assert str(refused.value).startswith(
        f"store format {STORE_FORMAT + 1} (written by timeshard 9.0.0) is newer than this timeshard reads "
        f"(up to format {STORE_FORMAT})")
    assert [i.name for i in await store.list()] == [FORMAT_LOG]  # never joined: no row, no shard
    assert await store.list(MEMBER_PREFIX) == []


def test_the_refusal_crosses_ray_whole() -> None:
    """Ray pickles a silo's error to the driver that awaited ``ready()``: it arrives typed, versions kept."""
    sent = UnsupportedStoreFormat(2, 1, "timeshard 0.2.0")
    got = pickle.loads(pickle.dumps(sent))
    assert (type(got), got.found, got.supported, got.written_by, str(got)) == (
        UnsupportedStoreFormat, 2, 1, "timeshard 0.2.0", str(sent))


async def test_a_new_store_is_marked_once_however_many_silos_open_it_at_once() -> None:
    store = MemoryStore()
    assert await asyncio.gather(*(check_store_format(store) for _ in range(5))) == [STORE_FORMAT] * 5
    assert await read_format(store) == (STORE_FORMAT, "timeshard 0.1.0")


async def test_a_marker_no_release_wrote_is_refused() -> None:
    store = MemoryStore()
    await store.create(FORMAT_LOG, {"format": "two"})
    with pytest.raises(UnsupportedStoreFormat, match="marker format 'two'"):
        await check_store_format(store)
