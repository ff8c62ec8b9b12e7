"""A claim whose answer was lost, with a record appended right after it landed, keeps that record.

A flow's log takes appends from every writer by ETag. A claim (the start of a repair) that landed
and lost its answer was settled by reading the log back: its metadata was there, so the ETag read
was taken for the claim's own, though a writer that read the log after the claim had appended a
record meanwhile. The repair then rotated the log from a snapshot read before that record, and
the record was gone (simulator seed 1200780, every kind: a flow step's success was lost so, and
the step ran again). Run on every store: memory, file and Azurite.
"""

from __future__ import annotations

from typing import Any

import storage
from storage import Fenced, LogWriter, read_log
from storage.records import encode


class AppendAfterClaim:
    """``store``, but the next metadata write lands, then another writer appends one record by
    the ETag it made, then the write's answer is lost."""

    def __init__(self, store: storage.Store) -> None:
        self._store = store
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def set_metadata(self, name: str, metadata: Any, if_match: str | None) -> str:
        etag = await self._store.set_metadata(name, metadata, if_match)
        if self.armed:
            self.armed = False
            log = await read_log(self._store, name.partition("~")[0])
            await self._store.append_block(log.head.name, encode(log.decoded.last_seq + 1, ["appended"]), etag)
            raise storage.Unavailable("injected: the claim landed, its answer was lost")
        return etag


async def test_a_record_appended_after_a_claim_whose_answer_was_lost_survives_the_repair(store: storage.Store) -> None:
    first = await LogWriter.create(store, "flows/f", {"flow_id": "f"})
    await first.append("defined")
    await first.close()
    doubted = AppendAfterClaim(store)
    state = await read_log(doubted, "flows/f")  # type: ignore[arg-type]
    records = list(state.records())
    doubted.armed = True
    try:
        writer = await LogWriter.claim(doubted, state, {"repairing": "1"}, snapshot=lambda: records)  # type: ignore[arg-type]
    except Fenced:
        pass  # the log moved on after the claim: its caller reads it again
    else:
        await writer.rotate()  # from the snapshot read before the append
        await writer.close()
    assert list((await read_log(store, "flows/f")).records()) == ["defined", "appended"]
