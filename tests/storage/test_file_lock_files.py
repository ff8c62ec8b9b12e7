"""The file store keeps no lock file of a log that is gone (issue 25 point 4): an overwrite of a
named job used to leak one ``.lock`` per generation, and every delete one more.

Taking the lock file away is safe only if no two processes can then hold locks on two different
files of one log: a waiter that locked the unlinked file must let it go and lock the file at the
path now. Both are checked here.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from storage import MetadataWrite, NotFound
from storage.file import FileStore


def files(root: Path) -> list[str]:
    """The logs' files, wherever the layout puts them (the index's dot-files aside)."""
    return sorted(p.name for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


async def test_no_lock_file_outlives_its_log(tmp_path: Path) -> None:
    store = FileStore(tmp_path)
    etag = await store.create("a", {})
    await store.append("a", b"x", etag)
    await store.delete("a", None)
    with pytest.raises(NotFound):
        await store.read("never")
    with pytest.raises(NotFound):
        await store.set_metadata("never", {}, None)
    await store.write_metadata_many([MetadataWrite("b", {}, create=True), MetadataWrite("c", {}, create=True)])
    await store.write_metadata_many([MetadataWrite("b", None), MetadataWrite("gone", None)])
    assert files(tmp_path) == ["c.lock", "c.meta"]
    await store.close()


class Racing(FileStore):
    """Between opening the lock file and locking it, the log is deleted and made again by
    someone else (a fresh lock file at the path), once."""

    raced = False

    def _acquire(self, fd: int, name: str, exclusive: bool) -> None:
        if not self.raced:
            self.raced = True
            path = self._path(name, ".lock")
            path.unlink()
            os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o644))
        super()._acquire(fd, name, exclusive)


async def test_a_lock_taken_on_an_unlinked_lock_file_is_taken_again_on_the_current_one(tmp_path: Path) -> None:
    store = Racing(tmp_path)
    with store._locked("a", exclusive=True, make=True):
        other = os.open(store._path("a", ".lock"), os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # held: on the file at the path, not the one unlinked
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(other)
    assert store.raced
