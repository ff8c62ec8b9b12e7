"""Errors as a user meets them on a real cluster: the project's own type and one plain line,
the silo's traceback kept behind it for debugging (issue 27, point 1). The full disk is
``tests/e2e/full_disk.py``'s."""

from __future__ import annotations

import asyncio
import errno
import os
import traceback
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster import Cluster, FailurePolicy, ScheduleInDoubt, Target, UnsupportedStoreFormat
from cluster.cli import main as cli
from cluster.client import running_silo_ids
from cluster.model.errors import RemoteTraceback
from cluster.runtime.store_format import FORMAT_LOG
from handlers import JobContext, JobHandler
from storage import StorageError
from storage.file import FileStore
from tests.e2e.conftest import FAST, wait_for
from tests.e2e.full_disk import assert_one_plain_line, fill_disk

pytestmark = [pytest.mark.ray, pytest.mark.file_only]


def assert_silo_traceback_behind(err: BaseException, silo_method: str) -> None:
    remote = err.__cause__
    assert isinstance(remote, RemoteTraceback), f"the silo's traceback is not kept: {remote!r}"
    assert f"SiloActor.{silo_method}" in remote.text and "storage/file.py" in remote.text
    assert "OSError: [Errno 28]" in remote.text
    printed = "".join(traceback.format_exception(err))
    assert "\x1b" not in printed, "a printed traceback carries terminal colour codes"
    assert "RayTaskError" not in printed, "Ray's wrapper is still chained to the error"


async def test_a_full_disk_while_opening_a_shard_raises_storage_error_in_one_line(make_cluster, store_url):
    """Before: ``RayTaskError(StorageError)``, its text led by colour codes and the silo actor's repr."""
    client = make_cluster(silos=1).client()
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    fill_disk(store_url, due)
    with pytest.raises(StorageError) as caught:
        await client.schedule_jobs([{"target": Target.actor("mailer"), "due": due}])
    assert type(caught.value) is StorageError
    assert_one_plain_line(caught.value)
    assert_silo_traceback_behind(caught.value, "schedule")


async def test_a_full_disk_while_appending_to_a_shard_says_which_jobs_may_still_fire(make_cluster, store_url):
    """An append that failed may have landed: the caller is told so, in one plain line."""
    client = make_cluster(silos=1).client()
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    await client.schedule_job(Target.actor("mailer"), "first", due=due)  # the window's shard exists
    fill_disk(store_url, due)
    with pytest.raises(ScheduleInDoubt) as caught:
        await client.schedule_job(Target.actor("mailer"), "second", due=due)
    assert type(caught.value) is ScheduleInDoubt and len(caught.value.may_fire) == 1
    assert_one_plain_line(caught.value)
    assert_silo_traceback_behind(caught.value, "schedule")


def test_the_command_line_prints_a_full_disk_as_one_line(make_cluster, store_url, capsys):
    cluster = make_cluster(silos=1)
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    fill_disk(store_url, due)
    code = cli(["schedule", "nightly", "--target", "actor:mailer", "--due-time", due.isoformat(),
                "--namespace", cluster.namespace])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("timeshard: error: ") and "\x1b" not in err, err
    assert os.strerror(errno.ENOSPC) in err, err


@ray.remote
class Ledger:
    """A service a handler calls: it refuses an invoice."""

    async def post(self, invoice: int) -> None:
        raise ValueError(f"invoice {invoice} has no address")


@ray.remote
class Billing(JobHandler):
    """A handler whose work is a call to another actor, which fails."""

    def __init__(self, ledger: str) -> None:
        self.ledger = ledger

    async def execute_job(self, ctx: JobContext) -> None:
        await ray.get_actor(self.ledger).post.remote(ctx.job.data["invoice"])


async def test_a_handler_failure_shows_in_the_job_status_as_the_error_it_raised(make_cluster):
    """Before: the status read ``RayTaskError(ValueError): \\x1b[36mray::Ledger.post()...``, cut
    at 200 characters before the reason."""
    suffix = uuid.uuid4().hex[:8]
    ledger: Any = Ledger.options(name=f"ledger-{suffix}", num_cpus=0).remote()  # type: ignore[attr-defined]
    billing: Any = Billing.options(name=f"billing-{suffix}", num_cpus=0).remote(f"ledger-{suffix}")  # type: ignore[attr-defined]
    jobs = make_cluster(silos=1).client().jobs
    await jobs.put("bill-7", target=Target.actor(f"billing-{suffix}"), due_time="0s", data={"invoice": 7},
                   failure_policy=FailurePolicy.drop())

    async def failed() -> Any:
        got = await jobs.get("bill-7")
        return got is not None and got.status.last_attempt is not None and got.status.last_attempt

    last = await wait_for(failed, timeout=30)
    assert (last.outcome, last.error) == ("failed", "ValueError: invoice 7 has no address")
    await jobs.close()
    ray.kill(billing)
    ray.kill(ledger)


@pytest.mark.silo_fails_with("UnsupportedStoreFormat: store format 2 (written by timeshard 0.2.0)")
def test_a_start_on_a_store_of_a_newer_format_raises_the_refusal_and_leaves_no_silo(ray_session, store_url):
    """Before: ``RayTaskError(UnsupportedStoreFormat)`` in colour codes, and the refusing silos left
    running as detached actors, which the next start (or ``timeshard up``) reused."""
    async def mark() -> None:
        store = FileStore(Path(store_url.removeprefix("file://")))
        await store.create(FORMAT_LOG, {"format": "2", "written_by": "timeshard 0.2.0"})
        await store.close()

    asyncio.run(mark())
    namespace = f"ts-{uuid.uuid4().hex[:8]}"
    with pytest.raises(UnsupportedStoreFormat) as caught:
        Cluster.start(store_url, silos=2, namespace=namespace, options=FAST)
    err = caught.value
    assert type(err) is UnsupportedStoreFormat and (err.found, err.written_by) == (2, "timeshard 0.2.0")
    assert "\n" not in str(err) and "\x1b" not in str(err)
    assert isinstance(err.__cause__, RemoteTraceback) and "SiloActor.ready" in err.__cause__.text
    assert "store_format.py" in err.__cause__.text, "the silo's traceback is kept"
    printed = "".join(traceback.format_exception(err))
    assert "\x1b" not in printed and "RayTaskError" not in printed
    assert running_silo_ids(namespace) == [], "a silo that refused its store was left running"
