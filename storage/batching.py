"""How a log writer batches and when it rotates: ``LogOptions``, and ``gathered()``, the hint that
a caller's appends are a batch already (``storage.log.LogWriter`` reads both)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from .base import MAX_BLOCK_BYTES
from .records import FRAME_OVERHEAD

__all__ = ["LogOptions", "gathered", "is_gathered"]


def is_gathered() -> bool:
    """Whether the running task appends inside ``gathered()``."""
    return _GATHERED.get()


_GATHERED: ContextVar[bool] = ContextVar("timeshard_log_gathered", default=False)


@contextlib.contextmanager
def gathered() -> Iterator[None]:
    """Appends made inside are a batch their caller gathered already (a named put's round at its
    bucket's owner): an idle log writes them at once instead of lingering for more. Lingering
    there bought nothing (one submission a block, measured) and cost each put its 2 ms."""
    token = _GATHERED.set(True)
    try:
        yield
    finally:
        _GATHERED.reset(token)


@dataclass(frozen=True)
class LogOptions:
    """How a ``LogWriter`` batches and when it rotates.

    ``linger``: seconds to wait for more records before writing an idle log's first block
    (0 = only yield to the event loop once); not for records appended inside ``gathered()``.
    ``rotate_blocks`` / ``rotate_bytes``: write a new generation before a block would go past
    either (an append blob holds 50,000 blocks).
    """

    linger: float = 0.0
    max_block_bytes: int = MAX_BLOCK_BYTES
    rotate_blocks: int = 49_000
    rotate_bytes: int = 64 * 1024**3

    def __post_init__(self) -> None:
        if not FRAME_OVERHEAD < self.max_block_bytes <= MAX_BLOCK_BYTES:
            raise ValueError(f"max_block_bytes: must be in ({FRAME_OVERHEAD}, {MAX_BLOCK_BYTES}]")
        if self.rotate_blocks < 1 or self.rotate_bytes < self.max_block_bytes:
            raise ValueError("rotate_blocks must be >= 1 and rotate_bytes >= max_block_bytes")
        if self.linger < 0:
            raise ValueError("linger: must be >= 0 seconds")
