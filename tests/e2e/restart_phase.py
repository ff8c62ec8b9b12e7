"""One phase of the whole-cluster restart test, in a process of its own with a fresh local Ray.

    python -m tests.e2e.restart_phase schedule WORK_DIR STORE_URL NAMESPACE
    python -m tests.e2e.restart_phase resume WORK_DIR STORE_URL NAMESPACE

One process cannot run two Rays, and the test's own process may hold one already; so each phase
starts its own (``address="local"``), and ending the process that started it ends that whole Ray:
GCS, raylet, silos and handler actors alike. That is the lost head node.

``schedule`` starts 3 silos and a ``Recorder``, schedules one-shot jobs (one of them failing once
and retrying across the restart), an ``@every`` job, a cron job (``fire_all``), a named job and a
3-step flow whose middle step targets a handler actor that only exists after the restart. Some of
them fire. At a moment when nothing is due, it shuts Ray down with no graceful silo stop, waits
until every process of that Ray is gone, and writes ``phase1.json`` (the plan: job ids, due times,
the shutdown window, timings).

``resume`` starts a fresh Ray, fresh recorders on the same files and 3 fresh silos on the same
store, waits until the plan has run out (every expected run recorded, every silo's queue empty),
and writes ``phase2.json`` (timings, the named job's status, the flow's status). It writes what it
saw even when something never came, and the test judges it.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import ray

from cluster import Cluster, FailurePolicy, Flow, Step, Target
from cluster._cluster import start_or_join_ray
from cluster.cli.silologs import faults_in, ray_logs_dir
from cluster.runtime.membership import MEMBER_PREFIX
from cluster.runtime.shardlog import SHARD_PREFIX
from handlers.builtin import Recorder, read_records
from storage import open_store
from tests.e2e.conftest import FAST

# A step's target may be absent for a whole outage: it waits (staged) instead of failing.
OPTIONS = FAST.with_(undeliverable_timeout="60s")
SILOS = 3
RECORDER, LATE_RECORDER = "recorder", "recorder-late"  # the late one exists only after the restart
RUNS, LATE_RUNS = "runs.jsonl", "runs-late.jsonl"
NAMED, FLOW = "restart-named", "restart-flow"
EVERY_REPEATS, CRON_REPEATS, NAMED_REPEATS = 10, 8, 6
RETRY_DELAY = 6.0
# Offsets from E (an even second): every recurring job fires at E, E+2, E+4 ...; the shutdown
# starts at E+3, a second clear of any due time, so no attempt is in flight when Ray goes.
EARLY_ONE_SHOTS = (0.25, 0.75)
LATE_ONE_SHOTS = tuple(4.5 + 1.5 * k for k in range(16))  # E+4.5 .. E+27: in the outage and after it
RETRY_ONE_SHOT = 1.0
SHUTDOWN_AT = 3.0
RESUME_TIMEOUT = 60.0

RecorderActor = ray.remote(Recorder)


def _start_ray(namespace: str) -> float:
    began = time.monotonic()
    start_or_join_ray("local", namespace=namespace, num_cpus=4, include_dashboard=False, log_to_driver=False,
                      configure_logging=False, object_store_memory=100 * 1024 * 1024)
    return time.monotonic() - began


def _recorder(name: str, path: Path) -> Any:
    handle = RecorderActor.options(name=name, num_cpus=0).remote(str(path))
    ray.get(handle.executions.remote(), timeout=60)
    return handle


def _at(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, timezone.utc)


async def _sleep_until(ts: float) -> None:
    await asyncio.sleep(max(0.0, ts - time.time()))


def _status_json(status: Any) -> dict[str, Any]:
    return {"successful": status.successful, "failed": status.failed, "interrupted": status.interrupted,
            "finished": status.finished, "next_fire": None if status.next_fire is None else status.next_fire.timestamp()}


def _flow_json(status: Any) -> dict[str, Any] | None:
    if status is None:
        return None
    return {"state": status.state, "halted_by": status.halted_by,
            "steps": {n: {"state": s.state, "attempts": s.attempts, "depends_on": list(s.depends_on),
                          "job_id": s.job_id} for n, s in status.steps.items()}}


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie runs nothing
    except FileNotFoundError:
        return True


async def _schedule(cluster: Cluster) -> dict[str, Any]:
    client = cluster.client()
    e = float(math.ceil((time.time() + 2.0) / 2.0) * 2)  # an even second: on the */2 cron's grid too
    await _sleep_until(e - 1.0)
    one_shots = await client.schedule_jobs(
        [{"target": Target.actor(RECORDER), "name": f"once-{k}", "due": _at(e + dt)}
         for k, dt in enumerate(EARLY_ONE_SHOTS + LATE_ONE_SHOTS)])
    retry = await client.schedule_job(
        Target.actor(RECORDER), "retry", _at(e + RETRY_ONE_SHOT), data={"fail_attempts": 1},
        failure_policy=FailurePolicy.constant(f"{RETRY_DELAY}s", max_retries=3))
    every = await client.schedule_job(Target.actor(RECORDER), "every", _at(e), schedule="@every 2s",
                                      repeats=EVERY_REPEATS)
    cron = await client.schedule_job(Target.actor(RECORDER), "cron", _at(e), schedule="*/2 * * * * *",
                                     repeats=CRON_REPEATS, misfire="fire_all")
    named = await client.jobs.put(NAMED, target=Target.actor(RECORDER), schedule="@every 2s", due_time=_at(e),
                                  repeats=NAMED_REPEATS)
    await client.flows.submit(Flow(FLOW, [
        Step("a", Target.actor(RECORDER)),
        Step("b", Target.actor(LATE_RECORDER), depends_on=["a"]),
        Step("c", Target.actor(RECORDER), depends_on=["b"]),
    ]))
    await _sleep_until(e + SHUTDOWN_AT - 0.3)
    looked = time.time()
    before = await client.jobs.get(NAMED)
    flow_before = await client.flows.get(FLOW)
    assert before is not None
    held = [shard for s in cluster.status(timeout=10) for shard in s["shards"]]
    await _sleep_until(e + SHUTDOWN_AT)
    return {
        "e": e,
        "one_shots": [{"id": j.id, "due": j.due.timestamp()} for j in one_shots],
        "retry": {"id": retry.id, "due": retry.due.timestamp(), "delay": RETRY_DELAY},
        "every": {"id": every.id, "first": e, "period": 2.0, "repeats": EVERY_REPEATS},
        "cron": {"id": cron.id, "first": e, "period": 2.0, "repeats": CRON_REPEATS},
        "named": {"id": named.job.id, "first": e, "period": 2.0, "repeats": NAMED_REPEATS,
                  "status_before": _status_json(before.status), "looked": looked},
        "flow": {"before": _flow_json(flow_before)},
        "shards_before": {"loaded": sum(1 for x in held if x["loaded"]), "dormant": sum(1 for x in held if not x["loaded"])},
    }


async def _table(store_url: str) -> dict[str, Any]:
    """Who the store says is alive and owns what: read after the shutdown, without any silo."""
    store = open_store(store_url)
    try:
        members = {info.metadata["silo_id"]: dict(info.metadata) for info in await store.list(MEMBER_PREFIX)}
        shards = {info.name: info.metadata.get("owner", "") for info in await store.list(SHARD_PREFIX)}
    finally:
        await store.close()
    return {"members": members, "shards": shards}


def schedule(work: Path, store_url: str, namespace: str) -> dict[str, Any]:
    init = _start_ray(namespace)
    logs = ray_logs_dir()
    recorder = _recorder(RECORDER, work / RUNS)
    began = time.monotonic()
    cluster = Cluster.start(store_url, silos=SILOS, namespace=namespace, options=OPTIONS)
    start = time.monotonic() - began
    pids = [ray.get(h.ready.remote(), timeout=60)["pid"] for h in cluster.silos]
    pids.append(ray.get(recorder.__ray_call__.remote(lambda self: os.getpid()), timeout=60))
    plan = asyncio.run(_schedule(cluster))
    # The head is lost: no silo stops gracefully; ray.shutdown() ends every process this Ray started.
    shutdown_began = time.time()
    ray.shutdown()
    shutdown_returned = time.time()
    while not all(_gone(pid) for pid in pids) and time.time() < shutdown_returned + 30:
        time.sleep(0.05)
    plan["shutdown"] = {"began": shutdown_began, "returned": shutdown_returned, "gone": time.time(),
                        "all_gone": all(_gone(pid) for pid in pids)}
    plan["timing"] = {"ray_init": init, "cluster_start": start}
    plan["after_shutdown"] = asyncio.run(_table(store_url))
    plan["faults"] = faults_in(logs, {})
    return plan


async def _wait_until_done(cluster: Cluster, plan: dict[str, Any], work: Path, deadline: float) -> dict[str, Any]:
    client = cluster.client()
    expected = {j["id"]: 1 for j in plan["one_shots"]}
    expected.update({plan["retry"]["id"]: 1, plan["every"]["id"]: plan["every"]["repeats"],
                     plan["cron"]["id"]: plan["cron"]["repeats"], plan["named"]["id"]: plan["named"]["repeats"]})
    named = flow = None
    while time.monotonic() < deadline:
        succeeded: dict[str, int] = {}
        for r in read_records(str(work / RUNS)) + read_records(str(work / LATE_RUNS)):
            if r["outcome"] == "succeeded":
                succeeded[r["job_id"]] = succeeded.get(r["job_id"], 0) + 1
        named, flow = await client.jobs.get(NAMED), await client.flows.get(FLOW)
        if (all(succeeded.get(job, 0) >= n for job, n in expected.items())
                and named is not None and named.status.finished
                and flow is not None and flow.state != "running"
                and _idle(cluster)):
            break
        await asyncio.sleep(0.2)
    return {"named_status": None if named is None else _status_json(named.status), "flow": _flow_json(flow)}


def _idle(cluster: Cluster) -> bool:
    """Nothing left to fire: every silo answers with an empty queue, no attempt running or staged."""
    statuses = cluster.status(timeout=10)
    return all("error" not in s and s["queued"] == 0 and s["inflight"] == 0 and s["staged"] == 0
               and all(shard["jobs"] == 0 for shard in s["shards"]) for s in statuses)


def resume(work: Path, store_url: str, namespace: str) -> dict[str, Any]:
    plan = json.loads((work / "phase1.json").read_text())
    init = _start_ray(namespace)
    logs = ray_logs_dir()
    # Kept referenced: Ray ends an actor, named or not, once its owner holds no handle to it.
    recorders = [_recorder(RECORDER, work / RUNS), _recorder(LATE_RECORDER, work / LATE_RUNS)]
    start_called = time.time()
    cluster = Cluster.start(store_url, silos=SILOS, namespace=namespace, options=OPTIONS)
    ready = time.time()
    seen = asyncio.run(_wait_until_done(cluster, plan, work, time.monotonic() + RESUME_TIMEOUT))
    status = cluster.status(timeout=10)
    del recorders
    ray.shutdown()
    return {
        **seen,
        "timing": {"ray_init": init, "start_called": start_called, "ready": ready},
        "owners": sorted({shard["name"]: s.get("owner") for s in status for shard in s.get("shards", [])}.items()),
        "faults": faults_in(logs, {}),
    }


def main(argv: list[str]) -> int:
    phase, work, store_url, namespace = argv
    out = (schedule if phase == "schedule" else resume)(Path(work), store_url, namespace)
    (Path(work) / ("phase1.json" if phase == "schedule" else "phase2.json")).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
