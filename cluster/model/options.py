"""Cluster-wide settings, each with a default that suits a few silos on a small machine."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

from cluster.model.errors import ValidationError
from cluster.model.limits import DEFAULT_LIMITS, JobLimits
from cluster.model.placement import PLACEMENTS
from cluster.model.times import parse_duration

DEFAULT_NAMESPACE = "timeshard"
# A silo's firing lease lasts this fraction of suspicion_timeout from when its last heartbeat
# began. Below 1, so a peer that watched a row unchanged for the whole timeout knows the lease
# is over; the rest is the margin for a delivery in flight when it ends (handlers refuse work past
# the lease's end in store time).
LEASE_FRACTION = 0.8
# The most ended attempts a named job's status keeps: 20 of them, errors clipped, fit the 8 KiB
# Azure allows a registry entry's metadata with room for the rest of the entry.
MAX_HISTORY_SIZE = 20
#: Where named jobs' names are kept (``ClusterOptions.named_registry``): the default first.
BUCKETS_REGISTRY = "buckets"
ENTRIES_REGISTRY = "entries"
NAMED_REGISTRIES = (BUCKETS_REGISTRY, ENTRIES_REGISTRY)
#: Earlier spellings of a registry, still accepted so that configs written with them keep working.
NAMED_REGISTRY_ALIASES = {"experimental-buckets": BUCKETS_REGISTRY}


@dataclass(frozen=True)
class ClusterOptions:
    """How silos shard, load, fire and watch each other. Durations accept timedelta or text.

    - ``shard_duration`` (1 h): the due-time window one shard log covers. Shorter windows mean
      smaller logs and faster replay after failover; longer ones mean fewer logs.
    - ``lookahead`` (5 min): a shard is loaded into memory once its window starts within this
      horizon; farther shards stay dormant and cost no memory per job.
    - ``max_concurrency`` (10,000): attempts in flight per silo; due jobs wait in the queue
      beyond it (backpressure) rather than pile up in handler actors.
    - ``max_batch`` (500): the most attempts sent to one handler actor in one Ray call; several
      batches are in flight at once, so a handler is never idle while a silo writes outcomes.
    - ``handler_timeout`` (30 s): an attempt still running after this counts as failed.
    - ``undeliverable_timeout`` (10 min): how long a job waits for its target actor to appear
      before that counts as a failed attempt (Dapr's staging queue).
    - ``staging_interval`` (1 s): how often staged jobs look for their target.
    - ``heartbeat_interval`` (500 ms) and ``suspicion_timeout`` (2 s): failure detection by
      heartbeat; a silo silent longer than the timeout is declared dead. Each heartbeat renews
      the silo's firing lease for ``LEASE_FRACTION`` (0.8) of the timeout (``firing_lease``):
      peers wait that long before taking the shards of a silo not proven gone. Together they
      bound failover when a whole machine is lost (about the timeout plus one or two
      heartbeats; see the README's node-loss drill); a silo whose event loop stalls longer than the lease
      stops firing until its next heartbeat. Each heartbeat pings every peer, so with dozens of
      silos, raise both.
    - ``adoption_interval`` (2 s): how often silos look for orphaned shards besides membership
      changes. ``adoption_listers`` (3): how many silos look each interval, cluster-wide. With
      more silos than that, each looks in turn (every ``ceil(silos / adoption_listers)``-th
      interval), so the store's List calls stay flat as the cluster grows; a silo still looks
      at once when it hears of a departure or join, or when its own write's outcome is unknown. ``max_adopted_count`` (3): after this many owners in a row died while a shard was
      firing, it is quarantined (its jobs fire in batches named in its metadata, never
      abandoned); after this many died while one job was alone in flight, that job is parked
      until an operator releases it. Deaths while a shard was idle do not count.
      ``poison_forgiveness`` (60 s): a shard held that long by one owner leaves quarantine (its
      death count starts over).
    - ``group_commit_linger`` (2 ms): how long a log writer waits to gather concurrent writes
      into one append block.
    - ``max_blocks`` (45,000): a shard log is compacted into a new generation before this many
      blocks (Azure's hard limit is 50,000).
    - ``retry_window`` (60 s): how long a drained shard is kept after its last schedule write.
      A client that lost a silo mid-call sends the same job ids again (for about 40 s), and the
      retry looks for its earlier try's jobs in the shards that try could have written: kept,
      a job that already ran to its end there is found, answered and not run again; deleted,
      it would be added again (one more run, one more chain for a recurring job). 0 deletes a
      drained shard as soon as its window is past.
    - ``misfire_grace`` (1 s): an occurrence later than this when its shard loads was missed,
      and the job's misfire policy decides (fire_once, fire_all, skip).
    - ``dispatch_ahead`` (50 ms): due jobs leave the silo up to this long before their due time
      and the handler actor waits for it, so the Ray call's transit is not added to lateness.
      The silo wakes once the earliest job is due within half of it and sends every job due
      within all of it, so jobs due close together still travel in one call. On a loaded
      2-core machine at 1,000 jobs/s, 20 ms left 6% of batches arriving after their due time
      (p99 9 ms late); 50 ms, 0.1% (p99 3 ms), with half the calls. Nothing starts
      early (see ``cluster.model.ahead``); a cancel withdraws a job sent but not yet started.
      0 sends each job at its due time, as actors that do not subclass ``JobHandler`` always are.
    - ``max_clock_skew`` (500 ms): how far a silo's host clock may be off the store's before it
      is an error (logged, in ``status()`` and a metric). Silos fire by the store's clock at any
      skew; handlers check a lease against their host's clock, which this bound stands for:
      silos send them the lease's end this much early.
    - ``silo_num_cpus`` (0.01): Ray CPUs reserved per silo actor: small, so many fit on 2 cores,
      and not 0, so the node counts as in use and Ray's autoscaler never removes it as idle (it
      takes a node whose actors reserve nothing for idle). Placement counts it: a node advertising
      no CPU (a KubeRay head started with ``num-cpus: "0"``) gets no silo.
    - ``placement`` ("spread"): where new silos go. "spread" puts one on each alive node before
      any node gets a second, so losing a machine takes as few silos as possible; "pack" puts
      them together on one node.
    - ``silo_resources`` (None): custom Ray resources each silo requires, e.g.
      ``{"timeshard": 1}``: silos then run only on nodes started with that resource (pinning).
    - ``max_restarts`` (-1): how often Ray restarts a crashed silo (-1: always).
    - ``min_period`` (1 s): the shortest ``@every`` period a job may have.
    - ``history_size`` (10): how many ended attempts a named job's status keeps
      (``status.history``, newest first), at most 20, so that its registry entry stays well
      under Azure's 8 KiB of metadata; 0 keeps none.
    - ``allowed_code_prefixes`` (None: any): module prefixes grain classes and callable failure
      policies must come from; silos import those paths, so this is the trust boundary for
      whoever can call a silo or write to the store (see ``JobLimits``).
    - ``named_registry`` ("buckets"): where named jobs' names are kept. "buckets": in hashed
      bucket logs that silos own as they own shards; a round of puts costs one append per
      bucket, and the bucket's owner answers reads, fence checks and status changes from
      memory, so firing a named job costs about what a plain job costs (0.63x its rate in
      ``benchmarks/named_put_profile.md``). "entries": one store entry per name; each put costs
      the caller a read and a compare-and-swap per name, each status change an entry write, and
      a silo reads the entry to clear a job. Choose "entries" only to keep a cluster on the
      layout its store was written with: a store written with "entries" is taken in by each
      bucket's first owner when the cluster moves to "buckets", but names written to buckets
      are not seen by "entries", so a store does not move back. Every silo and client of a
      cluster must use one value (clients take it from the silos). "experimental-buckets", the
      earlier spelling, is read as "buckets".
    """

    shard_duration: timedelta = timedelta(hours=1)
    lookahead: timedelta = timedelta(minutes=5)
    max_concurrency: int = 10_000
    max_batch: int = 500
    handler_timeout: timedelta = timedelta(seconds=30)
    undeliverable_timeout: timedelta = timedelta(minutes=10)
    staging_interval: timedelta = timedelta(seconds=1)
    heartbeat_interval: timedelta = timedelta(milliseconds=500)
    suspicion_timeout: timedelta = timedelta(seconds=2)
    adoption_interval: timedelta = timedelta(seconds=2)
    adoption_listers: int = 3
    max_adopted_count: int = 3
    poison_forgiveness: timedelta = timedelta(seconds=60)
    group_commit_linger: timedelta = timedelta(milliseconds=2)
    max_blocks: int = 45_000
    misfire_grace: timedelta = timedelta(seconds=1)
    retry_window: timedelta = timedelta(seconds=60)
    max_clock_skew: timedelta = timedelta(milliseconds=500)
    dispatch_ahead: timedelta = timedelta(milliseconds=50)
    silo_num_cpus: float = 0.01
    placement: str = "spread"
    silo_resources: tuple[tuple[str, float], ...] | None = None
    max_restarts: int = -1
    min_period: timedelta = timedelta(seconds=1)
    allowed_code_prefixes: tuple[str, ...] | None = None
    history_size: int = 10
    named_registry: str = BUCKETS_REGISTRY

    if TYPE_CHECKING:
        # The generated __init__, as callers may use it: durations also as text ("10s", "PT5M"),
        # which __post_init__ parses. Keep in step with the fields above.
        def __init__(
            self,
            shard_duration: timedelta | str = ...,
            lookahead: timedelta | str = ...,
            max_concurrency: int = ...,
            max_batch: int = ...,
            handler_timeout: timedelta | str = ...,
            undeliverable_timeout: timedelta | str = ...,
            staging_interval: timedelta | str = ...,
            heartbeat_interval: timedelta | str = ...,
            suspicion_timeout: timedelta | str = ...,
            adoption_interval: timedelta | str = ...,
            adoption_listers: int = ...,
            max_adopted_count: int = ...,
            poison_forgiveness: timedelta | str = ...,
            group_commit_linger: timedelta | str = ...,
            max_blocks: int = ...,
            misfire_grace: timedelta | str = ...,
            retry_window: timedelta | str = ...,
            max_clock_skew: timedelta | str = ...,
            dispatch_ahead: timedelta | str = ...,
            silo_num_cpus: float = ...,
            placement: str = ...,
            silo_resources: Mapping[str, float] | None = ...,
            max_restarts: int = ...,
            min_period: timedelta | str = ...,
            allowed_code_prefixes: Sequence[str] | None = ...,
            history_size: int = ...,
            named_registry: str = ...,
        ) -> None: ...

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("timedelta", timedelta) and not isinstance(value, timedelta):
                object.__setattr__(self, f.name, parse_duration(value, field=f.name))
        for name in ("shard_duration", "handler_timeout", "heartbeat_interval", "suspicion_timeout",
                     "adoption_interval", "staging_interval", "poison_forgiveness", "max_clock_skew",
                     "min_period"):
            if getattr(self, name) <= timedelta(0):
                raise ValidationError(name, "must be positive", getattr(self, name))
        if not timedelta(0) <= self.dispatch_ahead < self.firing_lease / 2:
            # Sent ahead under a lease that must still hold when the job starts: a window near the
            # lease would have handlers refuse what they were sent.
            raise ValidationError("dispatch_ahead", "must be >= 0 and shorter than half the firing lease "
                                  f"(suspicion_timeout * {LEASE_FRACTION})", self.dispatch_ahead)
        for name in ("lookahead", "retry_window"):
            if getattr(self, name) < timedelta(0):
                raise ValidationError(name, "must not be negative", getattr(self, name))
        if self.firing_lease <= self.heartbeat_interval:
            # Else the lease runs out between two heartbeats and the silo stops firing each time.
            raise ValidationError("suspicion_timeout", f"must be longer than heartbeat_interval / {LEASE_FRACTION} "
                                  "(the firing lease must outlast a heartbeat interval)", self.suspicion_timeout)
        for name in ("max_concurrency", "max_batch", "adoption_listers", "max_adopted_count", "max_blocks"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValidationError(name, "must be an int >= 1", value)
        if (isinstance(self.history_size, bool) or not isinstance(self.history_size, int)
                or not 0 <= self.history_size <= MAX_HISTORY_SIZE):
            raise ValidationError("history_size", f"must be an int from 0 to {MAX_HISTORY_SIZE}", self.history_size)

        if isinstance(self.named_registry, str):
            object.__setattr__(self, "named_registry", NAMED_REGISTRY_ALIASES.get(self.named_registry, self.named_registry))
        if self.named_registry not in NAMED_REGISTRIES:
            raise ValidationError("named_registry", f"must be one of {', '.join(NAMED_REGISTRIES)}", self.named_registry)
        if isinstance(self.silo_num_cpus, bool) or not isinstance(self.silo_num_cpus, (int, float)) or self.silo_num_cpus < 0:
            raise ValidationError("silo_num_cpus", "must be a number >= 0", self.silo_num_cpus)
        if self.placement not in PLACEMENTS:
            raise ValidationError("placement", f"must be one of {', '.join(PLACEMENTS)}", self.placement)
        if self.silo_resources is not None:
            object.__setattr__(self, "silo_resources", _resources(self.silo_resources))

        prefixes = self.allowed_code_prefixes
        if prefixes is not None:
            if isinstance(prefixes, str) or not all(isinstance(p, str) and p.strip(". ") for p in prefixes):
                raise ValidationError("allowed_code_prefixes", "must be None or a list of module prefixes like 'myapp.'",
                                      prefixes)
            object.__setattr__(self, "allowed_code_prefixes", tuple(prefixes))

    @property
    def required_resources(self) -> dict[str, float]:
        """The custom Ray resources each silo requires, as Ray's ``resources=`` takes them."""
        return dict(self.silo_resources or ())

    @property
    def placement_resources(self) -> dict[str, float]:
        """What a node must hold for each silo: the custom resources and the CPUs it reserves."""
        cpus = {"CPU": float(self.silo_num_cpus)} if self.silo_num_cpus > 0 else {}
        return {**self.required_resources, **cpus}

    def job_limits(self) -> JobLimits:
        """The limits every job scheduled on this cluster must meet."""
        return replace(DEFAULT_LIMITS, min_period=self.min_period, code_prefixes=self.allowed_code_prefixes)

    @property
    def named_buckets(self) -> bool:
        """Whether named jobs' names are kept in silo-owned registry buckets (``named_registry``).

        The old spelling counts too: options unpickled from a silo of an earlier release (as
        ``Cluster.connect`` takes them) were never validated here, so never normalised."""
        return NAMED_REGISTRY_ALIASES.get(self.named_registry, self.named_registry) == BUCKETS_REGISTRY

    @property
    def firing_lease(self) -> timedelta:
        """How long one heartbeat lets a silo fire, from when the heartbeat began."""
        return self.suspicion_timeout * LEASE_FRACTION

    def with_(self, **changes: Any) -> ClusterOptions:
        """A copy with ``changes`` applied and validated."""
        return replace(self, **changes)


def _resources(value: object) -> tuple[tuple[str, float], ...]:
    """``silo_resources`` as sorted (name, amount) pairs, so options stay hashable and comparable."""
    pairs = value.items() if hasattr(value, "items") else value
    try:
        out = tuple(sorted((name, float(amount)) for name, amount in pairs))  # type: ignore[union-attr]
    except (TypeError, ValueError):
        raise ValidationError("silo_resources", 'must map resource names to amounts, e.g. {"timeshard": 1}',
                              value) from None
    for name, amount in out:
        if not isinstance(name, str) or not name or name in ("CPU", "GPU", "memory") or amount <= 0:
            raise ValidationError("silo_resources", "must name custom resources (not CPU, GPU or memory) "
                                  "with positive amounts", value)
    return out
