"""Fenced writes that survive a lost answer: a metadata CAS and a block append that happen
exactly once, even when the store retried them or their response never came back."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from .base import Appended, LogStat, Store
from .errors import Fenced, LogCorrupted, NotFound, StorageError, Unavailable


async def cas_metadata(store: Store, name: str, metadata: dict[str, str], etag: str, *, size: int) -> str:
    """Set metadata under ``etag`` (the log ``size`` bytes long there); when the answer is lost
    or ambiguous, look before failing.

    Metadata written here always carries a fresh claim token, so finding exactly it proves the
    write was ours; ``_landed`` tells whether the ETag found is still the one it made.
    """
    try:
        return await store.set_metadata(name, metadata, etag)
    except NotFound as exc:
        raise Fenced(f"log {name!r} was deleted") from exc
    except (Fenced, Unavailable):
        stat = await stat_or_fenced(store, name)
        if stat.metadata == metadata:
            return _landed(stat, size)
        raise


def _landed(stat: LogStat, size: int) -> str:
    """The ETag our metadata write made, read back as ``stat``; ``Fenced`` if a block was appended
    after it landed.

    A log whose writers all append by ETag (a flow's log) takes an append from a writer that read
    it after our write: the ETag read back is then that append's, and taken for ours, a claim
    went on to rotate the log from a snapshot without the appended record (simulator seed
    1200780, every kind: a flow step's success was lost so, and the step ran again).
    """
    if stat.size != size:
        raise Fenced(f"log {stat.name!r} was appended to after our metadata write landed")
    return stat.etag


#: The first wait before asking the store again whether a CAS landed (``cas_metadata_until_known``); it doubles.
COMMIT_RETRY_S = 0.05
COMMIT_RETRY_MAX_S = 2.0


async def cas_metadata_until_known(store: Store, name: str, metadata: dict[str, str], etag: str, *,
                                   size: int) -> str:
    """``cas_metadata`` for a write that must not end in doubt: its new ETag once the store says
    it landed; ``Fenced`` if another writer's did; the write's own error if nothing changed.

    A log rotation's commit (the old generation pointed at the new one) is such a write, and
    neither way out of a doubt is safe: reported failed, the records the new generation's
    snapshot covers were taken back by their callers though the log may hold them; the next
    rotation then found this very commit in place, took it for another writer's, and the writer
    stopped as fenced on a log still its own (simulator seed 344458 with every kind: the shard was
    dropped, a flow step's success, folded into the snapshot, was never told to its flow, and the
    step ran again from another shard). So the store is asked until it answers.
    """
    try:
        return await cas_metadata(store, name, metadata, etag, size=size)
    except Fenced:
        raise
    except StorageError as exc:
        doubt = exc
    delay = COMMIT_RETRY_S
    while True:
        await asyncio.sleep(delay)
        try:
            stat = await stat_or_fenced(store, name)
        except Fenced:
            raise
        except StorageError:
            delay = min(2 * delay, COMMIT_RETRY_MAX_S)
            continue
        if stat.metadata == metadata:
            return _landed(stat, size)
        if stat.etag == etag:
            raise doubt  # it did not land, nor did anything else: a plain failure
        raise Fenced(f"log {name!r} was claimed by another writer")


async def stat_or_fenced(store: Store, name: str) -> LogStat:
    """``store.stat(name)``, with a deleted log read as ``Fenced``."""
    try:
        return await store.stat(name)
    except NotFound as exc:
        raise Fenced(f"log {name!r} was deleted") from exc


async def landed_append(store: Store, name: str, frame: bytes, etag: str, size: int,
                  metadata: Mapping[str, str]) -> Appended | None:
    """After an ambiguous append: its result if ``frame`` landed, None if nothing changed.

    Ownership first, from ``stat`` alone: other metadata (another writer's claim token) or a
    deleted log means ``Fenced`` even while the tail cannot be read, so a writer that lost an
    answer learns it was fenced as soon as the store answers at all. A log now shorter than
    ``size`` was cut behind the writer's back: ``LogCorrupted``. Only then is the tail read:
    ``frame`` there means it landed; other bytes at ``size`` mean someone else wrote (``Fenced``).
    """
    stat = await stat_or_fenced(store, name)
    if stat.metadata != metadata:
        raise Fenced(f"log {name!r} was claimed by another writer")
    if stat.etag == etag:
        return None
    if stat.size < size:
        raise LogCorrupted(f"log {name!r} is {stat.size} bytes, shorter than the {size} its writer wrote")
    try:
        tail = await store.fetch(name, size)
    except NotFound as exc:
        raise Fenced(f"log {name!r} was deleted") from exc
    if tail.etag == etag:
        return None
    if tail.metadata != metadata:
        raise Fenced(f"log {name!r} was claimed by another writer")
    if tail.data == frame:
        return Appended(tail.etag, tail.size, tail.blocks)
    raise Fenced(f"log {name!r} was written by someone else")


async def append_verified(store: Store, name: str, frame: bytes, etag: str, size: int,
                           metadata: Mapping[str, str]) -> Appended:
    """Append one frame exactly once, even when a response is lost and the append is retried.

    On an ambiguous failure, read the tail at the offset the frame was meant for: the frame
    there (and our metadata unchanged) means it landed; nothing new means it is safe to send
    again; anything else means another writer got in and we are fenced.
    """
    for _ in range(3):
        try:
            return await store.append_block(name, frame, etag)
        except NotFound as exc:
            raise Fenced(f"log {name!r} was deleted") from exc
        except (Fenced, Unavailable):
            landed = await landed_append(store, name, frame, etag, size, metadata)
            if landed is not None:
                return landed
            # nothing landed: send again
    raise Unavailable(f"append to {name!r}: failed repeatedly although the log did not change")
