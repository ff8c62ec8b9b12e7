"""Record framing: msgpack records in CRC-checked frames carrying per-log sequence numbers.

One frame is what one append writes (one block)::

    u32 length of body | u32 CRC32 of the rest | u64 first sequence number | u32 count | body

little-endian, where ``body`` is a msgpack array of ``count`` records numbered ``first_seq``,
``first_seq + 1``, ... Checking the CRC once per frame and decoding the body in one msgpack
call is what makes replay fast; a frame is also the unit that lands whole or not at all.
"""

from __future__ import annotations

import contextlib
import gc
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from .base import MAX_BLOCK_BYTES
from .errors import RecordTooLarge

HEADER = struct.Struct("<IIQI")
#: Bytes a frame adds around its records (the header plus the largest msgpack array header).
FRAME_OVERHEAD = HEADER.size + 5
_CRC_FROM = 8  # the CRC covers sequence number, count and body


def pack(record: Any) -> bytes:
    """Return ``record`` as msgpack bytes, ready for ``encode_frame``."""
    packed: bytes = msgpack.packb(record, use_bin_type=True)
    return packed


def _array_header(count: int) -> bytes:
    if count < 16:
        return bytes([0x90 | count])
    if count < 1 << 16:
        return b"\xdc" + count.to_bytes(2, "big")
    return b"\xdd" + count.to_bytes(4, "big")


def encode_frame(first_seq: int, packed: Sequence[bytes]) -> bytes:
    """Frame already-packed records numbered from ``first_seq``; raise if over one block."""
    body = _array_header(len(packed)) + b"".join(packed)
    if HEADER.size + len(body) > MAX_BLOCK_BYTES:
        raise RecordTooLarge(f"frame of {len(packed)} records is {HEADER.size + len(body)} bytes, over one block")
    tail = struct.pack("<QI", first_seq, len(packed)) + body
    return struct.pack("<II", len(body), zlib.crc32(tail)) + tail


def encode(first_seq: int, records: Sequence[Any]) -> bytes:
    """Frame ``records`` (any msgpack-able values) numbered from ``first_seq``."""
    return encode_frame(first_seq, [pack(r) for r in records])


@dataclass(frozen=True)
class Torn:
    """Where decoding stopped before the end of the data, and why: a bad tail with nothing whole after it."""

    offset: int
    reason: str


@dataclass(frozen=True)
class Damage:
    """Bytes ``[offset, end)`` in the middle of a log that hold no readable frame, and why.

    ``lost`` is how many records the writer numbered there (the gap in sequence numbers up to
    the next whole frame): 0 when the bad bytes were extra, never fewer than what was lost.
    """

    offset: int
    end: int
    reason: str
    lost: int


#: Reads one frame's body (a msgpack array of records) into a sequence of tuples, one a record, the
#: items each record's msgpack array holds; raises on a body it does not take, which ``decode`` then
#: reads as lists. A caller that knows its records' shapes passes one to ``decode`` to have a frame
#: read and checked in one call (see ``cluster.runtime.shardlog.SHARD_FRAMES``).
FrameReader = Callable[[memoryview], Sequence[tuple[Any, ...]]]


@dataclass(frozen=True)
class Frame:
    """One decoded frame: its offset in the log, first sequence number and records.

    ``typed`` holds the records as the ``FrameReader`` given to ``decode`` read them, when it
    took the frame; ``records`` are then made from it when first asked for, so a caller that
    folds ``typed`` never pays for lists.
    """

    offset: int
    first_seq: int
    _records: list[Any] | None = field(repr=False)
    typed: Sequence[tuple[Any, ...]] | None = None

    @property
    def records(self) -> list[Any]:
        if self._records is None:
            object.__setattr__(self, "_records", [list(record) for record in self.typed or ()])
        assert self._records is not None
        return self._records

    @property
    def count(self) -> int:
        """How many records the frame holds (without making them)."""
        return len(self.typed) if self._records is None and self.typed is not None else len(self.records)


