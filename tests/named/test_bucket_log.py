"""A registry bucket's log (issue 25, point 5; ``named_registry="buckets"``, the default), without Ray.

What a caller relies on: what the bucket's owner held in memory when its appends returned is
exactly what the next owner replays from the log — across a rotation, with a damaged record set
aside — so a put acknowledged by one owner is seen by the next; a failed append leaves memory as
the log is; and every client and silo send a name to the same bucket.
"""

from __future__ import annotations

import asyncio
import pickle
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from cluster.model.errors import ValidationError
from cluster.model.options import ClusterOptions
from cluster.named.bucket import (
    DELETE,
    PUT,
    RETIRED,
    SNAPSHOT,
    STATUS,
    BucketMeta,
    BucketState,
    UnreadableEntry,
    bucket_base,
    bucket_of,
)
from cluster.named.registry import Entry, JobStatus, Retired, entry_key
from cluster.runtime.logowner import RELEASED, read_to_claim
from storage import LogOptions, LogWriter, MemoryStore, read_log

KEY = entry_key("ns", "app", "nightly")
OTHER = entry_key("ns", "app", "hourly")


def entry(key: str, generation: int, job_id: str, retire: tuple[Retired, ...] = ()) -> Entry:
    return Entry(key, "", generation, job_id, f"shards/s-{job_id}", 1_000_000 * generation, 5, JobStatus(),
                 retire, "ZGVm")


def put(e: Entry) -> list[Any]:
    return [PUT, e.key, e.metadata()]


def history() -> list[list[Any]]:
    """An owner's decisions on two names: overwrite, a stale status, retire, delete, put again."""
    first, second = entry(KEY, 1, "j1"), entry(KEY, 2, "j2", retire=(Retired("j1", "shards/s-j1", 1, False),))
    ran = JobStatus(successful=3, next_fire=datetime(2030, 1, 1, tzinfo=timezone.utc))
    return [
        put(first),
        put(entry(OTHER, 1, "h1")),
        [STATUS, KEY, "j1", ran.to_json()],
        put(second),
        [STATUS, KEY, "j1", JobStatus(failed=9).to_json()],  # the old generation's hook, late: left alone
        [RETIRED, KEY, ["j1"]],
        [DELETE, OTHER, "h1"],
        put(entry(OTHER, 1, "h2")),
        [STATUS, OTHER, "h2", ran.to_json()],
        [DELETE, OTHER, "h1"],  # a delete of a generation it no longer points at: left alone
    ]


def test_the_next_owner_replays_what_the_owner_held_across_a_rotation() -> None:
    async def run() -> None:
        store = MemoryStore()
        base = bucket_base(3)
        held = BucketState()
        writer = await LogWriter.create(store, base, BucketMeta("a#1").to_metadata(), snapshot=held.snapshot,
                                        options=LogOptions())
        records = history()
        for record in records[:5]:
            held.apply(record)
            await writer.append(record)
        await writer.rotate()  # what came before is in the snapshot now
        for record in records[5:]:
            held.apply(record)
            await writer.append(record)
        await writer.close()
        state = await read_log(store, base)
        replayed = BucketState().replay_log(state.decoded, base)
        assert replayed.entries == held.entries
        assert replayed.unreadable == []
        assert set(replayed.entries) == {KEY, OTHER}
        assert replayed.entries[KEY].job_id == "j2"
        assert replayed.entries[KEY].status == JobStatus()  # an overwrite starts afresh; the old one's late hook is not its
        assert replayed.entries[KEY].retire == ()
        assert replayed.entries[OTHER].job_id == "h2"  # deleted, then put again
        assert replayed.entries[OTHER].status.successful == 3
        assert BucketMeta.from_metadata(state.metadata) == BucketMeta("a#1")

    asyncio.run(run())


def test_a_record_not_one_the_owner_writes_is_set_aside_and_the_rest_replays() -> None:
    records: list[Any] = [put(entry(KEY, 1, "j1")), [PUT, OTHER, {"gen": "x"}], "junk", [STATUS, 7, "j1", {}],
                          [STATUS, KEY, "j1", JobStatus(successful=1).to_json()]]
    state = BucketState().replay(records, first_seq=10)
    assert [bad.seq for bad in state.unreadable] == [11, 12, 13]
    assert set(state.entries) == {KEY}
    assert state.entries[KEY].status.successful == 1


def test_a_failed_append_is_taken_back_but_a_later_change_of_the_same_name_stays() -> None:
    state = BucketState()
    state.apply(put(entry(KEY, 1, "j1")))
    failed = state.apply_all([put(entry(KEY, 2, "j2")), put(entry(OTHER, 1, "h1"))])
    state.undo(failed)
    assert state.entries[KEY].job_id == "j1"
    assert OTHER not in state.entries

    failed = state.apply_all([put(entry(KEY, 2, "j2"))])
    state.apply(put(entry(KEY, 3, "j3")))  # submitted after, and may be durable: it wins
    state.undo(failed)
    assert state.entries[KEY].job_id == "j3"


