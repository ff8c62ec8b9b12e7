"""The name registry of named jobs: which job a name points at, and what that job is doing.

Layout in the store (the same one the shards live in):

- ``names/<namespace>/<app_id>/<name>``: one empty log per name, the **entry**. Its metadata is
  the whole record — generation, job id, shard, due time, the jobs still to retire, and the
  status — so that every change is one compare-and-swap on its ETag and a listing of a scope is
  one ``store.list`` call.
- the definition of the generation the entry points at is in the entry's own metadata (``def``:
  packed, base64) when it fits, so that one write makes a name and its job visible together; one
  that does not fit (data may be up to 256 KiB, far more than metadata takes) is in
  ``named-defs/<job id>``, one log per generation, written before the entry points at it.

Components are escaped byte-wise (``~XX`` for anything but ``A-Z a-z 0-9 - _``), so any
name is a safe, printable store name, and the escape of a prefix is a prefix of the escape:
``list(prefix)`` is a store prefix listing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from cluster.model.errors import ValidationError
from cluster.model.evolve import evolve
from cluster.model.wire import datetime_to_us, us_to_datetime
from storage import Fenced, NotFound, StorageError, Store
from storage.base import MAX_METADATA_BYTES

__all__ = [
    "NAMED_MARK",
    "REPLACES_MARK",
    "MAX_NAME_CHARS",
    "AttemptRecord",
    "JobStatus",
    "HISTORY_BYTES",
    "HISTORY_ERROR_CHARS",
    "with_history",
    "Entry",
    "Retired",
    "check_name",
    "check_scope",
    "entry_key",
    "key_in_scope",
    "scope_prefix",
    "namespace_prefix",
    "name_of",
    "definition_key",
    "read_entry",
    "read_entries",
    "update_entry",
]

#: Job metadata key a named job carries: the key of its registry entry.
NAMED_MARK = "timeshard.named"
#: Job metadata key an overwriting put's job carries: the job its entry named when the put read
#: it, the only one its compare-and-swap may replace (``cluster.named.fence``).
REPLACES_MARK = "timeshard.replaces"
RESERVED_METADATA = "timeshard."
REGISTRY_PREFIX = "names/"
DEFINITIONS_PREFIX = "named-defs/"
MAX_NAME_CHARS = 128
MAX_SCOPE_CHARS = 64
# The file store keeps each log in a file name of at most 240 characters and escapes '/' as
# '%2F'; 200 leaves room for that on every store.
MAX_KEY_CHARS = 200
MAX_ERROR_CHARS = 500
#: The longest definition kept in the entry's own metadata (packed, then base64): most jobs
#: (data of a few hundred bytes) are written in one write with their entry; a longer one goes
#: to ``named-defs/``. Leaves the status over 5 KiB of Azure's 8 KiB.
INLINE_DEFINITION_CHARS = 2400
# An error kept in ``status.history`` is clipped harder than the last attempt's, and the history
# as a whole is held under HISTORY_BYTES of JSON (oldest dropped first), so that a job whose
# attempts all fail with long errors in non-ASCII text (6 bytes a character once escaped) still
# leaves its entry's metadata well under Azure's 8 KiB.
HISTORY_ERROR_CHARS = 200
HISTORY_BYTES = 3072
_FORBIDDEN = set("/\\#?")
_PLAIN = re.compile(rb"[A-Za-z0-9_-]")
_ALL_PLAIN = re.compile(r"[A-Za-z0-9_-]*")
_CAS_ATTEMPTS = 20


# -- names ------------------------------------------------------------------------------------

def check_name(name: object, field: str = "name") -> str:
    """Return ``name`` if it is a valid job or reminder name, else raise ``ValidationError``.

    Rules: a non-empty str of at most 128 characters, without ``/ \\ # ?`` or control
    characters, and not ``.`` or ``..``.
    """
    _check_text(name, field, MAX_NAME_CHARS)
    assert isinstance(name, str)
    bad = sorted(set(name) & _FORBIDDEN)
    if bad:
        raise ValidationError(field, "must not contain '/', '\\', '#' or '?'", name)
    if name in (".", ".."):
        raise ValidationError(field, "must not be '.' or '..'", name)
    return name


def check_scope(value: object, field: str) -> str:
    """Return ``value`` if it is a valid ``namespace`` or ``app_id``: like a name, 64 characters."""
    _check_text(value, field, MAX_SCOPE_CHARS)
    assert isinstance(value, str)
    return value


def _check_text(value: object, field: str, limit: int) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError(field, "must be a non-empty str", value)
    if len(value) > limit:
        raise ValidationError(field, f"must be at most {limit} characters (got {len(value)})")
    if not value.isprintable():
        raise ValidationError(field, "must not contain control or other non-printable characters", value)


def _escape(text: str) -> str:
    if _ALL_PLAIN.fullmatch(text):  # the common case, as the loop below would spell it: a byte test each cost ~15 us a put
        return text
    return "".join(chr(b) if _PLAIN.fullmatch(bytes([b])) else f"~{b:02X}" for b in text.encode("utf-8"))


def _unescape(text: str) -> str:
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "~":
            out.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            out.append(ord(text[i]))
            i += 1
    return out.decode("utf-8")


def scope_prefix(namespace: str, app_id: str) -> str:
    """Return the store prefix of every entry of ``(namespace, app_id)``."""
    return f"{REGISTRY_PREFIX}{_escape(namespace)}/{_escape(app_id)}/"


def namespace_prefix(namespace: str) -> str:
    """Return the store prefix of every entry of ``namespace``, whatever its app_id."""
    return f"{REGISTRY_PREFIX}{_escape(namespace)}/"


def entry_key(namespace: str, app_id: str, name: str) -> str:
    """Return the store name of the entry for ``name``; raises if it would be too long."""
    return key_in_scope(scope_prefix(namespace, app_id), name)


def key_in_scope(prefix: str, name: str) -> str:
    """``entry_key`` of ``name`` in the scope whose ``scope_prefix`` is ``prefix``."""
    key = prefix + _escape(name)
    if len(key) > MAX_KEY_CHARS:
        raise ValidationError(
            "name",
            f"is too long once escaped for the store: {len(key)} characters with its namespace and app_id, "
            f"at most {MAX_KEY_CHARS} (letters, digits, '-' and '_' take 1, other characters 3 per UTF-8 byte)",
            name,
        )
    return key


def name_of(key: str) -> str:
    """Return the name an entry key holds (``entry_key``'s last component)."""
    return _unescape(key.rpartition("/")[2])


def definition_key(job_id: str) -> str:
    """Return the store name of the log holding the definition of generation ``job_id``."""
    return DEFINITIONS_PREFIX + job_id


# -- status ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of a named job: when it was due and started, by whom, and how it ended.

    ``outcome`` is ``running`` while it runs, then ``succeeded``, ``failed`` or ``interrupted``
    (cut short by a silo crash). ``scheduled_for`` is the virtual time it was due; ``started``
    and ``ended_at`` are when it started and ended by the silo's clock (the store's time).
    ``triggered``: an extra run asked for by ``trigger`` (``client.jobs.trigger``), not an
    occurrence of the schedule.
    """

    run_id: str
    attempt: int
    occurrence: int
    scheduled_for: datetime
    started_at: datetime
    owner: str = ""  # the silo incarnation that ran it
    outcome: str = "running"
    error: str | None = None
    ended_at: datetime | None = None
    triggered: bool = False

    @property
    def started(self) -> datetime:
        """When the attempt started (the silo's clock): ``started_at``, named as in ``JobContext``."""
        return self.started_at

    @property
    def lateness(self) -> timedelta:
        """How long after ``scheduled_for`` it started (never negative)."""
        return max(self.started_at - self.scheduled_for, timedelta(0))

    @property
    def duration(self) -> timedelta | None:
        """How long it ran, from its start to its end; None while it runs (or if its end is unknown)."""
        return None if self.ended_at is None else max(self.ended_at - self.started_at, timedelta(0))

    def to_json(self) -> dict[str, Any]:
        obj = {
            "r": self.run_id, "a": self.attempt, "o": self.occurrence, "s": datetime_to_us(self.scheduled_for),
            "t": datetime_to_us(self.started_at), "w": self.owner, "x": self.outcome, "e": self.error,
            "z": None if self.ended_at is None else datetime_to_us(self.ended_at),
        }
        if self.triggered:
            obj["g"] = 1  # only when set: entries written before it read the same
        return obj

    @classmethod
    def from_json(cls, obj: Mapping[str, Any] | None) -> AttemptRecord | None:
        if not obj:
            return None
        return cls(obj["r"], obj["a"], obj["o"], us_to_datetime(obj["s"]), us_to_datetime(obj["t"]), obj["w"],
                   obj["x"], obj["e"], None if obj["z"] is None else us_to_datetime(obj["z"]), bool(obj.get("g")))

    def to_row(self) -> list[Any]:
        """The compact form ``status.history`` keeps: a list, about 110 bytes of JSON without an error."""
        row = [self.run_id, self.attempt, self.occurrence, datetime_to_us(self.scheduled_for),
               datetime_to_us(self.started_at), self.owner, self.outcome, self.error,
               None if self.ended_at is None else datetime_to_us(self.ended_at)]
        if self.triggered:
            row.append(1)
        return row

    @classmethod
    def from_row(cls, row: list[Any]) -> AttemptRecord:
        return cls(row[0], row[1], row[2], us_to_datetime(row[3]), us_to_datetime(row[4]), row[5], row[6], row[7],
                   None if row[8] is None else us_to_datetime(row[8]), len(row) > 9 and bool(row[9]))


def with_history(history: tuple[AttemptRecord, ...], ended: AttemptRecord, size: int) -> tuple[AttemptRecord, ...]:
    """Return ``history`` with ``ended`` in it, newest start first, at most ``size`` long and
    ``HISTORY_BYTES`` of JSON.

    In start order, not in the order ends arrive: two silos report their attempts' ends
    independently (a failover: the adopter's next run ended before the interrupted one was
    recorded). The error is clipped to ``HISTORY_ERROR_CHARS``; the oldest records go first
    when the bytes run over, so the newest always stays (one record fits: its error is clipped).
    """
    if size <= 0:
        return ()
    record = evolve(ended, error=clip_error(ended.error, HISTORY_ERROR_CHARS))
    others = [h for h in history if h.run_id != record.run_id]
    at = next((i for i, h in enumerate(others) if h.started_at <= record.started_at), len(others))
    kept = (*others[:at], record, *others[at:])[:size]
    while len(kept) > 1 and len(_json([h.to_row() for h in kept])) > HISTORY_BYTES:
        kept = kept[:-1]
    return kept


@dataclass(frozen=True)
class JobStatus:
    """What a named job is doing, as ``client.jobs.get(name).status`` shows it.

    - ``next_fire``: when it fires next (None: nothing left, or an attempt is running);
    - ``successful`` / ``failed`` / ``interrupted``: attempts that succeeded, raised (or timed
      out), or were cut short by a silo crash (found when its shard was adopted);
    - ``consecutive_failures``: failed or interrupted attempts since the last success;
    - ``current_attempt``: the attempt running now, if any; ``last_attempt``: the last that ended;
    - ``attempts`` / ``last_attempted``: Dapr's counters — attempts made at the current
      occurrence and the virtual time of the last one; back to 0 / None when an occurrence ends;
    - ``finished``: the job has nothing left to fire (its entry stays until deleted);
    - ``excluded``: occurrences its ``exclude=`` skipped (counted as each attempt ends);
    - ``next_fires``: the next fire times (aware UTC, at most 5), honouring pause, bounds,
      exclusions, jitter and ``ttl``: computed by ``get`` and ``list`` from the definition, never stored.
    - ``overlap_skipped``: occurrences its overlap policy skipped (they came due while an earlier
      one was in flight); counted as each occurrence ends, at most once each.
    - ``history``: the last attempts that ended (``ClusterOptions.history_size``, 10 by
      default), newest first, each an ``AttemptRecord`` with ``scheduled_for``, ``started``,
      ``lateness``, ``duration``, ``outcome`` and ``error`` (clipped to 200 characters);
      triggered runs included. Kept in the entry, so it survives a failover;
    - ``staged_target`` / ``staged_since``: the job is due but its target actor does not exist
      yet; it waits (staged) since then, up to ``ClusterOptions.undeliverable_timeout``.
    - ``paused``: an operator paused it (``client.jobs.pause``): nothing new starts until it is
      resumed; ``paused_note``, ``paused_by`` and ``paused_since`` say why, who and since when.

    Counters describe the current generation: an overwrite starts them again (unpaused). A
    triggered run counts in ``successful`` / ``failed`` like any attempt, but does not touch
    ``next_fire``, ``attempts`` or ``finished``, which belong to the schedule.
    """

    next_fire: datetime | None = None
    successful: int = 0
    failed: int = 0
    interrupted: int = 0
    consecutive_failures: int = 0
    current_attempt: AttemptRecord | None = None
    last_attempt: AttemptRecord | None = None
    attempts: int = 0
    last_attempted: datetime | None = None
    finished: bool = False
    excluded: int = 0
    next_fires: list[datetime] = field(default_factory=list, compare=False)
    overlap_skipped: int = 0
    history: tuple[AttemptRecord, ...] = ()
    staged_target: str | None = None
    staged_since: datetime | None = None
    paused: bool = False
    paused_note: str | None = None
    paused_by: str | None = None
    paused_since: datetime | None = None

    @classmethod
    def fresh(cls, next_fire: datetime | None) -> JobStatus:
        """``JobStatus(next_fire=next_fire)``: a new generation's, made without the dataclass's
        field-by-field ``__init__`` (~4 us; a put makes one on its owner and one on its client)."""
        status = object.__new__(cls)
        status.__dict__.update(_FRESH_STATE, next_fire=next_fire, next_fires=[])
        return status

    @property
    def staged(self) -> bool:
        """Whether the job is due and waits for its target actor to appear."""
        return self.staged_target is not None

    def to_json(self) -> dict[str, Any]:
        obj: dict[str, Any] = {
            "n": None if self.next_fire is None else datetime_to_us(self.next_fire),
            "ok": self.successful, "ko": self.failed, "int": self.interrupted, "cf": self.consecutive_failures,
            "cur": None if self.current_attempt is None else self.current_attempt.to_json(),
            "last": None if self.last_attempt is None else self.last_attempt.to_json(),
            "at": self.attempts, "la": None if self.last_attempted is None else datetime_to_us(self.last_attempted),
            "fin": self.finished,
            **({"exc": self.excluded} if self.excluded else {}),
        }
        if self.overlap_skipped:  # only then: an entry of a job that skipped nothing keeps its size
            obj["osk"] = self.overlap_skipped
        # Written only when set: an entry without them costs no byte more than before.
        if self.history:
            obj["h"] = [h.to_row() for h in self.history]
        if self.staged_target is not None:
            obj["st"] = [self.staged_target, None if self.staged_since is None else datetime_to_us(self.staged_since)]
        if self.paused:  # written only when paused: an entry never paused costs no byte more
            obj["p"] = [self.paused_note, self.paused_by,
                        None if self.paused_since is None else datetime_to_us(self.paused_since)]
        return obj

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> JobStatus:
        staged_target, staged_since = _staged(obj.get("st"))
        paused, paused_note, paused_by, paused_since = _paused_from_json(obj.get("p"))
        return cls(
            None if obj.get("n") is None else us_to_datetime(obj["n"]),
            obj.get("ok", 0), obj.get("ko", 0), obj.get("int", 0), obj.get("cf", 0),
            AttemptRecord.from_json(obj.get("cur")), AttemptRecord.from_json(obj.get("last")),
            obj.get("at", 0), None if obj.get("la") is None else us_to_datetime(obj["la"]), obj.get("fin", False),
            obj.get("exc", 0),
            overlap_skipped=obj.get("osk", 0),
            history=tuple(AttemptRecord.from_row(row) for row in obj.get("h", ())),
            staged_target=staged_target,
            staged_since=staged_since,
            paused=paused,
            paused_note=paused_note,
            paused_by=paused_by,
            paused_since=paused_since,
        )


#: A new generation's status but for ``next_fire`` (``JobStatus.fresh`` copies it; never changed).
_FRESH_STATE = dict(JobStatus().__dict__)


def _staged(value: Any) -> tuple[str | None, datetime | None]:
    if not value:
        return None, None
    return value[0], None if value[1] is None else us_to_datetime(value[1])


def _paused_from_json(value: Any) -> tuple[bool, str | None, str | None, datetime | None]:
    if not value:
        return False, None, None, None
    note, by, since_us = value
    return True, note, by, None if since_us is None else us_to_datetime(since_us)


# -- entries -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Retired:
    """An older generation whose cancellation is not yet confirmed: ``put``/``delete`` retry it."""

    job_id: str
    shard: str
    due_us: int
    external: bool = True  # its definition is in ``named-defs/`` (every one written before inline ones)

    def row(self) -> list[Any]:
        return [self.job_id, self.shard, self.due_us] if self.external else [self.job_id, self.shard, self.due_us, 0]


@dataclass(frozen=True)
class Entry:
    """One registry entry at one ETag: the generation a name points at, and its status."""

    key: str
    etag: str
    generation: int
    job_id: str
    shard: str
    due_us: int
    updated_us: int
    status: JobStatus = field(default_factory=JobStatus)
    retire: tuple[Retired, ...] = ()
    #: The definition, packed and base64-encoded, when it fits (``INLINE_DEFINITION_CHARS``);
    #: None: it is in ``named-defs/<job id>`` (too big, or written before definitions were inline).
    definition: str | None = None

    @classmethod
    def new_generation(cls, key: str, generation: int, job_id: str, shard: str, due_us: int, updated_us: int,
                       next_fire: datetime, retire: tuple[Retired, ...], definition: str | None) -> Entry:
        """The entry of a generation just put: status ``JobStatus.fresh(next_fire)``, no ETag;
        made without the dataclass's field-by-field ``__init__``."""
        entry = object.__new__(cls)
        entry.__dict__.update(key=key, etag="", generation=generation, job_id=job_id, shard=shard, due_us=due_us,
                              updated_us=updated_us, status=JobStatus.fresh(next_fire), retire=retire,
                              definition=definition)
        return entry

    @classmethod
    def new_generation_stored(cls, key: str, generation: int, job_id: str, shard: str, due_us: int, updated_us: int,
                              next_fire: datetime, retire: tuple[Retired, ...], definition: str | None
                              ) -> tuple[Entry, dict[str, str]]:
        """``new_generation``'s entry and its ``metadata()``, byte for byte, without the generic
        encoding: a fresh status's JSON is a constant but for its next fire time (a put's owner
        spent ~20 us a put encoding it, a third of its CPU)."""
        entry = cls.new_generation(key, generation, job_id, shard, due_us, updated_us, next_fire, retire, definition)
        # A fresh status has no history for ``_fitting`` to drop, whatever the definition's size.
        return entry, entry._metadata(_FRESH_JSON % ("null" if next_fire is None else datetime_to_us(next_fire)))

    @property
    def name(self) -> str:
        return name_of(self.key)

    def retired(self) -> Retired:
        """This entry's generation as the next one retires it."""
        return Retired(self.job_id, self.shard, self.due_us, self.definition is None)

    def metadata(self) -> dict[str, str]:
        """Return the store metadata of this entry: printable ASCII (JSON with ASCII escapes)."""
        return self._metadata(_json(_fitting(self)))

    def _metadata(self, status: str) -> dict[str, str]:
        metadata = {
            "gen": str(self.generation),
            "job": self.job_id,
            "shard": self.shard,
            "due": str(self.due_us),
            "updated": str(self.updated_us),
            "retire": _json([r.row() for r in self.retire]) if self.retire else "[]",
            "status": status,
        }
        if self.definition is not None:
            metadata["def"] = self.definition
        return metadata

    @classmethod
    def from_metadata(cls, key: str, metadata: Mapping[str, str], etag: str) -> Entry:
        return cls(
            key, etag, int(metadata["gen"]), metadata["job"], metadata["shard"], int(metadata["due"]),
            int(metadata["updated"]), JobStatus.from_json(json.loads(metadata["status"])),
            tuple(Retired(r[0], r[1], r[2], bool(r[3]) if len(r) > 3 else True) for r in json.loads(metadata["retire"])),
            metadata.get("def"),
        )


def _fitting(entry: Entry) -> dict[str, Any]:
    """The status's JSON, its oldest history dropped while the entry would pass Azure's 8 KiB of
    metadata: an inline definition takes up to ``INLINE_DEFINITION_CHARS`` of them."""
    status = entry.status.to_json()
    if entry.definition is None:
        return status
    room = MAX_METADATA_BYTES - len(entry.definition) - 600 - 40 * len(entry.retire)  # keys, ids and numbers
    history = list(status.get("h", ()))
    while history and len(_json(status)) > room:
        history.pop()
        status["h"] = history
    return status


#: ``json.dumps(obj, separators=(",", ":"), ensure_ascii=True)``'s encoder, made once: ``dumps``
#: makes one a call when given options (~40% of encoding a status).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=True)


def _json(obj: Any) -> str:
    return _ENCODER.encode(obj)


def _fresh_json() -> str:
    """A fresh status's JSON with ``%s`` for its next fire time (``Entry.new_generation``)."""
    text = _json(JobStatus().to_json())
    head = '{"n":null,'
    assert text.startswith(head) and "%" not in text
    return '{"n":%s,' + text[len(head):]


_FRESH_JSON = _fresh_json()


def clip_error(text: str | None, limit: int = MAX_ERROR_CHARS) -> str | None:
    """Return ``text`` cut to ``limit`` characters to fit the entry's metadata (8 KiB for everything on Azure)."""
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "\u2026"


async def read_entry(store: Store, key: str) -> Entry | None:
    """Return the entry stored under ``key``, or None if there is none."""
    try:
        stat = await store.stat(key)
    except NotFound:
        return None
    return Entry.from_metadata(key, stat.metadata, stat.etag)


async def read_entries(store: Store, keys: Sequence[str]) -> list[Entry | None | StorageError]:
    """``read_entry`` of each of ``keys`` in one store call: the entry, None, or the read's error."""
    out: list[Entry | None | StorageError] = []
    for key, stat in zip(keys, await store.stat_many(keys), strict=True):
        if isinstance(stat, NotFound):
            out.append(None)
        elif isinstance(stat, StorageError):
            out.append(stat)
        else:
            out.append(Entry.from_metadata(key, stat.metadata, stat.etag))
    return out


async def update_entry(
    store: Store,
    key: str,
    job_id: str | None,
    change: Callable[[Entry], Entry | None],
    known: Entry | None = None,
) -> Entry | None:
    """Apply ``change`` by compare-and-swap while the entry still points at ``job_id`` (None:
    whatever job it points at; ``change`` looks).

    Returns the entry written, or None when the entry is gone, points at another generation, or
    ``change`` returned None (nothing to write). ``known`` is a cached entry to try first: a
    stale one costs one ``Fenced`` and a re-read.
    """
    entry = known if known is not None and job_id in (None, known.job_id) else None
    for _ in range(_CAS_ATTEMPTS):
        if entry is None:
            entry = await read_entry(store, key)
        if entry is None or job_id not in (None, entry.job_id):
            return None
        new = change(entry)
        if new is None:
            return None
        try:
            etag = await store.set_metadata(key, new.metadata(), if_match=entry.etag)
        except Fenced:
            entry = None
            continue
        except NotFound:
            return None
        return replace(new, etag=etag)
    raise Fenced(f"registry entry {key!r}: still contended after {_CAS_ATTEMPTS} attempts")
