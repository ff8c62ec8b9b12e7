"""Finding one job's current definition, for ``trigger_job``: in memory if this silo holds its
shard loaded, else in the shard's log, following a recurring job from shard to shard as it moves.

Read only: the log is the truth (nothing is applied in memory before it is durable), so any silo
may answer from it; the silo that owns the shard answers from memory, without a read.
"""

from __future__ import annotations

from typing import Any

from cluster.runtime.ownership import ShardTable
from cluster.runtime.shardlog import JOB, ShardState
from storage import NotFound, Store, read_log

#: ("found", packed job) | ("moved", the shard it moved to) | ("absent", None) | ("gone", None)
#: ("gone": the shard no longer exists; the job may have moved on before it was deleted).
FindAnswer = tuple[str, Any]


class Lookup:
    """Answers where a job is and what it is, for a client about to trigger it."""

    def __init__(self, store: Store, shards: ShardTable) -> None:
        self._store = store
        self._shards = shards

    async def find(self, shard_base: str, job_id: str) -> FindAnswer:
        """Where ``job_id`` is as ``shard_base`` says: see ``FindAnswer``."""
        shard = self._shards.get(shard_base)
        try:
            if shard is not None and self._shards.holds(shard):
                # Loaded, or dormant: what its log says, without loading it.
                state = shard.state if shard.state is not None else await self._shards.views.state(shard)
            else:  # not ours: fold its log to look
                state = ShardState().replay((await read_log(self._store, shard_base)).records())
        except NotFound:
            return "gone", None
        entry = state.live.get(job_id)
        if entry is not None:
            return "found", entry[JOB]
        pending = state.pending.get(job_id)
        if pending is not None:  # its move to the next occurrence is decided: the definition travels with it
            return "found", pending[1][1]
        moved = state.moved.get(job_id)
        return ("moved", moved) if moved else ("absent", None)