def test_an_entry_replay_left_undecoded_reads_and_changes_as_one_decoded_at_once() -> None:
    """A takeover decodes an entry only when it is first read (``Entries``): the new owner's
    memory, read and changed by its own writes and take-backs, and rotated into a snapshot, is
    what the old owner's (every entry decoded) shows after the same; and a replayed record of a
    name read meanwhile wins over what was read."""
    eager = BucketState()
    for record in history():
        eager.apply(record)
    lazy = BucketState().replay(history())
    assert lazy.unreadable == [] and lazy.count("") == 2
    assert BucketState().replay(lazy.snapshot()).entries == eager.entries  # a rotation before any read
    ran = JobStatus(successful=7).to_json()
    later: list[list[Any]] = [[STATUS, KEY, "j2", ran], [DELETE, OTHER, "h1"], [RETIRED, KEY, ["j2"]]]
    for state in (eager, lazy):
        for record in later:
            state.apply(record)
        state.undo(state.apply_all([[DELETE, OTHER, "h2"], put(entry(KEY, 3, "j3"))]))  # an append that failed
    assert lazy.entries == eager.entries
    assert lazy.entries[KEY].status.successful == 7 and lazy.entries[OTHER].job_id == "h2"
    assert BucketState().replay(lazy.snapshot()).entries == eager.entries  # and after its own writes

    state = BucketState().replay([put(entry(KEY, 1, "j1"))])
    assert state.entries[KEY].job_id == "j1"  # decoded, kept decoded
    state.replay([put(entry(KEY, 2, "j2")), [DELETE, KEY, "j1"]])  # the stale delete is left alone
    assert state.snapshot() == [[SNAPSHOT, []], [PUT, KEY, entry(KEY, 2, "j2").metadata()]]
    assert state.entries[KEY].job_id == "j2"
    state.replay([[DELETE, KEY, "j2"]])
    assert KEY not in state.entries and state.count("") == 0


def test_a_replayed_entry_whose_fields_do_not_decode_fails_its_reads_not_a_miss() -> None:
    """Replay checks a put's shape only; one whose JSON does not decode is an error when read,
    never a name taken for absent (a put would then start a second generation beside it)."""
    third = entry_key("ns", "app", "weekly")
    broken, numberless, jobless = put(entry(KEY, 1, "j1")), put(entry(third, 1, "w1")), put(entry(OTHER, 2, "h2"))
    broken[2] = {**broken[2], "status": "{not json"}
    numberless[2] = {**numberless[2], "gen": "x"}
    jobless[2] = {**jobless[2], "job": 7}  # no delete could compare it: set aside at once
    state = BucketState().replay([broken, numberless, put(entry(OTHER, 1, "h1")), jobless], first_seq=0)
    assert [bad.seq for bad in state.unreadable] == [3] and set(state.entries) == {KEY, third, OTHER}
    for key in (KEY, third):
        with pytest.raises(UnreadableEntry):
            state.entries.get(key)
    assert state.entries[OTHER].job_id == "h1"


def test_every_process_sends_a_name_to_the_same_bucket() -> None:
    # Pinned: a bucket number that changed between processes (Python's salted hash) or releases
    # would send a put to an owner that does not hold the name.
    assert [bucket_of(KEY, 8), bucket_of(OTHER, 8), bucket_of(KEY, 3)] == [3, 7, 0]
    counts = [0] * 8
    for i in range(8000):
        counts[bucket_of(entry_key("ns", "app", f"job-{i}"), 8)] += 1
    assert min(counts) > 800  # about even: a round's puts spread over every owner
    assert bucket_base(3) < bucket_base(12)


def test_bucket_metadata_reads_back_and_a_log_without_it_reads_as_released() -> None:
    meta = BucketMeta("a#1", imported=True)
    assert BucketMeta.from_metadata(meta.to_metadata()) == meta
    assert BucketMeta.from_metadata({}) == BucketMeta(RELEASED, False)
    assert replace(meta, owner="b#2") == meta.with_owner("b#2")


def test_names_are_kept_in_buckets_by_default_the_old_spelling_still_means_buckets_and_a_misspelt_choice_is_refused() -> None:
    assert ClusterOptions().named_registry == "buckets" and ClusterOptions().named_buckets
    assert not ClusterOptions(named_registry="entries").named_buckets
    # A config written while the buckets were opt-in keeps working, and compares equal to today's.
    old = ClusterOptions(named_registry="experimental-buckets")
    assert old.named_registry == "buckets" and old.named_buckets and old == ClusterOptions()
    assert ClusterOptions(named_registry="entries").with_(named_registry="experimental-buckets").named_buckets
    # Options a silo of an earlier release describes (``Cluster.connect`` unpickles them, no
    # validation on the way) still send this client's puts to the buckets.
    described = ClusterOptions()
    object.__setattr__(described, "named_registry", "experimental-buckets")
    assert pickle.loads(pickle.dumps(described)).named_buckets
    for wrong in ("bucket", "Buckets", None, ["buckets"]):
        with pytest.raises(ValidationError, match="named_registry"):
            ClusterOptions(named_registry=wrong)  # type: ignore[arg-type]


