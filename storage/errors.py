"""Typed errors of the storage layer: callers branch on the class, people read the message."""

from __future__ import annotations


class StorageError(Exception):
    """A storage operation failed; the message names the log and the reason."""


class Fenced(StorageError):
    """A conditional write lost: the log changed since the ETag the caller holds.

    For an owner this means someone else claimed (or deleted) the log: stop writing to it.
    """


class AlreadyExists(StorageError):
    """``create`` found a log of that name already there."""


class NotFound(StorageError):
    """The named log does not exist."""


class LogFull(StorageError):
    """The log reached its block or size limit; write a new generation (see ``LogWriter``)."""


class LogCorrupted(StorageError):
    """The log no longer holds what its writer wrote (cut short or rewritten): the writer stops."""


class LandedAfterFailure(LogCorrupted):
    """An append its callers were told had failed turned out to have landed, after they had taken
    back what it carried: the log holds what their memory does not, so the writer stops, and the
    log's owner reloads from it (as from a corrupted log)."""


class Unavailable(StorageError):
    """The store could not be reached after every retry; the write may or may not have landed."""


class Transient(StorageError):
    """A fault worth retrying (timeout, throttling, 5xx, lost connection). Retried inside stores."""


class DamagedLog(StorageError):
    """A log's own bookkeeping (the file store's ``.meta``) cannot be read; the log is kept as is."""


class InvalidStoreUrl(StorageError, ValueError):
    """``open_store`` got a URL it cannot use; the message says which forms and settings work."""


class InvalidMetadata(StorageError, ValueError):
    """Metadata keys must be lowercase identifiers and values short printable ASCII."""


class RecordTooLarge(StorageError, ValueError):
    """One payload or record exceeds the largest block a store accepts (4 MiB)."""
