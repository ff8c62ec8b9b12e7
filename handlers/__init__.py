"""What a handler author imports: ``JobHandler`` to subclass, ``JobContext`` it receives."""

from cluster.model.attempt import JobContext, JobFailed
from cluster.model.jobs import ScheduledJob, Target
from handlers.base import JobHandler

__all__ = ["JobHandler", "JobContext", "JobFailed", "ScheduledJob", "Target"]
