"""A silo's metrics: exported through ``ray.util.metrics`` and kept locally for ``status()``.

Recording a Ray metric costs tens of microseconds (tag validation, a call into the core worker),
more than firing a job. So the hot path only updates local numbers, and ``flush()`` — called
once a second by the silo — hands them to Ray: counters as one increment of the delta, lateness
and append latency as a uniform sample of at most ``SAMPLE`` observations per flush (count, mean
and max stay exact in ``snapshot()``).
"""

from __future__ import annotations

import random
from typing import Any

from ray.util import metrics as ray_metrics

_LATENESS_BOUNDS = [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]
_LATENCY_BOUNDS = [0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5]


SAMPLE = 100


class _Counter:
    def __init__(self, name: str, description: str, tags: dict[str, str]) -> None:
        self.value = 0
        self._flushed = 0
        self._metric = ray_metrics.Counter(f"timeshard_{name}", description=description, tag_keys=tuple(tags))
        self._metric.set_default_tags(tags)

    def inc(self, n: int = 1) -> None:
        self.value += n

    def flush(self) -> None:
        if self.value > self._flushed:
            self._metric.inc(self.value - self._flushed)
            self._flushed = self.value


class _Gauge:
    def __init__(self, name: str, description: str, tags: dict[str, str]) -> None:
        self.value = 0.0
        self._metric = ray_metrics.Gauge(f"timeshard_{name}", description=description, tag_keys=tuple(tags))
        self._metric.set_default_tags(tags)

    def set(self, value: float) -> None:
        self.value = value

    def flush(self) -> None:
        self._metric.set(self.value)


class _Histogram:
    def __init__(self, name: str, description: str, bounds: list[float], tags: dict[str, str]) -> None:
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        self._sample: list[float] = []
        self._seen = 0  # observations since the last flush, for reservoir sampling
        self._metric = ray_metrics.Histogram(f"timeshard_{name}", description=description, boundaries=bounds, tag_keys=tuple(tags))
        self._metric.set_default_tags(tags)

    def observe(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value > self.max:
            self.max = value
        self._seen += 1
        if len(self._sample) < SAMPLE:
            self._sample.append(value)
        else:
            slot = random.randrange(self._seen)
            if slot < SAMPLE:
                self._sample[slot] = value

    def flush(self) -> None:
        for value in self._sample:
            self._metric.observe(value)
        self._sample.clear()
        self._seen = 0


class SiloMetrics:
    """Jobs scheduled, fired, succeeded, failed, retried; lateness; shards; append latency."""

    def __init__(self, silo_id: str) -> None:
        tags = {"silo": silo_id}
        self.scheduled = _Counter("jobs_scheduled", "jobs durably added", tags)
        self.fired = _Counter("jobs_fired", "attempts delivered to handlers", tags)
        self.succeeded = _Counter("jobs_succeeded", "attempts that succeeded", tags)
        self.failed = _Counter("jobs_failed", "attempts that failed", tags)
        self.retried = _Counter("jobs_retried", "retries scheduled by failure policies", tags)
        self.adopted = _Counter("shards_adopted", "shards claimed from other silos", tags)
        self.shards_owned = _Gauge("shards_owned", "shards this silo owns", tags)
        self.shards_loaded = _Gauge("shards_loaded", "owned shards loaded into memory", tags)
        self.lateness = _Histogram("lateness_seconds", "execution start minus due time", _LATENESS_BOUNDS, tags)
        self.append_latency = _Histogram("append_seconds", "time for an add to become durable", _LATENCY_BOUNDS, tags)

    def flush(self) -> None:
        """Hand what was recorded since the last flush to Ray's metrics."""
        for metric in vars(self).values():
            metric.flush()

    def snapshot(self) -> dict[str, Any]:
        counters = {n: getattr(self, n).value for n in ("scheduled", "fired", "succeeded", "failed", "retried", "adopted")}
        late = self.lateness
        counters["lateness_mean_s"] = late.total / late.count if late.count else 0.0
        counters["lateness_max_s"] = late.max
        return counters
