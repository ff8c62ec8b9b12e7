"""Jitter and exclusions end to end on Ray (issue 16 "done when"): jitter bounds over many
occurrences, exclusions skipping real fires, and an exclusion on a DST day in a named zone.

A real-time test cannot wait for a DST day, so that part is checked as ``get`` shows it through
the cluster (``status.next_fires`` across the 2027 spring-forward in New York); the firing
itself across DST days is checked against croniter in ``tests/model/test_shape.py``.
"""

from __future__ import annotations

import asyncio
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from cluster import Target
from cluster.model.wire import datetime_to_us
from tests.e2e.conftest import executions, wait_for

pytestmark = pytest.mark.ray

NEW_YORK = ZoneInfo("America/New_York")


def _grid(first: datetime, when: datetime, period: timedelta) -> datetime:
    """The un-jittered occurrence of the ``@every`` series through ``first`` at or before ``when``."""
    return first + (when - first) // period * period


@pytest.mark.file_only
async def test_jitter_stays_in_its_window_exclusions_skip_fires_and_a_dst_day_is_excluded(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=1)
    client = cluster.client()
    period = timedelta(seconds=1)
    jittered, skipping = await asyncio.gather(
        client.schedule_job(Target.actor(name), "jittered", due="1s", schedule="@every 1s", jitter="500ms",
                            repeats=6),
        client.jobs.put("skipping", target=Target.actor(name), schedule="@every 1s", repeats=4,
                        exclude="*/3 * * * * *"),  # no fire at a second divisible by 3
    )
    dst = await client.jobs.put("dst", target=Target.actor(name), schedule="CRON_TZ=America/New_York 0 30 2 * * *",
                                jitter="1m", not_before="2027-03-13T00:00:00Z", exclude=["2027-03-14"])

    # The DST part, as get shows it: 2027-03-14 (New York springs forward; 02:30 would fire at
    # 03:00) is skipped; on either side 02:30 is 07:30Z (EST) and 06:30Z (EDT), each up to 1 min late.
    got = await client.jobs.get("dst")
    assert got is not None and got.job.id == dst.job.id
    fires = got.status.next_fires
    assert [f.astimezone(NEW_YORK).date() for f in fires] == [date(2027, 3, d) for d in (13, 15, 16, 17, 18)]
    for fire in fires:
        scheduled = fire.replace(minute=30, second=0, microsecond=0)
        assert scheduled.hour == (7 if fire.day == 13 else 6)
        assert scheduled <= fire <= scheduled + timedelta(minutes=1)
        assert datetime_to_us(fire) == got.job.fire_us(datetime_to_us(scheduled))  # the silos' own jitter

    def runs_of(job_id: str) -> list[dict]:
        return [r for r in executions(handle) if r["job_id"] == job_id]

    await wait_for(lambda: len(runs_of(jittered.id)) >= 6 and len(runs_of(skipping.job.id)) >= 4, timeout=40)

    runs = runs_of(jittered.id)
    assert len(runs) == 6 and [r["occurrence"] for r in runs] == list(range(1, 7))
    offsets = []
    for run in runs:
        fire = datetime.fromtimestamp(run["scheduled_for"], timezone.utc)
        scheduled = _grid(jittered.due, fire, period)
        offset = fire - scheduled
        assert timedelta(0) <= offset <= timedelta(milliseconds=500), run  # never before its time
        assert abs(datetime_to_us(fire) - jittered.fire_us(datetime_to_us(scheduled))) <= 1, run
        assert run["started"] >= run["scheduled_for"], run
        offsets.append(offset)
    assert len({round(o.total_seconds(), 3) for o in offsets}) > 1  # spread, not a fixed delay

    skipped_runs = runs_of(skipping.job.id)
    assert len(skipped_runs) == 4
    seconds = [datetime.fromtimestamp(r["scheduled_for"], timezone.utc).second for r in skipped_runs]
    assert all(s % 3 for s in seconds), seconds
    # Four fires need at least five consecutive seconds: at least one was excluded, and counted.
    status = await wait_for(lambda: _finished(client, "skipping"), timeout=20)
    assert status.excluded >= 1
    counted = sum(s.get("counters", {}).get("excluded", 0) for s in cluster.status())
    assert counted >= status.excluded


async def _finished(client, name):
    got = await client.jobs.get(name)
    return got.status if got is not None and got.status.finished else None
