"""A silo's metrics: kept locally for ``status()`` and handed to an exporter once a second.

Recording a Ray metric costs tens of microseconds (tag validation, a call into the core worker),
more than firing a job. So the hot path only updates local numbers, and ``flush()`` — called
once a second by the silo — hands them to the exporter (``cluster.runtime.ray_metrics`` on Ray):
counters as one increment of the delta, lateness and append latency as a uniform sample of at
most ``SAMPLE`` observations per flush (count, mean and max stay exact in ``snapshot()``).
Lateness also keeps exact counts per ``LATENESS_BOUNDS`` bucket, reported cumulatively like a
Prometheus histogram (``lateness_buckets``), so a reader of two snapshots can tell the quantiles
of what fired between them (the dashboard's p50/p99 charts).
"""

from __future__ import annotations

import random
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Sequence
from functools import partial
from typing import Any, Protocol

LATENESS_BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
LATENCY_BOUNDS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5]
SAMPLE = 100


class Exported(Protocol):
    """One exported metric: counters get ``inc``, gauges ``set``, histograms ``observe``."""

    def inc(self, value: float) -> None: ...

    def set(self, value: float) -> None: ...

    def observe(self, value: float) -> None: ...


class MetricsExporter(Protocol):
    """Makes the exported twin of each local metric (e.g. ``ray.util.metrics``)."""

    def counter(self, name: str, description: str, tags: dict[str, str]) -> Exported: ...

    def gauge(self, name: str, description: str, tags: dict[str, str]) -> Exported: ...

    def histogram(self, name: str, description: str, bounds: Sequence[float], tags: dict[str, str]) -> Exported: ...


class Counter:
    def __init__(self, exported: Exported | None) -> None:
        self.value = 0
        self._flushed = 0
        self._exported = exported

    def inc(self, n: int = 1) -> None:
        self.value += n

    def flush(self) -> None:
        if self._exported is not None and self.value > self._flushed:
            self._exported.inc(self.value - self._flushed)
            self._flushed = self.value


class Gauge:
    def __init__(self, exported: Exported | None) -> None:
        self.value = 0.0
        self._exported = exported

    def set(self, value: float) -> None:
        self.value = value

    def flush(self) -> None:
        if self._exported is not None:
            self._exported.set(self.value)


class Histogram:
    def __init__(self, exported: Exported | None, bounds: Sequence[float] = ()) -> None:
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self.bounds = tuple(bounds)
        # Observations per bucket: [i] counts those in (bounds[i-1], bounds[i]], the last those above all.
        self.per_bucket = [0] * (len(self.bounds) + 1)
        self._bucket_of = partial(bisect_left, self.bounds)  # C all the way: no Python frame per value
        self._sample: list[float] = []
        self._seen = 0  # observations since the last flush, for reservoir sampling
        self._exported = exported

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value > self.max:
            self.max = value
        self.per_bucket[self._bucket_of(value)] += 1
        if self._exported is not None:
            self._keep(value)

    def _keep(self, value: float) -> None:
        """Reservoir sampling: every value seen has the same chance to be among the exported."""
        self._seen += 1
        if len(self._sample) < SAMPLE:
            self._sample.append(value)
        else:
            slot = random.randrange(self._seen)
            if slot < SAMPLE:
                self._sample[slot] = value

    def observe_many(self, values: Sequence[float]) -> None:
        """``observe`` each of ``values``: count, total and max in one pass, sampled alike."""
        if not values:
            return
        self.count += len(values)
        self.total += sum(values)
        top = max(values)
        if top > self.max:
            self.max = top
        per_bucket = self.per_bucket
        # map, bisect and Counter's tally all run in C; a batch's values mostly share a few buckets.
        for bucket, n in Tally(map(self._bucket_of, values)).items():
            per_bucket[bucket] += n
        if self._exported is not None:
            for value in values:
                self._keep(value)

    def cumulative(self) -> dict[str, int]:
        """Observations at or below each bound (Prometheus' ``le``), ``+Inf`` counting them all."""
        out, running = {}, 0
        for bound, n in zip(self.bounds, self.per_bucket, strict=False):
            running += n
            out[str(bound)] = running
        out["+Inf"] = self.count
        return out

    def flush(self) -> None:
        if self._exported is not None:
            for value in self._sample:
                self._exported.observe(value)
        self._sample.clear()
        self._seen = 0


class _Names:
    """An exporter that only notes what each metric is called and what kind it is."""

    def __init__(self) -> None:
        self.kinds: dict[str, str] = {}

    def counter(self, name: str, description: str, tags: dict[str, str]) -> Exported:
        self.kinds[name] = "counter"
        return _NOWHERE

    def gauge(self, name: str, description: str, tags: dict[str, str]) -> Exported:
        self.kinds[name] = "gauge"
        return _NOWHERE

    def histogram(self, name: str, description: str, bounds: Sequence[float], tags: dict[str, str]) -> Exported:
        self.kinds[name] = "histogram"
        return _NOWHERE


class _Nowhere:
    def inc(self, value: float) -> None: ...

    def set(self, value: float) -> None: ...

    def observe(self, value: float) -> None: ...


_NOWHERE = _Nowhere()
#: Ray prefixes every application metric with its namespace, ``ray_``.
RAY_PREFIX = "ray_"
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum")}


