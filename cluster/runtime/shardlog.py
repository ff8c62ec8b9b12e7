"""What a shard log says: its name, its metadata, its operations, and the state they fold into.

A shard covers the due-time window ``[start, end)``. Its log name begins with the window start
in fixed-width UTC so lexical order is time order, then the creating silo and a counter, so
every silo writes its own shards without contention.

Operations are msgpack lists, compact on purpose — replay reads every one of them:

- ``[ADD, id, due_us, job, occurrence, attempts, scheduled_us]`` — ``job`` is the packed
  ``ScheduledJob``; replay keeps it packed and only the handler decodes it, so a loaded job
  costs little memory. ``scheduled_us`` is the occurrence's virtual time, ``due_us`` when its
  next attempt runs; an ADD of a live id replaces it (the next occurrence, or a reschedule).
  A recurring job's next occurrence carries an eighth field, ``source``: the shard it moved from.
- ``[REMOVE, id, occurrence, outcome, moved_to, next]`` — final for that occurrence; ``outcome``
  says why (succeeded, exhausted, cancelled, moved, expired); ``moved_to`` names the shard that
  holds a recurring job's next occurrence, so a cancel can follow the job there. ``next`` (logs
  written before it existed have five fields) is that occurrence, ``[due_us, job, occurrence,
  attempts, scheduled_us]``: the REMOVE is the one durable decision to move, and whoever owns
  this shard carries it out (see ``cluster.runtime.moves``).
- ``[RETRY, id, due_us, attempts]`` — the attempt failed; run again at ``due_us``.
- ``[PAUSE, id, note, by, since_us]`` — an operator paused the live job: it is not queued or
  fired until a ``[RESUME, id]``. The pause belongs to the job, not to one occurrence: an ADD
  replacing the entry keeps it, a REMOVE that ends the job drops it, and a move carries it as
  the ADD's ninth field (the next occurrence's sixth): ``[note, by, since_us]``. Replay that
  meets a PAUSE of a job not live (its ADD lost to a damaged frame) pauses the ADD that follows.
- ``[SNAPSHOT, [[id, due_us, job, occurrence, attempts, scheduled_us], ...], moved, pending, sources, paused]``
  — the live state, written first in a new generation when a log is compacted (older snapshots
  end after ``moved``; ``paused``, job id -> ``[note, by, since_us]``, only when a job is paused).
  Live jobs beyond ``SNAPSHOT_BYTES`` follow it as ADD records, and their pauses as PAUSE records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

import msgspec

from storage import Decoded, Frame
from storage.records import collector_paused, pack

log = logging.getLogger("timeshard.silo")

ADD, REMOVE, RETRY, SNAPSHOT, PAUSE, RESUME = 0, 1, 2, 3, 4, 5

SUCCEEDED, EXHAUSTED, CANCELLED, MOVED, EXPIRED = "succeeded", "exhausted", "cancelled", "moved", "expired"

SHARD_PREFIX = "shards/"
#: A compaction's SNAPSHOT record holds live jobs up to this many bytes, the rest as ADDs after
#: it (``ShardState.snapshot``): well within one block, the most one record may take.
SNAPSHOT_BYTES = 1 << 20
ENTRY_BYTES = 64  # a snapshot entry's bytes beside its id (UTF-8) and packed job, at most (four ints, three headers)
RELEASED = "-"  # the owner of a shard released by a graceful stop


def window_of(due_us: int, duration_us: int) -> int:
    """The start (µs) of the shard window that holds ``due_us``."""
    return due_us - due_us % duration_us


def format_window(start_us: int) -> str:
    """Fixed-width UTC text of a window start, ordered like the times it names.

    The year is padded to four digits by hand: ``%Y`` leaves years before 1000 short on
    glibc, and a window of year 999 then sorted after today's, where a listing that stops at
    the lookahead (``shards_before``) never looked.
    """
    dt = datetime.fromtimestamp(start_us // 1_000_000, timezone.utc)
    return f"{dt.year:04d}{dt:%m%dT%H%M%S}.{start_us % 1_000_000:06d}Z"


def shards_before(window_us: int) -> str:
    """The name bound below which lie exactly the shards whose window starts before ``window_us``
    (window texts are of one width, so a shorter-windowed name sorts first)."""
    return f"{SHARD_PREFIX}{format_window(window_us)}"


def shard_name(start_us: int, silo_id: str, counter: int) -> str:
    """``shards/<window start>-<silo>-<counter>``: lexical order is window order."""
    return f"{SHARD_PREFIX}{format_window(start_us)}-{silo_id}-{counter:06d}"


def creator_of(base: str) -> tuple[str, int] | None:
    """``(silo id, incarnation)`` that created the shard named ``base``, or None if not a shard name."""
    _, sep, rest = base.removeprefix(SHARD_PREFIX).partition("-")  # the window text has no "-"
    creator, sep2, counter = rest.rpartition("-")
    silo_id, sep3, incarnation = creator.rpartition(".")
    if not (sep and sep2 and sep3 and incarnation.isdigit() and counter.isdigit()):
        return None
    return silo_id, int(incarnation)


def landed_ids(records: Iterable[list[Any]], ids: set[str]) -> set[str]:
    """Which of ``ids`` a shard log took and did not take back (an ADD not followed by a
    REMOVE(CANCELLED)): a retried schedule call must not add these again.

    A job that already ran counts as landed; one cancelled (a failed call withdrawing its ADD)
    does not. A compacted log keeps live jobs, moves still pending and the recurring jobs whose
    chain ended here past its first occurrence (a forward to ``""``), which count as the ADD they
    replace did: their chain is over, and two retries of one call each wrote it again when only
    live jobs counted (simulator seed 1161807). One that moved on is found where it lives on
    (``_find_moved_on``), the shard a cancel reaches. A one-shot job that ran before the
    compaction is not found. A pending move counts: its job is in no other shard until the move lands, so a retry that looked for it there, and in the target before the
    ADD landed, wrote it again beside the chain the move then carried on (found probing the
    simulator's seed 219412).
    """
    landed: set[str] = set()
    for op in records:
        if why_unusable(op) is not None:
            continue  # an unreadable record took nothing (replay sets it aside too)
        if op[0] == SNAPSHOT:
            landed |= {entry[0] for entry in op[1] if entry[0] in ids}
            landed |= {job_id for job_id, to in op[2].items() if to == "" and job_id in ids}  # chains that ended here
            landed |= {job_id for job_id in (op[3] if len(op) > 3 else ()) if job_id in ids}
        elif op[1] in ids:
            if op[0] == ADD:
                landed.add(op[1])
            elif op[0] == REMOVE and op[3] == CANCELLED:
                landed.discard(op[1])
    return landed


def add_op(job_id: str, due_us: int, job: bytes, occurrence: int = 1, attempts: int = 0,
           scheduled_us: int | None = None, source: str | None = None, paused: list[Any] | None = None) -> list[Any]:
    op = [ADD, job_id, due_us, job, occurrence, attempts, due_us if scheduled_us is None else scheduled_us]
    if source is not None:
        op.append(source)
        if paused is not None:
            op.append(paused)  # only a move carries a pause: it always names its source
    return op


def remove_op(job_id: str, occurrence: int, outcome: str, moved_to: str | None = None,
              next_entry: list[Any] | None = None) -> list[Any]:
    op = [REMOVE, job_id, occurrence, outcome, moved_to]
    if next_entry is not None:
        op.append(next_entry)
    return op


def retry_op(job_id: str, due_us: int, attempts: int) -> list[Any]:
    return [RETRY, job_id, due_us, attempts]


def pause_op(job_id: str, note: str | None, by: str, since_us: int) -> list[Any]:
    return [PAUSE, job_id, note, by, since_us]


def resume_op(job_id: str) -> list[Any]:
    return [RESUME, job_id]


# A live job inside one shard: [due_us, packed job, occurrence, attempts, scheduled_us, owner, queued].
# A list, not an object, because a loaded shard holds one per job and replay builds them by the
# million; the same list is the silo queue's item, and ``owner`` (never written) points back at
# the in-memory shard that holds it. ``queued`` is the queue's: the bulk it was queued in, if any
# (see cluster.runtime.queue). Seven fields cost replay nothing: the ADD record's own list of
# seven becomes the entry.
DUE, JOB, OCCURRENCE, ATTEMPTS, SCHEDULED, OWNER, QUEUED = range(7)
LiveJob = list[Any]


def live_entry(due_us: int, job: bytes, occurrence: int, attempts: int, scheduled_us: int, owner: Any) -> LiveJob:
    """A live job's entry from a record's fields: one int object for both times when equal (32 B per job)."""
    return [due_us, job, occurrence, attempts, due_us if scheduled_us == due_us else scheduled_us, owner, None]

# Times a live job may carry: what a datetime can hold (years 1 to 9999), in µs since 1970.
MIN_US, MAX_US = -62_135_596_800_000_000, 253_402_300_799_999_999


_Time = Annotated[int, msgspec.Meta(ge=MIN_US, le=MAX_US)]
#: A frame of nothing but plain ADDs, read and checked in one call: loading a big shard is
#: mostly these. A million of them decoded and folded in 0.93 s of CPU as msgpack lists checked
#: one by one in ``ShardState._fold``, 0.83 s read this way and folded frame by frame as read
#: (issue 29; the shared 2-core machine, loaded). The types are ``_fold``'s inline check of an ADD; any other frame is read as
#: lists and folded record by record as before.
SHARD_FRAMES = msgspec.msgpack.Decoder(list[tuple[Literal[0], str, _Time, bytes, int, int, _Time]]).decode


@dataclass(frozen=True)
class Unreadable:
    """A record replay could not use, kept in the log and left out of the state.

    ``seq`` is its sequence number in the log (-1 when replayed from a plain list), ``job_id``
    the job it names when that much could be read.
    """

    seq: int
    reason: str
    job_id: str | None = None


def _str_or_none(value: Any) -> str | None:
    return value if type(value) is str else None


def _time_ok(value: Any) -> bool:
    return type(value) is int and MIN_US <= value <= MAX_US


def _live_ok(job_id: Any, due: Any, job: Any, occurrence: Any, attempts: Any, scheduled: Any) -> bool:
    return (type(job_id) is str and _time_ok(due) and type(job) is bytes and type(occurrence) is int
            and type(attempts) is int and _time_ok(scheduled))


def _pause_ok(value: Any) -> bool:
    """Whether ``value`` is a pause record: ``[note (str or None), by (str), since_us]``."""
    return (type(value) is list and len(value) == 3 and (value[0] is None or type(value[0]) is str)
            and type(value[1]) is str and _time_ok(value[2]))


def _next_ok(value: Any) -> bool:
    """Whether ``value`` is a REMOVE's next occurrence: ``[due_us, job, occurrence, attempts, scheduled_us]``,
    and the job's pause record sixth if it is paused."""
    return (type(value) is list and len(value) in (5, 6) and _live_ok("", *value[:5])
            and (len(value) == 5 or _pause_ok(value[5])))


def _pending_ok(value: Any) -> bool:
    return type(value) is list and len(value) == 2 and type(value[0]) is str and _next_ok(value[1])


def why_unusable(op: Any) -> str | None:
    """Why ``op`` is not a shard operation replay can fold (wrong shape or types), or None."""
    if type(op) is not list or not op or type(op[0]) is not int:
        return "not a shard operation"
    kind, size = op[0], len(op)
    if kind == ADD:
        ok = (size in (7, 8, 9) and _live_ok(*op[1:7]) and (size == 7 or type(op[7]) is str)
              and (size < 9 or _pause_ok(op[8])))
        return None if ok else "malformed ADD"
    if kind == REMOVE:
        ok = (size in (5, 6) and type(op[1]) is str and type(op[2]) is int and type(op[3]) is str
              and (op[4] is None or type(op[4]) is str) and (size == 5 or op[5] is None or _next_ok(op[5])))
        return None if ok else "malformed REMOVE"
    if kind == RETRY:
        return None if size == 4 and type(op[1]) is str and _time_ok(op[2]) and type(op[3]) is int else "malformed RETRY"
    if kind == SNAPSHOT:
        ok = (3 <= size <= 6 and type(op[1]) is list and type(op[2]) is dict
              and all(type(k) is str and type(v) is str for k, v in op[2].items())
              and (size < 4 or type(op[3]) is dict) and (size < 5 or type(op[4]) is list)
              and (size < 6 or type(op[5]) is dict))
        return None if ok else "malformed SNAPSHOT"
    if kind == PAUSE:
        return None if size == 5 and type(op[1]) is str and _pause_ok(op[2:5]) else "malformed PAUSE"
    if kind == RESUME:
        return None if size == 2 and type(op[1]) is str else "malformed RESUME"
    return f"unknown operation {kind}"


def removal_ends(op: list[Any], entry: LiveJob) -> bool:
    """Whether the REMOVE ``op`` ends the live ``entry`` of its job.

    The occurrence it names, and no other: a cancel's removal of an occurrence that already
    moved on must not end the next one (seed 244). But a cancel is of the job: a REMOVE(cancelled)
    naming a *later* occurrence than the live one ends it too. The live one is older only where
    the records between were lost (a damaged frame held the ADD of the occurrence the cancel
    removed), and the client was told the job is cancelled: without this the older occurrence
    came back at the next replay and ran on after the cancel returned (simulation with damaged
    logs, seeds 50250 and 50316). A move of a later occurrence ends it too, for the same reason:
    the job left for the move's target, and the older occurrence kept here beside the chain it
    moved on would run twice (seed 475742, a damaged frame held the ADD of occurrence 2).
    """
    occurrence = entry[OCCURRENCE]
    return bool(occurrence == op[2] or (op[3] in (CANCELLED, MOVED) and occurrence < op[2]))


@dataclass
class ShardState:
    """The fold of a shard log: live jobs by id, and where moved recurring jobs went.

    ``owner`` is stored in every live entry so an entry found in the silo's queue knows its shard.
    ``moved`` also keeps ``""`` for a later occurrence of a recurring job that ended here: proof
    that a move into this shard landed, which a redo of that move looks for. ``pending`` holds
    moves decided here and not yet known to have landed (job id -> [target, next occurrence]);
    ``sources`` the shards moves into this one came from: this log is kept while any of them
    exists, so a move still being settled there always finds its proof here. ``paused`` holds
    the live jobs an operator paused (job id -> ``[note, by, since_us]``): kept, never queued.
    ``orphan_pauses`` holds pauses read for a job not live here, until an ADD of it follows.
    """

    live: dict[str, LiveJob] = field(default_factory=dict)
    moved: dict[str, str] = field(default_factory=dict)
    owner: Any = None
    pending: dict[str, list[Any]] = field(default_factory=dict)
    sources: set[str] = field(default_factory=set)
    unreadable: list[Unreadable] = field(default_factory=list)  # records replay left out
    paused: dict[str, list[Any]] = field(default_factory=dict)
    # A PAUSE is written only for a live job, so one read where its job is not live had the ADD
    # before it lost to a damaged frame; the ADD of the next occurrence that follows is paused
    # (``_fold`` applies these at its end: ADDs there skip ``apply``). Without it that occurrence
    # replayed unpaused, and ran after its pause returned (simulation with damaged logs, seed 222064).
    orphan_pauses: dict[str, list[Any]] = field(default_factory=dict)

    def apply(self, op: list[Any]) -> LiveJob | None:
        """Fold one operation; returns the entry an ADD created or a RETRY changed."""
        kind = op[0]
        live = self.live
        entry: LiveJob | None
        if kind == ADD:
            entry = live_entry(op[2], op[3], op[4], op[5], op[6], self.owner)
            live[op[1]] = entry
            if len(op) > 7:
                self.sources.add(op[7])
                if len(op) > 8:
                    self.paused[op[1]] = op[8]  # a paused job moved in: still paused here
            return entry
        if kind == REMOVE:
            if self.orphan_pauses:
                self.orphan_pauses.pop(op[1], None)  # the job ends here, or moves on carrying its pause
            entry = live.get(op[1])
            ended = entry is not None and removal_ends(op, entry)
            if ended:
                del live[op[1]]
                if self.paused:
                    self.paused.pop(op[1], None)  # ended, or moved on carrying its pause
            if op[4] is not None:
                self.moved[op[1]] = op[4]
                if len(op) > 5 and op[5] is not None:
                    self.pending[op[1]] = [op[4], op[5]]
            elif ended and op[2] > 1:
                # A moved-in occurrence ended here: the proof a redo looks for. Only if it was live:
                # a cancel's removal of an occurrence that already moved on must not hide where it
                # went (found by the simulation, seed 244: the cancel answered "cancelled").
                self.moved[op[1]] = ""
            return None
        if kind == RETRY:
            entry = live.get(op[1])
            if entry is not None:
                entry[DUE] = op[2]
                entry[ATTEMPTS] = op[3]
            return entry
        if kind == PAUSE:
            if op[1] in live:
                self.paused[op[1]] = op[2:5]
            else:  # its ADD was lost: it holds the occurrence an ADD adds next (``orphan_pauses``)
                self.orphan_pauses[op[1]] = op[2:5]
            return None
        if kind == RESUME:
            self.paused.pop(op[1], None)
            if self.orphan_pauses:
                self.orphan_pauses.pop(op[1], None)
            return None
        if kind == SNAPSHOT:
            live.clear()
            self.moved = dict(op[2])
            self.pending = dict(op[3]) if len(op) > 3 else {}
            self.sources = set(op[4]) if len(op) > 4 else set()
            self.paused = dict(op[5]) if len(op) > 5 else {}
            self.orphan_pauses = {}
            for job_id, due_us, job, occurrence, attempts, scheduled_us in op[1]:
                live[job_id] = live_entry(due_us, job, occurrence, attempts, scheduled_us, self.owner)
            return None
        raise ValueError(f"unknown shard operation {kind!r}")

    def apply_undoably(self, ops: Iterable[list[Any]]) -> tuple[list[LiveJob | None], list[Any]]:
        """Fold ``ops`` like ``apply``; returns the entries touched and what ``undo`` needs."""
        before = []
        touched = []
        for op in ops:
            if op[0] == SNAPSHOT:
                raise ValueError("a snapshot is written by the log writer, never undone")
            entry = self.live.get(op[1])
            record = (op, entry, None if entry is None else entry[:OWNER], self.moved.get(op[1]),
                      self.pending.get(op[1]), self.paused.get(op[1]))
            touched.append(self.apply(op))
            before.append((*record, self.paused.get(op[1])))
        return touched, before

    def undo(self, before: list[Any], touched: list[LiveJob | None]) -> None:
        """Take back ops folded by ``apply_undoably`` whose write failed, newest first.

        An op is taken back only where the state still shows what it did: a later op on the
        same job (another write, already durable) wins.
        """
        for (op, entry, contents, moved, pending, paused, made_paused), made in zip(reversed(before), reversed(touched),
                                                                                    strict=True):
            job_id, live = op[1], self.live
            if paused is not made_paused and self.paused.get(job_id) is made_paused:
                # A pause or resume, or an ADD or REMOVE that carried or dropped a pause.
                if paused is None:
                    del self.paused[job_id]
                else:
                    self.paused[job_id] = paused
            if op[0] == ADD and live.get(job_id) is made:
                if entry is None:
                    del live[job_id]
                else:
                    live[job_id] = entry
            elif op[0] == REMOVE and entry is not None and job_id not in live and removal_ends(op, entry):
                live[job_id] = entry
            elif op[0] == RETRY and made is not None and live.get(job_id) is made and contents is not None:
                made[:OWNER] = contents
            if op[0] == REMOVE and self.moved.get(job_id) == (op[4] if op[4] is not None else ""):
                if moved is None:
                    del self.moved[job_id]
                else:
                    self.moved[job_id] = moved
            if op[0] == REMOVE and len(op) > 5 and self.pending.get(job_id, [None])[0] == op[4]:
                if pending is None:
                    del self.pending[job_id]
                else:
                    self.pending[job_id] = pending

    def replay(self, records: Iterable[list[Any]]) -> ShardState:
        """Fold records read from a log, in order (see ``replay_log``); never raises on bad records."""
        return self._fold(records, -1)

    def replay_log(self, decoded: Decoded, shard: str = "") -> ShardState:
        """Fold the records of a decoded log; a record that is not a usable op is set aside.

        Such records are left out of the state (and kept in the log), listed in ``unreadable``
        with their sequence numbers and logged at ERROR naming ``shard``; the rest replays.
        """
        for frame in decoded.frames:
            self.fold_frame(frame)
        self.report_unreadable(shard)
        return self

    def fold_frame(self, frame: Frame) -> None:
        """Fold one frame of a log, in order; as ``decode``'s ``fold``, each as it is read
        (with ``SHARD_FRAMES`` as its reader: see ``cluster.runtime.shard.read_shard``)."""
        if frame.typed is not None:
            self._fold_adds(frame.typed)
        else:
            self._fold(frame.records, frame.first_seq)

    def report_unreadable(self, shard: str) -> None:
        """Log at ERROR, naming ``shard``, each record replay set aside (``unreadable``)."""
        for bad in self.unreadable:
            log.error("shard record unreadable: kept in the log, not replayed",
                      extra={"shard": shard, "seq": bad.seq, "reason": bad.reason, "job": bad.job_id})

    def _fold(self, records: Iterable[Any], first_seq: int) -> ShardState:
        """The hot loop of loading a shard. Consumes the records: ADD records become entries.

        An ADD record's own list becomes the live entry (no copy), and the cyclic garbage
        collector is paused meanwhile: building a million containers would otherwise trigger
        dozens of full collections over the ones already built, which costs more than the
        replay itself. Every record is checked before it is folded, so nothing a writer did not
        mean (a bad type, a wrong length) reaches the queue or a handler; the check of an ADD
        is inlined, being most of what replay does. ``first_seq`` numbers the records (-1: unknown).
        """
        live, owner, apply = self.live, self.owner, self.apply
        low, high = MIN_US, MAX_US
        with collector_paused():
            for index, op in enumerate(records):
                # ``op[0]`` may be False (== ADD) harmlessly: every field is checked after it.
                if (type(op) is list and len(op) == 7 and op[0] == ADD and type(op[1]) is str
                        and type(op[3]) is bytes and int is type(op[2]) is type(op[4]) is type(op[5]) is type(op[6])
                        and low <= op[2] <= high and low <= op[6] <= high):
                    key = op[1]
                    if op[6] == op[2]:
                        op[6] = op[2]  # one int object for both times: 32 B per job, most jobs
                    del op[:2]
                    op.append(owner)
                    op.append(None)
                    live[key] = op
                    continue
                why = why_unusable(op)
                if why is not None:
                    job_id = op[1] if type(op) is list and len(op) > 1 and type(op[1]) is str else None
                    self.unreadable.append(Unreadable(-1 if first_seq < 0 else first_seq + index, why, job_id))
                elif op[0] == SNAPSHOT:
                    self._apply_snapshot(op, first_seq + index)
                else:
                    apply(op)
        if self.orphan_pauses:
            self._adopt_orphan_pauses()
        return self

    def _fold_adds(self, adds: Sequence[tuple[Any, ...]]) -> None:
        """Fold a frame ``SHARD_FRAMES`` read: plain ADDs, checked already (as ``_fold`` checks them)."""
        live, owner = self.live, self.owner
        with collector_paused():
            for _, job_id, due_us, job, occurrence, attempts, scheduled_us in adds:
                # ``live_entry``, inlined (as ``_fold``'s ADDs): a call per job made this loop ~15% slower.
                live[job_id] = [due_us, job, occurrence, attempts, due_us if scheduled_us == due_us else scheduled_us,
                                owner, None]
        if self.orphan_pauses:
            self._adopt_orphan_pauses()

    def _adopt_orphan_pauses(self) -> None:
        """Pause the jobs an ADD made live after a pause read for them while they were not
        (``orphan_pauses``): a RESUME or REMOVE of the job in between had dropped it."""
        for job_id in [job_id for job_id in self.orphan_pauses if job_id in self.live]:
            self.paused[job_id] = self.orphan_pauses.pop(job_id)

    def _apply_snapshot(self, op: list[Any], seq: int) -> None:
        """Fold a checked SNAPSHOT: entries that are not what they should be are set aside one by one."""
        self.live.clear()
        self.moved = dict(op[2])
        self.pending = {}
        self.sources = set()
        self.paused = {}
        self.orphan_pauses = {}
        for item in op[1]:
            if type(item) is list and len(item) == 6 and _live_ok(*item):
                job_id, due_us, job, occurrence, attempts, scheduled_us = item
                self.live[job_id] = live_entry(due_us, job, occurrence, attempts, scheduled_us, self.owner)
            else:
                job_id = item[0] if type(item) is list and item and type(item[0]) is str else None
                self.unreadable.append(Unreadable(seq, "malformed SNAPSHOT entry", job_id))
        for job_id, move in (op[3] if len(op) > 3 else {}).items():
            if type(job_id) is str and _pending_ok(move):
                self.pending[job_id] = move
            else:
                self.unreadable.append(Unreadable(seq, "malformed SNAPSHOT pending move", _str_or_none(job_id)))
        for source in op[4] if len(op) > 4 else ():
            if type(source) is str:
                self.sources.add(source)
            else:
                self.unreadable.append(Unreadable(seq, "malformed SNAPSHOT source", None))
        for job_id, pause in (op[5] if len(op) > 5 else {}).items():
            if type(job_id) is str and job_id in self.live and _pause_ok(pause):
                self.paused[job_id] = pause
            else:
                self.unreadable.append(Unreadable(seq, "malformed SNAPSHOT pause", _str_or_none(job_id)))

    def snapshot(self) -> list[list[Any]]:
        """The records a compacted generation starts with: every live job and forward, and every pause.

        One SNAPSHOT record holds the live jobs up to ``SNAPSHOT_BYTES``; the rest follow it as
        ADD records, their pauses as PAUSE records after those, which replay folds to the same
        state (and older releases read alike). A record is never split across blocks, and the
        whole state in one record outgrew a block (4 MiB) at ~20,000 live jobs of ~200 B, or 17
        of the largest (256 KiB): such a shard could not rotate at the block limit, its writer
        stopped there, and the jobs it held could no longer record an outcome. The forwards
        (``moved``, one per recurring job that moved on from here, ~80 B each) stay in the record,
        ahead of the jobs: a shard that forwarded more than ~50,000 jobs still cannot compact.
        """
        first: list[list[Any]] = []
        rest: list[list[Any]] = []
        size = len(pack([self.moved, self.pending, sorted(self.sources)]))  # the record's other fields
        paused = self.paused
        for job_id, entry in self.live.items():
            size += len(job_id.encode()) + len(entry[JOB]) + ENTRY_BYTES
            if job_id in paused:  # carried in the record too: its id again, note and by
                size += len(pack([job_id, paused[job_id]]))
            (first if size <= SNAPSHOT_BYTES else rest).append([job_id, *entry[:OWNER]])
        later = {item[0] for item in rest}
        record = [SNAPSHOT, first, dict(self.moved), dict(self.pending), sorted(self.sources)]
        if self.paused:  # only then: a log with no pause reads as before
            record.append({job_id: pause for job_id, pause in self.paused.items() if job_id not in later})
        return [record, *([ADD, *item] for item in rest),
                *([PAUSE, job_id, *pause] for job_id, pause in self.paused.items() if job_id in later)]

    def holds_move(self, job_id: str, occurrence: int) -> bool:
        """Whether a move of ``job_id`` to ``occurrence`` landed here: live, or ended or moved on since."""
        entry = self.live.get(job_id)
        return job_id in self.moved if entry is None else entry[OCCURRENCE] >= occurrence
