"""Owning a log: what a shard and a named-job registry bucket share (issue 25, point 5).

A log's owner is named in its metadata (``owner``: ``silo#incarnation``, or ``RELEASED`` after a
graceful stop). An owner writes through the fenced writer its claim returned; a claim is a
compare-and-swap on the metadata read with the log, so it fences every earlier writer. A silo
answers from its memory of a log it owns while its firing lease holds (``cluster.runtime.lease``);
past the lease it reads the log's owner first. A peer takes a log over once its owner is proven
gone — released, or an incarnation that ended *and* whose lease provably ran out
(``membership.Departures``) — so a log changes hands within the same bound, whatever it holds.

Handing a log over to a peer below its fair share (``cluster.runtime.balance`` for shards,
``Buckets.hand_over`` for registry buckets) follows one policy, kept here: the fair share (the
even split among the live, rounded up), a log held for less than ``SETTLE_ROUNDS`` adoption
intervals stays put, a released log goes first to silos below their share and to the others
only once it waited an interval unclaimed (``ReleasedSince``), and the release itself is the
owner set to ``RELEASED`` through the log's fenced writer (``release``).

This module is that part alone, free of what a shard adds (windows, loading, moves,
quarantine): ``Adoption`` and ``ShardTable`` run shards on it, and registry buckets run on
the very same code, not a copy.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from cluster.model.clock import Clock
from cluster.runtime.membership import DEAD, LEAVING, Departures, Identity, Member, Membership, parse_owner
from cluster.runtime.shardlog import RELEASED
from storage import Fenced, Frame, FrameReader, LogState, StorageError, Store, list_logs, read_log

__all__ = ["RELEASED", "SETTLE_ROUNDS", "Owner", "ReleasedSince", "alive_count", "fair_share", "held_per_live_silo",
           "is_orphan", "live_holder", "orphan_at", "owner_of", "read_to_claim", "release", "settled_before"]

log = logging.getLogger("timeshard.silo")

#: A log held for less than this many adoption intervals is not handed over: one just adopted,
#: created or taken stays put, so logs do not bounce between silos.
SETTLE_ROUNDS = 2


def fair_share(total: int, alive: int) -> int:
    """The most logs one of ``alive`` silos should hold of ``total``: the even split, rounded up."""
    return -(-total // max(alive, 1))


def alive_count(members: Mapping[str, Member]) -> int:
    """How many silos of ``members`` count for the fair share: neither dead nor leaving."""
    return sum(1 for m in members.values() if m.status not in (DEAD, LEAVING))


def settled_before(now: float, interval_s: float) -> float:
    """The latest moment (monotonic) a log may have been taken and be handed over at ``now``."""
    return now - SETTLE_ROUNDS * interval_s


class ReleasedSince:
    """Released logs, and since when each was seen unclaimed: a silo below its fair share takes
    them at once, the others only once one waited an adoption interval (so none waits for
    good, and the silo that let one go does not take it back before a peer could)."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def waited(self, bases: Iterable[str], now: float, wait_s: float) -> set[str]:
        """Of ``bases`` (every released log seen now), those seen unclaimed for ``wait_s``."""
        self._since = {base: self._since.get(base, now) for base in bases}
        return {base for base, since in self._since.items() if now - since >= wait_s}


async def release(write: Awaitable[object], base: str) -> bool | None:
    """Await ``write``, the log's owner set to ``RELEASED`` through its fenced writer (after every
    append submitted before it): True once it landed, False if another writer claimed the log
    (``Fenced``), None if unsure (a store error: it may have landed). Unsure, the caller lets
    the log go either way: if the release did not land, the log still names this incarnation,
    which the owner's next round takes back (``Owner.mine``)."""
    try:
        await write
    except Fenced:
        return False
    except StorageError as exc:
        log.warning("releasing a log: unsure whether it landed", extra={"log": base, "error": repr(exc)})
        return None
    return True


def orphan_at(metadata: Mapping[str, str], members: Mapping[str, Member], departures: Departures) -> float | None:
    """From when (monotonic) the log whose metadata is ``metadata`` is an orphan; None while its owner may live."""
    owner = metadata.get("owner", RELEASED)
    if owner == RELEASED:
        return float("-inf")
    parsed = parse_owner(owner)
    if parsed is None:
        return float("-inf")
    silo_id, incarnation = parsed
    member = members.get(silo_id)
    if member is None:
        return float("-inf")  # never registered
    if member.incarnation < incarnation:
        # The owner is newer than our snapshot of the table (read before the log list): it
        # joined and claimed meanwhile. Only an owner proven gone makes an orphan.
        return None
    if member.incarnation == incarnation and member.status not in (DEAD, LEAVING):
        # A silent silo is orphaned only once declared dead by CAS (see the heartbeat), so a silo
        # that was merely slow learns it from its own failed heartbeat and stops firing.
        return None
    # Replaced (a Ray restart) or marked dead: gone once its process is known to have exited or
    # its lease has run out — a process cut off by a partition may still write until then.
    return departures.over_at(member, incarnation)


