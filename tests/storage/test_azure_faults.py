"""Azure faults on a real emulator: stopped mid-stream and restarted on the same port."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import storage
from storage import LogWriter, RetryPolicy, read_log
from storage.urls import CONNECTION_STRING_ENV
from tests.azurite import start_azurite

pytestmark = pytest.mark.azurite


async def test_appends_across_an_emulator_restart_lose_nothing_acknowledged(tmp_path: Path) -> None:
    azurite = start_azurite(location=tmp_path / "azurite")
    try:
        env = {CONNECTION_STRING_ENV: azurite.connection_string}
        # A short retry budget so that the outage produces errors as well as delayed successes.
        retry = RetryPolicy(attempts=4, base=0.05, cap=0.3)
        async with storage.open_store("azure://faults", environ=env, retry=retry) as store:
            writer = await LogWriter.create(store, "log", {"owner": "w"})
            acked: list[int] = []
            errors: list[Exception] = []
            stop = asyncio.Event()

            async def produce(first: int) -> None:
                i = first
                while not stop.is_set():
                    try:
                        await writer.append(i)
                        acked.append(i)
                    except storage.StorageError as exc:
                        errors.append(exc)
                        await asyncio.sleep(0.05)
                    i += 8

            producers = [asyncio.create_task(produce(k)) for k in range(8)]
            await asyncio.sleep(0.5)
            before = len(acked)
            await asyncio.to_thread(azurite.stop)
            await asyncio.sleep(1.0)
            await asyncio.to_thread(azurite.start)
            await asyncio.sleep(1.0)
            stop.set()
            await asyncio.gather(*producers)

            assert before > 0 and len(acked) > before  # it wrote before, and again after
            assert errors, "the outage should have surfaced at least one error"
            assert all(isinstance(e, storage.Unavailable) and "unavailable" in str(e) for e in errors)
            replayed = list((await read_log(store, "log")).records())
            assert len(replayed) == len(set(replayed))
            assert set(acked) <= set(replayed)
    finally:
        azurite.stop()
