"""What only the file store promises: crash safety and locking between processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import storage
from storage import records
from storage.file_layout import encode, log_dir

_WRITER = """
import asyncio, sys
import storage
async def main():
    async with storage.open_store(sys.argv[1]) as store:
        writer = await storage.LogWriter.create(store, "crash", {"owner": "child"})
        i = 0
        while True:
            await writer.append_many([i] + [b"x" * 65536] * 40)  # ~2.6 MiB blocks: long writes
            print(i, flush=True)
            i += 1
asyncio.run(main())
"""

_CAS = """
import asyncio, sys
import storage
async def main():
    async with storage.open_store(sys.argv[1]) as store:
        done = 0
        while done < int(sys.argv[2]):
            info = await store.stat("counter")
            try:
                await store.set_metadata("counter", {"n": str(int(info.metadata["n"]) + 1)}, info.etag)
                done += 1
            except storage.Fenced:
                pass
asyncio.run(main())
"""


def _file(root: Path, name: str, suffix: str) -> Path:
    return log_dir(root, name) / (encode(name) + suffix)


def _meta(root: Path, name: str) -> dict[str, int]:
    return json.loads(_file(root, name, ".meta").read_bytes())


async def test_kill_9_mid_append_leaves_a_torn_tail_that_is_never_replayed(tmp_path: Path) -> None:
    root = tmp_path / "store"
    url = f"file://{root}"
    # Blocking on purpose: the loop below spins on stat() to catch the child mid-append.
    child = subprocess.Popen([sys.executable, "-c", _WRITER, url], stdout=subprocess.PIPE, text=True)  # noqa: ASYNC220
    acked: list[int] = []
    body = _file(root, "crash~00000000", ".log")
    try:
        assert child.stdout is not None
        while len(acked) < 3:
            acked.append(int(child.stdout.readline()))
        # Kill it while the body holds bytes past the committed size: an append under way.
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if body.stat().st_size > _meta(root, "crash~00000000")["size"]:
                os.kill(child.pid, signal.SIGKILL)
                break
        else:
            raise AssertionError("never caught the child mid-append")
        child.wait(10)
        acked += [int(line) for line in child.stdout.read().split()]
    finally:
        child.kill()
        child.wait()
    committed = _meta(root, "crash~00000000")["size"]
    raw = body.read_bytes()
    assert len(raw) > committed
    beyond = records.decode(raw, after=-1)
    # Past the committed size lies either a torn frame, which the reader reports, or a whole
    # frame whose commit never happened; in both cases the store does not show it.
    if beyond.torn is not None:
        assert beyond.torn.offset == committed and beyond.end == committed
    async with storage.open_store(url) as store:
        state = await storage.read_log(store, "crash")
        assert state.decoded.torn is None and state.size == committed
        ids = [r for r in state.records() if isinstance(r, int)]
        assert ids == list(range(len(ids))) and set(acked) <= set(ids)
        writer = await storage.LogWriter.claim(store, state, {"owner": "parent"})
        await writer.append(-1)
        after = await storage.read_log(store, "crash")
        assert after.decoded.torn is None and list(after.records())[-1] == -1


async def test_compare_and_swap_is_safe_between_processes(tmp_path: Path) -> None:
    url = f"file://{tmp_path / 'store'}"
    async with storage.open_store(url) as store:
        await store.create("counter", {"n": "0"})
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", _CAS, url, "40") for _ in range(2)]
    assert [await asyncio.wait_for(p.wait(), 60) for p in procs] == [0, 0]
    async with storage.open_store(url) as store:
        assert (await store.stat("counter")).metadata == {"n": "80"}  # no lost update


async def test_a_damaged_meta_file_hides_only_its_own_log(tmp_path: Path, caplog) -> None:
    store = storage.FileStore(tmp_path)
    for name in ("shards/a", "shards/b", "members/0"):
        await store.create(name, {"owner": "x"})
    meta = store._path("shards/a", ".meta")
    for damage in (b"\xff\xfe not json", b'{"metadata": {}}', b"[]"):
        meta.write_bytes(damage)
        assert [i.name for i in await store.list("shards/")] == ["shards/b"]
        assert [i.name for i in await store.list()] == ["members/0", "shards/b"]
        try:
            await store.stat("shards/a")
        except storage.DamagedLog as exc:
            assert "shards/a" in str(exc)
        else:
            raise AssertionError("a damaged log must not stat as a healthy one")
    reported = [r for r in caplog.records if r.getMessage() == "damaged log left out of listings"]
    assert len(reported) == 1  # once per log, not on every listing
