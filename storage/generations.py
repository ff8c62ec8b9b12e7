"""Where a log lives and how it is read: generations, the current one, and a log read whole.

A log called ``base`` is stored as generations ``base~00000000``, ``base~00000001``, ...
(fixed width, so lexical order is generation order). The current generation is the highest one
that is not pending, or that an existing generation points at (see ``LogWriter``'s rotation).
Metadata keys starting with ``log_`` belong to the log layer; callers see and set the others.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .base import LogInfo, Store, check_metadata
from .errors import InvalidMetadata, NotFound, StorageError, Transient, Unavailable
from .records import Decoded, Frame, FrameReader, decode

SEPARATOR = "~"
RESERVED = "log_"
NEXT_KEY = "log_next"
PENDING_KEY = "log_pending"
CLAIM_KEY = "log_claim"
_GENERATION = re.compile(r"(.*)~(\d{8})")


def generation_name(base: str, generation: int) -> str:
    """The store name of one generation of ``base``."""
    return f"{base}{SEPARATOR}{generation:08d}"


def split_name(name: str) -> tuple[str, int] | None:
    """``(base, generation)`` of a generation's store name, or None for another name."""
    match = _GENERATION.fullmatch(name)
    return (match.group(1), int(match.group(2))) if match else None


def user_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """The caller's part of a generation's metadata (without the ``log_`` keys)."""
    return {k: v for k, v in metadata.items() if not k.startswith(RESERVED)}


def claim_metadata(user: Mapping[str, str], **reserved: str) -> dict[str, str]:
    """``user`` metadata with a fresh claim token (and ``reserved`` log keys), checked."""
    bad = [k for k in user if k.startswith(RESERVED)]
    if bad:
        raise InvalidMetadata(f"metadata keys {bad}: the prefix {RESERVED!r} is reserved for the log layer")
    return check_metadata({**user, CLAIM_KEY: uuid.uuid4().hex[:16], **reserved})


@dataclass(frozen=True)
class LogHead:
    """The current generation of a log: what to read, and the ETag to claim it with."""

    base: str
    name: str
    generation: int
    metadata: dict[str, str]
    etag: str


def current_head(base: str, infos: Iterable[LogInfo]) -> LogHead | None:
    """The current generation of ``base`` among ``infos`` (a listing), or None."""
    generations = {}
    for info in infos:
        split = split_name(info.name)
        if split and split[0] == base:
            generations[split[1]] = info
    pointed = {int(i.metadata[NEXT_KEY]) for i in generations.values() if i.metadata.get(NEXT_KEY, "").isdigit()}
    for generation in sorted(generations, reverse=True):
        info = generations[generation]
        if PENDING_KEY not in info.metadata or generation in pointed:
            return LogHead(base, info.name, generation, user_metadata(info.metadata), info.etag)
    return None


async def find_log(store: Store, base: str) -> LogHead:
    """Return the current generation of ``base``; ``NotFound`` if there is none."""
    head = current_head(base, await store.list(base + SEPARATOR))
    if head is None:
        raise NotFound(f"log {base!r} not found")
    return head


async def list_logs(store: Store, prefix: str = "") -> list[LogHead]:
    """Return the current generation of every log whose base name starts with ``prefix``."""
    by_base: dict[str, list[LogInfo]] = {}
    for info in await store.list(prefix):
        split = split_name(info.name)
        if split:
            by_base.setdefault(split[0], []).append(info)
    heads = (current_head(base, infos) for base, infos in sorted(by_base.items()))
    return [head for head in heads if head is not None]


#: Logs asked for per ``list_page`` call by ``list_logs_between``: Azure's most per List Blobs call.
LIST_PAGE = 5000


