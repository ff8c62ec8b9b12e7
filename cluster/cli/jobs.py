"""The job commands of the ``timeshard`` command line: schedule, get, list, delete, trigger,
pause, resume, status, release-quarantine.

Each connects to silos already running in a Ray namespace (``timeshard up`` starts them), acts
through the same client a program uses, and exits 0 (ok), 1 (failure: one line on stderr, no
traceback) or 2 (usage, from argparse). ``cluster.cli`` registers them with
``add_job_commands(subparsers)``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from cluster.model.errors import ONE_LINE_ERRORS
from cluster.model.options import DEFAULT_NAMESPACE
from cluster.model.times import format_duration
from storage import StorageError

__all__ = ["add_job_commands", "named_job_to_json"]

_SCOPE_HELP = "scope of the name (default: default)"

SCHEDULE_EXAMPLES = """examples:
  timeshard schedule db-backup --target actor:backup --schedule '@daily'
  timeshard schedule nudge --target actor:mailer@apps --due-time 2h30m --data '{"to": "x"}'
  timeshard schedule poll --target actor:poller --schedule '@every 30s' --repeats 10 --overwrite
  timeshard schedule sync --target actor:sync --schedule '@every 1m' --overlap skip
  timeshard schedule report --target grain:myapp.grains:Report/42 --schedule '0 0 9 * * Mon'
  timeshard schedule once --target actor:mailer --due-time 2026-10-02T15:00:00Z --metadata team=ops
  timeshard schedule standup --target actor:bot --schedule 'CRON_TZ=Europe/Berlin 0 0 9 * * Mon-Fri' \
      --jitter 2m --exclude 2026-12-24 --exclude 2026-12-25 --not-after 2027-06-30T00:00:00Z
"""


PAUSE_EXAMPLES = """examples:
  timeshard pause db-backup --note 'restore in progress (INC-42)'
  timeshard pause poll --app-id billing --json
  timeshard pause --all --app-id billing --note 'billing freeze'
  timeshard pause --all --job-namespace tenant-7        # every app_id of the namespace

A paused job starts nothing new until resumed: an attempt already running finishes. Exit code 1
if there is no such job (or it has nothing left to run).
"""

RESUME_EXAMPLES = """examples:
  timeshard resume db-backup
  timeshard resume --all --app-id billing

Occurrences that came due while paused follow the job's misfire policy (skip, fire_once,
fire_all); a one-shot job already due fires at once. Exit code 1 if there is no such job.
"""


class _Failure(Exception):
    """A failure to report in one line."""


_PRINTED: tuple[type[BaseException], ...] = (_Failure, StorageError, *ONE_LINE_ERRORS)


#: How long a command waits for Ray's head to answer before saying it cannot reach it.
CONNECT_TIMEOUT = 5.0


def _connect(namespace: str) -> Any:
    import ray

    from cluster._cluster import Cluster

    if not ray.is_initialized():
        _check_reachable()
        # Ray logs this on every connection to a cluster with a token; it is not the user's concern.
        logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
        try:
            # "auto": join the Ray that runs the silos, never start a new empty one.
            ray.init(address="auto", namespace=namespace, log_to_driver=False, configure_logging=False)
        except ConnectionError as exc:
            raise _Failure(f"no running Ray found ({exc}); start the silos with `timeshard up`") from None
    try:
        return Cluster.connect(namespace=namespace)
    except LookupError as exc:
        raise _Failure(str(exc)) from None


def _check_reachable() -> None:
    """Fail in one line within ``CONNECT_TIMEOUT`` when Ray's head does not answer: ``ray.init``
    itself retries an unreachable address for minutes."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        address = canonicalize_bootstrap_address(os.environ.get("RAY_ADDRESS") or "auto")
    except ConnectionError as exc:
        raise _Failure(f"no running Ray found ({exc}); start the silos with `timeshard up`") from None
    if not address or "://" in address:
        return  # Ray Client (ray://) and other schemes: ray.init knows how to reach them
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT).close()
    except (OSError, ValueError) as exc:
        raise _Failure(f"cannot reach Ray at {address} within {CONNECT_TIMEOUT:g} s ({exc}); "
                       "check RAY_ADDRESS or start the silos with `timeshard up`") from None


