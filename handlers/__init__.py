"""What a handler author imports: ``JobHandler`` to subclass, ``JobContext`` it receives."""

from cluster.context import JobContext, JobFailed
from cluster.jobs import ScheduledJob, Target
from handlers.base import JobHandler

__all__ = ["JobHandler", "JobContext", "JobFailed", "ScheduledJob", "Target"]
