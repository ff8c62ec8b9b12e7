"""``timeshard ui``: the dashboard's JSON endpoints, token check and page, against fakes.

No Ray and no browser here: the app is built over a fake ``status()`` and a fake ``client.jobs``
(the same seams ``timeshard ui`` wires to ``Cluster.status`` and ``Client.jobs``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from cluster.cli import main
from cluster.cli.ui import TOKEN_ENV, UiSource, make_app, page
from cluster.model.errors import JobNotFound, ValidationError
from cluster.model.jobs import ScheduledJob, Target
from cluster.named.api import MAX_PAGE, NamedJob, NamedJobPage
from cluster.named.registry import AttemptRecord, JobStatus, check_name

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=timezone.utc)
TOKEN = "0123456789abcdef-test-token"
CSRF_HEADER = "X-Timeshard-CSRF"  # what the page's script sends with every POST


def named(name: str, *, paused: bool = False) -> NamedJob:
    job = ScheduledJob.create(Target.actor("h", namespace="test"), due=T0 + timedelta(minutes=5), now=T0)
    return NamedJob(name=name, namespace="default", app_id="default", generation=1, job=job,
                    status=replace(JobStatus(), paused=paused), updated_at=T0)


class FakeJobs:
    """``client.jobs`` over a dict: records each call so tests see what the UI asked for."""

    def __init__(self, names: list[str]) -> None:
        self.jobs = {n: named(n) for n in names}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.paused_with: dict[str, str | None] = {}

    async def list_page(self, prefix: str = "", *, after: str | None = None, limit: int = 50,
                        app_id: str = "default", namespace: str = "default") -> NamedJobPage:
        self.calls.append(("list_page", prefix, {"after": after, "limit": limit, "app_id": app_id,
                                                 "namespace": namespace}))
        if prefix:
            check_name(prefix, "prefix")
        if not 1 <= limit <= MAX_PAGE:
            raise ValidationError("limit", f"must be an int from 1 to {MAX_PAGE}", limit)
        names = sorted(n for n in self.jobs if n.startswith(prefix) and (after is None or n > after))
        return NamedJobPage(tuple(self.jobs[n] for n in names[:limit]), names[limit - 1] if len(names) > limit else None)

    async def count(self, prefix: str = "", *, app_id: str = "default", namespace: str = "default") -> int:
        self.calls.append(("count", prefix, {"app_id": app_id, "namespace": namespace}))
        return sum(1 for n in self.jobs if n.startswith(prefix))

    async def get(self, name: str, **scope: str) -> NamedJob | None:
        self.calls.append(("get", name, scope))
        return self.jobs.get(name)

    async def pause(self, name: str, *, note: str | None = None, by: str | None = None, **scope: str) -> NamedJob:
        self.calls.append(("pause", name, scope))
        self.paused_with = {"note": note, "by": by}
        if name not in self.jobs:
            raise JobNotFound(f"no job named {name!r}")
        self.jobs[name] = replace(self.jobs[name], status=replace(self.jobs[name].status, paused=True))
        return self.jobs[name]

    async def delete(self, name: str, **scope: str) -> bool:
        self.calls.append(("delete", name, scope))
        return self.jobs.pop(name, None) is not None


SILOS: list[dict[str, Any]] = [
    {"silo_id": "s0", "owner": "s0#3", "node": "n1", "queued": 4, "inflight": 1, "staged": 0,
     "shards": [{"name": f"shard-{i:02d}", "state": "active", "loaded": True, "jobs": 10 - i,
                 "window_start": i, "window_end": i + 1, "adopted_count": 0} for i in range(7)],
     "quarantined": [], "damaged": {}, "counters": {"fired": 12}},
    {"silo_id": "s1", "error": "RayActorError()"},
]


async def from_the_page(client: TestClient) -> dict[str, str]:
    """The headers the page's own POSTs carry: its anti-forgery value, read from the page as its script does."""
    found = re.search(r'name="timeshard-csrf" content="([0-9a-f]+)"', await (await client.get("/")).text())
    assert found, "the page carries its anti-forgery value"
    return {CSRF_HEADER: found.group(1), "Origin": str(client.make_url("/")).rstrip("/"), "Sec-Fetch-Site": "same-origin"}


@pytest.fixture
def fake_jobs() -> FakeJobs:
    return FakeJobs([f"job-{i:03d}" for i in range(120)] + ["other"])


async def client_for(fake: FakeJobs, token: str | None = None, page_size: int = 50) -> TestClient:
    app = make_app(UiSource(status=lambda: SILOS, jobs=fake), token=token, page_size=page_size)
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.fixture
async def ui(fake_jobs: FakeJobs) -> AsyncIterator[TestClient]:
    client = await client_for(fake_jobs)
    yield client
    await client.close()


