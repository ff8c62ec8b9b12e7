"""The drill's watch on the store: who owns each shard and each silo's row, read every 100 ms, and
every outcome appended to a shard log with the owner of record when it was appended.

What the store showed is the drills' truth (``drill_analysis`` judges fires against it), so the
watch says what it could not see: a log replaced between two reads leaves a gap, and a log it
could not read for too long is an error.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from dataclasses import dataclass, field

from cluster.runtime.membership import DEAD, MEMBER_PREFIX, Member
from cluster.runtime.shardlog import REMOVE, RETRY, SHARD_PREFIX
from storage import NotFound, StorageError, Store, Unavailable, decode
from storage.generations import LogHead, list_logs

OBSERVE_INTERVAL_S = 0.1
#: A read the store could not answer (a file store's log locked past its 2 s wait under load, an
#: Azure timeout) is taken up by the next reading, which starts where the last one ended: nothing
#: goes unseen, it is only seen later. A log or listing unread for longer than this is a hole in
#: the watch, and an error.
MAX_BLIND_S = 5.0


@dataclass(frozen=True)
class Appended:
    """One append (frame) of a shard log that holds outcomes, as the observer read it.

    ``writer`` is the owner of record when it was appended, when the store proves it: the log's
    metadata named the same owner at the read before and at the read that found it (a killed
    incarnation never owns again, and no live silo hands a shard over and takes it back within
    one poll). ``seen`` is when it was first read: an upper bound on when it became durable.
    """

    shard: str
    offset: int
    seen: float
    writer: str | None
    outcomes: tuple[str, ...]  # job ids with a REMOVE or RETRY in this frame
    removes: tuple[str, ...] = ()  # the REMOVEs among them
    after: float = 0.0  # when the read that did not find it yet began: it landed later


@dataclass
class _Tail:
    """How far the observer has read one shard log: its generation, offset, and owner then."""

    name: str
    end: int = 0
    last_seq: int = -1
    owner: str | None = None  # None: not read yet
    read_at: float = 0.0  # when the last read began


@dataclass
class Observer:
    """Who owns each shard and each silo's row, as seen in the store, with the time first seen;
    and every outcome appended to a shard log, with the owner of record when it was appended."""

    store: Store
    shard_owners: dict[str, list[tuple[float, str]]] = field(default_factory=dict)
    rows: dict[str, list[tuple[float, int, str]]] = field(default_factory=dict)  # silo -> (t, incarnation, status)
    #: Every reading of the store as (started, answered): what it showed held at some moment between.
    samples: list[tuple[float, float]] = field(default_factory=list)
    appends: list[Appended] = field(default_factory=list)
    #: Shards whose history the observer could not read whole (a generation replaced between two
    #: reads): a missing outcome there proves nothing.
    gaps: set[str] = field(default_factory=set)
    errors: int = 0
    error_examples: list[str] = field(default_factory=list)
    tails: dict[str, _Tail] = field(default_factory=dict)
    retried: int = 0  # reads the store could not answer, taken up by the next reading
    longest_blind_s: float = 0.0  # the longest a log or the listing went unread
    blind_since: dict[str, float] = field(default_factory=dict)  # what is unread now, since when
    _rows_read: asyncio.Event = field(default_factory=asyncio.Event)  # set and replaced at each reading of the rows

    async def run(self) -> None:
        while True:
            await self.observe()
            await asyncio.sleep(OBSERVE_INTERVAL_S)

    async def observe(self) -> None:
        started = time.time()
        try:
            heads = await list_logs(self.store, SHARD_PREFIX)
            members = await self.store.list(MEMBER_PREFIX)
        except StorageError as exc:
            self._missed("the listing", exc)
            return
        self._read("the listing")
        listed = {head.base for head in heads}
        for gone in [key for key in self.blind_since if key.startswith(SHARD_PREFIX) and key not in listed]:
            del self.blind_since[gone]  # deleted while unread: what it got since the last read is unseen
            self.gaps.add(gone)
        now = time.time()
        self.samples.append((started, now))
        for head in heads:
            history = self.shard_owners.setdefault(head.base, [])
            owner = head.metadata.get("owner", "")
            if not history or history[-1][1] != owner:
                history.append((now, owner))
        for info in members:
            row = Member.from_metadata(info.metadata, info.etag)
            seen = self.rows.setdefault(row.silo_id, [])
            if not seen or seen[-1][1:] != (row.incarnation, row.status):
                seen.append((now, row.incarnation, row.status))
        self._rows_read.set()
        self._rows_read = asyncio.Event()
        await asyncio.gather(*(self._follow(head) for head in heads))

    async def _follow(self, head: LogHead) -> None:
        """Read what was appended to ``head``'s log since the last read."""
        tail = self.tails.get(head.base)
        if tail is None or tail.name != head.name:
            if tail is not None:
                self.gaps.add(head.base)  # what the old generation got after our last read is gone
            tail = self.tails[head.base] = _Tail(head.name)
        began = time.time()
        try:
            fetched = await self.store.fetch(head.name, tail.end)
        except NotFound:
            return  # replaced since the listing: the next reading follows the new generation
        except StorageError as exc:
            self._missed(head.base, exc)
            return
        self._read(head.base)
        seen = time.time()
        owner = fetched.metadata.get("owner", "")
        writer = owner if tail.owner == owner else None
        decoded = decode(fetched.data, offset=tail.end, after=tail.last_seq)
        for frame in decoded.frames:
            ops = [op for op in frame.records if isinstance(op, list) and len(op) > 1 and op[0] in (REMOVE, RETRY)]
            if ops:
                self.appends.append(Appended(head.base, frame.offset, seen, writer, tuple(str(op[1]) for op in ops),
                                             tuple(str(op[1]) for op in ops if op[0] == REMOVE), tail.read_at))
        tail.end, tail.last_seq, tail.owner, tail.read_at = decoded.end, decoded.last_seq, owner, began

    async def finish(self) -> None:
        """Read every log to its end once the drill is over; what stays unreadable is an error."""
        await self.observe()
        while self.blind_since and time.time() < min(self.blind_since.values()) + MAX_BLIND_S:
            await asyncio.sleep(OBSERVE_INTERVAL_S)
            await self.observe()
        for key, since in self.blind_since.items():
            self._failed(f"{key} could not be read in the {time.time() - since:.1f} s since {since:.3f}")

    def _missed(self, key: str, exc: StorageError) -> None:
        if not isinstance(exc, Unavailable):
            self._failed(exc)
            return
        self.retried += 1
        self.blind_since.setdefault(key, time.time())

    def _read(self, key: str) -> None:
        since = self.blind_since.pop(key, None)
        if since is not None:
            blind = time.time() - since
            self.longest_blind_s = max(self.longest_blind_s, blind)
            if blind > MAX_BLIND_S:
                self._failed(f"{key} went unread for {blind:.1f} s (more than {MAX_BLIND_S} s)")

    def _failed(self, exc: BaseException | str) -> None:
        self.errors += 1
        if len(self.error_examples) < 10:
            self.error_examples.append(exc if isinstance(exc, str) else repr(exc))

    def declared_dead_at(self, owner: str) -> float | None:
        """When ``owner``'s row was first seen dead or taken by a later incarnation."""
        silo, _, incarnation = owner.rpartition("#")
        for at, inc, status in self.rows.get(silo, []):
            if inc > int(incarnation) or (inc == int(incarnation) and status == DEAD):
                return at
        return None

    async def until_declared_dead(self, owner: str) -> float:
        """When ``owner`` was seen declared dead, waiting for the readings that show it."""
        while (at := self.declared_dead_at(owner)) is None:
            await self._rows_read.wait()
        return at

    def owner_at(self, shard: str, at: float) -> str | None:
        """The owner of ``shard`` as the last reading answered by ``at`` showed it (None: not seen yet)."""
        history = self.shard_owners.get(shard, [])
        i = bisect.bisect_right([t for t, _ in history], at)
        return history[i - 1][1] if i else None

    def superseded_at(self, shard: str, owner: str, sent: float) -> float | None:
        """When the store showed another owner of ``shard`` than ``owner``, which sent a fire at
        ``sent``; None if ``owner`` was the owner of record then, or the store cannot tell.

        The reading answered before ``sent`` showed who owned it at some moment before the send.
        If that was another owner, ``owner`` may still have claimed it before the send only if a
        reading answered after it, up to the first one begun after the send, shows ``owner`` (a
        reading under way at the send shows some moment of its own span): nothing else excuses it
        (not "never seen owning", not a claim back seconds later). Can miss a fire sent within
        one reading of losing the shard, never invent one.
        """
        answered = [t1 for _, t1 in self.samples]
        i = bisect.bisect_right(answered, sent)
        if i == 0:
            return None  # nothing read yet
        before = self.owner_at(shard, answered[i - 1])
        if before is None or before == owner:
            return None
        for t0, t1 in self.samples[i:]:
            if self.owner_at(shard, t1) == owner:
                return None  # claimed around the send: before or after it, the store cannot say
            if t0 >= sent:
                break
        history = self.shard_owners.get(shard, [])
        return next((t for t, o in reversed(history) if t <= answered[i - 1] and o != owner), answered[i - 1])
