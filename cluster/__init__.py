"""timeshard's public names: the cluster, its client, the job model, named jobs and flows.

    from cluster import Cluster, ClusterOptions, Target, FailurePolicy, Schedule, parse_time

The implementation lives in subpackages, each a layer that imports only those below it:
``cli`` -> ``_cluster`` (wiring) -> ``sync_client`` -> ``client`` -> ``named``, ``flows`` -> ``runtime`` -> ``model``
-> ``storage``. The names that need Ray (``Cluster``, ``Client``, ``SyncClient``) load on first use, so the job
model, schedules and policies stay cheap to import (the CLI's ``--help``, unit tests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.flows.model import Backoff, Flow, FlowStatus, RetryPolicy, Step, StepStatus
from cluster.model.errors import (
    AlreadyExists,
    InvalidJob,
    InvalidPolicy,
    InvalidSchedule,
    InvalidTime,
    JobNotFound,
    PutInDoubt,
    PutManyFailed,
    ScheduleInDoubt,
    SiloStopping,
    UnsupportedStoreFormat,
    ValidationError,
)
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.occurrences import Misfire, Overlap
from cluster.model.options import ClusterOptions
from cluster.model.policies import DEFAULT_FAILURE_POLICY, FailurePolicy
from cluster.model.schedules import Schedule
from cluster.model.times import parse_duration, parse_period, parse_time
from cluster.named.registry import JobStatus

if TYPE_CHECKING:
    from cluster._cluster import Cluster
    from cluster.client import Client, ClusterUnavailable
    from cluster.named.api import NamedJob
    from cluster.sync_client import SyncClient

__all__ = [
    "DEFAULT_FAILURE_POLICY",
    "AlreadyExists",
    "Backoff",
    "Client",
    "Cluster",
    "ClusterOptions",
    "ClusterUnavailable",
    "FailurePolicy",
    "Flow",
    "FlowStatus",
    "InvalidJob",
    "InvalidPolicy",
    "InvalidSchedule",
    "InvalidTime",
    "JobNotFound",
    "JobStatus",
    "Misfire",
    "NamedJob",
    "Overlap",
    "PutInDoubt",
    "PutManyFailed",
    "RetryPolicy",
    "Schedule",
    "ScheduleInDoubt",
    "ScheduledJob",
    "SiloStopping",
    "Step",
    "StepStatus",
    "SyncClient",
    "Target",
    "UnsupportedStoreFormat",
    "ValidationError",
    "parse_duration",
    "parse_period",
    "parse_time",
]

_LAZY = {
    "Cluster": "cluster._cluster",
    "Client": "cluster.client",
    "ClusterUnavailable": "cluster.client",
    "NamedJob": "cluster.named.api",
    "SyncClient": "cluster.sync_client",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cluster' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
