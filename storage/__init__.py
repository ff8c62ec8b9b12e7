"""Generic durable logs: named, fenced, append-only. Knows nothing of jobs.

``open_store(url)`` gives a ``Store`` (memory, file or Azure append blobs) of raw logs with
ETag compare-and-swap. On top of it, ``read_log`` / ``LogWriter`` give framed msgpack records,
group commit, exactly-once blocks and rotation into new generations.
"""

from __future__ import annotations

from .base import (
    AZURE_MAX_BLOCKS,
    MAX_BLOCK_BYTES,
    Appended,
    Fetched,
    LogInfo,
    LogPage,
    LogStat,
    MetadataWrite,
    RetryPolicy,
    ServerTime,
    Store,
)
from .batching import LogOptions, gathered
from .damage import DAMAGED_PREFIX, damaged_name, describe_damage, keep_damaged
from .errors import (
    AlreadyExists,
    DamagedLog,
    Fenced,
    InvalidMetadata,
    InvalidStoreUrl,
    LandedAfterFailure,
    LogCorrupted,
    LogFull,
    NotFound,
    RecordTooLarge,
    StorageError,
    Transient,
    Unavailable,
)
from .file import FileStore
from .generations import LogHead, LogState, LogTail, find_log, generation_name, list_logs, read_log, read_tail
from .log import LogWriter
from .memory import MemoryStore
from .records import Damage, Decoded, Frame, FrameReader, Torn, decode, encode
from .urls import DEFAULT_URL, open_store

__all__ = [
    "AZURE_MAX_BLOCKS", "MAX_BLOCK_BYTES", "DEFAULT_URL",
    "Store", "LogInfo", "LogPage", "LogStat", "MetadataWrite", "Appended", "Fetched", "RetryPolicy", "ServerTime",
    "MemoryStore", "FileStore", "open_store",
    "StorageError", "Fenced", "AlreadyExists", "NotFound", "LogFull", "LogCorrupted", "LandedAfterFailure", "Unavailable", "Transient",
    "InvalidStoreUrl", "InvalidMetadata", "RecordTooLarge", "DamagedLog",
    "Decoded", "Frame", "FrameReader", "Torn", "Damage", "decode", "encode",
    "LogHead", "LogState", "LogTail", "LogOptions", "LogWriter", "find_log", "gathered", "list_logs", "read_log", "read_tail",
    "generation_name",
    "DAMAGED_PREFIX", "damaged_name", "describe_damage", "keep_damaged",
]
