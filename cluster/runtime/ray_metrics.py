"""Exports a silo's metrics through ``ray.util.metrics`` (Prometheus via Ray's metrics agent)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray.util import metrics as ray_metrics


class RayMetrics:
    """A ``MetricsExporter`` for silos running as Ray actors; picklable, stateless."""

    def counter(self, name: str, description: str, tags: dict[str, str]) -> Any:
        return _tagged(ray_metrics.Counter(name, description=description, tag_keys=tuple(tags)), tags)

    def gauge(self, name: str, description: str, tags: dict[str, str]) -> Any:
        return _tagged(ray_metrics.Gauge(name, description=description, tag_keys=tuple(tags)), tags)

    def histogram(self, name: str, description: str, bounds: Sequence[float], tags: dict[str, str]) -> Any:
        metric = ray_metrics.Histogram(name, description=description, boundaries=list(bounds), tag_keys=tuple(tags))
        return _tagged(metric, tags)


def _tagged(metric: Any, tags: dict[str, str]) -> Any:
    metric.set_default_tags(tags)
    return metric
