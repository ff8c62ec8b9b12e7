"""The membership table: which silos exist, which incarnation of each is alive, and since when.

One small log per silo (``members/<silo id>``) whose metadata is the silo's row; every change is a
compare-and-swap on its ETag, so two incarnations of one silo can never both believe they are
current. A silo restarted by Ray joins as a new incarnation. What its predecessor owned becomes an
orphan once that predecessor provably fires no more: its process is known to have exited, or its
lease has run out (``Departures``); the row carries what is proven (``ended_through``).

Correctness never rests on this table: a silo wrongly thought dead loses its shards by fencing,
not its data. The table only decides *when* others look for orphans.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from storage import AlreadyExists, Fenced, NotFound, Store, Unavailable

MEMBER_PREFIX = "members/"
SILO_PREFIX = "silo-"  # a silo's Ray actor name is SILO_PREFIX + silo id
JOINING, ACTIVE, LEAVING, DEAD = "joining", "active", "leaving", "dead"
# Why a row was marked dead. Each but REPORTED proves that incarnation fires no more.
SILENT = "silent"  # a peer watched its row unchanged past suspicion_timeout, which outlasts any lease
EXITED = "exited"  # Ray saw its worker process exit
STOPPED = "stopped"  # it stopped gracefully, once its work had ended and its shards were released
REPORTED = "reported"  # Ray reports it dead without proof (node lost, unreachable): peers wait out its lease


def owner_tag(silo_id: str, incarnation: int) -> str:
    """The owner string a shard's metadata carries: ``<silo id>#<incarnation>``."""
    return f"{silo_id}#{incarnation}"


def parse_owner(owner: str) -> tuple[str, int] | None:
    """``(silo id, incarnation)`` of an owner tag, or None for a released shard."""
    silo_id, sep, incarnation = owner.rpartition("#")
    if not sep or not incarnation.isdigit():
        return None
    return silo_id, int(incarnation)


@dataclass(frozen=True)
class Member:
    """One silo's row: identity, incarnation, where it runs, its status and last heartbeat (µs)."""

    silo_id: str
    incarnation: int
    status: str
    heartbeat_us: int
    node: str = ""
    pid: int = 0
    etag: str = ""
    token: str = ""  # new on every write: tells a landed write whose answer was lost
    cause: str = ""  # why it was marked dead (SILENT, EXITED, STOPPED, REPORTED)
    ended_through: int = 0  # every incarnation up to this one provably fires no more

    @property
    def owner(self) -> str:
        return owner_tag(self.silo_id, self.incarnation)

    def to_metadata(self) -> dict[str, str]:
        return {
            "silo_id": self.silo_id,
            "incarnation": str(self.incarnation),
            "status": self.status,
            "heartbeat_us": str(self.heartbeat_us),
            "node": self.node or "-",
            "pid": str(self.pid),
            "token": self.token or "-",
            "cause": self.cause or "-",
            "ended_through": str(self.ended_through),
        }

    @classmethod
    def from_metadata(cls, md: Mapping[str, str], etag: str) -> Member:
        return cls(
            silo_id=md["silo_id"],
            incarnation=int(md["incarnation"]),
            status=md["status"],
            heartbeat_us=int(md["heartbeat_us"]),
            node="" if md.get("node", "-") == "-" else md["node"],
            pid=int(md.get("pid", "0")),
            etag=etag,
            token="" if md.get("token", "-") == "-" else md["token"],
            cause="" if md.get("cause", "-") == "-" else md["cause"],
            ended_through=int(md.get("ended_through", "0")),
        )

    def ended_with(self, proven: bool) -> int:
        """``ended_through`` once this row's incarnation is replaced or marked dead, ``proven`` ended or not.

        Proof for one incarnation says nothing of older ones, so the mark moves only when every
        older incarnation was already proven ended.
        """
        if proven and self.ended_through >= self.incarnation - 1:
            return max(self.ended_through, self.incarnation)
        return self.ended_through

    def alive(self, now_us: int, suspicion_timeout_us: int) -> bool:
        """Whether this incarnation counts as alive: not dead, not gone, heard from lately."""
        return self.status in (JOINING, ACTIVE) and now_us - self.heartbeat_us <= suspicion_timeout_us


class UnsureWrite(Unavailable):
    """A row write whose outcome is unknown (its answer and the look after it both failed): it
    may have landed. ``row`` is what it wrote, so the next write can recognise it by its token."""

    def __init__(self, message: str, row: Member) -> None:
        super().__init__(message)
        self.row = row


