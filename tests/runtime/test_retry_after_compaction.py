"""A retried schedule call finds a recurring job its earlier try added, after the log it passed
through was compacted: the compacted log answers as the whole log did."""

from __future__ import annotations

from typing import Any

from cluster.runtime.shardlog import MOVED, SUCCEEDED, ShardState, add_op, landed_ids, remove_op

DUE = 1_000_000


def _compacted(records: list[list[Any]]) -> list[list[Any]]:
    return ShardState(owner="s").replay(records).snapshot()


def test_a_job_that_moved_in_and_ended_is_landed_in_the_compacted_log_as_in_the_whole_one() -> None:
    """Simulator seed 1161807 (every kind): a recurring job's chain moved from its first shard into
    a second and ended there; that log rotated. Two retries of its schedule call each found it
    nowhere, since a snapshot was read for live jobs and pending moves only, and each added it
    again: three chains for one call where docs/failover.md allows one more."""
    nxt = [DUE + 1_000, b"job", 2, 0, DUE + 1_000]
    moved_on = [add_op("on", DUE, b"job"), remove_op("on", 1, MOVED, "shards/next", nxt)]
    ended_here = [add_op("in", DUE, b"job", occurrence=2, source="shards/first"), remove_op("in", 2, SUCCEEDED)]
    one_shot = [add_op("once", DUE, b"job"), remove_op("once", 1, SUCCEEDED)]
    ids = {"on", "in", "once"}
    whole = moved_on + ended_here + one_shot
    assert landed_ids(whole, ids) == ids
    # The chain that moved on is found where it lives on (a pending move here counts too); a
    # one-shot job that ran leaves nothing (the one more run docs/failover.md allows).
    assert landed_ids(_compacted(whole), ids) == {"on", "in"}
    assert landed_ids(_compacted(moved_on[:1] + [remove_op("on", 1, MOVED, "shards/next")] + ended_here),
                      ids) == {"in"}
