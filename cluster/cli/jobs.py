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
from typing import Any

from cluster.cli.job_text import (
    _job_text,
    _list_text,
    _show,
    _status_text,
    _time,
    named_job_to_json,
)
from cluster.model.errors import ONE_LINE_ERRORS
from cluster.model.options import DEFAULT_NAMESPACE
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
