"""``memory://``: logs in a dict, with the same ETag and limit semantics as the real stores."""

from __future__ import annotations

import asyncio
import bisect
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .base import (
    AZURE_MAX_BLOCKS,
    Appended,
    Fetched,
    LogInfo,
    LogPage,
    LogStat,
    ServerTime,
    Store,
    check_metadata,
    check_name,
    check_page,
    check_payload,
    nested_below,
    page_of,
    page_start,
)
from .errors import AlreadyExists, Fenced, LogFull, NotFound, StorageError


@dataclass
class _Log:
    metadata: dict[str, str]
    etag: str
    body: bytearray = field(default_factory=bytearray)
    blocks: int = 0


class MemoryStore(Store):
    """Logs that live as long as this object: fast, for unit tests and benchmarks.

    ``max_blocks`` mimics the append-blob block limit so rotation can be tested quickly.
    ``clock`` (wall time, µs) is the store's own clock, so a test can set it apart from the
    silos'; without one the store has no clock and callers take theirs as the store's.
    """

    def __init__(self, *, max_blocks: int = AZURE_MAX_BLOCKS, clock: Callable[[], int] | None = None) -> None:
        self.max_blocks = max_blocks
        self.clock = clock
        self._logs: dict[str, _Log] = {}
        self._order: list[str] = []  # the names, sorted: a page or a count costs a bisection, not a scan
        self._versions = itertools.count(1)

    def _etag(self) -> str:
        # One counter for the whole store: a deleted and re-created log never reuses an ETag.
        return f"m{next(self._versions)}"

    def _get(self, name: str) -> _Log:
        try:
            return self._logs[name]
        except KeyError:
            raise NotFound(f"log {name!r} not found") from None

    def _match(self, name: str, if_match: str | None) -> _Log:
        log = self._get(name)
        if if_match is not None and log.etag != if_match:
            raise Fenced(f"log {name!r} changed: ETag is no longer {if_match!r}")
        return log

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        check_name(name)
        md = check_metadata(metadata)
        await asyncio.sleep(0)  # every store operation is a suspension point, as with real I/O
        if name in self._logs:
            raise AlreadyExists(f"log {name!r} already exists")
        log = self._logs[name] = _Log(md, self._etag())
        bisect.insort(self._order, name)
        return log.etag

    async def list(self, prefix: str = "") -> list[LogInfo]:
        await asyncio.sleep(0)
        # Filtered before sorted: a test with thousands of shard logs lists members/ many times.
        names = sorted(name for name in self._logs if name.startswith(prefix))
        return [LogInfo(name, dict(self._logs[name].metadata), self._logs[name].etag) for name in names]

    async def names(self, prefix: str = "") -> tuple[str, ...]:
        await asyncio.sleep(0)
        return tuple(sorted(name for name in self._logs if name.startswith(prefix)))

    async def list_page(self, prefix: str = "", *, after: str | None = None, limit: int) -> LogPage:
        check_page(prefix, after, limit)
        await asyncio.sleep(0)
        after, empty = page_start(prefix, after)
        if empty:
            return LogPage((), None)
        start = bisect.bisect_right(self._order, after) if after is not None else bisect.bisect_left(self._order, prefix)
        # One more than the page: it tells whether a next page exists.
        names = [n for n in self._order[start:start + limit + 1] if n.startswith(prefix)]
        return page_of([LogInfo(n, dict(self._logs[n].metadata), self._logs[n].etag) for n in names], limit)

    async def count(self, prefix: str = "", *, nested: bool = True) -> int:
        await asyncio.sleep(0)
        start = bisect.bisect_left(self._order, prefix)
        end = bisect.bisect_left(self._order, prefix[:-1] + chr(ord(prefix[-1]) + 1), start) if prefix else len(self._order)
        if nested:
            return end - start
        return sum(1 for name in self._order[start:end] if not nested_below(name, prefix))

    async def stat(self, name: str) -> LogStat:
        await asyncio.sleep(0)
        log = self._get(name)
        return LogStat(name, dict(log.metadata), log.etag, len(log.body), log.blocks)

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        md = check_metadata(metadata)
        await asyncio.sleep(0)
        log = self._match(name, if_match)
        log.metadata, log.etag = md, self._etag()
        return log.etag

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        check_payload(name, payload)
        await asyncio.sleep(0)
        log = self._match(name, if_match)
        if log.blocks >= self.max_blocks:
            raise LogFull(f"log {name!r} holds {log.blocks} blocks, the limit")
        log.body += payload
        log.blocks += 1
        log.etag = self._etag()
        return Appended(log.etag, len(log.body), log.blocks)

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        await asyncio.sleep(0)
        log = self._get(name)
        if not 0 <= offset <= len(log.body):
            raise StorageError(f"read {name!r} at {offset}: outside the body (size {len(log.body)})")
        return Fetched(bytes(log.body[offset:]), log.etag, dict(log.metadata), len(log.body), log.blocks)

    async def server_time(self) -> ServerTime | None:
        await asyncio.sleep(0)
        return None if self.clock is None else ServerTime(self.clock(), 1)

    async def delete(self, name: str, if_match: str | None) -> None:
        await asyncio.sleep(0)
        self._match(name, if_match)
        del self._logs[name]
        del self._order[bisect.bisect_left(self._order, name)]
