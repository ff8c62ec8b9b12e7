"""The client checks the cluster's limits before it sends anything to a silo."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from cluster.client import Client
from cluster.model.errors import InvalidJob, InvalidSchedule
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ClusterOptions


class NoSilos(Client):
    """A client whose every silo call fails the test: nothing may be sent."""

    async def _call(self, method, *args, prefer=None):
        raise AssertionError(f"{method} was sent to a silo")


def test_submit_checks_the_clusters_limits_before_sending():
    client = NoSilos("ns", ["0"], ClusterOptions(min_period="5s", allowed_code_prefixes=["handlers"]))
    now = datetime.now(timezone.utc)
    too_fast = ScheduledJob.create(Target.actor("a"), schedule="@every 2s", now=now)  # fine by default limits
    with pytest.raises(InvalidSchedule, match="at least 5s"):
        asyncio.run(client.submit_jobs([too_fast]))
    outside = ScheduledJob.create(Target.grain("os.path:join", 1), due="1m", now=now)
    with pytest.raises(InvalidJob, match="module must start with"):
        asyncio.run(client.submit_jobs([outside]))
    with pytest.raises(InvalidSchedule, match="at least 5s"):
        asyncio.run(client.schedule_job(Target.actor("a"), schedule="@every 2s"))


def test_scheduling_imports_the_grain_class_in_the_callers_process():
    client = NoSilos("ns", ["0"], ClusterOptions())
    with pytest.raises(InvalidJob, match="target.cls: must name a class"):
        asyncio.run(client.schedule_job(Target.grain("os.path:join", 1), due="1m"))
