"""The job model, schedules, policies, silos, membership, shard ownership, client and CLI.

Public names (DESIGN.md "Public contract")::

    from cluster import Cluster, ClusterOptions, Target, FailurePolicy, Schedule, parse_time
"""

from cluster.errors import (
    AlreadyExists,
    InvalidJob,
    InvalidPolicy,
    InvalidSchedule,
    InvalidTime,
    SiloStopping,
    ValidationError,
)
from cluster.flows import Backoff, Flow, RetryPolicy, Step
from cluster.jobs import ScheduledJob, Target
from cluster.occurrences import Misfire
from cluster.options import ClusterOptions
from cluster.policies import DEFAULT_FAILURE_POLICY, FailurePolicy
from cluster.queue import JobQueue
from cluster.schedules import Schedule
from cluster.times import parse_duration, parse_period, parse_time

__all__ = [
    "AlreadyExists",
    "NamedJob",
    "JobStatus",
    "Backoff",
    "Flow",
    "RetryPolicy",
    "Step",
    "Cluster",
    "Client",
    "ClusterOptions",
    "DEFAULT_FAILURE_POLICY",
    "FailurePolicy",
    "InvalidJob",
    "InvalidPolicy",
    "InvalidSchedule",
    "InvalidTime",
    "JobQueue",
    "Misfire",
    "Schedule",
    "ScheduledJob",
    "SiloStopping",
    "Target",
    "ValidationError",
    "parse_duration",
    "parse_period",
    "parse_time",
]


def __getattr__(name: str) -> object:
    # The Ray-facing half (Cluster, Client) imports Ray; load it on first use so that the job
    # model, schedules and policies stay cheap to import (the CLI's --help, unit tests).
    if name == "Cluster":
        from cluster.cluster import Cluster

        return Cluster
    if name in ("NamedJob", "JobStatus"):
        from cluster import named

        return getattr(named, name)
    if name == "Client":
        from cluster.client import Client

        return Client
    raise AttributeError(f"module 'cluster' has no attribute {name!r}")
