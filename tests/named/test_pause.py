"""Pause and resume of named jobs without Ray (issue 16, point 1): the client routes to an
in-process silo's roles, the registry shows the pause, bad input writes nothing."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

import pytest

from cluster.client import Client
from cluster.model.errors import JobNotFound, ValidationError
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import ENTRIES_REGISTRY
from cluster.model.routing import Router
from cluster.model.wire import datetime_to_us
from cluster.named.api import NamedJobs
from cluster.runtime.roles import Roles
from cluster.runtime.shardlog import PAUSE
from storage import list_logs, read_log
from tests.runtime.harness import OPTIONS, ManualClock, Recorder, fire_due, make_parts

TARGET = Target.actor("h", "test")


def local_client(parts: Roles) -> Client:
    """A ``Client`` whose calls reach ``parts`` in this process, as they reach a silo over Ray."""
    methods = {"schedule": parts.scheduling.schedule, "cancel": parts.cancelling.cancel,
               "pause": parts.pausing.pause, "resume": parts.pausing.resume,
               "shards_from": parts.cancelling.shards_from}

    async def call(silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        return await methods[method](*args)

    # Names in per-name entries: this silo runs no named-jobs hooks, so it owns no registry
    # buckets (the buckets' pause is ``test_bucket_pause``).
    client = Client("test", ["0"], replace(OPTIONS, named_registry=ENTRIES_REGISTRY))
    client._router = Router(["0"], call)
    return client


async def named(parts: Roles) -> NamedJobs:
    jobs = NamedJobs(local_client(parts), store_url="memory://")
    jobs._stores[id(asyncio.get_running_loop())] = parts.store  # the silo's own store
    return jobs


async def start() -> tuple[Roles, NamedJobs, Recorder]:
    clock = ManualClock(datetime_to_us(datetime.now(timezone.utc)))  # put reads the wall clock
    parts = await make_parts(clock=clock)
    parts.transport.handlers["h"] = recorder = Recorder()
    return parts, await named(parts), recorder


async def fire_for(parts: Roles, seconds: int) -> None:
    for _ in range(seconds):
        parts.clock.advance(1)  # type: ignore[attr-defined]
        parts.lease.renew(parts.clock.monotonic())
        await fire_due(parts)


async def pause_records(parts: Roles) -> list[list[Any]]:
    found = []
    for head in await list_logs(parts.store, "shards/"):
        found += [op for op in (await read_log(parts.store, head.base)).records() if op[0] == PAUSE]
    return found


async def test_get_shows_who_paused_since_when_and_why_and_resume_fires_the_overdue_job() -> None:
    parts, jobs, recorder = await start()
    await jobs.put("backup", target=TARGET, due_time="2s")
    paused = await jobs.pause("backup", note="disk full", by="ops@host")
    status = (await jobs.get("backup")).status  # type: ignore[union-attr]
    assert status == paused.status
    assert status.paused and status.paused_note == "disk full" and status.paused_by == "ops@host"
    assert status.paused_since is not None and status.paused_since.tzinfo is not None
    again = await jobs.pause("backup", note="other")  # paused already: the first pause stays
    assert again.status.paused_note == "disk full"
    await fire_for(parts, 4)
    assert recorder.ran == []
    resumed = await jobs.resume("backup")
    assert not resumed.status.paused and resumed.status.paused_note is None and resumed.status.paused_since is None
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert len(recorder.ran) == 1


async def test_pausing_what_does_not_exist_raises_lookup_error_and_bad_input_writes_nothing() -> None:
    parts, jobs, _ = await start()
    await jobs.put("backup", target=TARGET, due_time="1h")
    with pytest.raises(LookupError):
        await jobs.pause("nope")
    with pytest.raises(JobNotFound):
        await jobs.resume("backup", app_id="other")
    for bad in ({"note": "x" * 201}, {"note": "a\x00b"}, {"note": 3}, {"by": ""}, {"app_id": ""}):
        with pytest.raises(ValidationError):
            await jobs.pause("backup", **bad)
    with pytest.raises(ValueError):
        await jobs.pause("bad/name")
    with pytest.raises(ValueError):
        await jobs.pause_all(note="\n")
    assert await pause_records(parts) == []
    assert not (await jobs.get("backup")).status.paused  # type: ignore[union-attr]


async def test_pause_all_covers_an_app_id_or_a_whole_namespace() -> None:
    parts, jobs, recorder = await start()
    for name, app in (("a", "billing"), ("b", "billing"), ("c", "mail")):
        await jobs.put(name, target=TARGET, schedule="@every 1s", app_id=app)
    await jobs.put("d", target=TARGET, schedule="@every 1s", namespace="other")
    assert await jobs.pause_all(app_id="billing", note="freeze") == 2
    assert await jobs.pause_all() == 1  # the rest of the namespace "default": c
    assert await jobs.pause_all() == 0
    listed = await jobs.list(app_id="billing") + await jobs.list(app_id="mail")
    assert [(j.name, j.status.paused) for j in listed] == [("a", True), ("b", True), ("c", True)]
    assert not (await jobs.get("d", namespace="other")).status.paused  # type: ignore[union-attr]
    recorder.ran.clear()
    await fire_for(parts, 3)
    assert {ctx.job.name for ctx in recorder.ran} == {"d"}
    assert await jobs.resume_all(app_id="billing") == 2
    recorder.ran.clear()
    await fire_for(parts, 2)
    assert {ctx.job.name for ctx in recorder.ran} == {"a", "b", "d"}


async def test_a_plain_job_is_paused_and_resumed_through_the_client() -> None:
    parts, jobs, recorder = await start()
    client = jobs.client
    assert isinstance(client, Client)
    now = datetime.now(timezone.utc)
    (job,) = await client.submit_jobs([ScheduledJob.create(TARGET, due=now, now=now)])
    for bad in ({"note": "x" * 201}, {"by": "a\nb"}, {"by": 7}):
        with pytest.raises(ValidationError):
            await client.pause_job(job, **bad)
    with pytest.raises(ValueError):  # not returned by schedule_job: cannot be located
        await client.pause_job(ScheduledJob.create(TARGET, due=now, now=now))
    assert await pause_records(parts) == []
    assert await client.pause_job(job, "hold") is True
    assert await client.pause_job(job) is False
    await fire_for(parts, 2)
    assert recorder.ran == []
    assert await client.resume_job(job) is True
    assert await client.resume_job(job) is False
    parts.lease.renew(parts.clock.monotonic())
    await fire_due(parts)
    assert len(recorder.ran) == 1
    with pytest.raises(JobNotFound):
        await client.pause_job(job)


async def test_the_command_line_pauses_a_name_or_a_scope_and_get_shows_it(capsys: pytest.CaptureFixture[str]) -> None:
    from types import SimpleNamespace

    from cluster.cli import build_parser
    from cluster.cli.jobs import _get, _pause, _resume

    parts, jobs, _ = await start()
    await jobs.put("backup", target=TARGET, schedule="@every 1m", app_id="billing")
    await jobs.put("report", target=TARGET, schedule="@every 1m", app_id="billing")
    client = SimpleNamespace(jobs=jobs)
    parse = build_parser().parse_args

    assert await _pause(client, parse(["pause", "backup", "--app-id", "billing", "--note", "INC-42", "--json"])) == 0
    shown = json.loads(capsys.readouterr().out)["status"]
    assert shown["paused"] and shown["paused_note"] == "INC-42" and shown["paused_by"] and shown["paused_since"]
    assert await _get(client, parse(["get", "backup", "--app-id", "billing"])) == 0
    text = capsys.readouterr().out
    assert "PAUSED" in text and "INC-42" in text
    assert await _pause(client, parse(["pause", "--all", "--app-id", "billing"])) == 0
    assert capsys.readouterr().out.strip() == "paused 1 job(s) in namespace 'default', app_id 'billing'"
    assert await _resume(client, parse(["resume", "--all", "--json"])) == 0  # the whole namespace
    assert json.loads(capsys.readouterr().out) == {"resumed": 2, "namespace": "default", "app_id": None}
    with pytest.raises(JobNotFound):  # the command turns it into one line and exit code 1
        await _pause(client, parse(["pause", "nope"]))
    for usage in (["pause"], ["pause", "x", "--all"], ["resume", "x", "--note", "n"]):
        with pytest.raises(SystemExit) as exit_info:
            parse(usage)
        assert exit_info.value.code == 2
    capsys.readouterr()


async def test_a_handle_whose_first_shard_was_deleted_finds_the_job_where_it_moved() -> None:
    parts, jobs, recorder = await start()
    client = jobs.client
    assert isinstance(client, Client)
    now = datetime.now(timezone.utc)
    (job,) = await client.submit_jobs([ScheduledJob.create(TARGET, due=now, now=now, schedule="@every 30s")])
    await fire_for(parts, 1)  # the first occurrence runs; the next moves to a later window's shard
    assert len(recorder.ran) == 1
    for _ in range(4):  # past the first window, then the drained shard is deleted
        parts.clock.advance(10)  # type: ignore[attr-defined]
        await parts.loading.delete_drained()
    assert job.shard not in {head.base for head in await list_logs(parts.store, "shards/")}
    assert await client.pause_job(job, "found by search") is True
    assert await client.resume_job(job) is True