def prometheus_series() -> dict[str, str]:
    """Every series a silo exports, named as Prometheus scrapes it from Ray, with its kind.

    Ray (2.60, OpenTelemetry export) adds ``ray_`` before the name; Prometheus' exposition adds
    ``_total`` to a counter, and ``_bucket``, ``_count``, ``_sum`` to a histogram. Each series
    carries the label ``silo`` besides Ray's own (``Component``, ``NodeAddress``, ``SessionName``...).
    """
    names = _Names()
    SiloMetrics("-", names)
    return {f"{RAY_PREFIX}{name}{suffix}": kind
            for name, kind in names.kinds.items() for suffix in _SUFFIXES[kind]}


class SiloMetrics:
    """Jobs scheduled, fired, succeeded, failed, retried; lateness; shards; append latency."""

    def __init__(self, silo_id: str, exporter: MetricsExporter | None = None) -> None:
        tags = {"silo": silo_id}
        e = exporter

        def counter(name: str, description: str) -> Counter:
            return Counter(None if e is None else e.counter(f"timeshard_{name}", description, tags))

        def gauge(name: str, description: str) -> Gauge:
            return Gauge(None if e is None else e.gauge(f"timeshard_{name}", description, tags))

        def histogram(name: str, description: str, bounds: Sequence[float]) -> Histogram:
            return Histogram(None if e is None else e.histogram(f"timeshard_{name}", description, bounds, tags), bounds)

        self.scheduled = counter("jobs_scheduled", "jobs durably added")
        self.fired = counter("jobs_fired", "attempts delivered to handlers")
        self.succeeded = counter("jobs_succeeded", "attempts that succeeded")
        self.failed = counter("jobs_failed", "attempts that failed")
        self.retried = counter("jobs_retried", "retries scheduled by failure policies")
        self.adopted = counter("shards_adopted", "shards claimed from other silos")
        self.handed_over = counter("shards_handed_over", "shards released to silos below their fair share")
        self.unreadable = counter("records_unreadable", "records and jobs that could not be decoded, kept unrun")
        self.shards_damaged = counter("shards_damaged", "shard logs found with bad frames before whole ones")
        self.records_lost = counter("records_lost", "records in damaged stretches of shard logs")
        self.lease_lapses = counter("lease_lapses", "times the firing lease ran out before a heartbeat renewed it")
        # Alerts count live silos by this one's rate: a dead silo's last values may linger in an export.
        self.heartbeats = counter("heartbeats", "membership rows written: one per heartbeat that got through")
        self.store_errors = counter("store_errors",
                                    "heartbeat and maintenance rounds cut short by the store (retries ran out)")
        self.excluded = counter("occurrences_excluded", "occurrences skipped because a job's exclude= matched them")
        self.out_of_bounds = counter("occurrences_out_of_bounds",
                                     "occurrences not fired because they fell after a job's not_after (the job ends)")
        self.overlap_skipped = counter("occurrences_overlap_skipped",
                                       "occurrences not run: due while an earlier one was in flight (overlap policy)")
        self.overlap_buffered = counter("occurrences_overlap_buffered",
                                        "occurrences that waited for an earlier one to end, then started (overlap policy)")
        self.overlap_cancelled = counter("attempts_overlap_cancelled",
                                         "attempts stopped because the next occurrence came due (overlap cancel_other)")
        self.paused_occurrences = counter("occurrences_paused",
                                          "occurrences that came due while their job was paused (counted at resume)")
        self.shards_owned = gauge("shards_owned", "shards this silo owns")
        self.shards_loaded = gauge("shards_loaded", "owned shards loaded into memory")
        self.shards_quarantined = gauge("shards_quarantined", "owned shards firing in named batches after owner deaths")
        self.jobs_parked = gauge("jobs_parked", "jobs held back after killing their owners; released by an operator")
        self.lateness = histogram("lateness_seconds", "execution start minus due time", LATENESS_BOUNDS)
        self.clock_offset = gauge("clock_offset_seconds", "store clock minus this host's (middle of the measured interval)")
        self.clock_uncertainty = gauge("clock_offset_uncertainty_seconds", "width of the measured clock offset interval")
        self.clock_skew_exceeded = gauge("clock_skew_exceeded", "1 while this host's clock is beyond max_clock_skew")
        self.append_latency = histogram("append_seconds", "time for an add to become durable", LATENCY_BOUNDS)

    def flush(self) -> None:
        """Hand what was recorded since the last flush to the exporter."""
        for metric in vars(self).values():
            metric.flush()

    def snapshot(self) -> dict[str, Any]:
        counters: dict[str, Any] = {
            n: getattr(self, n).value
            for n in ("scheduled", "fired", "succeeded", "failed", "retried", "adopted", "handed_over", "unreadable",
                      "shards_damaged", "records_lost", "lease_lapses", "excluded", "out_of_bounds", "overlap_skipped",
                      "overlap_buffered", "overlap_cancelled", "paused_occurrences", "heartbeats", "store_errors")
        }
        late = self.lateness
        counters["lateness_mean_s"] = late.total / late.count if late.count else 0.0
        counters["lateness_max_s"] = late.max
        counters["lateness_count"] = late.count
        counters["lateness_buckets"] = late.cumulative()
        counters["shards_quarantined"] = int(self.shards_quarantined.value)
        counters["jobs_parked"] = int(self.jobs_parked.value)
        return counters