async def list_logs_between(store: Store, prefix: str, *, start: str | None = None, end: str | None = None,
                            first_page: int = LIST_PAGE) -> list[LogHead]:
    """``list_logs(store, prefix)`` for the logs whose base name sorts from ``start`` (inclusive)
    up to ``end`` (exclusive) alone, paging through just that range.

    Names sort lexically, so where names start with what orders them (shard names start with
    their window) a caller bounds a listing by time: the calls made grow with the logs in the
    range, not with those beyond it. A generation name sorts right after its base, so a base in
    the range has every generation in it (unless ``end`` extends the base itself, which no
    caller's bound does). ``first_page``: the logs asked for by the first call, the rest
    ``LIST_PAGE`` a call; a caller that knows about how many lie in the range asks for a little
    more, so one call answers without carrying thousands of logs beyond ``end``.
    """
    infos: list[LogInfo] = []
    after = None if start is None else _before(start)
    page = max(1, min(first_page, LIST_PAGE))
    while True:
        listed = await store.list_page(prefix, after=after, limit=page)
        page = LIST_PAGE
        within = [info for info in listed.infos if end is None or info.name < end]
        infos += within
        if listed.next is None or len(within) < len(listed.infos):
            break
        after = listed.next
    by_base: dict[str, list[LogInfo]] = {}
    for info in infos:
        split = split_name(info.name)
        if split and (start is None or split[0] >= start):
            by_base.setdefault(split[0], []).append(info)
    heads = (current_head(base, group) for base, group in sorted(by_base.items()))
    return [head for head in heads if head is not None]


def _before(name: str) -> str | None:
    """A cursor for ``list_page`` whose page starts at ``name`` itself: the name just before it
    in lexical order as far as a cursor needs (``name`` shortened by its last character, which
    sorts before ``name`` and after anything smaller); None for a one-character name."""
    return name[:-1] or None


@dataclass(frozen=True)
class LogState:
    """A log read whole at one ETag: replay ``records()``, then claim with this state."""

    head: LogHead
    decoded: Decoded
    raw_metadata: dict[str, str]
    size: int
    blocks: int
    data: bytes = b""  # the bytes read, kept only when they are damaged (see ``keep_damaged``)

    @property
    def metadata(self) -> dict[str, str]:
        return self.head.metadata

    @property
    def etag(self) -> str:
        return self.head.etag

    def records(self) -> Iterable[Any]:
        """Every whole record in order (a torn or corrupt tail is left out; see ``decoded.torn``)."""
        return self.decoded.records()


async def read_log(store: Store, base: str, *, attempts: int = 5, reader: FrameReader | None = None,
                   fold: Callable[[Frame], None] | None = None) -> LogState:
    """Read the current generation of ``base`` and decode it; follows a rotation under way.

    ``reader`` and ``fold`` are ``decode``'s: how frames are read first, and who takes each as it
    is found (then ``records()`` is empty: the frames went to ``fold``, once, from the generation read).
    """
    for _ in range(attempts):
        head = await find_log(store, base)
        try:
            fetched = await store.fetch(head.name)
        except NotFound:
            continue  # rotated and deleted between listing and reading
        if NEXT_KEY in fetched.metadata:
            continue  # superseded while we looked
        head = LogHead(base, head.name, head.generation, user_metadata(fetched.metadata), fetched.etag)
        decoded = decode(fetched.data, reader=reader, fold=fold)
        kept = fetched.data if decoded.damaged else b""
        return LogState(head, decoded, dict(fetched.metadata), fetched.size, fetched.blocks, kept)
    raise Unavailable(f"log {base!r}: kept rotating under {attempts} reads")


@dataclass(frozen=True)
class LogTail:
    """What one generation of a log holds past a point already read (see ``read_tail``).

    ``decoded`` starts at the offset given: its ``end`` and ``last_seq`` are where the next
    ``read_tail`` starts, as a ``LogState``'s are after a whole read.
    """

    name: str
    decoded: Decoded
    etag: str
    size: int

    def records(self) -> Iterable[Any]:
        return self.decoded.records()


async def read_tail(store: Store, name: str, *, offset: int, after: int) -> LogTail | None:
    """The rest of a log read before: what generation ``name`` holds from ``offset`` on, numbered
    past ``after`` (the ``decoded.end`` and ``decoded.last_seq`` of that read), in one ranged read.

    Decoding goes on exactly as a whole read would at that offset (a torn tail is read again, and
    left out again unless whole frames now follow it), so folding the records read before and
    then these is folding the log read whole. None when the read cannot be continued: the
    generation was superseded by a rotation or deleted, or is shorter than ``offset`` (not the
    log read before): read it whole with ``read_log``. Raises ``Unavailable`` as a read does.
    """
    try:
        fetched = await store.fetch(name, offset)
    except NotFound:
        return None
    except (Unavailable, Transient):
        raise
    except StorageError:
        return None  # outside the body: cut short or replaced, so whatever it holds is read whole
    if NEXT_KEY in fetched.metadata:
        return None
    return LogTail(name, decode(fetched.data, offset=offset, after=after), fetched.etag, fetched.size)