def test_a_page_and_a_count_show_the_durable_entries_in_key_order_as_keys_come_go_and_are_taken_back() -> None:
    """Random puts, deletes and status changes, up to three appends in flight at once (they land
    in order, as the log writer makes them), a failed one taken back: at every step a page of
    the whole bucket is what the log holds, in key order; a count of a prefix agrees; and ``durable``
    of each key is its entry in the log (a status landed while a later append of its key flies)."""
    import random

    rng = random.Random("bucket-index/0")
    state = BucketState()
    log: dict[str, Entry] = {}  # what the log holds, by key
    flying: list[tuple[list[Any], Any, list[str]]] = []  # (records, what undo needs, keys), in append order
    keys = [entry_key("ns", "app", f"n{i:03d}") for i in range(40)]
    scope = entry_key("ns", "app", "")
    for step in range(1500):
        if flying and (len(flying) >= 3 or rng.random() < 0.5):
            records, done, held = flying.pop(0)  # the oldest append ends first
            if rng.random() < 0.1 and not flying:
                state.undo(done)  # failed (the owner then claims the bucket again from its log)
                state.settle(held, done, landed=False)
            else:
                for record in records:
                    if record[0] == DELETE:
                        log.pop(record[1], None)
                    elif record[0] == STATUS and record[1] in log:
                        log[record[1]] = replace(log[record[1]], status=JobStatus.from_json(record[3]))
                    elif record[0] == PUT:
                        log[record[1]] = Entry.from_metadata(record[1], record[2], "")
                state.settle(held, done, landed=True)
        else:
            key = rng.choice(keys)
            current = state.entries.get(key)
            roll = rng.random()
            if current is not None and roll < 0.3:
                record = [DELETE, key, current.job_id]
            elif current is not None and roll < 0.6:
                record = [STATUS, key, current.job_id, JobStatus(successful=step).to_json()]
            else:
                record = put(entry(key, step + 1, f"j{step}"))
            done = state.apply_all([record])
            flying.append(([record], done, state.hold(done)))
        page, more = state.page(scope, None, 1000)
        assert [(e.key, e.job_id, e.status) for e in page] == [(k, log[k].job_id, log[k].status) for k in sorted(log)], step
        assert not more, step
        assert all((state.durable(k) is None) == (k not in log) for k in keys), step
        prefix = entry_key("ns", "app", "n01")
        assert state.count(prefix) == sum(1 for k in log if k.startswith(prefix)), step
    first, more = state.page(scope, None, 5)
    rest, _ = state.page(scope, first[-1].key, 1000)
    assert [e.key for e in first + rest] == sorted(log) and more == (len(log) > 5)


@pytest.mark.parametrize("torn", [False, True], ids=["rotated", "claimed-after-a-torn-append"])
def test_a_bucket_of_more_names_than_a_block_holds_rotates_and_is_taken_over_whole(torn: bool) -> None:
    """A rotation writes each record whole in one block: a bucket's snapshot was one record
    listing every name, so past ~9,000 names (4 MiB) it could not rotate, its writes failed for
    good at the block limit, and a next owner could not claim it from a log with a torn tail
    (claiming rewrites it). Here a block holds 8 KiB and the bucket ~60 KiB of names."""

    async def run() -> None:
        store = MemoryStore()
        base = bucket_base(1)
        options = LogOptions(max_block_bytes=8 * 1024)
        held = BucketState()
        writer = await LogWriter.create(store, base, BucketMeta("a#1").to_metadata(), snapshot=held.snapshot,
                                        options=options)
        names = [entry_key("ns", "app", f"job-{i:04d}") for i in range(300)]
        for number, key in enumerate(names):
            record = put(entry(key, 1, f"j{number}"))
            held.apply(record)
            await writer.append(record)
        await writer.append(put(entry(names[0], 2, "again")))
        held.apply(put(entry(names[0], 2, "again")))
        await writer.rotate()
        assert writer.rotations == 1
        if torn:
            state = await read_log(store, base)
            await store.append(state.head.name, b"\x07torn", state.etag)  # an append cut short by a crash
            read = await read_to_claim(store, base, "a#1")
            assert read.decoded.torn is not None
            claimed = await LogWriter.claim(store, read, BucketMeta("b#1").to_metadata(),
                                            snapshot=BucketState().replay_log(read.decoded, base).snapshot,
                                            options=options)
            await claimed.close()
        else:
            await writer.close()
        replayed = BucketState().replay_log((await read_log(store, base)).decoded, base)
        assert replayed.unreadable == []
        assert replayed.entries == held.entries and len(replayed.entries) == 300
        assert replayed.entries[names[0]].job_id == "again"
        assert [e.key for e in replayed.page("", None, 1000)[0][:3]] == sorted(names)[:3]

    asyncio.run(run())


def test_a_snapshot_an_earlier_release_wrote_as_one_record_still_replays() -> None:
    old = [[SNAPSHOT, [[KEY, entry(KEY, 2, "j2").metadata()], [OTHER, entry(OTHER, 1, "h1").metadata()]]],
           [DELETE, OTHER, "h1"]]
    state = BucketState().replay(old)
    assert state.unreadable == [] and list(state.entries) == [KEY] and state.entries[KEY].job_id == "j2"