class Identity:
    """Who this silo is right now: its id and current membership row (replaced on every write).

    Shared by the silo's roles: a rejoin gives a new incarnation, and every role sees it at once.
    """

    def __init__(self, silo_id: str) -> None:
        self.silo_id = silo_id
        self.member: Member | None = None
        self._joined = asyncio.Event()  # clear from being declared dead until the rejoin lands
        self._joined.set()

    @property
    def rejoining(self) -> bool:
        """Declared dead and not yet joined again: this silo is no incarnation at all meanwhile."""
        return not self._joined.is_set()

    def retire(self) -> None:
        """Our row was taken: nothing may be held under the old tag, nor yet under the next one."""
        self._joined.clear()

    def joined(self, member: Member) -> None:
        """A join landed: ``member`` is this silo's incarnation from now on."""
        self.member = member
        self._joined.set()

    async def wait_joined(self) -> None:
        """Return once this silo is an incarnation (at once, unless it is rejoining)."""
        await self._joined.wait()

    @property
    def row(self) -> Member:
        assert self.member is not None, "the silo has not joined yet"
        return self.member

    @property
    def owner(self) -> str:
        return self.row.owner

    @property
    def incarnation(self) -> int:
        return self.row.incarnation


class Membership:
    """Reads and writes the membership table in ``store``; every write is a CAS."""

    def __init__(self, store: Store) -> None:
        self._store = store

    async def members(self) -> dict[str, Member]:
        """Every silo's current row, by silo id."""
        rows = await self._store.list(MEMBER_PREFIX)
        return {m.silo_id: m for m in (Member.from_metadata(md, etag) for _, md, etag in rows)}

    async def join(self, silo_id: str, now_us: int, *, node: str = "", pid: int = 0,
                   ended: Callable[[Member], bool] = lambda previous: False, mine: str = "") -> Member:
        """Register a new incarnation of ``silo_id`` and return its row (status active).

        ``ended(previous row)`` says whether the incarnation being replaced provably fires no
        more (its process is gone); the new row records it, so peers take its shards at once.
        A write whose answer was lost is recognised by its token when the row is read again,
        so one join makes one incarnation: within this call, or across calls when the caller
        passes ``mine``, the token of an earlier join that raised ``UnsureWrite``.
        """
        name = MEMBER_PREFIX + silo_id
        unsure: Member | None = None  # our last write, in case it landed unanswered
        while True:
            try:
                stat = await self._store.stat(name)
            except NotFound:
                row = Member(silo_id, 1, ACTIVE, now_us, node, pid, token=secrets.token_hex(8))
                unsure, mine = row, row.token
                try:
                    etag = await self._store.create(name, row.to_metadata())
                except AlreadyExists:
                    continue  # another incarnation raced us to it: read and go on from there
                except Unavailable as exc:
                    raise UnsureWrite(f"row of {silo_id}: outcome of a join unknown: {exc!r}", row) from exc
                return replace(row, etag=etag)
            except Unavailable as exc:
                if unsure is None:
                    raise
                raise UnsureWrite(f"row of {silo_id}: outcome of a join unknown: {exc!r}", unsure) from exc
            previous = Member.from_metadata(stat.metadata, stat.etag)
            if mine and previous.token == mine:
                return previous
            row = Member(silo_id, previous.incarnation + 1, ACTIVE, now_us, node, pid, token=secrets.token_hex(8),
                         ended_through=previous.ended_with(ended(previous)))
            unsure, mine = row, row.token
            try:
                etag = await self._store.set_metadata(name, row.to_metadata(), if_match=stat.etag)
            except Fenced:
                continue
            except Unavailable as exc:
                # It may have landed: taken for another's, the row would make this silo give way
                # to itself as to a newer process (``Heartbeat._replaced``; simulator seed 260256).
                raise UnsureWrite(f"row of {silo_id}: outcome of a join unknown: {exc!r}", row) from exc
            return replace(row, etag=etag)

    async def update(self, row: Member, **changes: Any) -> Member:
        """Write ``row`` with ``changes``; ``Fenced`` if someone else changed it since.

        Each write carries a fresh token. A CAS whose answer was lost and that the store then
        retried sees its own write as a conflict (412 on Azure): the token in the row tells
        that it landed, so a lost answer never reads as "declared dead".
        """
        new = replace(row, **changes, token=secrets.token_hex(8))
        name = MEMBER_PREFIX + row.silo_id
        try:
            etag = await self._store.set_metadata(name, new.to_metadata(), if_match=row.etag)
        except (Fenced, Unavailable) as exc:
            try:
                stat = await self._store.stat(name)
            except Unavailable as unsure:
                raise UnsureWrite(f"row of {row.silo_id}: outcome of a write unknown: {unsure!r}", new) from exc
            if stat.metadata.get("token") != new.token:
                raise
            etag = stat.etag
        return replace(new, etag=etag)

    async def declare_dead(self, row: Member, cause: str = REPORTED) -> bool:
        """Mark a suspected silo dead by CAS, saying why; False if its row moved on (it is alive after all).

        SILENT proves every incarnation up to this one ended: each older one's row changed
        before this one's last heartbeat, which is older than any lease by now.
        """
        ended = row.incarnation if cause == SILENT else row.ended_with(cause in (EXITED, STOPPED))
        try:
            await self.update(row, status=DEAD, cause=cause, ended_through=ended)
        except (Fenced, NotFound):
            return False
        return True


    async def prove_ended(self, row: Member) -> bool:
        """Record on a row already marked dead that its process is now proven ended (EXITED), so
        peers take its shards without waiting out its lease; False if the row moved on meanwhile."""
        ended = row.ended_with(True)
        if ended == row.ended_through:
            return False  # an older incarnation's end is unproven: this proof changes nothing
        try:
            await self.update(row, cause=EXITED, ended_through=ended)
        except (Fenced, NotFound):
            return False
        return True


