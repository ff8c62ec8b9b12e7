"""Record framing: msgpack records in CRC-checked frames carrying per-log sequence numbers.

One frame is what one append writes (one block)::

    u32 length of body | u32 CRC32 of the rest | u64 first sequence number | u32 count | body

little-endian, where ``body`` is a msgpack array of ``count`` records numbered ``first_seq``,
``first_seq + 1``, ... Checking the CRC once per frame and decoding the body in one msgpack
call is what makes replay fast; a frame is also the unit that lands whole or not at all.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
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
    """Where decoding stopped before the end of the data, and why."""

    offset: int
    reason: str


@dataclass(frozen=True)
class Frame:
    """One decoded frame: its offset in the log, first sequence number and records."""

    offset: int
    first_seq: int
    records: list[Any]


@dataclass(frozen=True)
class Decoded:
    """The whole frames found in some bytes; ``torn`` is set when a bad tail stopped decoding.

    ``end`` is the offset just past the last good frame; ``last_seq`` the highest sequence
    number seen (or the ``after`` given). Frames whose numbers were already seen are skipped
    and counted in ``skipped``, so a duplicated block never replays twice.
    """

    frames: list[Frame] = field(default_factory=list)
    end: int = 0
    last_seq: int = -1
    torn: Torn | None = None
    skipped: int = 0

    def records(self) -> Iterator[Any]:
        """Yield every record in order."""
        for frame in self.frames:
            yield from frame.records

    def items(self) -> Iterator[tuple[int, Any]]:
        """Yield ``(sequence number, record)`` pairs in order."""
        for frame in self.frames:
            yield from enumerate(frame.records, frame.first_seq)

    def __len__(self) -> int:
        return sum(len(frame.records) for frame in self.frames)


def decode(data: bytes, *, offset: int = 0, after: int = -1) -> Decoded:
    """Decode whole frames from ``data`` (which starts at log ``offset``); never raises on bad bytes.

    ``after`` is the last sequence number already known: records numbered up to it are skipped.
    """
    view = memoryview(data)
    size = len(view)
    unpack_header = HEADER.unpack_from
    crc32 = zlib.crc32
    unpackb = msgpack.unpackb
    frames: list[Frame] = []
    pos = 0
    last = after
    skipped = 0
    torn: Torn | None = None
    while pos < size:
        if size - pos < HEADER.size:
            torn = Torn(offset + pos, f"truncated header: {size - pos} of {HEADER.size} bytes")
            break
        length, crc, first, count = unpack_header(view, pos)
        end = pos + HEADER.size + length
        if length > MAX_BLOCK_BYTES:
            torn = Torn(offset + pos, f"bad length {length}")
            break
        if end > size:
            torn = Torn(offset + pos, f"truncated frame: {size - pos} of {end - pos} bytes")
            break
        if crc32(view[pos + _CRC_FROM : end]) != crc:
            torn = Torn(offset + pos, "CRC mismatch")
            break
        try:
            records = unpackb(view[pos + HEADER.size : end], raw=False, strict_map_key=False)
        except Exception as exc:  # msgpack raises several unrelated types on garbage
            torn = Torn(offset + pos, f"undecodable body: {type(exc).__name__}")
            break
        if not isinstance(records, list) or len(records) != count:
            torn = Torn(offset + pos, "record count does not match the header")
            break
        if first <= last:  # a block written twice: keep only what is new
            drop = min(last - first + 1, count)
            skipped += drop
            records = records[drop:]
            first += drop
        if records:
            frames.append(Frame(offset + pos, first, records))
            last = first + len(records) - 1
        pos = end
    return Decoded(frames, offset + pos, last, torn, skipped)
