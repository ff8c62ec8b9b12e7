"""The ``timeshard`` command line.

    timeshard demo                       the main job: 3 silos, real jobs, a crash, a summary
    timeshard up --store file:///var/ts  run silos in the foreground until Ctrl-C
    timeshard drain --node self          move this node's silos off it (a preStop hook)
    timeshard bench                      run the benchmark suite (or: bench queue storage ...)
    timeshard ui                         a web dashboard at http://127.0.0.1:8470

Exit codes: 0 ok, 1 failure (one line on stderr, no traceback for a user error), 2 usage.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from cluster.cli.drain import add_drain_command
from cluster.cli.jobs import add_job_commands
from cluster.cli.ui import add_ui_command
from cluster.model.errors import ONE_LINE_ERRORS
from cluster.model.options import DEFAULT_NAMESPACE
from storage import StorageError

EPILOG = """examples:
  timeshard demo                                   # the main job, about a minute
  timeshard up --store file://./.timeshard --silos 3
  timeshard up --store azure://jobs --shard-duration 30m
  timeshard drill --kills 20 --pause                # failover drill, table + timeline PNG
  timeshard bench queue storage --quick
"""


class UserError(Exception):
    """A failure to report in one line, without a traceback."""


_PRINTED: tuple[type[BaseException], ...] = (UserError, StorageError, *ONE_LINE_ERRORS)


def _add_up(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "up",
        help="run silos on a store in the foreground (Ctrl-C stops them gracefully)",
        description="Start silos on STORE (in a new local Ray, or the Ray cluster at --address) and show a "
        "live status line until Ctrl-C, which stops them gracefully. If silos already run in the namespace, "
        "scale them to --silos: new ones take a fair share of the shards; removed ones hand theirs over.",
        epilog="examples:\n  timeshard up --store file://./.timeshard --silos 3 --shard-duration 1h\n"
        "  timeshard up --address auto --store azure://jobs?account_url=https://acct.blob.core.windows.net "
        "--silos 6 --detach\n  timeshard up --address auto --silos 4 --detach    # scale a running cluster to 4",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--store", default="file://./.timeshard", help="store URL (default file://./.timeshard)")
    p.add_argument("--silos", type=int, default=3,
                   help="how many silos (default 3); on a running cluster, scale to this many")
    p.add_argument("--namespace", default=DEFAULT_NAMESPACE, help="Ray namespace (default timeshard)")
    p.add_argument("--address", default=None,
                   help="join the Ray cluster at ADDRESS (host:port, or 'auto'); default: a new local Ray")
    p.add_argument("--detach", action="store_true",
                   help="start or scale the silos, then return; they keep running in Ray")
    p.add_argument("--placement", choices=("spread", "pack"), default=None,
                   help="spread: one silo per node first (default); pack: together on one node")
    p.add_argument("--shard-duration", default=None, help="shard window, e.g. 1h, 30m (default 1h)")
    p.add_argument("--lookahead", default=None, help="load shards this far ahead, e.g. 5m (default 5m)")
    p.set_defaults(func=_run_up)


def _run_up(args: argparse.Namespace) -> int:
    from cluster.cli.up import run_up

    return run_up(args)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the main job: 3 silos, one-shot, cron and failing jobs, a silo crash, a summary",
        description="A local Ray, 3 silos on ./.timeshard/demo, a recording handler. Schedules "
        "one-shot jobs, a cron every 2 s, a job that fails twice and succeeds under back-off; "
        "kills one silo half-way (Ray restarts it) and ends with fired / on time / retried / lost.",
        epilog="example: timeshard demo --seconds 40",
    )
    p.add_argument("--store", default="file://./.timeshard/demo", help="store URL (wiped first when it is a local file store)")
    p.add_argument("--seconds", type=float, default=30.0, help="span over which jobs fall due (default 30)")
    p.add_argument("--jobs", type=int, default=300, help="one-shot jobs to schedule (default 300)")
    p.add_argument("--no-crash", action="store_true", help="do not kill a silo half-way")
    p.set_defaults(func=_run_demo)


def _run_demo(args: argparse.Namespace) -> int:
    from cluster.cli.demo import run_demo

    return run_demo(args)


def _add_drill(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "drill",
        help="failover drill: load, SIGKILL silos at random, count lost / early / duplicate fires",
        description="Start silos, schedule jobs due over the next seconds into a recording handler, "
        "kill silo processes at random (and optionally pause one past the suspicion timeout), then "
        "check lost = 0, early = 0 (against the due time acknowledged), duplicates only of runs whose outcome the "
        "shard log lacks at a kill, no fire by a superseded shard owner, failover per shard, no silo exceptions. Runs with the default cluster options. Exits 1 on any failed check.",
        epilog="examples:\n  timeshard drill --kills 3\n  timeshard drill --kills 20 --pause\n  timeshard drill --storm 20\n"
        "  timeshard drill --nodes 3                       # lose a node, scale up and down\n"
        "  timeshard drill --nodes 3 --replace             # replace every node in turn; the keeper holds the count",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--store", default="file://./.timeshard/drill", help="store URL (a file store is wiped first)")
    p.add_argument("--silos", type=int, default=3, help="silos (default 3)")
    p.add_argument("--kills", type=int, default=3, help="SIGKILLs at random moments (default 3)")
    p.add_argument("--pause", action="store_true", help="also SIGSTOP one silo past the suspicion timeout, then SIGCONT")
    p.add_argument("--rate", type=float, default=200.0, help="jobs due per second (default 200)")
    p.add_argument("--storm", type=float, default=0.0, metavar="SECONDS",
                   help="restart storm: SIGKILL a random silo every 1-2 s for SECONDS under load (--kills is ignored)")
    p.add_argument("--storm-kills", type=int, default=0, metavar="N",
                   help="with --storm: go on past SECONDS until N kills were made (at most 3x as long)")
    p.add_argument("--seed", type=int, default=None, help="random seed for which silo and when")
    p.add_argument("--nodes", type=int, default=0, metavar="N",
                   help="many machines: a Ray head and N worker nodes on this machine, one silo per worker; lose a "
                   "whole node under load, then scale to N+2 silos and back (--kills, --silos ignored)")
    p.add_argument("--replace", action="store_true",
                   help="with --nodes: replace every worker node in turn under load (drained, lost, drained, ...) "
                   "while the keeper holds the silo count; times each return to target")
    p.add_argument("--out", default="benchmarks/results/scratch/drill",
                   help="folder for executions.jsonl, drill.json, drill-timeline.png (default not tracked by git)")
    p.set_defaults(func=_run_drill)


def _run_drill(args: argparse.Namespace) -> int:
    if args.nodes and args.replace:
        from cluster.cli.keep_drill import run_keep_drill_command

        return run_keep_drill_command(args)
    if args.nodes:
        from cluster.cli.node_drill import run_node_drill_command

        return run_node_drill_command(args)
    from cluster.cli.drill import run_drill_command

    return run_drill_command(args)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="run benchmarks side by side (JSON + PNG in a scratch folder; --publish: benchmarks/results)",
        description="Run benchmarks by name; each is also `python -m benchmarks.<name>`.",
        epilog="examples:\n  timeshard bench                 # the whole suite, into $TIMESHARD_BENCH_DIR or $TMPDIR/timeshard-bench\n"
        "  timeshard bench --publish       # the same, into benchmarks/results/ and docs/benchmarks.md's table\n"
        "  timeshard bench queue storage --quick",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("names", nargs="*", default=["suite"],
                   help="benchmarks to run: suite (every figure side by side, the default), queue, storage, memory, herd")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="small sizes, seconds each; indicative figures, written to $TIMESHARD_BENCH_DIR or a scratch "
                      "folder ($TMPDIR/timeshard-bench-quick), never published")
    size.add_argument("--publish", action="store_true",
                      help="write the figures into benchmarks/results/, the published ones (default: "
                      "$TIMESHARD_BENCH_DIR, else a scratch folder, $TMPDIR/timeshard-bench)")
    p.set_defaults(func=_run_bench)


def _run_bench(args: argparse.Namespace) -> int:
    import importlib

    status = 0
    for name in args.names:
        try:
            module = importlib.import_module(f"benchmarks.{name}")
        except ImportError:
            raise UserError(f"no benchmark named {name!r} (python -m benchmarks.<name>)") from None
        status |= module.main(["--quick"] if args.quick else ["--publish"] if args.publish else [])
    return status


def _version() -> str:
    """The installed distribution's version; a checkout that was never installed says so."""
    from importlib import metadata

    try:
        return metadata.version("timeshard")
    except metadata.PackageNotFoundError:
        return "(not installed: pip install -e .)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="timeshard",
        description="timeshard: a durable, distributed job scheduler for Ray.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"timeshard {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_demo(sub)
    _add_up(sub)
    add_job_commands(sub)
    add_drain_command(sub)
    add_ui_command(sub)
    _add_drill(sub)
    _add_bench(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        return int(args.func(args) or 0)
    except _PRINTED as exc:
        print(f"timeshard: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
