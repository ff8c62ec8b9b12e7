"""Flows end to end on Ray: the reference's DAG with a retry, a halt, per-step policies, a cancel,
and a silo killed mid-flow. Prints the time from a step's success to its dependants' start."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from typing import Any

import pytest

from cluster import Backoff, Flow, RetryPolicy, Step, Target
from cluster.flows.model import FlowExists, InvalidFlow
from tests.e2e.conftest import executions, silo_pid, wait_for

pytestmark = pytest.mark.ray

FAST_RETRY = RetryPolicy(max_retries=1, backoff=Backoff(base_delay="200ms", max_delay="1s"))


def reference_flow(target: Target, retry: RetryPolicy | None = FAST_RETRY, **data: dict[str, Any]) -> Flow:
    """a -> b -> {c, d} -> e, as in the reference; ``data`` per step makes the Recorder misbehave."""
    deps = {"a": [], "b": ["a"], "c": ["b"], "d": ["b"], "e": ["c", "d"]}
    name = f"example-{uuid.uuid4().hex[:6]}"
    return Flow(name, [Step(n, target, data=data.get(n), depends_on=d) for n, d in deps.items()], retry=retry)


async def finished(client: Any, name: str, timeout: float = 30.0) -> Any:
    async def done() -> Any:
        status = await client.flows.get(name)
        return status if status is not None and status.state != "running" else None

    return await wait_for(done, timeout=timeout, interval=0.1)


def runs_by_step(handle: Any) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for run in executions(handle):
        out.setdefault(run["name"], []).append(run)
    return out


def handoffs(status: Any, runs: dict[str, list[dict[str, Any]]]) -> dict[str, float]:
    """Seconds from the success that made each dependant ready (its last dependency's) to its start."""
    return {
        step.name: runs[step.name][0]["started"] - max(status.steps[d].ended_at.timestamp() for d in step.depends_on)
        for step in status.steps.values() if step.depends_on
    }


async def test_reference_flow_completes_with_c_failing_once_then_retried_after_backoff(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=2).client()
    flow = reference_flow(Target.actor(name), c={"fail_attempts": 1})
    submitted = await client.flows.submit(flow)
    assert submitted.state == "running" and submitted.name == flow.name

    status = await finished(client, flow.name)
    assert status.state == "succeeded" and status.halted_by is None and status.ended_at is not None
    assert {n: (s.state, s.attempts) for n, s in status.steps.items()} == {
        "a": ("succeeded", 1), "b": ("succeeded", 1), "c": ("succeeded", 2), "d": ("succeeded", 1), "e": ("succeeded", 1),
    }
    runs = runs_by_step(handle)
    assert [r["outcome"] for r in runs["c"]] == ["failed", "succeeded"]
    assert runs["c"][1]["started"] - runs["c"][0]["scheduled_for"] >= 0.2, "c waited its back-off"
    for step in status.steps.values():
        assert len(runs[step.name]) == step.attempts, "no step ran more often than its attempts"
        for dep in step.depends_on:
            assert runs[step.name][0]["started"] >= runs[dep][-1]["started"], f"{step.name} started before {dep}"
    assert runs["e"][0]["started"] > runs["c"][1]["started"], "e waited for c's successful retry"
    latencies = handoffs(status, runs)
    print(f"\nlast dependency's success -> step start (s): {sorted((k, round(v, 3)) for k, v in latencies.items())}")
    assert all(0 <= v < 5 for v in latencies.values()), latencies

    assert await client.flows.submit(flow) == await client.flows.get(flow.name), "same definition: idempotent"
    with pytest.raises(FlowExists):
        await client.flows.submit(Flow(flow.name, [Step("other", Target.actor(name))]))
    assert flow.name in [f.name for f in await client.flows.list()]


async def test_b_exhausting_its_retries_halts_the_flow_and_e_never_starts(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=2).client()
    flow = reference_flow(Target.actor(name), RetryPolicy(2, backoff=Backoff("constant", "200ms")), b={"fail_attempts": 99})
    await client.flows.submit(flow)

    status = await finished(client, flow.name)
    assert status.state == "halted" and status.halted_by == "b"
    b = status.steps["b"]
    assert (b.state, b.attempts) == ("failed", 3) and "on purpose" in b.error
    assert {n: status.steps[n].state for n in "cde"} == {"c": "pending", "d": "pending", "e": "pending"}
    await asyncio.sleep(1.0)
    assert set(runs_by_step(handle)) == {"a", "b"}, "nothing downstream of b started"
    assert len(runs_by_step(handle)["b"]) == 3


@pytest.mark.file_only
async def test_a_step_policy_overrides_the_flow_policy(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1).client()
    target = Target.actor(name)
    quick = Backoff("constant", "200ms")
    flow = Flow(f"override-{uuid.uuid4().hex[:6]}", [
        Step("inherits", target, data={"fail_attempts": 1}, depends_on=["overrides", "checks"]),
        Step("overrides", target, data={"fail_attempts": 1}, retry=RetryPolicy(1, backoff=quick)),
        Step("checks", target, retry=RetryPolicy(2, "always", quick)),  # re-runs a success twice
    ], retry=RetryPolicy(0))
    await client.flows.submit(flow)

    status = await finished(client, flow.name)
    assert status.state == "halted" and status.halted_by == "inherits", "the flow's policy: no retries"
    assert {n: (s.state, s.attempts) for n, s in status.steps.items()} == {
        "overrides": ("succeeded", 2), "checks": ("succeeded", 3), "inherits": ("failed", 1),
    }
    runs = runs_by_step(handle)
    assert [r["outcome"] for r in runs["checks"]] == ["succeeded"] * 3
    assert runs["inherits"][0]["started"] >= max(r["started"] for r in runs["checks"])


@pytest.mark.file_only
async def test_cancel_stops_a_flow_before_its_next_step(make_cluster, recorder):
    name, handle = recorder
    client = make_cluster(silos=1).client()
    target = Target.actor(name)
    flow = Flow(f"cancel-{uuid.uuid4().hex[:6]}", [
        Step("slow", target, data={"sleep": 1.0}), Step("next", target, depends_on=["slow"]),
    ])
    await client.flows.submit(flow)
    await wait_for(lambda: "slow" in runs_by_step(handle))
    assert await client.flows.cancel(flow.name) is True
    assert await client.flows.cancel(flow.name) is False, "already cancelled"
    status = await client.flows.get(flow.name)
    assert status.state == "cancelled" and status.steps["next"].state == "cancelled"
    await asyncio.sleep(1.5)
    assert set(runs_by_step(handle)) == {"slow"}
    assert await client.flows.get("no-such-flow") is None


@pytest.mark.file_only
async def test_bad_input_is_rejected_at_submit_and_nothing_is_written(make_cluster, recorder):
    name, _ = recorder
    client = make_cluster(silos=1).client()
    cyclic = Flow("cyclic", [Step("a", Target.actor(name), depends_on=["b"]), Step("b", Target.actor(name), depends_on=["a"])])
    with pytest.raises(InvalidFlow, match="cycle"):
        await client.flows.submit(cyclic)
    with pytest.raises(ValueError, match="max_retries"):
        await client.flows.submit(Flow("negative", [Step("a", Target.actor(name))], retry=RetryPolicy(-1)))
    assert await client.flows.list() == []


async def test_a_flow_survives_its_silos_being_killed_mid_flow(make_cluster, recorder):
    name, handle = recorder
    cluster = make_cluster(silos=2)
    client = cluster.client()
    flow = reference_flow(Target.actor(name), b={"sleep": 1.5})
    await client.flows.submit(flow)
    await wait_for(lambda: "b" in runs_by_step(handle))
    for silo_id in cluster.silo_ids:  # whichever silo runs b dies with it; Ray restarts both
        os.kill(silo_pid(cluster, silo_id), signal.SIGKILL)
    cluster.wait_ready()

    status = await finished(client, flow.name, timeout=60)
    assert status.state == "succeeded", status
    runs = runs_by_step(handle)
    assert set(runs) == set("abcde")
    assert runs["c"][0]["started"] >= runs["b"][-1]["started"] and runs["e"][0]["started"] >= runs["d"][0]["started"]
