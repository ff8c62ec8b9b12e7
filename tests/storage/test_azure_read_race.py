"""Azure reads racing an append, on a real emulator (found by a restart-storm drill's watcher)."""

from __future__ import annotations

from typing import Any

import pytest

import storage

pytestmark = pytest.mark.azurite


async def test_a_read_refused_at_the_end_of_a_log_that_grew_meanwhile_reads_what_it_grew_by(azure_store_url: str) -> None:
    """A new generation's log is empty when a reader asks for it from 0 (refused: 416) and has a
    block by the time the reader asks its size: the reader reads on, it does not call the log
    damaged ("outside the body")."""
    async with storage.open_store(azure_store_url) as store:
        etag = await store.create("log", {"owner": "w"})
        real = store._blob  # type: ignore[attr-defined]
        grown: list[Any] = []

        def blob(name: str) -> Any:
            client = real(name)
            download = client.download_blob

            async def download_then_grow(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await download(*args, **kwargs)
                finally:
                    if not grown:  # the writer's append lands between the refusal and the size
                        grown.append(await store.append_block("log", b"block", etag))

            client.download_blob = download_then_grow
            return client

        store._blob = blob  # type: ignore[attr-defined]
        fetched = await store.fetch("log", 0)
    assert grown and fetched.data == b"block" and fetched.size == 5
