"""The public surface, pinned (as httpx and trio pin theirs): a change here is a change to users."""

from __future__ import annotations

import cluster
import handlers
from cluster.model.attempt import DELIVER

CLUSTER = [
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
HANDLERS = ["JobContext", "JobFailed", "JobHandler", "ScheduledJob", "Target"]


def test_cluster_exports_exactly_its_public_names() -> None:
    assert cluster.__all__ == CLUSTER
    for name in cluster.__all__:
        assert getattr(cluster, name) is not None, name
    assert "JobQueue" not in dir(cluster)


def test_handlers_exports_exactly_what_a_handler_author_needs() -> None:
    assert sorted(handlers.__all__) == HANDLERS
    for name in handlers.__all__:
        assert getattr(handlers, name) is not None, name


def test_every_name_of_the_design_contract_imports_as_written() -> None:
    from cluster import Backoff, Cluster, ClusterOptions, FailurePolicy, Flow, RetryPolicy, Schedule, Step, Target, parse_time
    from handlers import JobContext, JobHandler

    assert all([Backoff, Cluster, ClusterOptions, FailurePolicy, Flow, RetryPolicy, Schedule, Step, Target, parse_time,
                JobContext, JobHandler])
    assert callable(Cluster.start) and callable(Cluster.connect)
    for method in ("schedule_job", "schedule_jobs", "try_cancel_job"):
        assert callable(getattr(cluster.Client, method))
    assert callable(FailurePolicy.drop) and callable(FailurePolicy.backoff) and callable(Schedule.parse)


def test_silos_call_handlers_by_the_method_name_jobhandler_defines() -> None:
    assert callable(getattr(handlers.JobHandler, DELIVER))


def test_the_same_class_is_exported_where_both_packages_share_it() -> None:
    assert handlers.Target is cluster.Target and handlers.ScheduledJob is cluster.ScheduledJob