def _run(work: Callable[[Any, argparse.Namespace], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    """Wrap a command: connect, run it, and turn user errors into one line and exit code 1."""

    def command(args: argparse.Namespace) -> int:
        try:
            client = _connect(args.namespace).client()
            return asyncio.run(_with_args(work, client, args))
        except _PRINTED as exc:
            print(f"timeshard: error: {exc}", file=sys.stderr)
            return 1

    return command


async def _with_args(work: Callable[[Any, argparse.Namespace], Awaitable[int]], client: Any, args: argparse.Namespace) -> int:
    try:
        return await work(client, args)
    finally:
        await client.jobs.close()


def _scope(args: argparse.Namespace) -> dict[str, str]:
    return {"app_id": args.app_id, "namespace": args.job_namespace}


def _common(p: argparse.ArgumentParser, *, scoped: bool = True, json_flag: bool = True) -> None:
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE,
                   help=f"Ray namespace of the silos (default {DEFAULT_NAMESPACE}); the Ray cluster is "
                        "$RAY_ADDRESS, else the one started last on this machine")
    if scoped:
        p.add_argument("--app-id", default="default", help=_SCOPE_HELP)
        p.add_argument("--job-namespace", default="default", help=_SCOPE_HELP)
    if json_flag:
        p.add_argument("--json", action="store_true", help="print JSON instead of text")


# -- schedule ---------------------------------------------------------------------------------

def _metadata_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"metadata {text!r}: expected KEY=VALUE")
    return key, value


def _json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--data is not JSON: {exc}") from None


async def _schedule(client: Any, args: argparse.Namespace) -> int:
    named = await client.jobs.put(
        args.name, target=args.target, schedule=args.schedule, due_time=args.due_time, repeats=args.repeats,
        ttl=args.ttl, data=args.data, metadata=dict(args.metadata) if args.metadata else None,
        jitter=args.jitter, not_before=args.not_before, not_after=args.not_after, exclude=args.exclude,
        overlap=args.overlap, overwrite=args.overwrite, **_scope(args),
    )
    _show(args, named_job_to_json(named), _job_text)
    return 0


# -- get / list / delete ----------------------------------------------------------------------

async def _get(client: Any, args: argparse.Namespace) -> int:
    named = await client.jobs.get(args.name, **_scope(args))
    if named is None:
        raise _Failure(f"no job named {args.name!r} in namespace {args.job_namespace!r}, app_id {args.app_id!r}")
    _show(args, named_job_to_json(named), _job_text)
    return 0


async def _list(client: Any, args: argparse.Namespace) -> int:
    found = [named_job_to_json(n) for n in await client.jobs.list(args.prefix, **_scope(args))]
    _show(args, found, _list_text)
    return 0


async def _delete(client: Any, args: argparse.Namespace) -> int:
    if args.prefix:
        count = await client.jobs.delete_prefix(args.name, **_scope(args))
        print(f"deleted {count} job(s) named {args.name}*")
        return 0
    if not await client.jobs.delete(args.name, **_scope(args)):
        raise _Failure(f"no job named {args.name!r} in namespace {args.job_namespace!r}, app_id {args.app_id!r}")
    print(f"deleted {args.name}")
    return 0


# -- trigger ----------------------------------------------------------------------------------

TRIGGER_EXAMPLES = """examples:
  timeshard trigger db-backup
  timeshard trigger poll --app-id billing --json
  timeshard trigger nightly --job-namespace prod --namespace timeshard

The run is a one-shot copy of the job due now; the job's own schedule does not move. It counts
in `timeshard get NAME` like any attempt (its history marks it "triggered").
"""


async def _trigger(client: Any, args: argparse.Namespace) -> int:
    run = await client.jobs.trigger(args.name, **_scope(args))
    _show(args, {"name": args.name, "namespace": args.job_namespace, "app_id": args.app_id, "run_job_id": run.id,
                 "triggered_from": run.metadata.get("timeshard.triggered_from"), "due": _time(run.due),
                 "shard": run.shard}, _trigger_text)
    return 0


def _trigger_text(t: dict[str, Any]) -> str:
    return f"triggered {t['name']}: run {t['run_job_id']} due {t['due']} (shard {t['shard']})"


# -- pause / resume ---------------------------------------------------------------------------

async def _pause(client: Any, args: argparse.Namespace) -> int:
    return await _set_paused(client, args, True)


async def _resume(client: Any, args: argparse.Namespace) -> int:
    return await _set_paused(client, args, False)