@dataclass(frozen=True)
class Decoded:
    """The whole frames found in some bytes; ``torn`` is set when a bad tail stopped decoding.

    ``end`` is the offset just past the last good frame; ``last_seq`` the highest sequence
    number seen (or the ``after`` given). Frames whose numbers were already seen are skipped
    and counted in ``skipped``, so a duplicated block never replays twice. ``damaged`` lists
    bad ranges with whole frames after them: decoding went on from the next frame whose header
    checks and whose numbers continue the ones before.
    """

    frames: list[Frame] = field(default_factory=list)
    end: int = 0
    last_seq: int = -1
    torn: Torn | None = None
    skipped: int = 0
    damaged: tuple[Damage, ...] = ()

    def records(self) -> Iterator[Any]:
        """Yield every record in order."""
        for frame in self.frames:
            yield from frame.records

    def items(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(sequence number, record)`` pairs in order."""
        for frame in self.frames:
            yield from enumerate(frame.records, frame.first_seq)

    @property
    def lost(self) -> int:
        """Records known lost in damaged ranges (a torn tail's are not known)."""
        return sum(d.lost for d in self.damaged)

    def __len__(self) -> int:
        return sum(frame.count for frame in self.frames)


def _frame_at(view: memoryview, pos: int) -> tuple[int, int, int, list[Any]] | str:
    """The frame at ``pos`` as ``(end, first_seq, count, records)``, or why there is none."""
    size = len(view)
    if size - pos < HEADER.size:
        return f"truncated header: {size - pos} of {HEADER.size} bytes"
    length, crc, first, count = HEADER.unpack_from(view, pos)
    end = pos + HEADER.size + length
    if length > MAX_BLOCK_BYTES:
        return f"bad length {length}"
    if end > size:
        return f"truncated frame: {size - pos} of {end - pos} bytes"
    if zlib.crc32(view[pos + _CRC_FROM : end]) != crc:
        return "CRC mismatch"
    try:
        records = msgpack.unpackb(view[pos + HEADER.size : end], raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on garbage
        return f"{_NONSENSE}undecodable body: {type(exc).__name__}"
    if not isinstance(records, list) or len(records) != count:
        return f"{_NONSENSE}record count does not match the header"
    return end, first, count, records


_NONSENSE = "checksum holds, "  # a frame written whole whose body is not records


def _next_frame(view: memoryview, start: int, last: int) -> tuple[int, int, int, int, list[Any]] | None:
    """The first whole frame at or after ``start`` that continues the numbering after ``last``.

    Resynchronising after damage: only offsets whose header is plausible (length within a block
    and the data, at least one record, numbers past ``last``) are checksummed, so scanning
    garbage costs little.
    """
    size = len(view)
    unpack_header = HEADER.unpack_from
    for p in range(start, size - HEADER.size + 1):
        length, _, first, count = unpack_header(view, p)
        if length > MAX_BLOCK_BYTES or p + HEADER.size + length > size or not 0 < count <= length:
            continue
        if first + count - 1 <= last:
            continue
        found = _frame_at(view, p)
        if not isinstance(found, str):
            return (p, *found)
    return None


#: Objects the collector tracks, made under one ``collector_paused``, past which they count as a
#: bulk build and go to the collector's oldest generation when it ends.
BULK_BUILD = 100_000


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a bulk build of containers that all stay alive.

    Building a million records with the collector on triggers a full collection each time the
    heap grows by a quarter, each walking every record built so far: replay spent three times
    longer decoding than it did with the collector off (benchmarks/cluster.py's replay, issue 29).
    A bulk build (``BULK_BUILD`` objects or more) ends in the oldest generation: left in the
    youngest, the first allocation after the pause walked all of it, and the next middle
    collection again (0.13 s a million jobs loaded, the event loop stalled meanwhile); the
    oldest is walked only by full collections, which walk everything long-lived anyway.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            # Not where the process froze objects itself (a Ray Serve replica does at start):
            # unfreeze would hand them all back to the collector.
            if gc.get_count()[0] >= BULK_BUILD and not gc.get_freeze_count():
                gc.freeze()  # every generation into the permanent one, then that one into the oldest
                gc.unfreeze()
            gc.enable()


def decode(data: bytes, *, offset: int = 0, after: int = -1, reader: FrameReader | None = None,
           fold: Callable[[Frame], None] | None = None) -> Decoded:
    """Decode whole frames from ``data`` (which starts at log ``offset``); never raises on bad bytes.

    ``after`` is the last sequence number already known: records numbered up to it are skipped.
    ``reader``, if given, is tried first on each whole frame's body (see ``FrameReader``); a frame
    it does not take is read as lists, so what counts as damage does not depend on it.
    ``fold``, if given, is handed each frame as soon as it is found, in log order, and the frames
    are not kept (``frames`` stays empty): a caller that turns records into something else holds
    one frame's records at a time, not the whole log's beside what it made of them.
    A bad stretch with a whole frame after it is reported in ``damaged`` and decoding goes on
    from that frame; bad bytes with nothing whole after them are the tail, reported in ``torn``.
    A frame whose checksum holds but whose body is not records (written that way) is damage
    wherever it is: it was written whole, so it is not a torn append.
    """
    with collector_paused():
        return _decode_frames(data, offset, after, reader, fold)


def _decode_frames(data: bytes, offset: int, after: int, reader: FrameReader | None,
                   fold: Callable[[Frame], None] | None) -> Decoded:
    view = memoryview(data)
    size = len(view)
    unpack_header = HEADER.unpack_from
    crc32 = zlib.crc32
    unpackb = msgpack.unpackb
    frames: list[Frame] = []
    damaged: list[Damage] = []
    pos = 0
    last = after
    skipped = 0
    torn: Torn | None = None
    while pos < size:
        # The common case inline (replay's hot loop); anything unusual goes through _frame_at.
        records: Any = None
        typed: Sequence[tuple[Any, ...]] | None = None
        if size - pos >= HEADER.size:
            length, crc, first, count = unpack_header(view, pos)
            end = pos + HEADER.size + length
            if length <= MAX_BLOCK_BYTES and end <= size and crc32(view[pos + _CRC_FROM : end]) == crc:
                if reader is not None:
                    try:
                        typed = reader(view[pos + HEADER.size : end])
                    except Exception:  # not a body it takes: read as lists below
                        typed = None
                    if typed is not None and len(typed) != count:
                        typed = None
                if typed is None:
                    try:
                        records = unpackb(view[pos + HEADER.size : end], raw=False, strict_map_key=False)
                    except Exception:
                        records = None
                    if not isinstance(records, list) or len(records) != count:
                        records = None
        at = pos
        if typed is None and records is None:
            reason = _frame_at(view, pos)
            assert isinstance(reason, str)
            if reason.startswith(_NONSENSE):
                # The checksum holds, so the length is the writer's: skip the frame whole
                # rather than look for frames inside its body.
                length, _, first, count = unpack_header(view, pos)
                skip_to = pos + HEADER.size + length
                found = _next_frame(view, skip_to, last)
                if found is None:
                    damaged.append(Damage(offset + pos, offset + skip_to, reason, count))
                    pos = skip_to
                    continue
            else:
                found = _next_frame(view, pos + 1, last)
                if found is None:
                    torn = Torn(offset + pos, reason)
                    break
            at, end, first, count, records = found
            damaged.append(Damage(offset + pos, offset + at, reason, first - last - 1))
        kept: Any = records if typed is None else typed
        if first <= last:  # a block written twice: keep only what is new
            drop = min(last - first + 1, count)
            skipped += drop
            kept = kept[drop:]
            first += drop
        if kept:
            frame = Frame(offset + at, first, kept) if typed is None else Frame(offset + at, first, None, kept)
            if fold is None:
                frames.append(frame)
            else:
                fold(frame)
            last = first + len(kept) - 1
            del frame
        # Let the records a fold took go before the next frame is read, so that one reuses their memory.
        kept = typed = records = None
        pos = end
    return Decoded(frames, offset + pos, last, torn, skipped, tuple(damaged))