async def test_token_refused_without_it_and_accepted_with_it(fake_jobs: FakeJobs) -> None:
    client = await client_for(fake_jobs, token=TOKEN)
    try:
        assert (await client.get("/api/overview")).status == 401
        assert (await client.get("/")).status == 401
        assert (await client.get("/api/overview", headers={"Authorization": "Bearer wrong"})).status == 401
        assert (await client.post("/api/jobs/job-001/pause", headers={"Authorization": "Bearer wrong"})).status == 401
        assert "job-001" not in [c[1] for c in fake_jobs.calls]  # refused before acting
        assert (await client.get("/api/overview", headers={"Authorization": f"Bearer {TOKEN}"})).status == 200
        # First visit with ?token= sets a cookie; the page's later requests carry only the cookie.
        first = await client.get(f"/?token={TOKEN}")
        assert first.status == 200 and TOKEN not in str(first.url)
        assert (await client.get("/api/jobs")).status == 200
    finally:
        await client.close()


async def test_overview_lists_silos_with_incarnation_and_errors(ui: TestClient) -> None:
    silos = (await (await ui.get("/api/overview")).json())["silos"]
    assert [(s["silo_id"], s["incarnation"], s["queued"], s["inflight"], s["shards"]) for s in silos[:1]] == [
        ("s0", "3", 4, 1, 7)]
    assert silos[1]["error"] == "RayActorError()"


async def test_shards_are_sorted_and_paged_on_the_server(fake_jobs: FakeJobs) -> None:
    client = await client_for(fake_jobs, page_size=3)
    try:
        first = await (await client.get("/api/shards?sort=jobs")).json()
        assert (first["total"], first["pages"]) == (7, 3)
        assert [s["jobs"] for s in first["items"]] == [4, 5, 6]
        last = await (await client.get("/api/shards?sort=-name&page=3")).json()
        assert [s["name"] for s in last["items"]] == ["shard-00"]
        assert (await client.get("/api/shards?sort=nonsense")).status == 400
    finally:
        await client.close()


async def test_jobs_are_paged_by_cursor_on_the_server(ui: TestClient, fake_jobs: FakeJobs) -> None:
    first = await (await ui.get("/api/jobs?prefix=job-&namespace=ns&app_id=app&count=1")).json()
    assert [j["name"] for j in first["items"]] == [f"job-{i:03d}" for i in range(50)]
    assert (first["next"], first["total"]) == ("job-049", 120)
    assert "next_fires" in first["items"][0]["status"]
    # Only one page is asked of the client: never the whole scope.
    assert fake_jobs.calls[-2] == ("list_page", "job-", {"after": None, "limit": 50, "app_id": "app", "namespace": "ns"})
    assert [c[0] for c in fake_jobs.calls] == ["list_page", "count"]
    third = await (await ui.get("/api/jobs?prefix=job-&after=job-099")).json()
    assert [j["name"] for j in third["items"]] == [f"job-{i:03d}" for i in range(100, 120)]
    assert third["next"] is None and "total" not in third  # the count is asked for, not paid every refresh
    assert fake_jobs.calls[-1][0] == "list_page"
    big = await (await ui.get("/api/jobs?size=100000")).json()
    assert (big["size"], len(big["items"])) == (200, 121) and fake_jobs.calls[-1][2]["limit"] == 200
    assert (await ui.get("/api/jobs?size=0")).status == 400


async def test_a_bad_filter_is_a_400_naming_the_field(ui: TestClient) -> None:
    answer = await ui.get("/api/jobs?prefix=a%3Fb")
    assert answer.status == 400 and (await answer.json())["field"] == "prefix"


async def test_one_job_shows_its_counters_next_fires_pause_and_attempts(ui: TestClient, fake_jobs: FakeJobs) -> None:
    attempt = AttemptRecord("r1", 1, 3, T0, T0 + timedelta(seconds=2), "s0#1", "failed", "boom",
                            T0 + timedelta(seconds=5))
    job = fake_jobs.jobs["job-007"]
    fake_jobs.jobs["job-007"] = replace(job, status=replace(
        job.status, successful=4, failed=1, history=(attempt,), next_fires=[T0 + timedelta(minutes=5)],
        paused=True, paused_note="maintenance", paused_by="ops@host", paused_since=T0,
        staged_target="actor:h@test", staged_since=T0))
    answer = await ui.get("/api/jobs/job-007?namespace=ns&app_id=app")
    assert answer.status == 200
    status = (await answer.json())["status"]
    assert fake_jobs.calls[-1] == ("get", "job-007", {"namespace": "ns", "app_id": "app"})
    assert (status["successful"], status["failed"], status["paused_note"], status["paused_by"]) == (
        4, 1, "maintenance", "ops@host")
    assert status["next_fires"] == [(T0 + timedelta(minutes=5)).isoformat()]
    assert status["staged"] == {"target": "actor:h@test", "since": T0.isoformat()}
    (row,) = status["history"]
    assert (row["scheduled_for"], row["started"], row["lateness_s"], row["duration_s"], row["outcome"], row["error"]) == (
        T0.isoformat(), (T0 + timedelta(seconds=2)).isoformat(), 2.0, 3.0, "failed", "boom")
    assert (await ui.get("/api/jobs/nope")).status == 404