async def _set_paused(client: Any, args: argparse.Namespace, paused: bool) -> int:
    verb = "paused" if paused else "resumed"
    if args.all:
        app_id = args.app_id  # None: every app_id of the namespace
        scope = {"app_id": app_id, "namespace": args.job_namespace}
        if paused:
            count = await client.jobs.pause_all(note=args.note, **scope)
        else:
            count = await client.jobs.resume_all(**scope)
        where = f"namespace {args.job_namespace!r}" + ("" if app_id is None else f", app_id {app_id!r}")
        _show(args, {verb: count, "namespace": args.job_namespace, "app_id": app_id},
              lambda _: f"{verb} {count} job(s) in {where}")
        return 0
    scope = {"app_id": args.app_id or "default", "namespace": args.job_namespace}
    if paused:
        named = await client.jobs.pause(args.name, note=args.note, **scope)
    else:
        named = await client.jobs.resume(args.name, **scope)
    _show(args, named_job_to_json(named), _job_text)
    return 0


# -- status -----------------------------------------------------------------------------------

def _status(args: argparse.Namespace) -> int:
    try:
        cluster = _connect(args.namespace)
    except _Failure as exc:
        print(f"timeshard: error: {exc}", file=sys.stderr)
        return 1
    statuses = cluster.status()
    _show(args, {"namespace": cluster.namespace, "store": cluster.store_url,
                 "keeping": keeping_summary(cluster.keeping(), statuses), "silos": statuses}, _status_text)
    return 0


