"""The file store acknowledges a write only once a power cut can no longer take it back.

A SIGKILL keeps the page cache, so no crash test can tell an fsync from none: these tests record
the store's system calls instead (writes, flushes, fsyncs, renames, new names) and replay them on a
model of what a power cut may lose. Each acknowledged ``create``, ``append_block`` and
``set_metadata`` must leave nothing the model could lose: every byte written reached the disk (a
Python buffer flushed, then fsynced), every rename carried data already on disk, and every
directory that got a new name was fsynced after it.
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

import storage.file
from storage import FileStore

BUFFERED, WRITTEN = "in a Python buffer", "in the page cache"


@dataclass
class Disk:
    """What a power cut may still lose, from the calls seen so far."""

    unsynced: dict[str, str] = field(default_factory=dict)  # file path -> BUFFERED or WRITTEN
    new_names: set[str] = field(default_factory=set)  # directories holding a name not yet fsynced
    violations: list[str] = field(default_factory=list)

    def created(self, path: str) -> None:
        self.new_names.add(os.path.dirname(path))

    def buffered(self, path: str) -> None:
        self.unsynced[path] = BUFFERED

    def flushed(self, path: str) -> None:
        if self.unsynced.get(path) == BUFFERED:
            self.unsynced[path] = WRITTEN

    def written(self, path: str) -> None:
        self.unsynced.setdefault(path, WRITTEN)  # bytes still buffered stay buffered

    def fsynced(self, path: str) -> None:
        if os.path.isdir(path):
            self.new_names.discard(path)
        elif self.unsynced.get(path) == WRITTEN:
            del self.unsynced[path]  # a Python buffer not flushed is not reached by fsync

    def replaced(self, src: str, dst: str) -> None:
        if src in self.unsynced:
            # The rename may reach the disk before the data: a power cut leaves dst empty or torn.
            self.violations.append(f"{os.path.basename(dst)} replaced by {os.path.basename(src)}, "
                                   f"whose data was {self.unsynced[src]}")
        state = self.unsynced.pop(src, None)
        if state is None:
            self.unsynced.pop(dst, None)
        else:
            self.unsynced[dst] = state
        self.new_names.add(os.path.dirname(dst))

    def acknowledged(self, call: str) -> None:
        lost = [f"{os.path.basename(p)} {s}" for p, s in sorted(self.unsynced.items()) if not p.endswith(".lock")]
        lost += [f"a new name in {d} not fsynced" for d in sorted(self.new_names)]
        if lost:
            self.violations.append(f"{call} acknowledged with {', '.join(lost)}")


class Recording:
    """A file object that tells ``disk`` of its writes and flushes."""

    def __init__(self, inner: IO[Any], path: str, disk: Disk) -> None:
        self._inner, self._path, self._disk = inner, path, disk

    def write(self, data: bytes) -> int:
        self._disk.buffered(self._path)
        return self._inner.write(data)

    def flush(self) -> None:
        self._inner.flush()
        self._disk.flushed(self._path)

    def close(self) -> None:
        self._inner.close()  # closing flushes Python's buffer into the page cache, no further
        self._disk.flushed(self._path)

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._inner, attr)


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[Disk]:
    """Record the file store's calls into a fresh ``Disk`` for the length of a test."""
    model = Disk()
    paths: dict[int, str] = {}  # open descriptors -> the path they were opened on
    real_open, real_fopen = os.open, builtins.open

    def os_open(path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        is_new = bool(flags & os.O_CREAT) and not os.path.exists(path)
        fd = real_open(path, flags, mode, **kw)
        paths[fd] = os.fspath(path)
        if is_new:
            model.created(os.fspath(path))
        return fd

    def fopen(path: Any, mode: str = "r", *args: Any, **kw: Any) -> Any:
        is_new = mode[0] in "wx" and not os.path.exists(path)
        f = real_fopen(path, mode, *args, **kw)
        paths[f.fileno()] = os.fspath(path)
        if is_new:
            model.created(os.fspath(path))
        return f if mode[0] == "r" else Recording(f, os.fspath(path), model)

    def on_fd(real: Callable[..., Any], note: Callable[[str], None]) -> Callable[..., Any]:
        def call(fd: int, *args: Any) -> Any:
            result = real(fd, *args)
            note(paths.get(fd, f"descriptor {fd}"))
            return result
        return call

    def replace(src: Any, dst: Any) -> None:
        real_replace(src, dst)
        model.replaced(os.fspath(src), os.fspath(dst))

    real_replace = os.replace
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(storage.file, "open", fopen, raising=False)  # the module's own name, not builtins'
    monkeypatch.setattr(os, "write", on_fd(os.write, model.written))
    monkeypatch.setattr(os, "pwrite", on_fd(os.pwrite, model.written))
    monkeypatch.setattr(os, "ftruncate", on_fd(os.ftruncate, model.written))
    monkeypatch.setattr(os, "fsync", on_fd(os.fsync, model.fsynced))
    monkeypatch.setattr(os, "fdatasync", on_fd(os.fdatasync, model.fsynced))
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "rename", replace)
    yield model


