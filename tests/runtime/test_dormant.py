"""Overwrite and delete in a dormant shard without Ray (issue 25, point 3): cancels of one shard are
answered in batches, one look and one append for all waiting, and a dormant shard's fold is kept
and brought up to date by reading only its log's tail, never folded whole again per call."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.runtime.dormant import DormantView, DormantViews
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import ADD, CANCELLED, REMOVE, RETRY, ShardState, remove_op
from cluster.runtime.shardmeta import ShardMeta
from storage import Fenced, Fetched, MemoryStore, StorageError, read_log
from storage.generations import generation_name
from storage.records import encode
from tests.runtime.harness import GatedStore, Recorder, add, fire_due, item, job, make_parts
from tests.runtime.test_moves import fire, live_copies

LATER = timedelta(hours=1)  # beyond the 5 s lookahead: the shard stays dormant


class CountingStore(MemoryStore):
    """A memory store that notes every read (name, offset, bytes) and every append (name)."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches: list[tuple[str, int, int]] = []
        self.appends: list[str] = []

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        fetched = await super().fetch(name, offset)
        self.fetches.append((name, offset, len(fetched.data)))
        return fetched

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Any:
        self.appends.append(name)
        return await super().append_block(name, payload, if_match)


async def dormant_jobs(parts: Roles, n: int, due: timedelta = LATER) -> tuple[str, list[str]]:
    """``n`` jobs added in one schedule call to one dormant shard: (its name, their ids)."""
    jobs = [job(due=due + timedelta(seconds=i % 5)) for i in range(n)]
    names = await parts.scheduling.schedule([item(j) for j in jobs])
    (name,) = set(names)
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded
    return name, [j.id for j in jobs]


async def live_in_log(store: Any, name: str) -> set[str]:
    return set(ShardState().replay((await read_log(store, name)).records()).live)


async def test_a_dormant_shard_is_read_whole_once_then_only_its_tail_is_read() -> None:
    store = CountingStore()
    parts = await make_parts(store)
    name, ids = await dormant_jobs(parts, 200)
    size_before = (await read_log(store, name)).size
    store.fetches.clear()
    assert await parts.cancelling.cancel(name, ids[0]) == ("cancelled", None)
    assert [offset for n, offset, _ in store.fetches if n.startswith(name)] == [0]  # the first look reads it whole
    store.fetches.clear()
    for job_id in ids[1:4]:
        assert await parts.cancelling.cancel(name, job_id) == ("cancelled", None)
    reads = [(offset, size) for n, offset, size in store.fetches if n.startswith(name)]
    assert len(reads) == 3 and all(offset >= size_before for offset, _ in reads), reads
    assert all(size < 200 for _, size in reads)  # only the removal written since the last look
    assert await parts.cancelling.cancel(name, ids[0]) == ("absent", None)  # its removal, read from the tail
    assert await live_in_log(store, name) == set(ids[4:])
    shard = parts.shards.get(name)
    assert shard is not None and not shard.loaded


async def test_concurrent_cancels_of_one_dormant_shard_share_one_look_and_one_append() -> None:
    store = CountingStore()
    parts = await make_parts(store)
    name, ids = await dormant_jobs(parts, 100)
    store.fetches.clear()
    store.appends.clear()
    answers = await asyncio.gather(*(parts.cancelling.cancel(name, job_id) for job_id in ids[:40]),
                                   parts.cancelling.cancel(name, ids[0]),  # the same job twice
                                   parts.cancelling.cancel(name, "no-such-job"))
    assert answers == [("cancelled", None)] * 40 + [("absent", None)] * 2
    assert len([n for n in store.appends if n.startswith(name)]) == 1
    assert len([n for n, _, _ in store.fetches if n.startswith(name)]) == 1
    assert await live_in_log(store, name) == set(ids[40:])
    removals = [op for op in (await read_log(store, name)).records() if op[0] == REMOVE]
    assert sorted(op[1] for op in removals) == sorted(ids[:40])  # each once: the job named twice too


async def test_a_batch_whose_append_fails_answers_none_cancelled_and_its_queued_jobs_still_fire() -> None:
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    parts.transport.handlers["h"] = recorder = Recorder()
    jobs = [job() for _ in range(5)]
    names = await add(parts, *jobs)
    store.fail_next("append_block", 3)  # the writer tries three times
    results = await asyncio.gather(*(parts.cancelling.cancel(n, j.id) for n, j in zip(names, jobs, strict=True)),
                                   return_exceptions=True)
    assert all(isinstance(r, StorageError) for r in results), results
    parts.lease.renew(parts.clock.monotonic())
    parts.clock.advance(2)
    await fire_due(parts)
    assert sorted(ctx.job.id for ctx in recorder.ran) == sorted(j.id for j in jobs)