def keeping_summary(keeping: Mapping[str, Any] | None, statuses: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Target versus live silos: ``live`` counts the silos whose status answered just now (what
    serves), ``target`` is the keeper's (None without a keeper), with its own view beside."""
    live = sum(1 for s in statuses if "error" not in s)
    if keeping is None:
        return {"target": None, "live": live, "keeper": None}
    return {"target": keeping.get("target"), "live": live, "keeper": dict(keeping)}


# -- release-quarantine -----------------------------------------------------------------------

def _release_quarantine(args: argparse.Namespace) -> int:
    try:
        cluster = _connect(args.namespace)
        released = cluster.release_quarantine(args.shard)
    except _Failure as exc:
        print(f"timeshard: error: {exc}", file=sys.stderr)
        return 1
    except LookupError as exc:
        print(f"timeshard: error: {exc.args[0]}", file=sys.stderr)
        return 1
    _show(args, released, _released_text)
    return 0


def _released_text(released: dict[str, Any]) -> str:
    jobs = released["released_jobs"]
    if not released["was_quarantined"] and not jobs:
        return f"shard {released['shard']} was not in quarantine and held no parked jobs"
    state = "released from quarantine" if released["was_quarantined"] else "not in quarantine"
    return f"shard {released['shard']} {state}; {len(jobs)} parked job(s) queued again" + "".join(
        f"\n  {job_id}" for job_id in jobs)


# -- output -----------------------------------------------------------------------------------

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

    Alerts (STAGED, QUARANTINED, PARKED, DAMAGED, CLOCK SKEW) keep their whole text on one line,
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

def add_job_commands(subparsers: argparse._SubParsersAction) -> None:
    """Register ``schedule``, ``get``, ``trigger``, ``list``, ``delete``, ``pause``, ``resume``, ``status`` and
    ``release-quarantine``."""
    raw = argparse.RawDescriptionHelpFormatter

    p = subparsers.add_parser("schedule", help="schedule (or replace) a named job", formatter_class=raw,
                              description="Schedule the job NAME on the running silos; prints it.",
                              epilog=SCHEDULE_EXAMPLES)
    p.add_argument("name", help="job name, unique per --job-namespace and --app-id")
    p.add_argument("--target", required=True, help="actor:NAME, actor:NAME@RAY_NAMESPACE or grain:module:Class/KEY")
    p.add_argument("--schedule", help="cron with seconds ('0 30 * * * *'), '@every 1h30m', '@daily', 'R4/PT3S'")
    p.add_argument("--due-time", help="first fire: '2h30m', 'PT2H30M' or '2026-10-02T15:00:00Z'")
    p.add_argument("--repeats", type=int, help="stop after this many occurrences (needs --schedule)")
    p.add_argument("--ttl", help="no occurrence at or after this time (same forms as --due-time)")
    p.add_argument("--overlap", default="allow_all",
                   help="occurrences due while one runs: allow_all (default), skip, buffer_one, buffer_all, cancel_other")
    p.add_argument("--data", type=_json_value, help="JSON payload handed to the handler")
    p.add_argument("--metadata", type=_metadata_pair, action="append", metavar="KEY=VALUE", help="repeatable")
    p.add_argument("--jitter", help="fire each occurrence up to this much after its time, never before ('30s')")
    p.add_argument("--not-before", help="no occurrence before this time (same forms as --due-time)")
    p.add_argument("--not-after", help="no occurrence after this time; the job ends there")
    p.add_argument("--exclude", action="append", metavar="CRON_OR_DATE",
                   help="skip occurrences matching this cron text or on this YYYY-MM-DD (schedule's zone); repeatable")
    p.add_argument("--overwrite", action="store_true", help="replace a job of that name (last write wins)")
    _common(p)
    p.set_defaults(func=_run(_schedule))

    p = subparsers.add_parser("get", help="show a named job and its status", formatter_class=raw,
                              description="Show the job NAME: definition, next fire times, counters, attempts.",
                              epilog="examples:\n  timeshard get db-backup\n  timeshard get poll --app-id billing --json\n")
    p.add_argument("name")
    _common(p)
    p.set_defaults(func=_run(_get))

    p = subparsers.add_parser("trigger", help="run a named job once now, without moving its schedule",
                              formatter_class=raw,
                              description="Run the job NAME once now, out of band: a one-shot copy of its "
                                          "definition, durable once this returns. Its schedule does not move. "
                                          "Exit code 1 if there is no such job.",
                              epilog=TRIGGER_EXAMPLES)
    p.add_argument("name")
    _common(p)
    p.set_defaults(func=_run(_trigger))

    p = subparsers.add_parser("list", help="list named jobs", formatter_class=raw,
                              description="List the jobs of one --job-namespace / --app-id, by name.",
                              epilog="examples:\n  timeshard list\n  timeshard list db- --json\n")
    p.add_argument("prefix", nargs="?", default="", help="only names starting with this")
    _common(p)
    p.set_defaults(func=_run(_list))

    p = subparsers.add_parser("delete", help="delete a named job", formatter_class=raw,
                              description="Delete the job NAME; once this returns it does not start again. "
                                          "Exit code 1 if there is no such job.",
                              epilog="examples:\n  timeshard delete db-backup\n  timeshard delete tmp- --prefix\n")
    p.add_argument("name", help="job name (a name prefix with --prefix)")
    p.add_argument("--prefix", action="store_true", help="delete every job whose name starts with NAME")
    _common(p, json_flag=False)
    p.set_defaults(func=_run(_delete))

    for verb, work, examples in (("pause", _pause, PAUSE_EXAMPLES), ("resume", _resume, RESUME_EXAMPLES)):
        p = subparsers.add_parser(
            verb, help=f"{verb} a named job, or every job of a scope", formatter_class=raw, epilog=examples,
            description=f"{verb.capitalize()} the job NAME (or, with --all, every job of --job-namespace, or of "
                        f"--app-id in it); prints it. Durable: it holds across silo failures.")
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("name", nargs="?", help="job name")
        which.add_argument("--all", action="store_true",
                           help=f"{verb} every job of --job-namespace (of --app-id only, if given)")
        if verb == "pause":
            p.add_argument("--note", help="why (at most 200 characters); shown by `timeshard get`")
        _common(p)
        p.set_defaults(func=_run(work), app_id=None)  # NAME: "default"; --all: every app_id unless given

    p = subparsers.add_parser("status", help="silos, shards, quarantined shards, parked jobs, lateness",
                              formatter_class=raw,
                              description="Show each silo: its shards (owner, state, window, job count), "
                                          "quarantined shards and parked jobs, queue and lateness.",
                              epilog="examples:\n  timeshard status\n  timeshard status --namespace prod --json\n")
    _common(p, scoped=False)
    p.set_defaults(func=_status)

    p = subparsers.add_parser("release-quarantine", help="take a shard out of quarantine, run its parked jobs again",
                              formatter_class=raw,
                              description="Release SHARD (as `timeshard status` names it) from quarantine: its "
                                          "jobs fire in batches again and its parked jobs are queued again. Exit "
                                          "code 1 if no silo holds SHARD.",
                              epilog="examples:\n  timeshard release-quarantine "
                                     "shards/20300101T000000.000000Z-0.1-000001\n")
    p.add_argument("shard", help="shard name, e.g. shards/20300101T000000.000000Z-0.1-000001")
    _common(p, scoped=False)
    p.set_defaults(func=_release_quarantine)
