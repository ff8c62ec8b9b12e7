"""A registry bucket's log: the named jobs whose keys hash to it, as records its owner appends.

The default registry (``ClusterOptions.named_registry="buckets"``; issue 25, point 5). A name's key hashes to
one of a fixed number of buckets (``bucket_of``); each bucket is one append-only log
``registry/<b>``, owned by one silo like a shard (``cluster.runtime.logowner``). The owner keeps
the bucket's entries in memory and answers puts, reads and fence verdicts from it, so a put costs
one append shared by every put of the round instead of a read and a compare-and-swap per name.

An entry is today's ``Entry`` (``cluster.named.registry``), with no ETag: the owner's memory,
built from the log, is the truth. Records (msgpack lists):

- ``[PUT, key, metadata]``: the name now points at the generation ``metadata`` describes
  (``Entry.metadata()``: generation, job, shard, due, retire list, status, inline definition);
- ``[STATUS, key, job_id, status]``: the status (``JobStatus.to_json()``) of generation
  ``job_id``; a generation the name no longer points at is left alone;
- ``[RETIRED, key, job_ids]``: those older generations are confirmed cancelled;
- ``[DELETE, key, job_id]``: the name, pointing at ``job_id``, is deleted;
- ``[SNAPSHOT, [[key, metadata], ...]]``: a rotated generation's first record, every entry
  (written with none since the entries outgrew a block: each follows as its own ``PUT``).

Each record carries the generation it is about, so a record the owner decided against what
memory showed replays to the same state, and replay never needs more than the log.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from cluster.model.evolve import evolve
from cluster.named.registry import Entry, JobStatus
from cluster.named.sortedkeys import SortedKeys
from cluster.runtime.logowner import RELEASED
from storage import Decoded

log = logging.getLogger("timeshard.silo")

__all__ = [
    "BUCKETS",
    "BUCKET_PREFIX",
    "DELETE",
    "PUT",
    "RETIRED",
    "StatusJson",
    "SNAPSHOT",
    "STATUS",
    "BucketMeta",
    "BucketState",
    "Entries",
    "UnreadableEntry",
    "bucket_base",
    "bucket_of",
]

BUCKET_PREFIX = "registry/"
#: How many buckets a store's names hash among. Fixed: a name in another bucket than the one its
#: put went to would be unseen. (To be recorded in the store, so that it may differ per store.)
#: Few, as each bucket a round touches is an append of its own (three fsyncs on the file store):
#: 64 callers, 2 silos, file store, one loaded machine: 2 buckets 1,449 puts/s, 4: 1,215, 8: 936-1,128.
BUCKETS = 4
PUT = "P"
STATUS = "S"
RETIRED = "R"
DELETE = "D"
SNAPSHOT = "N"


class StatusJson(dict[str, Any]):
    """A ``STATUS`` record's status (``JobStatus.to_json()``), carrying the status it was made
    from: the owner's memory takes that rather than parsing the record back (it applies every
    attempt's start and end: ~15 µs each, issue 25). The log holds the plain JSON, which replays
    to an equal status."""

    __slots__ = ("status",)

    def __init__(self, status: JobStatus) -> None:
        super().__init__(status.to_json())
        self.status = status


def bucket_of(key: str, buckets: int) -> int:
    """The bucket of registry key ``key`` among ``buckets``: the same on every host and run
    (CRC-32 of the key's bytes, not Python's salted ``hash``)."""
    return zlib.crc32(key.encode("utf-8")) % buckets


def bucket_base(bucket: int) -> str:
    """The log name of bucket ``bucket``; fixed width, so buckets list in number order."""
    return f"{BUCKET_PREFIX}{bucket:04d}"


@dataclass(frozen=True)
class BucketMeta:
    """A bucket log's metadata: its owner (``silo#incarnation``, or ``RELEASED``), and whether
    the entries of the old per-name layout that hash to it were imported (issue 25, point 5.6)."""

    owner: str = RELEASED
    imported: bool = False

    def to_metadata(self) -> dict[str, str]:
        return {"owner": self.owner, "imported": "1" if self.imported else "0"}

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, str]) -> BucketMeta:
        return cls(metadata.get("owner", RELEASED), metadata.get("imported") == "1")

    def with_owner(self, owner: str) -> BucketMeta:
        return replace(self, owner=owner)


#: The fields a ``PUT`` record's metadata must hold for replay to keep it (``Entry.metadata()``'s).
_FIELDS = frozenset(("gen", "job", "shard", "due", "updated", "retire", "status"))


class UnreadableEntry(ValueError):
    """An entry replay kept whose metadata does not decode (not one this module wrote)."""


class Entries(MutableMapping[str, Entry]):
    """A bucket's entries by key. One replay read is held as its record's metadata and built
    into an ``Entry`` (then kept built, in its place) when first read: decoding every entry's
    JSON was nearly all of a takeover (~10-30 µs a name: 31 s to take 1,000,000 names), while
    the key order and a count need only the keys and most names are not read before the next
    takeover. Replay checks such metadata's shape only; its JSON was decoded by the owner that
    appended it (``BucketState.apply`` builds every entry before its record is appended)."""

    def __init__(self) -> None:
        self._held: dict[str, Entry | dict[str, str]] = {}

    def __getitem__(self, key: str) -> Entry:
        held = self._held[key]
        if isinstance(held, Entry):
            return held
        try:
            entry = Entry.from_metadata(key, held, "")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            # Not a KeyError out of here: ``get`` would take it for a name not held.
            log.error("registry bucket entry unreadable", extra={"key": key, "reason": repr(exc)})
            raise UnreadableEntry(f"registry entry {key!r} does not decode: {exc!r}") from exc
        self._held[key] = entry
        return entry

    def get(self, key: str, default: Any = None) -> Any:
        """``Mapping.get`` without its KeyError for a name not held: a put of a new name asks
        three times (~1 us each, raised and caught)."""
        held = self._held.get(key)
        if held is None:
            return default
        return held if isinstance(held, Entry) else self[key]

    def __setitem__(self, key: str, entry: Entry) -> None:
        self._held[key] = entry

    def __delitem__(self, key: str) -> None:
        del self._held[key]

    def __contains__(self, key: object) -> bool:
        return key in self._held

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def __repr__(self) -> str:
        return f"Entries({self._held!r})"

    def read(self, key: str, metadata: Any) -> None:
        """Hold ``key``'s entry as a replayed record's ``metadata``, built when first read;
        ``ValueError`` (the record set aside) if it is not an entry's shape: a field missing, or
        a job id a delete could not compare. A field that does not decode fails its first read.
        (Checking each field's type and number too made replay twice as long: 1.4 against 0.6 µs a name.)"""
        if type(metadata) is not dict or not metadata.keys() >= _FIELDS or type(metadata["job"]) is not str:
            raise ValueError(f"not an entry's metadata: {metadata!r}")
        self._held[key] = metadata

    def job_of(self, key: str) -> str | None:
        """The generation (job id) ``key`` points at, without building its entry; None if not held."""
        held = self._held.get(key)
        return None if held is None else held.job_id if isinstance(held, Entry) else held["job"]

    def metadata_of(self, key: str) -> dict[str, str]:
        """``key``'s entry's metadata: as replay read it if not built since."""
        held = self._held[key]
        return held.metadata() if isinstance(held, Entry) else held


@dataclass(frozen=True)
class Unreadable:
    """A record replay left out: its sequence number (-1: unknown) and why."""

    seq: int
    reason: str


class BucketState:
    """The entries of one bucket, folded from its log; the owner applies a record when it
    submits it (the log writer's snapshot must cover every record submitted) and takes it back
    (``undo``) if the append fails."""

    def __init__(self) -> None:
        self.entries = Entries()
        self.unreadable: list[Unreadable] = []
        # Keys whose records are applied here but not durable yet: the entry each had before
        # the first of them, and how many appends carry them (``durable`` answers from these).
        self.inflight: dict[str, tuple[Entry | None, int]] = {}
        # The keys in order, kept in step with ``entries`` once made: at the end of a replay
        # (``replay_log``), so that no read after a takeover pays for sorting a whole bucket.
        self._sorted: SortedKeys | None = None

    def durable(self, key: str) -> Entry | None:
        """The entry of ``key`` as the log holds it: what a read may show (an append under way
        may still fail and be taken back)."""
        pending = self.inflight.get(key)
        return self.entries.get(key) if pending is None else pending[0]

    def page(self, start: str, after: str | None, limit: int) -> tuple[list[Entry], bool]:
        """At most ``limit`` durable entries whose keys start with ``start``, after key ``after``,
        in key order; and whether more follow."""
        past = after if after is not None and after >= start else None
        keys = self._keys().since(start if past is None else past, inclusive=past is None)
        # Keys a delete under way took out of memory (and its order) are still durable.
        gone = sorted(key for key, (before, _) in self.inflight.items() if before is not None
                      and key not in self.entries and key.startswith(start) and (after is None or key > after))
        out: list[Entry] = []
        g = 0
        kept = _within(keys, start)
        while len(out) < limit:
            if g < len(gone) and (kept is None or gone[g] < kept):
                key, g = gone[g], g + 1
            elif kept is not None:
                key, kept = kept, _within(keys, start)
            else:
                break
            entry = self.durable(key)
            if entry is not None:
                out.append(entry)
        return out, kept is not None or g < len(gone)

    def count(self, start: str) -> int:
        """How many durable entries' keys start with ``start`` (in-flight new keys counted out,
        in-flight deleted ones in)."""
        keys = self._keys()
        first = keys.rank(start)
        last = keys.rank(start + "\U0010ffff") if start else len(keys)
        changing = [(before is None, key in self.entries) for key, (before, _) in self.inflight.items()
                    if key.startswith(start)]
        return last - first - sum(1 for new, there in changing if new and there) \
            + sum(1 for new, there in changing if not new and not there)

    def _keys(self) -> SortedKeys:
        if self._sorted is None:
            self._sorted = SortedKeys(self.entries)
        return self._sorted

    def _reorder(self, key: str, was_there: bool) -> None:
        """Keep the order in step after ``key`` came or went (a chunk changed, not the whole bucket)."""
        if self._sorted is not None and was_there != (key in self.entries):
            if was_there:
                self._sorted.remove(key)
            else:
                self._sorted.add(key)

    def apply(self, record: list[Any], made: Entry | None = None) -> Entry | None:
        """Fold one record; returns the entry its key had before (what ``undo`` restores).
        ``made``: a ``PUT``'s entry as its metadata reads back, already built (not parsed again)."""
        before = self._apply(record, made)
        self._reorder(record[1], before is not None)
        return before

    def _apply(self, record: list[Any], made: Entry | None = None) -> Entry | None:
        kind, key = record[0], record[1]
        before = self.entries.get(key)
        if kind == PUT:
            self.entries[key] = made if made is not None else Entry.from_metadata(key, record[2], "")
        elif kind == STATUS:
            if before is not None and before.job_id == record[2]:
                body = record[3]
                status = body.status if isinstance(body, StatusJson) else JobStatus.from_json(body)
                self.entries[key] = evolve(before, status=status)
        elif kind == RETIRED:
            if before is not None:
                done = set(record[2])
                self.entries[key] = evolve(before, retire=tuple(r for r in before.retire if r.job_id not in done))
        elif kind == DELETE:
            if before is not None and before.job_id == record[2]:
                del self.entries[key]
        else:
            raise ValueError(f"not a bucket record: {kind!r}")
        return before

    def apply_all(self, records: Sequence[list[Any]], made: Sequence[Entry] | None = None
                  ) -> list[tuple[list[Any], Entry | None, Entry | None]]:
        """``apply`` each of ``records`` (``made``: each one's entry, all ``PUT`` records);
        returns what ``undo`` needs: each record, its key's entry before and after."""
        done = []
        for i, record in enumerate(records):
            before = self.apply(record, None if made is None else made[i])
            done.append((record, before, self.entries.get(record[1])))
        return done

    def hold(self, done: list[tuple[list[Any], Entry | None, Entry | None]]) -> list[str]:
        """Mark the keys of ``done`` (just applied) in flight until ``settle``; returns them."""
        keys: dict[str, None] = {}  # in order, and a key's test O(1): a round of 1,000 puts is 1,000 records
        for record, before, _ in done:
            key = record[1]
            if key in keys:
                continue
            keys[key] = None
            pending = self.inflight.get(key)
            self.inflight[key] = (before, 1) if pending is None else (pending[0], pending[1] + 1)
        return list(keys)

    def settle(self, keys: list[str], done: list[tuple[list[Any], Entry | None, Entry | None]],
               landed: bool) -> None:
        """The append of ``done`` carrying ``keys`` ended: durable (``landed``), or taken back.
        Appends land in the order they were made, so a landed one's entries are what the log
        holds now, also of a key a later append (still in flight) changes again."""
        after = {record[1]: entry for record, _, entry in done} if landed else {}
        for key in keys:
            durable, count = self.inflight[key]
            if count <= 1:
                del self.inflight[key]
            else:
                self.inflight[key] = (after.get(key, durable) if landed else durable, count - 1)

    def undo(self, done: list[tuple[list[Any], Entry | None, Entry | None]]) -> None:
        """Take back records ``apply_all`` folded whose append failed, newest first; a key a
        later record changed since (durable, or still in flight) keeps that change."""
        for record, before, after in reversed(done):
            key = record[1]
            if self.entries.get(key) is not after:
                continue
            was_there = key in self.entries
            if before is None:
                self.entries.pop(key, None)
            else:
                self.entries[key] = before
            self._reorder(key, was_there)

    def snapshot(self) -> list[list[Any]]:
        """The records a rotated generation starts with: an empty ``SNAPSHOT``, then every entry
        as its own ``PUT``.

        Not one record listing them all: a rotation writes each record whole in one block
        (4 MiB), so a bucket of more than ~9,000 names could neither rotate nor be claimed from
        a damaged log (``LogFull``), and its writes failed for good at the block limit. Code that
        wrote the single record folds these the same way (the ``SNAPSHOT`` clears, each ``PUT``
        points its name), so an owner of an earlier release reads this generation too."""
        return [[SNAPSHOT, []], *([PUT, key, self.entries.metadata_of(key)] for key in self.entries)]

    def replay(self, records: Iterable[Any], first_seq: int = -1) -> BucketState:
        """Fold ``records`` in order; a record that is not one this module writes is set aside
        (``unreadable``), the rest replays."""
        for index, record in enumerate(records):
            seq = -1 if first_seq < 0 else first_seq + index
            try:
                self._fold(record)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError, json.JSONDecodeError) as exc:
                self.unreadable.append(Unreadable(seq, repr(exc)))
        return self

    def replay_log(self, decoded: Decoded, bucket: str = "") -> BucketState:
        """Fold the records of a decoded log, logging each one set aside at ERROR."""
        self._sorted = None  # sorted once at the end, not kept in step record by record
        for frame in decoded.frames:
            self.replay(frame.records, frame.first_seq)
        self._keys()
        for bad in self.unreadable:
            log.error("registry bucket record unreadable: kept in the log, not replayed",
                      extra={"bucket": bucket, "seq": bad.seq, "reason": bad.reason})
        return self

    def _fold(self, record: Any) -> None:
        if not isinstance(record, list) or len(record) < 2:
            raise ValueError(f"not a record: {record!r}")
        if record[0] == SNAPSHOT:
            entries = Entries()
            for key, metadata in record[1]:
                entries.read(key, metadata)
            self.entries, self._sorted = entries, None
            return
        key = record[1]
        if not isinstance(key, str):
            raise TypeError(f"a record's key must be a str: {key!r}")
        # A put or delete needs no entry built (``Entries``); a status or retire builds its own.
        if record[0] == PUT:
            was_there = key in self.entries
            self.entries.read(key, record[2])
        elif record[0] == DELETE:
            was_there = key in self.entries
            if self.entries.job_of(key) == record[2]:
                del self.entries[key]
        else:
            self.apply(record)
            return
        self._reorder(key, was_there)


def _within(keys: Iterator[str], start: str) -> str | None:
    """The next of ``keys`` if it starts with ``start``; None past them."""
    key = next(keys, None)
    return key if key is not None and key.startswith(start) else None