async def test_pause_calls_the_client_with_the_scope(ui: TestClient, fake_jobs: FakeJobs) -> None:
    page = await from_the_page(ui)
    answer = await ui.post("/api/jobs/job-007/pause?namespace=ns&app_id=app", headers=page)
    assert answer.status == 200
    assert (await answer.json())["job"]["status"]["paused"] is True
    assert fake_jobs.calls[-1] == ("pause", "job-007", {"namespace": "ns", "app_id": "app"})
    assert (await ui.post("/api/jobs/nope/pause", headers=page)).status == 404
    assert (await ui.post("/api/jobs/nope/delete", headers=page)).status == 404
    assert (await ui.post("/api/jobs/job-007/delete", headers=page)).status == 200 and "job-007" not in fake_jobs.jobs


async def test_a_name_with_a_slash_reaches_the_client_whole(fake_jobs: FakeJobs) -> None:
    fake_jobs.jobs["reports/daily"] = named("reports/daily")
    client = await client_for(fake_jobs)
    try:
        assert (await client.post("/api/jobs/reports%2Fdaily/pause", headers=await from_the_page(client))).status == 200
        assert fake_jobs.calls[-1][:2] == ("pause", "reports/daily")
    finally:
        await client.close()


async def test_page_loads_nothing_from_elsewhere(ui: TestClient) -> None:
    html = page()
    local = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)""", html)
    assert local and all(ref.startswith("static/") for ref in local)
    for ref in local:  # every script and style the page names is served, and names nothing remote
        answer = await ui.get("/" + ref)
        assert answer.status == 200, ref
        assert not re.search(r"https?://|//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(", await answer.text()), ref


def test_ui_on_a_public_host_without_token_exits_2(monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert main(["ui", "--host", "0.0.0.0"]) == 2
    assert "--token" in capsys.readouterr().err


async def test_about_names_the_namespace_and_ray_address_for_the_header(fake_jobs: FakeJobs) -> None:
    client = TestClient(TestServer(make_app(UiSource(status=lambda: SILOS, jobs=fake_jobs, namespace="prod",
                                                     address="10.0.0.7:6379"))))
    await client.start_server()
    try:
        assert await (await client.get("/api/about")).json() == {"namespace": "prod", "ray_address": "10.0.0.7:6379"}
    finally:
        await client.close()


def failed_attempt(run: str) -> AttemptRecord:
    return AttemptRecord(run, 1, 1, T0, T0 + timedelta(seconds=1), "s0#1", "failed", "boom", T0 + timedelta(seconds=2))


async def test_failing_lists_only_failing_jobs_page_by_page_with_a_bounded_scan(
        ui: TestClient, fake_jobs: FakeJobs, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = ["job-003", "job-040", "job-041", "job-118"]
    for name in bad[:3]:
        job = fake_jobs.jobs[name]
        fake_jobs.jobs[name] = replace(job, status=replace(job.status, last_attempt=failed_attempt(name),
                                                           history=(failed_attempt(name),)))
    job = fake_jobs.jobs["job-118"]  # failing again and again, its last record already rotated out
    fake_jobs.jobs["job-118"] = replace(job, status=replace(job.status, consecutive_failures=3))

    async def walk(size: int) -> tuple[list[str], list[int]]:
        names, scans, after = [], [], ""
        while True:
            page = await (await ui.get(f"/api/jobs?failing=1&size={size}&after={after}")).json()
            names += [j["name"] for j in page["items"]]
            scans.append(page["scanned"])
            if page["next"] is None:
                return names, scans
            after = page["next"]

    assert (await walk(2))[0] == bad
    monkeypatch.setattr("cluster.cli.ui.jobs.MAX_SCAN", 30)
    names, scans = await walk(50)
    assert names == bad and max(scans) <= 30 and len(scans) == 5, scans  # 121 jobs, 30 at a time
    row = (await (await ui.get("/api/jobs?failing=1&size=1")).json())["items"][0]
    assert (row["name"], row["target"], row["schedule"]) == ("job-003", "actor:h@test", None)
    assert row["status"]["recent"] == [{"outcome": "failed", "scheduled_for": T0.isoformat(), "triggered": False}]


async def test_shards_narrow_to_one_shard_or_one_silos_shards(ui: TestClient) -> None:
    one = await (await ui.get("/api/shards?name=shard-03")).json()
    assert [s["name"] for s in one["items"]] == ["shard-03"]
    mine = await (await ui.get("/api/shards?silo=s0")).json()
    assert mine["total"] == 7 and {s["owner"] for s in mine["items"]} == {"s0#3"}
    assert (await (await ui.get("/api/shards?silo=s1")).json())["total"] == 0  # s1 did not answer: it shows no shard
