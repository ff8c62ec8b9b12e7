"""Owning a log: what a shard and a named-job registry bucket share (issue 25, point 5).

A log's owner is named in its metadata (``owner``: ``silo#incarnation``, or ``RELEASED`` after a
graceful stop). An owner writes through the fenced writer its claim returned; a claim is a
compare-and-swap on the metadata read with the log, so it fences every earlier writer. A silo
answers from its memory of a log it owns while its firing lease holds (``cluster.runtime.lease``);
past the lease it reads the log's owner first. A peer takes a log over once its owner is proven
gone — released, or an incarnation that ended *and* whose lease provably ran out
(``membership.Departures``) — so a log changes hands within the same bound, whatever it holds.

This module is that part alone, free of what a shard adds (windows, loading, moves,
quarantine): ``Adoption`` and ``ShardTable`` run shards on it, and registry buckets are to run on
the very same code, not a copy.
"""

from __future__ import annotations

from collections.abc import Mapping

from cluster.model.clock import Clock
from cluster.runtime.membership import DEAD, LEAVING, Departures, Identity, Member, Membership, parse_owner
from cluster.runtime.shardlog import RELEASED
from storage import Fenced, LogState, Store, list_logs, read_log

__all__ = ["RELEASED", "Owner", "is_orphan", "live_holder", "orphan_at", "owner_of", "read_to_claim"]


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


async def read_to_claim(store: Store, base: str, expected_owner: str) -> LogState:
    """Read log ``base`` whole, to take it over from ``expected_owner`` (then ``LogWriter.claim``).

    ``Fenced`` if its owner is another by now: a winner's claim that landed between our listing
    and this read, which the claim's ETag alone cannot tell from an unclaimed log.
    """
    state = await read_log(store, base)
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

    async def read_members(self) -> dict[str, Member]:
        """The membership table, noting for each ended incarnation when we first saw it end."""
        members = await Membership(self._store).members()
        self.departures.observe(members, self._clock.monotonic())  # after the read: never too early
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
