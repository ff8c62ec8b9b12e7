"""Status of named jobs is written off the firing path (issue 25, point 1), without Ray: what a
caller of ``get()`` relies on is that an attempt shows within the README's bound (1 s), and that
a short attempt costs its name one write, start and end together."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cluster.named.registry import entry_key, read_entry
from tests.named.test_fence import TARGET, fire_for, start


async def test_an_ended_attempt_shows_in_get_within_a_second_in_one_write() -> None:
    parts, jobs, starts = await start()
    await jobs.put("once", target=TARGET, due_time="1s")
    key = entry_key("default", "default", "once")
    writes: list[str] = []
    set_metadata = parts.store.set_metadata

    async def counted(name: str, metadata: Any, if_match: Any) -> str:
        if name == key:
            writes.append(name)
        return await set_metadata(name, metadata, if_match)

    parts.store.set_metadata = counted  # type: ignore[method-assign]
    await fire_for(parts, 2)
    assert len(starts.log) == 1
    ended = time.monotonic()
    while True:
        status = (await jobs.get("once")).status  # type: ignore[union-attr]
        if status.successful == 1:
            break
        assert time.monotonic() - ended < 1.0, "get() did not show the attempt within 1 s"
        await asyncio.sleep(0.01)
    assert status.finished and status.current_attempt is None and status.history[0].outcome == "succeeded"
    await asyncio.sleep(0.6)  # past the start's own linger: nothing more is written for it
    assert len(writes) == 1
    entry = await read_entry(parts.store, key)
    assert entry is not None and entry.status.successful == 1
