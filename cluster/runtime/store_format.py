"""The store's format marker: which layout of shards, rows and records a store holds.

Job records carry their own wire version (``cluster.model.jobs.WIRE_VERSION``), but a later
release may change more than a job record: frame layout, shard names, membership rows. A silo
of an older release meeting such a store would misread it, or worse, write into it. So the
store says which format it holds, in the metadata of one empty log (``FORMAT_LOG``), written
when the first silo opens a store that has none, and read by every silo before it joins: a
store of a newer format is refused with ``UnsupportedStoreFormat`` naming both versions.

A store written before the marker existed (timeshard 0.1.0) holds format 1, the layout this
release reads; opening it writes the marker. A release that changes the layout raises
``STORE_FORMAT`` and rewrites the marker once it has converted the store (or on first open,
when the change needs no conversion) — after the old silos are stopped, as docs/operations.md
("Upgrades") tells operators.
"""

from __future__ import annotations

from cluster.model.errors import UnsupportedStoreFormat
from storage import AlreadyExists, NotFound, Store

#: The newest store format this release reads and writes.
STORE_FORMAT = 1
#: Outside every prefix that silos list (``shards/``, ``members/``, ``named/``, ``flows/``).
FORMAT_LOG = "timeshard/format"
RELEASE = "timeshard 0.1.0"


async def read_format(store: Store) -> tuple[int, str] | None:
    """The format the store's marker names and who wrote it; ``None`` when it has none."""
    try:
        stat = await store.stat(FORMAT_LOG)
    except NotFound:
        return None
    text, by = stat.metadata.get("format", ""), stat.metadata.get("written_by", "")
    if not text.isdigit():
        # No release that reads format 1 writes such a marker: refuse rather than guess.
        raise UnsupportedStoreFormat(0, STORE_FORMAT, f"{by or 'an unknown writer'}; marker format {text!r}")
    return int(text), by


async def check_store_format(store: Store) -> int:
    """Refuse a store of a newer format; mark an unmarked one as ours. Returns the store's format.

    Raises ``UnsupportedStoreFormat`` before anything is written to such a store; a
    ``StorageError`` when the store cannot be reached (the caller retries).
    """
    marker = await read_format(store)
    if marker is None:
        try:
            await store.create(FORMAT_LOG, {"format": str(STORE_FORMAT), "written_by": RELEASE})
            return STORE_FORMAT
        except AlreadyExists:  # another silo marked it meanwhile: judge by what it wrote
            marker = await read_format(store)
            if marker is None:  # deleted again in between: nothing to refuse
                return STORE_FORMAT
    found, by = marker
    if found > STORE_FORMAT:
        raise UnsupportedStoreFormat(found, STORE_FORMAT, by)
    return found


__all__ = ["FORMAT_LOG", "RELEASE", "STORE_FORMAT", "check_store_format", "read_format"]
