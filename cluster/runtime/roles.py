"""One silo's shared pieces and the roles built on them, wired in one place.

``Silo`` runs on what ``wire`` returns, and so do the in-process tests: they exercise the same
wiring, role by role, without the silo's loops or Ray.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from cluster.model.clock import Clock
from cluster.model.options import ClusterOptions
from cluster.runtime.adoption import Adoption
from cluster.runtime.balance import Balance
from cluster.runtime.cancel import Cancelling
from cluster.runtime.firing import Firing
from cluster.runtime.heartbeat import Heartbeat
from cluster.runtime.hooks import SiloHooks
from cluster.runtime.lease import Lease
from cluster.runtime.loading import Loading
from cluster.runtime.membership import Departures, Identity
from cluster.runtime.metrics import SiloMetrics
from cluster.runtime.moves import Moves
from cluster.runtime.outcomes import Outcomes
from cluster.runtime.ownership import ShardTable, copy_of
from cluster.runtime.pausing import Pausing
from cluster.runtime.quarantine import Quarantine
from cluster.runtime.queue import JobQueue
from cluster.runtime.runs import JobDecoder, RunTable
from cluster.runtime.scheduling import Scheduling
from cluster.runtime.skew import Skew
from cluster.runtime.staging import Staging
from cluster.runtime.transport import Transport
from storage import Store


@dataclass(frozen=True)
class Roles:
    """The pieces every role shares, then the roles. ``hooks`` is filled in once the silo joined.

    ``clock`` is the host's clock as given; the roles run on ``skew.clock``, the store's time.
    """

    store: Store
    clock: Clock
    transport: Transport
    me: Identity
    hooks: list[SiloHooks]
    metrics: SiloMetrics
    queue: JobQueue[list[Any]]
    runs: RunTable
    lease: Lease
    shards: ShardTable
    outcomes: Outcomes
    quarantine: Quarantine
    staging: Staging
    firing: Firing
    loading: Loading
    adoption: Adoption
    cancelling: Cancelling
    heartbeat: Heartbeat
    skew: Skew
    scheduling: Scheduling
    moves: Moves
    balance: Balance
    pausing: Pausing


def wire(silo_id: str, store: Store, options: ClusterOptions, *, clock: Clock, transport: Transport,
         metrics: SiloMetrics, rng: random.Random) -> Roles:
    """Build one silo's roles on ``store``, each given the shared pieces it needs."""
    me = Identity(silo_id)
    local = clock
    skew = Skew(store, options, local, metrics, silo_id)
    clock = skew.clock  # every role reads the store's time, measured from this host (issue 12, point 10)
    hooks: list[SiloHooks] = []
    queue: JobQueue[list[Any]] = JobQueue(clock.now_us, copy_of=copy_of)
    runs = RunTable(options.max_concurrency)
    lease = Lease(clock, options.suspicion_timeout.total_seconds(), options.max_clock_skew.total_seconds())
    decode = JobDecoder(metrics)
    shards = ShardTable(store, options, clock, me, lease, queue, runs, metrics)
    moves = Moves(store, options, shards, runs)
    outcomes = Outcomes(options, clock, queue, runs, shards, metrics, moves)
    quarantine = Quarantine(options, clock, queue, runs, shards, metrics)
    staging = Staging(options, clock, runs, transport)
    firing = Firing(options, clock, me, queue, runs, lease, hooks, transport, staging, outcomes, quarantine, decode,
                    metrics)
    loading = Loading(store, options, clock, queue, runs, shards, quarantine, hooks, decode, metrics)
    queue.restorable = loading.may_queue_again
    departures = Departures(options.firing_lease.total_seconds())
    adoption = Adoption(store, options, clock, me, shards, loading, quarantine, metrics, rng, moves, departures)
    moves.claim_orphan = adoption.claim_to_fence
    shards.retake = adoption.retake
    shards.unsure = adoption.look_soon
    cancelling = Cancelling(store, queue, runs, shards, adoption, hooks, moves, loading, lease)
    cancelling.withdraw_sent = firing.withdraw
    heartbeat = Heartbeat(store, options, clock, me, shards, lease, adoption, transport, metrics)
    scheduling = Scheduling(store, options, me, queue, runs, shards, adoption, cancelling)
    scheduling.hooks = hooks
    balance = Balance(options, clock, shards, runs, queue, quarantine, transport, metrics, heartbeat.peers)
    pausing = Pausing(store, options, clock, queue, runs, shards, adoption, moves, cancelling, quarantine, decode, metrics,
                      lease)
    pausing.withdraw_sent = firing.withdraw_answer
    return Roles(store, local, transport, me, hooks, metrics, queue, runs, lease, shards, outcomes, quarantine, staging,
                 firing, loading, adoption, cancelling, heartbeat, skew, scheduling, moves, balance, pausing)
