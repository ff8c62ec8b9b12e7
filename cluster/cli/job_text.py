"""How jobs, their history and the cluster's status read: the JSON and the text the ``timeshard``
job commands print (``cluster.cli.jobs``), the dashboard reusing the JSON."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from cluster.model.times import format_duration


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _attempt(record: Any) -> dict[str, Any] | None:
    if record is None:
        return None
    return {
        "run_id": record.run_id, "attempt": record.attempt, "occurrence": record.occurrence,
        "scheduled_for": _time(record.scheduled_for), "started_at": _time(record.started_at),
        "outcome": record.outcome, "error": record.error, "ended_at": _time(record.ended_at),
        "triggered": record.triggered,
    }


def _history_row(record: Any) -> dict[str, Any]:
    duration = record.duration
    return {
        "scheduled_for": _time(record.scheduled_for), "started": _time(record.started),
        "lateness_s": record.lateness.total_seconds(),
        "duration_s": None if duration is None else duration.total_seconds(),
        "outcome": record.outcome, "error": record.error, "triggered": record.triggered,
        "occurrence": record.occurrence, "attempt": record.attempt, "run_id": record.run_id, "silo": record.owner,
    }


def named_job_to_json(named: Any) -> dict[str, Any]:
    """Return a ``NamedJob`` as plain JSON values (what ``--json`` prints)."""
    job, status = named.job, named.status
    target = job.target
    return {
        "name": named.name, "namespace": named.namespace, "app_id": named.app_id,
        "generation": named.generation, "job_id": job.id, "updated_at": _time(named.updated_at),
        "target": f"actor:{target.name}@{target.namespace}" if target.kind == "actor"
        else f"grain:{target.cls_path}/{target.key}",
        "schedule": None if job.schedule is None else job.schedule.text, "due": _time(job.due),
        "repeats": job.repeats, "ttl": _time(job.ttl), "overlap": job.overlap, "data": job.data,
        "metadata": named.metadata,
        "jitter": format_duration(job.jitter) if job.jitter else None, "not_before": _time(job.not_before),
        "not_after": _time(job.not_after), "exclude": _exclusions(job.exclude),
        "status": {
            "next_fire": _time(status.next_fire), "successful": status.successful, "failed": status.failed,
            "interrupted": status.interrupted, "consecutive_failures": status.consecutive_failures,
            "attempts": status.attempts, "last_attempted": _time(status.last_attempted),
            "current_attempt": _attempt(status.current_attempt), "last_attempt": _attempt(status.last_attempt),
            "finished": status.finished, "excluded": status.excluded, "overlap_skipped": status.overlap_skipped,
            "next_fires": [_time(t) for t in status.next_fires],
            "staged": None if not status.staged else {"target": status.staged_target,
                                                      "since": _time(status.staged_since)},
            "history": [_history_row(h) for h in status.history],
            "paused": status.paused, "paused_note": status.paused_note,
            "paused_by": status.paused_by, "paused_since": _time(status.paused_since),
        },
    }


def _show(args: argparse.Namespace, obj: Any, text: Callable[[Any], str]) -> None:
    print(json.dumps(obj, indent=2, default=str) if getattr(args, "json", False) else text(obj))


def _job_text(j: dict[str, Any]) -> str:
    s = j["status"]
    lines = [
        f"{j['name']}  (namespace {j['namespace']}, app_id {j['app_id']}, generation {j['generation']})",
        f"  job id        {j['job_id']}",
        f"  target        {j['target']}",
        f"  schedule      {j['schedule'] or '-'}   repeats {j['repeats'] or '-'}   ttl {j['ttl'] or '-'}",
        f"  first due     {j['due']}",
        *_shape_lines(j),
        f"  next fire     {s['next_fire'] or ('finished' if s['finished'] else '-')}",
        f"  next fires    {', '.join(s['next_fires']) or '-'}",
        f"  attempts      {s['successful']} succeeded, {s['failed']} failed, {s['interrupted']} interrupted, "
        f"{s['consecutive_failures']} consecutive failures"
        + (f", {s['excluded']} occurrences excluded" if s["excluded"] else ""),
    ]
    if j["overlap"] != "allow_all":
        lines.append(f"  overlap       {j['overlap']}   {s['overlap_skipped']} occurrences skipped")
    if s["paused"]:
        note = f": {s['paused_note']}" if s["paused_note"] else ""
        lines.append(f"  PAUSED        since {s['paused_since']} by {s['paused_by']}{note}")
    if s["current_attempt"]:
        c = s["current_attempt"]
        lines.append(f"  running       since {c['started_at']} (occurrence {c['occurrence']}, attempt {c['attempt']})")
    if s.get("staged"):
        lines.append(f"  staged: waiting for {s['staged']['target']} since {s['staged']['since']}")
    if s["last_attempt"]:
        last = s["last_attempt"]
        error = f": {last['error']}" if last["error"] else ""
        lines.append(f"  last attempt  {last['outcome']} at {last['ended_at']}{error}")
    if s.get("history"):
        lines.append(f"  history       last {len(s['history'])}, newest first")
        for h in s["history"]:
            took = "-" if h["duration_s"] is None else f"{h['duration_s']:.3f}s"
            kind = "triggered" if h["triggered"] else f"occurrence {h['occurrence']} attempt {h['attempt']}"
            error = f": {h['error']}" if h["error"] else ""
            lines.append(f"    {h['scheduled_for']}  started {h['lateness_s']:.3f}s late, took {took}, "
                         f"{h['outcome']} ({kind}){error}")
    return "\n".join(lines)


def _exclusions(exclude: Any) -> list[str]:
    return [*(c.text for c in exclude.crons), *(d.isoformat() for d in sorted(exclude.dates))]


def _shape_lines(j: dict[str, Any]) -> list[str]:
    """The jitter, bounds and exclusions line of ``get``, when the job has any."""
    parts = [f"{label} {j[key]}" for label, key in (("jitter", "jitter"), ("not before", "not_before"),
                                                    ("not after", "not_after")) if j[key]]
    if j["exclude"]:
        parts.append("exclude " + "; ".join(j["exclude"]))
    return [f"  shape         {'   '.join(parts)}"] if parts else []


def _list_text(jobs: list[dict[str, Any]]) -> str:
    if not jobs:
        return "no jobs"
    rows = [("NAME", "GEN", "SCHEDULE", "NEXT FIRE", "OK", "FAILED", "INTERRUPTED")]
    for j in jobs:
        s = j["status"]
        rows.append((j["name"], str(j["generation"]), j["schedule"] or "once",
                     (s["next_fire"] or "-") + (" (paused)" if s["paused"] else ""),
                     str(s["successful"]), str(s["failed"]), str(s["interrupted"])))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)


#: Why a silo above niceness 0 is an alert, and what to do. Ray runs workers at 15 unless told.
NICENESS_ADVICE = ("any busy process on its node takes the CPU first, and it may miss heartbeats and the "
                   "failover bound; start Ray with RAY_worker_niceness=0")


def niced(silo: Mapping[str, Any]) -> int:
    """The niceness of a silo's ``status()`` if above 0 (an alert), else 0."""
    return max(0, silo.get("niceness") or 0)


