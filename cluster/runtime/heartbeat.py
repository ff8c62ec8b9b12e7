"""Heartbeat and failure detection: renew this silo's lease, and declare silent peers dead.

Every ``heartbeat_interval`` a silo rewrites its membership row by CAS (which renews its firing
lease), then looks at its peers: one whose row this silo has watched unchanged for
``suspicion_timeout`` (longer than any lease), or whose process is proven ended (Ray saw it exit,
or this host's process table no longer has it), is declared dead by CAS with that proof, and its
shards become orphans at once. One that Ray reports dead without
such proof (a lost node, a partition) is declared dead too, but its shards wait until its lease
has provably run out. A silo that finds its own row taken (declared dead while paused or cut off)
drops every shard and joins again as a new incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Sequence

from cluster.model.clock import Clock
from cluster.model.errors import SiloStopping
from cluster.model.options import ClusterOptions
from cluster.runtime.adoption import Adoption
from cluster.runtime.lease import Lease
from cluster.runtime.membership import (
    DEAD,
    EXITED,
    LEAVING,
    REPORTED,
    SILENT,
    STOPPED,
    HeartbeatWatch,
    Identity,
    Member,
    Membership,
    UnsureWrite,
)
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.ownership import ShardTable
from cluster.runtime.transport import Ping, Transport
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
        # Peers' incarnations declared dead without proof -> when first seen so (monotonic): while
        # their lease may hold, proof that came late still spares peers waiting it out.
        self._unproven: dict[str, float] = {}
        self._writing = asyncio.Lock()  # held while our row is written: a stop waits for it
        self.watching_peers = True  # off while stopping: keep our lease, take on nothing new
        self._unsure: Member | None = None  # our last row write, if its outcome is unknown
        # Our last join, if its outcome is unknown: its token, and when its write began (its lease runs from then).
        self._joining: tuple[str, float] | None = None
        # Called once a newer process of this silo has joined: this one must end (see ``beat``).
        self.on_superseded: Callable[[], None] = lambda: None
        self.superseded = False

    async def join(self, *, replacing: int = 0) -> None:
        """Register as a new incarnation; the lease runs from when the write began.

        The row records whether the incarnation replaced provably fires no more: ``replacing``
        (ours, given up in this process), or one whose process ran here and is gone.
        """
        began = self._clock.monotonic()

        def ended(previous: Member) -> bool:
            return previous.incarnation == replacing or self._transport.exited(previous.node, previous.pid)

        try:
            member = await self._membership.join(self._me.silo_id, self._clock.now_us(), node=self._transport.node_id(),
                                                 pid=os.getpid(), ended=ended,
                                                 mine=self._joining[0] if self._joining else "")
        except UnsureWrite as exc:
            self._joining = exc.row.token, began
            raise
        if self._joining is not None and member.token == self._joining[0]:
            began = self._joining[1]  # an earlier join's write landed: the lease runs from when it began
        self._joining = None
        self._me.joined(member)
        self._renew(began)

    async def run(self) -> None:
        """The heartbeat loop: beat, then look at peers; every ``heartbeat_interval``, until halted.

        Beats keep their cadence whatever a round costs: a round that ran past the lease would
        make this silo forget every peer's silence (``_renew``), and a paused peer, whose ping
        waits out its timeout every round, would then never be declared dead.
        """
        interval = self._options.heartbeat_interval.total_seconds()
        loop = asyncio.get_running_loop()
        began = loop.time()
        self._lease.renewer, self._lease.renew_now = asyncio.current_task(), self._beat_in_round
        while True:
            await asyncio.sleep(max(0.0, began + interval - loop.time()))
            began = loop.time()
            try:
                self._metrics.flush()
                async with self._writing:
                    await self.beat()
                if self.superseded:
                    return
                if self.watching_peers:
                    await self.detect_failures()
            except asyncio.CancelledError:
                raise
            except StorageError as exc:
                self._metrics.store_errors.inc()
                log.warning("heartbeat failed", extra={"silo": self._me.owner, "error": repr(exc)})
            except Exception:
                log.exception("heartbeat round failed")

    async def _beat_in_round(self) -> None:
        """Beat now, from within a round of this loop that needs the lease (``Lease.wait_valid``);
        a beat that did not renew it is tried again at the loop's cadence."""
        if self.superseded:
            raise SiloStopping(f"silo {self._me.silo_id}: a newer process of it joined")
        async with self._writing:
            await self.beat()
        if not self._lease.valid:
            await asyncio.sleep(self._options.heartbeat_interval.total_seconds())

    async def beat(self) -> None:
        """Rewrite our row by CAS; rejoin as a new incarnation if a peer declared us dead."""
        began = self._clock.monotonic()
        try:
            self._me.member = await self._update()
        except (Fenced, NotFound):
            if await self._replaced():
                return
            # Declared dead by a peer (we were paused or cut off): our shards are being adopted
            # and our writes are fenced. Drop them all and join again as a new incarnation.
            # Retired first: a create or claim in flight must not be held under the dead tag
            # while the join is under way (issue 12 point 2); it stays retired if the join fails.
            log.error("silo was declared dead; rejoining", extra={"silo": self._me.owner})
            self._me.retire()
            self._shards.drop_all("declared dead")
            # Having dropped everything proves it starts nothing more; calls it already sent may
            # still reach handlers (delayed, or retried by Ray) until its lease ends, when handlers
            # refuse them. So the row records the old incarnation over only once its lease is;
            # until then peers wait it out as for any death without proof (issue 12 point 6; found
            # by the simulation: a partitioned silo's retried call ran beside its shard's new owner).
            proven = not self._lease.valid
            await self.join(replacing=self._me.incarnation if proven else 0)
            return
        self._renew(began)

    async def _replaced(self) -> bool:
        """Whether our row now names a newer incarnation that another process joined as.

        Ray restarts a silo elsewhere once it thinks the old one's node is gone, while the old
        process may still run (its raylet died, or a partition cut it off). Rejoining would take
        the row back from the new process, which would rejoin in turn, each dropping every
        shard: so the older process gives way for good, fires nothing more and ends.
        """
        row = (await self._membership.members()).get(self._me.silo_id)
        if row is None or row.incarnation <= self._me.incarnation:
            return False
        if self._joining is not None and row.token == self._joining[0]:
            return False  # our own rejoin, landed unanswered: the next join takes it up
        log.error("a newer process of this silo joined; this one ends",
                  extra={"silo": self._me.owner, "newer": row.owner, "node": row.node, "pid": row.pid})
        self._me.retire()
        self._shards.drop_all("a newer process of this silo joined")
        self.superseded = True  # the heartbeat loop ends: this process never holds a lease again
        self.on_superseded()
        return True

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
        self._metrics.heartbeats.inc()
        first = self._lease.until == 0.0
        if self._lease.renew(began):
            self._watch.forget_silence(self._clock.monotonic())  # we were blind too: give every peer a fresh timeout
            if not first:
                self._metrics.lease_lapses.inc()

    async def detect_failures(self) -> None:
        """Declare dead, by CAS, peers that stayed silent too long or that Ray reports dead, saying why."""
        members = await self._adoption.read_members()
        now = self._clock.monotonic()
        self._watch.observe(members, now)
        timeout = self._options.suspicion_timeout.total_seconds()
        silent = {m.silo_id: m for m in self._watch.suspects(members, now, timeout, me=self._me.silo_id)}
        alive = [m for m in members.values() if m.silo_id != self._me.silo_id and m.status not in (DEAD, LEAVING)]
        # Silence (the strongest proof: every incarnation of it is over) and a process this host's
        # table shows gone need no ping, and no answer changes them: taken over before the pings,
        # which a slow peer (one Ray is restarting) makes wait out their timeout.
        known = {silo_id: (m, SILENT) for silo_id, m in silent.items()}
        known |= {m.silo_id: (m, EXITED) for m in alive if m.silo_id not in silent and self._transport.exited(m.node, m.pid)}
        if known:
            await self._declare(known)
        causes: dict[str, tuple[Member, str]] = {}
        alive = [m for m in alive if m.silo_id not in known]
        ping_timeout = self._options.heartbeat_interval.total_seconds()
        answers = await asyncio.gather(*(self._transport.ping(m.silo_id, ping_timeout) for m in alive))
        for m, answer in zip(alive, answers, strict=True):
            cause = await self._cause(m, answer)  # one by one: no task per peer, which would reorder the rounds
            if cause is not None:
                causes[m.silo_id] = (m, cause)
        await self._declare(causes, await self._prove_reported(members, now))

    async def _declare(self, causes: dict[str, tuple[Member, str]], proven: Sequence[Member] = ()) -> None:
        """Declare each of ``causes`` dead for its cause; with ``proven`` (rows already marked EXITED),
        adopt what that made orphans."""
        declared = {m.owner: cause for m, cause in causes.values() if await self._membership.declare_dead(m, cause)}
        declared |= dict.fromkeys((m.owner for m in proven), EXITED)
        if declared:
            log.warning("peers declared dead", extra={"silos": list(declared), "by": self._me.owner, "causes": declared})
            await self._adoption.adopt_orphans()

    async def declare_peer_dead(self, silo_id: str) -> bool:
        """Mark a peer dead now (Ray told a caller it died), then adopt what is provably orphaned.

        Its shards are taken at once only if Ray saw its process exit; otherwise (a lost node,
        a partition) once its lease has run out. A peer that answers is not declared dead.
        """
        member = (await self._adoption.read_members()).get(silo_id)
        if member is None or member.status in (DEAD, LEAVING):
            return False
        answer = await self._transport.ping(silo_id, self._options.heartbeat_interval.total_seconds())
        if answer is Ping.ALIVE:
            return False
        dead = await self._membership.declare_dead(member, await self._cause(member, answer) or REPORTED)
        if dead:
            await self._adoption.adopt_orphans()
        return dead

    async def _prove_reported(self, members: dict[str, Member], now: float) -> list[Member]:
        """Rows declared dead without proof whose process is now proven ended, marked so (EXITED).

        Ray marks an actor dead when it sends ``ray.kill``, a moment before the process exits: the
        round that saw it gone may have found no proof yet. Looked at until its lease is surely
        over, when proof would change nothing.
        """
        lease = self._options.firing_lease.total_seconds()
        reported = {m.owner: m for m in members.values() if m.silo_id != self._me.silo_id and m.status == DEAD
                    and m.cause == REPORTED and m.ended_through < m.incarnation}
        self._unproven = {o: self._unproven.get(o, now) for o in reported}
        looking = [m for o, m in reported.items() if now - self._unproven[o] <= lease]
        # One by one, as in ``detect_failures``; rarely more than one, and a host's proof costs nothing.
        return [m for m in looking if await self._transport.ended(m.silo_id, m.node, m.pid)
                and await self._membership.prove_ended(m)]

    async def _cause(self, member: Member, answer: Ping) -> str | None:
        """Why ``member``'s incarnation is to be declared dead now, given its ping's ``answer``, or None.

        A peer that did not answer is looked at further: its process proven ended (this host's
        process table, or Ray's record of that very process's exit) is EXITED however the ping
        ended, so its shards are taken at once rather than after suspicion and its lease (issue
        28). Without such proof, Ray's word that it is dead is REPORTED (its lease is waited
        out), and silence alone is left to the heartbeat watch.
        """
        if answer is Ping.ALIVE:
            return None
        if answer is Ping.EXITED or await self._transport.ended(member.silo_id, member.node, member.pid):
            return EXITED
        return REPORTED if answer is Ping.GONE else None

    def peers(self) -> list[str]:
        """The other silos this one has seen in the membership table."""
        return [s for s in self._watch.seen() if s != self._me.silo_id]

    async def halt(self, loop: asyncio.Task[None]) -> None:
        """Stop the heartbeat ``loop`` between two writes of our row, never during one."""
        async with self._writing:
            loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop

    async def leave(self) -> None:
        """Mark our row dead (a graceful stop, once our work ended): peers adopt what is left at once."""
        row = self._me.row
        self._me.member = await self._membership.update(row, status=DEAD, cause=STOPPED, ended_through=row.ended_with(True))