class HeartbeatWatch:
    """Suspects peers by how long *this* silo has seen their heartbeat unchanged.

    Judging by local observation, not by comparing a peer's timestamp with our clock, keeps
    detection right under clock skew and after a storage outage: when nobody could write a
    heartbeat, nobody's silence counts until we have watched it again for a full timeout.
    """

    def __init__(self) -> None:
        # silo -> (incarnation, heartbeat, since, token): any write changes the token, so an
        # unchanged one proves the row was not written since
        self._seen: dict[str, tuple[int, int, float, str]] = {}

    def observe(self, members: Mapping[str, Member], now: float) -> None:
        """Record what ``members`` shows at monotonic time ``now``."""
        for silo_id, m in members.items():
            seen = self._seen.get(silo_id)
            if seen is None or seen[:2] != (m.incarnation, m.heartbeat_us) or seen[3] != m.token:
                self._seen[silo_id] = (m.incarnation, m.heartbeat_us, now, m.token)

    def suspects(self, members: Mapping[str, Member], now: float, timeout: float, *, me: str) -> list[Member]:
        """Peers still marked alive whose heartbeat has not moved for ``timeout`` seconds."""
        out = []
        for silo_id, m in members.items():
            seen = self._seen.get(silo_id)
            if silo_id != me and m.status in (JOINING, ACTIVE) and seen is not None and now - seen[2] > timeout:
                out.append(m)
        return out

    def seen(self) -> list[str]:
        """Every silo id observed so far."""
        return list(self._seen)

    def forget_silence(self, now: float) -> None:
        """Restart every peer's clock: we could not see the table for a while ourselves."""
        self._seen = {k: (inc, hb, now, token) for k, (inc, hb, _, token) in self._seen.items()}


class Departures:
    """When this silo first saw each peer incarnation end, and so when its lease provably ran out.

    An incarnation ends when its row shows a newer incarnation, or marks it dead or leaving.
    Its lease ends ``lease`` seconds after its last successful heartbeat *began*, and any other
    write to its row lands after that heartbeat (every write is a CAS). So once we have seen the
    changed row, ``lease`` more seconds on our own monotonic clock (clocks tick at the same rate)
    prove its lease over, however far its wall clock is off. A row's ``ended_through`` proves it
    at once.
    """

    def __init__(self, lease: float) -> None:
        self.lease = lease
        # silo -> [(every incarnation up to this one had ended, first seen at)], ascending
        self._ends: dict[str, list[tuple[int, float]]] = {}

    def observe(self, members: Mapping[str, Member], now: float) -> None:
        """Record what ``members``, read just before monotonic time ``now``, shows ended."""
        for silo_id, m in members.items():
            ended = m.incarnation if m.status in (DEAD, LEAVING) else m.incarnation - 1
            marks = self._ends.setdefault(silo_id, [])
            if ended > 0 and (not marks or ended > marks[-1][0]):
                marks.append((ended, now))

    def lease_over_at(self, silo_id: str, incarnation: int) -> float | None:
        """From when (monotonic) ``incarnation`` of ``silo_id`` provably holds no lease, by when we
        saw it end alone (a proven end of its process aside); None if not seen to have ended."""
        for ended, since in self._ends.get(silo_id, ()):
            if ended >= incarnation:
                return since + self.lease
        return None

    def over_at(self, member: Member, incarnation: int) -> float | None:
        """From when (monotonic) ``incarnation`` of ``member``'s silo provably fires no more; None if not known to have ended."""
        if member.ended_through >= incarnation:
            return float("-inf")
        return self.lease_over_at(member.silo_id, incarnation)