def is_orphan(metadata: Mapping[str, str], members: Mapping[str, Member], departures: Departures, now: float) -> bool:
    """Whether the log whose metadata is ``metadata`` has no live owner in ``members`` at ``now``."""
    since = orphan_at(metadata, members, departures)
    return since is not None and now >= since


def live_holder(owner: str, members: Mapping[str, Member], alive: set[str]) -> str | None:
    """The live silo whose current incarnation holds a log owned by ``owner``, if any."""
    parsed = parse_owner(owner)
    if parsed is None or parsed[0] not in alive or members[parsed[0]].incarnation != parsed[1]:
        return None
    return parsed[0]


def held_per_live_silo(owners: Iterable[str], members: Mapping[str, Member]) -> tuple[dict[str, int], int]:
    """Of the logs whose owners are ``owners``: how many each live silo of ``members`` holds
    (every live silo a key, from 0), and how many no live silo holds."""
    alive = {silo for silo, m in members.items() if m.status not in (DEAD, LEAVING)}
    held = dict.fromkeys(alive, 0)
    unheld = 0
    for owner in owners:
        holder = live_holder(owner, members, alive)
        if holder is None:
            unheld += 1
        else:
            held[holder] += 1
    return held, unheld


async def read_to_claim(store: Store, base: str, expected_owner: str, reader: FrameReader | None = None,
                        fold: Callable[[Frame], None] | None = None) -> LogState:
    """Read log ``base`` whole, to take it over from ``expected_owner`` (then ``LogWriter.claim``).

    ``Fenced`` if its owner is another by now: a winner's claim that landed between our listing
    and this read, which the claim's ETag alone cannot tell from an unclaimed log. ``reader`` and
    ``fold``: how its frames are read, and who takes them as they are (see ``storage.decode``).
    """
    state = await read_log(store, base, reader=reader, fold=fold)
    if state.metadata.get("owner") != expected_owner:
        raise Fenced(f"log {base!r} was claimed by {state.metadata.get('owner')!r} meanwhile")
    return state


async def owner_of(store: Store, base: str) -> str | None:
    """Who log ``base`` names as its owner, read now; None if the log is gone."""
    heads = [head for head in await list_logs(store, base) if head.base == base]
    return heads[0].metadata.get("owner") if heads else None


class Owner:
    """This silo as the owner and judge of logs: whose a log is, and whether it may be taken.

    Shared by every kind of owned log on one silo, so they judge from one membership read and
    one record of departures.
    """

    def __init__(self, store: Store, clock: Clock, me: Identity, departures: Departures) -> None:
        self._store = store
        self._clock = clock
        self.me = me
        self.departures = departures

    @property
    def clock(self) -> Clock:
        return self._clock

    async def read_members(self) -> dict[str, Member]:
        """The membership table, noting for each ended incarnation when we first saw it end."""
        members = await Membership(self._store).members()
        self.departures.observe(members, self._clock.monotonic())  # after the read: never too early
        return members

    def owner_unknown_to(self, metadatas: Iterable[Mapping[str, str]], members: Mapping[str, Member]) -> bool:
        """Whether a log of ``metadatas`` names an owner whose silo ``members`` does not hold: one
        that joined after that read. Judge those logs on the table read again (after listing
        them): ``orphan_at`` takes an owner never registered for an orphan, and a silo paused
        between its read and its listing took a live joiner's shard so (simulator seed 910359
        of ``--faults all``, a silo joining: two owners). A silo's row is written before it
        owns any log, so a read after the listing holds every owner the listing showed."""
        for metadata in metadatas:
            parsed = parse_owner(metadata.get("owner", RELEASED))
            if parsed is not None and parsed[0] not in members:
                return True
        return False

    async def members_knowing(self, metadatas: Iterable[Mapping[str, str]], members: dict[str, Member],
                              read: Callable[[], Awaitable[dict[str, Member]]] | None = None) -> dict[str, Member]:
        """``members``, or the table read again (``read``, default ``read_members``) if a log of
        ``metadatas`` names an owner ``members`` does not hold (``owner_unknown_to``)."""
        if self.owner_unknown_to(metadatas, members):
            return await (read or self.read_members)()
        return members

    def orphaned(self, metadata: Mapping[str, str], members: Mapping[str, Member]) -> bool:
        """Whether the log whose metadata is ``metadata`` is an orphan now (``members`` from ``read_members``)."""
        return is_orphan(metadata, members, self.departures, self._clock.monotonic())

    def mine(self, metadata: Mapping[str, str]) -> bool:
        """Owned by this very incarnation: a claim or create whose CAS landed although the call
        failed. No peer takes that one, since its owner is alive, so unless we take it its
        contents are nobody's."""
        return metadata.get("owner") == self.me.owner

    def claimable(self, metadata: Mapping[str, str], members: Mapping[str, Member]) -> bool:
        """An orphan now, or a log of this very incarnation that it does not hold (the caller checked)."""
        return self.mine(metadata) or self.orphaned(metadata, members)