async def test_a_dormant_batch_whose_append_fails_leaves_its_jobs_in_the_log_and_a_retry_cancels_them() -> None:
    store = GatedStore()
    parts = await make_parts(store)  # type: ignore[arg-type]
    name, ids = await dormant_jobs(parts, 10)
    assert await parts.cancelling.cancel(name, ids[9]) == ("cancelled", None)  # the fold is kept from here
    store.fail_next("append_block", 3)
    results = await asyncio.gather(*(parts.cancelling.cancel(name, job_id) for job_id in ids[:3]),
                                   return_exceptions=True)
    assert all(isinstance(r, StorageError) for r in results), results
    assert await live_in_log(store, name) == set(ids[:9])
    assert await asyncio.gather(*(parts.cancelling.cancel(name, job_id) for job_id in ids[:3])) == \
        [("cancelled", None)] * 3
    assert await live_in_log(store, name) == set(ids[3:9])


async def test_a_claim_landing_while_a_dormant_batch_writes_fences_it_and_nothing_is_answered_cancelled() -> None:
    store = GatedStore()
    a = await make_parts(store, "a")  # type: ignore[arg-type]
    name, ids = await dormant_jobs(a, 10)
    assert await a.cancelling.cancel(name, ids[0]) == ("cancelled", None)  # the fold is kept from here
    release = store.gate("append_block", name)
    cancels = asyncio.ensure_future(asyncio.gather(*(a.cancelling.cancel(name, j) for j in ids[1:4]),
                                                   return_exceptions=True))
    await store.reached("append_block", name).wait()  # looked, removal on its way
    b = await make_parts(store, "b")  # type: ignore[arg-type]
    head = (await read_log(store, name)).head
    assert await b.adoption.claim(name, ShardMeta.from_metadata(head.metadata), judged_by=b.me.owner) is not None
    release.set()
    results = await cancels
    assert all(isinstance(r, Fenced) for r in results), results
    assert await live_in_log(store, name) == set(ids[1:])  # the claimer holds them all, and fires them
    held = b.shards.get(name)
    assert held is not None and held.state is not None and set(held.state.live) == set(ids[1:])
    assert await b.cancelling.cancel(name, ids[1]) == ("cancelled", None)  # where the caller goes next


async def test_a_kept_fold_sees_what_the_shards_new_owner_wrote_since() -> None:
    """The log is the truth, not the fold: a job the claimer cancelled is absent, not written again."""
    store = MemoryStore()
    a = await make_parts(store, "a")
    name, ids = await dormant_jobs(a, 10)
    assert await a.cancelling.cancel(name, ids[0]) == ("cancelled", None)  # the fold is kept from here
    b = await make_parts(store, "b")
    head = (await read_log(store, name)).head
    assert await b.adoption.claim(name, ShardMeta.from_metadata(head.metadata), judged_by=b.me.owner) is not None
    assert await b.cancelling.cancel(name, ids[1]) == ("cancelled", None)
    assert await a.cancelling.cancel(name, ids[1]) == ("absent", None)  # b's removal, read from the tail
    with pytest.raises(Fenced):
        await a.cancelling.cancel(name, ids[2])  # live: its removal is written, and fenced
    assert await live_in_log(store, name) == set(ids[2:])


async def test_a_torn_tail_is_left_out_of_the_kept_fold_as_a_whole_read_leaves_it_out() -> None:
    store = MemoryStore()
    parts = await make_parts(store)
    name, ids = await dormant_jobs(parts, 10)
    assert await parts.cancelling.cancel(name, ids[0]) == ("cancelled", None)  # the fold is kept from here
    shard = parts.shards.get(name)
    assert shard is not None
    frame = encode(shard.writer.last_seq + 1, [remove_op(ids[1], 1, CANCELLED)])
    torn = frame[: len(frame) - 3]  # an append cut short: the removal it carried never landed
    await store.append_block(shard.writer.name, torn, (await store.stat(shard.writer.name)).etag)
    state = await parts.shards.views.state(shard)
    assert parts.shards.views.view(shard).tail_reads == 1  # type: ignore[union-attr]
    assert ids[1] in state.live and set(state.live) == await live_in_log(store, name) == set(ids[1:])
    # Someone else wrote those bytes: the writer is fenced, and nothing is answered cancelled.
    with pytest.raises(Fenced):
        await parts.cancelling.cancel(name, ids[1])
    assert await live_in_log(store, name) == set(ids[1:])


