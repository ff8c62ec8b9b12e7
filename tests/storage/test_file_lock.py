"""A process stopped inside a file-store critical section must not stall its peers (issue 12 drill flake).

A SIGSTOPped silo keeps the ``flock`` it held; a peer's declare-dead CAS on that silo's row then
waited for it forever, and the peer's heartbeat with it. A lock is now waited for at most
``lock_timeout``; the caller gets ``Unavailable`` and retries, and nothing is written meanwhile.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time

import pytest

from storage import Fenced, Unavailable
from storage.file import FileStore


async def test_an_operation_on_a_log_locked_by_a_stopped_process_gives_up_instead_of_hanging(tmp_path):
    store = FileStore(tmp_path)
    etag = await store.create("members/0", {"status": "active"})
    # Another open file description on the lock file: flock treats it as another process, here
    # one that was stopped in the middle of a write.
    frozen = os.open(store._path("members/0", ".lock"), os.O_RDWR)
    fcntl.flock(frozen, fcntl.LOCK_EX)
    try:
        began = time.monotonic()
        with pytest.raises(Unavailable):
            await asyncio.wait_for(store.set_metadata("members/0", {"status": "dead"}, if_match=etag), timeout=10)
        assert time.monotonic() - began < store.lock_timeout + 1
        # Nothing was written: the row is as the stopped holder left it.
        assert (await store.stat("members/0")).metadata == {"status": "active"}
    finally:
        os.close(frozen)
    # Once the holder lets go, the CAS works and still fences a stale ETag.
    new = await store.set_metadata("members/0", {"status": "dead"}, if_match=etag)
    with pytest.raises(Fenced):
        await store.set_metadata("members/0", {"status": "active"}, if_match=etag)
    assert (await store.stat("members/0")).etag == new
