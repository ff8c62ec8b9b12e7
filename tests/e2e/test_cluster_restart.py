"""A whole-cluster restart loses nothing: the store is the truth (issue 14, point 3).

Phase 1 (its own process and Ray) schedules one-shot jobs, an ``@every`` job, a cron job, a named
job and a flow; some fire. Then Ray goes away entirely, silos and handlers with it, with no
graceful stop: the head node is lost. Phase 2 (a new process, a fresh Ray, fresh silos and
handler actors on the same store) must fire everything as if nothing had happened. Runs with
``-s`` print how long the fresh cluster took to serve and to fire.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from handlers.builtin import read_records
from tests.e2e.restart_phase import LATE_RUNS, RUNS

pytestmark = pytest.mark.ray

ROOT = Path(__file__).resolve().parents[2]
IN_FLIGHT_MARGIN = 0.5  # an outcome is durable within milliseconds of its run; nothing is due this close to the shutdown


def run_phase(phase: str, work: Path, store_url: str, namespace: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)  # a fresh local Ray, never the test session's
    done = subprocess.run([sys.executable, "-m", "tests.e2e.restart_phase", phase, str(work), store_url, namespace],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"phase {phase} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return json.loads((work / ("phase1.json" if phase == "schedule" else "phase2.json")).read_text())


def same(a: float, b: float) -> bool:
    return abs(a - b) < 1e-5  # times travel as float seconds; the store keeps microseconds


def on_grid(runs: list[dict[str, Any]], first: float, period: float) -> bool:
    return all(same(r["scheduled_for"], first + round((r["scheduled_for"] - first) / period) * period) for r in runs)


#: The README's bound on an attempt's showing in ``get()``.
STATUS_SHOWN_WITHIN_S = 1.0


def test_a_whole_cluster_restart_fires_every_job_as_if_nothing_happened(store_url: str, tmp_path: Path) -> None:
    namespace = f"ts-restart-{os.getpid()}"
    plan = run_phase("schedule", tmp_path, store_url, namespace)
    down = plan["shutdown"]
    assert down["all_gone"], "a process of the first Ray outlived its shutdown"
    assert plan["faults"] == [], plan["faults"]
    assert plan["shards_before"]["loaded"] and plan["shards_before"]["dormant"], plan["shards_before"]
    table = plan["after_shutdown"]
    # No silo stopped gracefully: every row still says active and every shard keeps its first owner.
    assert {m["status"] for m in table["members"].values()} == {"active"}, table["members"]
    assert table["shards"] and all(owner.endswith("#1") for owner in table["shards"].values()), table["shards"]

    after = run_phase("resume", tmp_path, store_url, namespace)
    assert after["faults"] == [], after["faults"]
    runs = sorted(read_records(str(tmp_path / RUNS)) + read_records(str(tmp_path / LATE_RUNS)),
                  key=lambda r: r["started"])
    start_called, ready = after["timing"]["start_called"], after["timing"]["ready"]
    before = [r for r in runs if r["started"] < down["gone"]]
    restarted = [r for r in runs if r["started"] >= start_called]
    assert len(before) + len(restarted) == len(runs), "something ran while no Ray was up"
    assert restarted, "nothing fired after the restart"

    # Nothing early, ever; an attempt in flight at the shutdown is the only thing that may run twice.
    early = [r for r in runs if r["started"] < r["scheduled_for"] or r["scheduled_for"] < r["due"]]
    assert not early, early
    in_flight = {(r["job_id"], r["occurrence"]) for r in runs
                 if down["began"] - IN_FLIGHT_MARGIN <= r["received"] <= down["gone"]}
    successes = Counter((r["job_id"], r["occurrence"]) for r in runs if r["outcome"] == "succeeded")
    twice = {unit for unit, n in successes.items() if n > 1}
    assert twice <= in_flight, f"ran twice without being in flight at the shutdown: {twice - in_flight}"

    by_job: dict[str, list[dict[str, Any]]] = {}  # every run, the repeat of an in-flight success dropped
    succeeded: set[tuple[str, int]] = set()
    for r in runs:
        unit = (r["job_id"], r["occurrence"])
        if r["outcome"] == "succeeded":
            if unit in succeeded:
                continue
            succeeded.add(unit)
        by_job.setdefault(r["job_id"], []).append(r)

    # One-shot jobs: each exactly once, none early, none lost: before, during and after the outage.
    lateness: dict[str, list[float]] = {"before the shutdown": [], "due in the outage": [], "due after ready": []}
    for job in plan["one_shots"]:
        fired = by_job.pop(job["id"], [])
        assert len(fired) == 1, f"one-shot {job} ran {len(fired)} times: {fired}"
        run = fired[0]
        assert run["outcome"] == "succeeded" and run["started"] >= job["due"], run
        kind = ("before the shutdown" if run["started"] < down["gone"]
                else "due in the outage" if job["due"] < ready else "due after ready")
        lateness[kind].append(run["started"] - job["due"])
    assert all(lateness.values()), f"the plan must cover each case: {lateness}"

    # A retry decided before the shutdown is kept: the second attempt comes after the restart, on time.
    retry = by_job.pop(plan["retry"]["id"])
    assert [(r["dequeue_count"], r["outcome"]) for r in retry] == [(1, "failed"), (2, "succeeded")], retry
    assert retry[0]["started"] < down["began"] and retry[1]["started"] >= start_called, retry
    assert same(retry[1]["scheduled_for"], retry[0]["scheduled_for"] + plan["retry"]["delay"]), retry

    # Recurring jobs run their full count in order, on their grid, one chain across the restart.
    for kind in ("every", "cron", "named"):
        spec = plan[kind]
        fired = by_job.pop(spec["id"])
        assert [r["occurrence"] for r in fired] == list(range(1, spec["repeats"] + 1)), (kind, fired)
        assert all(r["outcome"] == "succeeded" for r in fired), (kind, fired)
        scheduled = [r["scheduled_for"] for r in fired]
        assert scheduled == sorted(set(scheduled)) and on_grid(fired, spec["first"], spec["period"]), (kind, scheduled)
        old, new = [r for r in fired if r["started"] < down["gone"]], [r for r in fired if r["started"] >= start_called]
        assert old and new, (kind, "spans the restart", scheduled)
        assert same(new[0]["scheduled_for"], old[-1]["scheduled_for"] + spec["period"]), (kind, "the chain goes on", scheduled)
        if kind == "cron":  # fire_all: every occurrence missed in the outage, back to back
            assert all(same(t, spec["first"] + k * spec["period"]) for k, t in enumerate(scheduled)), scheduled
        else:  # fire_once (the default): one catch-up for the outage, then the grid from then on
            assert all(r["scheduled_for"] > new[0]["started"] for r in new[1:]), (kind, "one catch-up", scheduled)

    # The named job's counters go on: those before the shutdown count with those after it.
    named_before, named_after = plan["named"]["status_before"], after["named_status"]
    # get() shows an attempt within the README's 1 s: each run that started a second or more before
    # the look is counted; one of the last second may not be yet (a CI run saw the e+2 s run 0.7 s
    # later not yet counted).
    looked, runs_before = plan["named"]["looked"], [r for r in before if r["job_id"] == plan["named"]["id"]]
    shown = sum(1 for r in runs_before if r["started"] < looked - STATUS_SHOWN_WITHIN_S)
    started = sum(1 for r in runs_before if r["started"] < looked)
    assert 1 <= shown <= named_before["successful"] <= started, (named_before, shown, started)
    assert named_after == {"successful": plan["named"]["repeats"], "failed": 0, "interrupted": 0,
                           "finished": True, "next_fire": None}, named_after

    # The flow resumes where it was: a ran before the shutdown; b (whose handler came back only
    # with the new Ray) and then c after it; each step once, in dependency order.
    flow = after["flow"]
    assert plan["flow"]["before"]["state"] == "running" and flow is not None and flow["state"] == "succeeded", flow
    assert {n: (s["state"], s["attempts"]) for n, s in flow["steps"].items()} == {
        n: ("succeeded", 1) for n in ("a", "b", "c")}, flow
    step_runs = {n: by_job.pop(s["job_id"]) for n, s in flow["steps"].items()}
    assert all(len(r) == 1 for r in step_runs.values()), step_runs
    a, b, c = (step_runs[n][0] for n in ("a", "b", "c"))
    assert a["started"] < down["began"] <= start_called <= b["started"] <= c["started"], (a, b, c)
    assert b["target"] == "recorder-late"

    assert not by_job, f"runs of jobs nobody scheduled: {by_job}"

    first_fire = min(r["started"] for r in restarted)
    print(f"\n[{store_url.split(':')[0]}] first Ray: init {plan['timing']['ray_init']:.1f} s, Cluster.start "
          f"{plan['timing']['cluster_start']:.2f} s, {len(before)} runs, then shutdown {down['returned'] - down['began']:.2f} s "
          f"(every process gone after {down['gone'] - down['began']:.2f} s)")
    print(f"  fresh Ray: init {after['timing']['ray_init']:.1f} s; Cluster.start -> ready {ready - start_called:.2f} s, "
          f"-> first fire {first_fire - start_called:.2f} s; outage (processes gone -> ready) {ready - down['gone']:.1f} s")
    for kind, values in lateness.items():
        print(f"  one-shots {kind}: {len(values)}, lateness {min(values):.2f} .. {max(values):.2f} s")
    print(f"  attempts in flight at the shutdown: {len(in_flight)}; ran twice: {len(twice)}")