async def test_kept_folds_are_dropped_once_over_budget_idle_or_loaded() -> None:
    parts = await make_parts()
    first, _ = await dormant_jobs(parts, 10)
    second, _ = await dormant_jobs(parts, 10, due=LATER + timedelta(seconds=20))
    a, b = parts.shards.get(first), parts.shards.get(second)
    assert a is not None and b is not None
    views = DormantViews(parts.store, parts.clock, budget_jobs=15, idle_s=30)
    await views.state(a)
    await views.state(b)  # 20 jobs kept in all, over 15: the least recently used goes
    assert views.view(a) is None and views.view(b) is not None
    parts.clock.advance(31)
    views.trim()
    assert len(views) == 0  # idle
    await views.state(a)
    a.state = ShardState(owner=a)  # loaded: the shard's own state answers from now on
    views.trim()
    assert len(views) == 0


async def test_a_move_settled_again_does_not_revive_a_job_cancelled_in_its_dormant_target() -> None:
    """A source taken back from its log reads its move's decision again and settles it once more:
    into a dormant target that already held the move, the occurrence was added again, and the job,
    cancelled there meanwhile ("cancelled"), lived on and fired. A loaded target was asked first."""
    parts = await make_parts()
    parts.transport.handlers["h"] = recorder = Recorder()
    j = job(due=timedelta(seconds=1), schedule="@every 20s")  # the next occurrence's window is dormant
    (source,) = await add(parts, j)
    parts.clock.advance(1)
    await fire(parts)
    ((target, occurrence),) = await live_copies(parts.store, j.id)
    shard = parts.shards.get(target)
    assert occurrence == 2 and shard is not None and not shard.loaded
    assert await parts.cancelling.cancel(source, j.id) == ("moved", target)
    assert await parts.cancelling.cancel(target, j.id) == ("cancelled", None)
    held = parts.shards.get(source)
    assert held is not None and await parts.adoption.retake(held)  # settles the move again
    assert await live_copies(parts.store, j.id) == []
    parts.clock.advance(20)
    await parts.loading.load_due()
    await fire(parts)
    assert [ctx.occurrence for ctx in recorder.ran] == [1]


# -- the kept fold is the fold of the log read whole, whatever was appended between two looks --

IDS = ["a", "b", "c"]
_ops = st.one_of(
    st.builds(lambda i, due, occ: [ADD, i, due, b"job", occ, 0, due], st.sampled_from(IDS), st.integers(0, 99),
              st.integers(1, 3)),
    st.builds(lambda i, occ: remove_op(i, occ, CANCELLED), st.sampled_from(IDS), st.integers(1, 3)),
    st.builds(lambda i, due: [RETRY, i, due, 1], st.sampled_from(IDS), st.integers(0, 99)),
    st.builds(lambda i: remove_op(i, 1, "moved", "shards/next"), st.sampled_from(IDS)),
)
# One append: a frame of ops; the last frame again (a block written twice); or bytes that are no
# frame (a torn tail, or damage once whole frames follow it).
_appends = st.lists(st.one_of(st.tuples(st.just("ops"), st.lists(_ops, min_size=1, max_size=4)),
                              st.tuples(st.just("again"), st.none()),
                              st.tuples(st.just("junk"), st.binary(min_size=1, max_size=30))),
                    min_size=1, max_size=12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=_appends, looks=st.lists(st.booleans(), min_size=12, max_size=12))
def test_the_kept_fold_equals_the_log_folded_whole_after_every_look(appends: list[Any], looks: list[bool]) -> None:
    asyncio.run(_kept_equals_whole(appends, looks))


async def _kept_equals_whole(appends: list[Any], looks: list[bool]) -> None:
    store = MemoryStore()
    name = generation_name("shards/x", 0)
    etag = await store.create(name, {})
    view = DormantView("shards/x")
    seq, last = 0, b""
    for (kind, value), look in zip(appends, looks, strict=False):
        if kind == "ops":
            last = encode(seq, value)
            seq += len(value)
        payload = last if kind == "again" else value if kind == "junk" else last
        if payload:
            etag = (await store.append_block(name, payload, etag)).etag
        if look:
            await _same(view, store)
    await _same(view, store)


async def _same(view: DormantView, store: MemoryStore) -> None:
    kept = await view.refresh(store)
    whole = ShardState().replay((await read_log(store, "shards/x")).records())
    assert (kept.live, kept.moved, kept.pending, kept.paused) == (whole.live, whole.moved, whole.pending, whole.paused)
