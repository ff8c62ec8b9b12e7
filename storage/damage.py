"""Keeping a damaged generation for inspection, and saying what was damaged."""

from __future__ import annotations

from collections.abc import Mapping

from .appends import append_verified
from .base import MAX_BLOCK_BYTES, Store, check_metadata
from .errors import AlreadyExists, InvalidMetadata
from .generations import LogState, user_metadata
from .records import Decoded

#: Where a damaged generation is kept for inspection: ``damaged/<generation name>``, a log of its
#: own (outside every caller's prefix, so nothing replays or adopts it) that ``read_log`` reads.
DAMAGED_PREFIX = "damaged/"


def damaged_name(generation: str) -> str:
    """Where ``keep_damaged`` keeps a copy of the generation stored as ``generation``."""
    return DAMAGED_PREFIX + generation


async def keep_damaged(store: Store, state: LogState, why: str) -> str:
    """Copy the generation read as ``state`` to ``damaged/<its name>``, byte for byte; its name.

    For inspection: the copy outlives compaction and deletion of the log it came from, and is
    found with ``store.list("damaged/")``. Keeping it twice is harmless: a copy already there is
    completed if it is shorter, else left as it is. ``Fenced`` if another copier wrote meanwhile.
    ``why`` goes into its metadata (``damage``), cut to fit.
    """
    name = damaged_name(state.head.name)
    data = state.data
    if not data:
        data = (await store.fetch(state.head.name)).data
    metadata = {**user_metadata(state.raw_metadata), "damage": _printable(why)[:1000] or "unknown"}
    if not _fits(metadata):
        metadata = {"damage": "unknown"}
    start = 0
    try:
        etag = await store.create(name, metadata)
    except AlreadyExists:
        # Kept by someone else, or being kept: finish it from where it is, so a copier that died
        # half way never leaves a partial copy behind a claim that then deletes the original.
        stat = await store.stat(name)
        etag, start, metadata = stat.etag, stat.size, stat.metadata
    while start < len(data):
        chunk = data[start : start + MAX_BLOCK_BYTES]
        etag = (await append_verified(store, name, chunk, etag, start, metadata)).etag
        start += len(chunk)
    return name


def describe_damage(decoded: Decoded) -> str:
    """One line for people: each damaged range and the records lost there."""
    parts = [f"bytes {d.offset}-{d.end}: {d.reason}, {d.lost} records lost" for d in decoded.damaged]
    if decoded.torn is not None:
        parts.append(f"tail from {decoded.torn.offset}: {decoded.torn.reason}")
    return "; ".join(parts)


def _printable(text: str) -> str:
    return "".join(ch if " " <= ch <= "~" else "?" for ch in text).strip()


def _fits(metadata: Mapping[str, str]) -> bool:
    try:
        check_metadata(metadata)
    except InvalidMetadata:
        return False
    return True