async def test_every_acknowledged_write_is_on_disk_when_the_call_returns(tmp_path: Path, disk: Disk) -> None:
    store = FileStore(tmp_path / "store")
    etag = await store.create("shards/a", {"owner": "s#1"})
    disk.acknowledged("create")
    for i in range(3):
        etag = (await store.append_block("shards/a", b"block %d" % i, etag)).etag
        disk.acknowledged(f"append {i}")
    etag = await store.set_metadata("shards/a", {"owner": "s#2"}, etag)
    disk.acknowledged("set_metadata")
    assert disk.violations == []
    assert (await store.fetch("shards/a")).data == b"block 0block 1block 2"  # the recorder changed nothing


async def test_an_append_over_a_torn_tail_is_on_disk_when_the_call_returns(tmp_path: Path, disk: Disk) -> None:
    """A killed writer left bytes past the committed size: the next append cuts them off."""
    store = FileStore(tmp_path / "store")
    etag = (await store.append_block("t", b"kept", await store.create("t", {}))).etag
    with store._path("t", ".log").open("ab") as body:  # noqa: ASYNC230  not the store's open: not recorded
        body.write(b"torn tail, longer than the next block")
    await store.append_block("t", b"next", etag)
    disk.acknowledged("append over a torn tail")
    assert disk.violations == []
    assert (await store.fetch("t")).data == b"keptnext"


def replay(*calls: tuple[str, ...]) -> list[str]:
    """What ``Disk`` reports for ``calls``: (method, path...) in order, then one acknowledgement."""
    disk = Disk()
    for method, *paths in calls:
        getattr(disk, method)(*paths)
    disk.acknowledged("the call")
    return disk.violations


def test_the_model_reports_each_way_of_acknowledging_early(tmp_path: Path) -> None:
    """The checker itself: each unsafe order is reported, the safe one is not."""
    d, f, tmp = str(tmp_path), str(tmp_path / "x.meta"), str(tmp_path / "x.meta.tmp")
    assert replay(("created", tmp), ("buffered", tmp), ("flushed", tmp), ("fsynced", tmp),
                  ("replaced", tmp, f), ("fsynced", d)) == []
    assert replay(("buffered", f), ("fsynced", f)) == [f"the call acknowledged with x.meta {BUFFERED}"]
    assert replay(("written", tmp), ("fsynced", tmp), ("replaced", tmp, f)) == [
        f"the call acknowledged with a new name in {d} not fsynced"]
    assert replay(("written", tmp), ("replaced", tmp, f), ("fsynced", f), ("fsynced", d)) == [
        f"x.meta replaced by x.meta.tmp, whose data was {WRITTEN}"]
