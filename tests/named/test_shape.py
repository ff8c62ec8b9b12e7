"""Jitter, bounds and exclusions on named jobs and plain ones: what put / schedule_job accept and
refuse, and what get (and ``timeshard get``) shows of the next fire times (issue 16 points 4-6)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from cluster import Target
from cluster.cli.jobs import _job_text, named_job_to_json
from cluster.client import Client
from cluster.model.errors import ValidationError
from cluster.model.jobs import ScheduledJob
from cluster.model.options import ClusterOptions
from cluster.named.api import NamedJobs, with_next_fires
from cluster.named.hooks import ended
from cluster.named.registry import AttemptRecord, JobStatus
from cluster.runtime.hooks import AttemptEnd, AttemptEvent

TARGET = Target.actor("mailer", "apps")


class Submitter:
    """Stands in for the cluster: jobs are 'durable' at once, in shard ``s``."""

    def __init__(self) -> None:
        self.submitted: list[ScheduledJob] = []

    async def describe(self) -> dict[str, Any]:
        return {"store_url": "memory://"}

    async def submit_jobs(self, jobs: Sequence[ScheduledJob]) -> list[ScheduledJob]:
        self.submitted.extend(jobs)
        return [dataclasses.replace(j, shard="s") for j in jobs]

    def resolve_target(self, target: Target) -> Target:
        return target

    async def try_cancel_job(self, job: ScheduledJob) -> bool:
        return True


BAD = [
    ({"jitter": "-5s"}, "jitter"),
    ({"not_before": "not a time"}, "not_before"),
    ({"not_after": "2020-01-01T00:00:00Z"}, "not_after"),
    ({"exclude": ["0 0 9 * * *", "2026-13-01"]}, "exclude[1]"),
    ({"exclude": "@every 1h"}, "exclude"),
]


@pytest.mark.parametrize(("kw", "field"), BAD)
async def test_a_bad_shape_is_refused_by_put_and_nothing_is_written(kw: dict[str, Any], field: str) -> None:
    submitter = Submitter()
    jobs = NamedJobs(submitter, store_url="memory://")
    with pytest.raises(ValidationError) as caught:
        await jobs.put("report", target=TARGET, schedule="@every 1h", **kw)
    assert caught.value.field == field
    assert submitter.submitted == [] and await jobs.list() == []


@pytest.mark.parametrize(("kw", "field"), BAD)
async def test_a_bad_shape_is_refused_by_schedule_job_and_schedule_jobs(kw: dict[str, Any], field: str) -> None:
    client = Client("ns", [], ClusterOptions())  # no silo: nothing could be written anyway
    with pytest.raises(ValidationError) as caught:
        await client.schedule_job(TARGET, schedule="@every 1h", **kw)
    assert caught.value.field == field
    with pytest.raises(ValidationError):
        await client.schedule_jobs([{"target": TARGET, "schedule": "@every 1h", **kw}])


async def test_put_passes_the_shape_on_and_get_shows_the_next_fire_times() -> None:
    submitter = Submitter()
    jobs = NamedJobs(submitter, store_url="memory://")
    christmas = "2030-12-25"
    put = await jobs.put("greet", target=TARGET, schedule="CRON_TZ=Europe/Berlin 0 0 9 * * *", jitter="2m",
                         exclude=[christmas], not_before="2030-12-24T00:00:00Z", not_after="2030-12-28T00:00:00Z")
    (job,) = submitter.submitted
    assert job.jitter == timedelta(minutes=2) and job.exclude
    assert put.status.next_fire == job.first_fire  # the jittered time, not the scheduled one
    got = await jobs.get("greet")
    assert got is not None
    fires = got.status.next_fires
    # 24th, 26th, 27th at 09:00 Berlin (08:00 UTC), each up to 2 minutes late; the 25th is excluded.
    assert [f.date().isoformat() for f in fires] == ["2030-12-24", "2030-12-26", "2030-12-27"]
    for fire in fires:
        scheduled = fire.replace(hour=8, minute=0, second=0, microsecond=0)
        assert scheduled <= fire <= scheduled + timedelta(minutes=2)
    shown = named_job_to_json(got)
    assert shown["status"]["next_fires"] == [f.isoformat() for f in fires]
    assert shown["jitter"] == "2m" and shown["exclude"] == [christmas]
    text = _job_text(shown)
    assert "next fires" in text and fires[0].isoformat() in text and christmas in text


def test_the_named_status_counts_excluded_occurrences_and_reads_old_entries() -> None:
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    job = ScheduledJob.create(TARGET, "n", schedule="@every 1h", now=now)
    event = AttemptEvent(job, "r1", 1, 1, now, now)
    after = ended(JobStatus(), event, AttemptEnd(True, None, now, None, now + timedelta(hours=2), False, 1), "o")
    assert after.excluded == 1
    assert JobStatus.from_json(after.to_json()).excluded == 1
    assert "exc" not in JobStatus().to_json()  # nothing excluded costs no byte in the entry
    assert JobStatus.from_json({"ok": 3}).excluded == 0


def test_next_fires_count_down_the_repeats_left_from_the_status() -> None:
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    job = ScheduledJob.create(TARGET, "n", schedule="@every 1h", repeats=3, due=now + timedelta(hours=1), now=now)
    fresh = with_next_fires(JobStatus(), job, now)
    assert len(fresh.next_fires) == 3
    two_ended = JobStatus(last_attempt=AttemptRecord("r", 1, 2, now, now, "o"))
    assert len(with_next_fires(two_ended, job, now).next_fires) == 1
    assert with_next_fires(JobStatus(finished=True), job, now).next_fires == []
    assert with_next_fires(JobStatus(), job, now, paused=True).next_fires == []
