"""Trigger now: one extra run of a job, at once, that leaves the job's own schedule alone.

A triggered run is an ordinary one-shot job due now: a copy of the job's definition under an id
of its own (``<job id>.t<12 hex>``), without schedule, repeats or ttl, whose metadata names the
job it is a run of (``TRIGGERED_FROM``). So it is as durable as any job — acknowledged once its
ADD is in a shard log, it survives the kill of any silo — and firing, retries, cancel and
failover need nothing new. Named jobs count it in the name's status (``cluster.named.hooks``).
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime, timedelta

from cluster.model.jobs import ScheduledJob
from cluster.model.shape import NO_EXCLUSIONS

__all__ = ["TRIGGERED_FROM", "triggered_run", "triggered_from"]

#: Job metadata key of a triggered run: the id of the job it is an extra run of.
TRIGGERED_FROM = "timeshard.triggered_from"


def triggered_from(job: ScheduledJob) -> str:
    """Return the id of the job whose identity ``job`` carries: the original of a triggered run, else its own."""
    return job.metadata.get(TRIGGERED_FROM, job.id)


def triggered_run(job: ScheduledJob, now: datetime) -> ScheduledJob:
    """Return a one-shot run of ``job`` due at ``now``, under a new id, with the same target,
    data, metadata and failure policy (its retries are its own; ``job`` is not touched).

    The options that shape a schedule go too: the run starts now, not jittered, bounded or
    excluded, and a one-shot job has no occurrences to overlap."""
    original = triggered_from(job)
    return dataclasses.replace(
        job, id=f"{original}.t{uuid.uuid4().hex[:12]}", due=now, schedule=None, repeats=None, ttl=None,
        metadata={**job.metadata, TRIGGERED_FROM: original}, created_at=now, shard=None,
        jitter=timedelta(0), not_before=None, not_after=None, exclude=NO_EXCLUSIONS, overlap="allow_all",
    )
