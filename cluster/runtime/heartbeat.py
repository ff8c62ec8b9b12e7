"""Heartbeat and failure detection: renew this silo's lease, and declare silent peers dead.

Every ``heartbeat_interval`` a silo rewrites its membership row by CAS (which renews its firing
lease), then looks at its peers: one that Ray reports dead, or whose row this silo has watched
unchanged for ``suspicion_timeout``, is declared dead by CAS, and its shards become orphans. A
silo that finds its own row taken (declared dead while paused or cut off) drops every shard and
joins again as a new incarnation.
"""

from __future__ import annotations

import asyncio
import logging
import os

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.runtime.adoption import Adoption
from cluster.runtime.lease import Lease
from cluster.runtime.membership import DEAD, LEAVING, HeartbeatWatch, Identity, Member, Membership, UnsureWrite
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.ownership import ShardTable
from cluster.runtime.transport import Transport
from storage import Fenced, NotFound, StorageError, Store

log = logging.getLogger("timeshard.silo")


class Heartbeat:
    """Keeps this silo's membership row fresh and watches its peers'."""

    def __init__(self, store: Store, options: ClusterOptions, clock: Clock, me: Identity, shards: ShardTable,
                 lease: Lease, adoption: Adoption, transport: Transport, metrics: SiloMetrics) -> None:
        self._membership = Membership(store)
        self._options = options
        self._clock = clock
        self._me = me
        self._shards = shards
        self._lease = lease
        self._adoption = adoption
        self._transport = transport
        self._metrics = metrics
        self._watch = HeartbeatWatch()
        self._unsure: Member | None = None  # our last row write, if its outcome is unknown

    async def join(self) -> None:
        """Register as a new incarnation; the lease runs from when the write began."""
        began = self._clock.monotonic()
        self._me.joined(await self._membership.join(self._me.silo_id, self._clock.now_us(),
                                                    node=self._transport.node_id(), pid=os.getpid()))
        self._renew(began)

    async def run(self) -> None:
        """The heartbeat loop: beat, then look at peers; every ``heartbeat_interval``, forever."""
        interval = self._options.heartbeat_interval.total_seconds()
        while True:
            await asyncio.sleep(interval)
            try:
                self._metrics.flush()
                await self.beat()
                await self.detect_failures()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                log.warning("heartbeat failed", extra={"silo": self._me.owner, "error": repr(exc)})
            except Exception:
                log.exception("heartbeat round failed")

    async def beat(self) -> None:
        """Rewrite our row by CAS; rejoin as a new incarnation if a peer declared us dead."""
        began = self._clock.monotonic()
        try:
            self._me.member = await self._update()
        except (Fenced, NotFound):
            # Declared dead by a peer (we were paused or cut off): our shards are being adopted
            # and our writes are fenced. Drop them all and join again as a new incarnation.
            # Retired first: a create or claim in flight must not be held under the dead tag
            # while the join is under way (issue 12 point 2); it stays retired if the join fails.
            log.error("silo was declared dead; rejoining", extra={"silo": self._me.owner})
            self._me.retire()
            self._shards.drop_all("declared dead")
            self._me.joined(await self._membership.join(self._me.silo_id, self._clock.now_us(), pid=os.getpid()))
        self._renew(began)

    async def _update(self) -> Member:
        """Rewrite our row. A conflict caused by our own last write, which landed although its
        answer and the look after it were lost, is not taken for being declared dead."""
        unsure, self._unsure = self._unsure, None
        try:
            return await self._membership.update(self._me.row, heartbeat_us=self._clock.now_us())
        except UnsureWrite as exc:
            self._unsure = exc.row
            raise
        except Fenced:
            current = (await self._membership.members()).get(self._me.silo_id) if unsure is not None else None
            if current is None or unsure is None or current.token != unsure.token:
                raise
        try:
            return await self._membership.update(current, heartbeat_us=self._clock.now_us())
        except UnsureWrite as exc:
            self._unsure = exc.row
            raise

    def _renew(self, began: float) -> None:
        if self._lease.renew(began):
            self._watch.forget_silence(self._clock.monotonic())  # we were blind too: give every peer a fresh timeout

    async def detect_failures(self) -> None:
        """Declare dead, by CAS, peers that the transport reports dead or that stayed silent too long."""
        members = await self._membership.members()
        now = self._clock.monotonic()
        self._watch.observe(members, now)
        timeout = self._options.suspicion_timeout.total_seconds()
        dead = {m.silo_id: m for m in self._watch.suspects(members, now, timeout, me=self._me.silo_id)}
        alive = [m for m in members.values() if m.silo_id != self._me.silo_id and m.status not in (DEAD, LEAVING)]
        ping_timeout = self._options.heartbeat_interval.total_seconds()
        answers = await asyncio.gather(*(self._transport.ping(m.silo_id, ping_timeout) for m in alive))
        dead.update({m.silo_id: m for m, answer in zip(alive, answers, strict=True) if answer is False})
        declared = [m for m in dead.values() if await self._membership.declare_dead(m)]
        if declared:
            log.warning("peers declared dead", extra={"silos": [m.owner for m in declared], "by": self._me.owner})
            await self._adoption.adopt_orphans()

    async def declare_peer_dead(self, silo_id: str) -> bool:
        """Mark a peer dead now (Ray told a caller it died), then adopt its shards."""
        member = (await self._membership.members()).get(silo_id)
        if member is None or member.status in (DEAD, LEAVING):
            return False
        dead = await self._membership.declare_dead(member)
        if dead:
            await self._adoption.adopt_orphans()
        return dead

    def peers(self) -> list[str]:
        """The other silos this one has seen in the membership table."""
        return [s for s in self._watch.seen() if s != self._me.silo_id]

    async def leave(self) -> None:
        """Mark our row dead (a graceful stop): peers adopt what we released at once."""
        await self._membership.update(self._me.row, status=DEAD)
