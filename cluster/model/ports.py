"""What features (named jobs, flows) need from whoever submits their jobs: a small protocol.

``Client`` implements it over Ray; a test may implement it in-process. Features depend on this
protocol, never on ``Client``, so the client can build features without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from cluster.model.jobs import ScheduledJob, Target
from cluster.model.pause import PauseRecord


class JobSubmitter(Protocol):
    """Durably adds, cancels, pauses and resumes jobs, and says which store and namespace the cluster uses."""

    async def describe(self) -> dict[str, Any]:
        """At least ``store_url``: where the cluster keeps its logs."""
        ...

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        """Durably add ``jobs`` (already validated); each comes back with its ``shard`` set."""
        ...

    def resolve_target(self, target: Target) -> Target:
        """``target`` with a bare actor name placed in the submitter's namespace."""
        ...

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        """Cancel ``job``; True if this call stopped it from running again."""
        ...

    async def set_paused(self, job: ScheduledJob, paused: bool, *, note: str | None = None,
                         by: str | None = None) -> tuple[bool, PauseRecord | None]:
        """Pause or resume ``job``: (whether this call changed it, the pause now in force or None);
        ``LookupError`` if it has nothing left to run."""
        ...