def _clock_text(clock: dict[str, Any] | None) -> list[str]:
    """How far this silo's host clock is from the store's, and whether that is too far."""
    if clock is None or clock["offset_low_s"] is None:
        return ["  clock: not measured yet"]
    if clock["store_clock"] == "shared":
        return ["  clock: the store's is this host's"]
    # Jobs fire by the interval's low end: up to its width late (an older silo reports no width).
    late = clock.get("lateness_up_to_s", clock["offset_high_s"] - clock["offset_low_s"])
    lines = [f"  clock: store minus host in [{clock['offset_low_s']:+.3f}s, {clock['offset_high_s']:+.3f}s],"
             f" jobs up to {late * 1e3:.1f} ms late"]
    if clock["exceeded"]:
        lines.append(f"  CLOCK SKEW beyond max_clock_skew ({clock['max_clock_skew_s']}s): fix this host's time sync")
    return lines


SHARD_PREFIX = "shards/"


def _shard_rows(shards: list[dict[str, Any]]) -> list[str]:
    """One row per shard under a header, oldest window first: fits 80 columns with today's shard names."""
    rows = [("shard", "state", "memory", "jobs", "adopted", "")]
    for shard in sorted(shards, key=lambda sh: (sh["window_start"], sh["name"])):
        notes = [f"{shard['paused']} paused" if shard.get("paused") else "",
                 f"{shard['unreadable']} UNREADABLE" if shard.get("unreadable") else ""]
        name = shard["name"].removeprefix(SHARD_PREFIX)
        rows.append((name, shard["state"], "loaded" if shard["loaded"] else "dormant",
                     str(shard["jobs"]) if shard["jobs"] >= 0 else "-", str(shard["adopted_count"]),
                     ", ".join(n for n in notes if n)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = {3, 4}  # numbers
    return ["  " + "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                             for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]


def _status_text(report: dict[str, Any]) -> str:
    """Readable at a glance on an 80-column terminal: a header per silo, its counts, a table of shards.

    Alerts (STAGED, QUARANTINED, PARKED, DAMAGED, CLOCK SKEW, NICED) keep their whole text on one line,
    whatever its length: they carry the job ids and shard names an operator copies into a command.
    """
    lines = [f"namespace {report['namespace']}", f"store {report['store']}", *_keeping_text(report.get("keeping"))]
    for silo in report["silos"]:
        if "error" in silo:
            lines.append(f"silo {silo['silo_id']}: not answering ({silo['error']})")
            continue
        c = silo["counters"]
        lines.append(f"silo {silo['silo_id']}  owner {silo['owner']}  node {silo.get('node', '')[:12] or '-'}  "
                     f"pid {silo['pid']}")
        lines.append(f"  {silo['queued']} queued, {silo['inflight']} in flight, {silo['staged']} staged")
        lines.append(f"  lateness: mean {c.get('lateness_mean_s', 0):.3f}s, max {c.get('lateness_max_s', 0):.3f}s")
        lines.extend(_clock_text(silo.get("clock")))
        if niced(silo):
            lines.append(f"  NICED at {niced(silo)}: {NICENESS_ADVICE}")
        for staged in silo.get("staged_jobs", ()):
            since = datetime.fromtimestamp(staged["since_us"] / 1e6).isoformat(timespec="seconds")
            lines.append(f"  STAGED job {staged['name'] or staged['job']}: waiting for {staged['target']} since {since}")
        if silo["shards"]:
            lines.extend(_shard_rows(silo["shards"]))
        for shard in silo["shards"]:
            if shard.get("quarantined"):
                lines.append(f"  QUARANTINED shard {shard['name']}: {shard['owner_deaths']} owners died while it "
                             "fired; its jobs fire in named batches")
            for job_id in shard.get("parked", ()):
                lines.append(f"  PARKED job {job_id} in shard {shard['name']}: its owners died during its attempts; "
                             f"`timeshard release-quarantine {shard['name']}` runs it again")
        for shard, damage in silo.get("damaged", {}).items():
            lines.append(f"  DAMAGED shard {shard}: {damage['lost']} records lost, {damage['unreadable']} unreadable; "
                         f"copy kept as {damage['kept_as']}")
    return "\n".join(lines)


def _keeping_text(keeping: dict[str, Any] | None) -> list[str]:
    """``silos 3 live, target 3`` and, when they differ or the keeper waits, why."""
    if not keeping:
        return []
    live, target, keeper = keeping["live"], keeping["target"], keeping.get("keeper")
    if keeper is None:
        return [f"silos {live} live, no target: no keeper runs (start with `timeshard up`; `Cluster.start(keep=True)`)"]
    if "error" in keeper:
        return [f"silos {live} live, target unknown: the keeper did not answer ({keeper['error']})"]
    lines = [f"silos {live} live, target {target}" + ("" if live == target else "  BELOW TARGET" if live < target
                                                         else "  above target")]
    if keeper.get("waiting"):
        lines.append(f"  keeper: {keeper['waiting']}")
    if keeper.get("draining"):
        lines.append(f"  draining node(s), no silo placed there: {', '.join(n[:12] for n in keeper['draining'])}")
    for repair in keeper.get("repairs", [])[-3:]:
        at = datetime.fromtimestamp(repair["at"]).isoformat(timespec="seconds")
        lines.append(f"  keeper started silo {repair['silo']} on node {str(repair['node'])[:12] or '-'} at {at} "
                     f"({repair['start_s']:.1f} s to serve)")
    return lines


# -- registration -----------------------------------------------------------------------------
