"""Plant each bug of the mutation table and run the commands that must catch it (all of them).

    python -m tests.mutants                 every mutant, then the table (exit 1 if any survived)
    python -m tests.mutants NAME...         only these
    python -m tests.mutants --list          the table, without running anything
    python -m tests.mutants --hunt NAME --seeds 500 [--start S] [--faults F]
                                            the simulator under one mutant: which seeds catch it

The checkout is never touched: the tracked files (``git ls-files``, as they are in the work tree)
are copied to a temporary directory, where one mutant at a time is planted, run and taken out.
Each catching command is first run on the unmutated copy: a command that fails without the bug
would "catch" every mutant, so its mutants are reported INVALID instead.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.mutants.model import Catch, Mutant, Sim
from tests.mutants.table import MUTANTS

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Verdict:
    mutant: Mutant
    result: str  # CAUGHT, SURVIVED, INVALID (fails unmutated), ERROR (could not run), MOVED (text not found once)
    seconds: float
    detail: str = ""


def copy_tree(dest: Path) -> None:
    """The tracked files as they are in the work tree (uncommitted edits included), into ``dest``."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True, capture_output=True).stdout
    for name in listed.decode().split("\0"):
        source = REPO / name
        if not name or not source.is_file():
            continue  # deleted in the work tree, or a submodule
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    if (REPO / "node_modules").is_dir():  # Azurite, for catchers that run against it
        (dest / "node_modules").symlink_to(REPO / "node_modules")


def run(catch: Catch, tree: Path, log: Path) -> tuple[bool | None, str]:
    """(caught?, detail) of ``catch`` run in ``tree``; None when it could not run or timed out."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)  # cwd first on sys.path: the copy's code, not the checkout's
    with log.open("w") as out:
        try:
            done = subprocess.run(catch.argv(sys.executable), cwd=tree, env=env, stdout=out,
                                  stderr=subprocess.STDOUT, timeout=catch.timeout, check=False)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {catch.timeout:.0f} s"
    caught = catch.caught(done.returncode)
    lines = [line for line in log.read_text().splitlines() if line.strip()]
    summary = next((line for line in lines if line.startswith("FAILED ")), None) or next(
        (line for line in reversed(lines) if " failed" in line or " passed" in line or line.startswith("ran ")),
        lines[-1] if lines else "")
    summary = re.sub(r" with faults \S+", "", summary)  # the table names the faults already
    if caught is None:
        return None, f"exit {done.returncode}: {summary}"
    return caught, summary


def judge(mutant: Mutant, tree: Path, logs: Path, baseline: dict[Catch, tuple[bool | None, str]]) -> Verdict:
    """Plant ``mutant``, run every command that must catch it, take it out again."""
    started = time.monotonic()
    try:
        before = mutant.plant(tree)
    except ValueError as exc:
        return Verdict(mutant, "MOVED", 0.0, str(exc))
    try:
        results = [run(catch, tree, logs / f"{mutant.name}-{i}.log") for i, catch in enumerate(mutant.catchers)]
    finally:
        (tree / mutant.path).write_text(before)
    elapsed = time.monotonic() - started
    detail = "; ".join(f"{c.describe()}: {d}" for c, (_, d) in zip(mutant.catchers, results, strict=True))
    unclean = [c for c in mutant.catchers if c in baseline and baseline[c][0] is not False]
    if unclean:
        return Verdict(mutant, "INVALID", elapsed, "fails without the mutant: " +
                       "; ".join(f"{c.describe()}: {baseline[c][1]}" for c in unclean))
    if any(caught is None for caught, _ in results):
        return Verdict(mutant, "ERROR", elapsed, detail)
    return Verdict(mutant, "CAUGHT" if all(caught for caught, _ in results) else "SURVIVED", elapsed, detail)


def table(verdicts: Sequence[Verdict] | None, mutants: Sequence[Mutant]) -> str:
    rows = [("mutant", "bug class", "file", "caught by", "result", "time")]
    for i, mutant in enumerate(mutants):
        verdict = verdicts[i] if verdicts is not None else None
        result = "-" if verdict is None else verdict.result
        if verdict is not None and verdict.result == "SURVIVED" and mutant.expects:
            result += " (expects oracle)"
        elif verdict is None and mutant.expects:
            result = "expects oracle"
        seconds = "" if verdict is None else f"{verdict.seconds:.0f} s"
        rows.append((mutant.name, mutant.kind, mutant.path, " + ".join(c.describe() for c in mutant.catchers), result, seconds))
    widths = [min(max(len(row[c]) for row in rows), 90) for c in range(len(rows[0]))]
    lines = [" | ".join(cell[:90].ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def notes(verdicts: Sequence[Verdict]) -> str:
    out = []
    for v in verdicts:
        if v.result != "CAUGHT":
            out.append(f"{v.mutant.name}: {v.result}: {v.detail}")
            if v.mutant.expects:
                out.append(f"    expects: {v.mutant.expects}")
        else:
            out.append(f"{v.mutant.name}: {v.detail}")
    return "\n".join(out)


def select(names: Sequence[str]) -> list[Mutant]:
    known = {m.name: m for m in MUTANTS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"no mutant named {unknown}; --list shows them")
    return [known[n] for n in names] if names else list(MUTANTS)


def hunt(mutant: Mutant, start: int, seeds: int, faults: str, tree: Path) -> int:
    """The simulator's search under ``mutant``, its output as it comes: the seeds that catch it."""
    before = mutant.plant(tree)
    try:
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        env.pop("PYTHONPATH", None)
        return subprocess.run(Sim(start, seeds, faults).argv(sys.executable), cwd=tree, env=env, check=False).returncode
    finally:
        (tree / mutant.path).write_text(before)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutants", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="mutants to run (default: all)")
    parser.add_argument("--list", action="store_true", help="print the table without running anything")
    parser.add_argument("--no-baseline", action="store_true", help="skip running each catcher without its mutant")
    parser.add_argument("--keep", action="store_true", help="keep the copied tree and the logs")
    parser.add_argument("--hunt", metavar="NAME", help="run the simulator under this mutant instead")
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--faults", default="all")
    args = parser.parse_args(argv)
    # Killed (a timeout, a CI cancel): the temporary tree is still removed, and the child with it.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    if args.list:
        print(table(None, select(args.names)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="timeshard-mutants-"))
    tree, logs = work / "tree", work / "logs"
    logs.mkdir()
    try:
        copy_tree(tree)
        if args.hunt:
            return hunt(select([args.hunt])[0], args.start, args.seeds, args.faults, tree)
        mutants = select(args.names)
        baseline: dict[Catch, tuple[bool | None, str]] = {}
        if not args.no_baseline:
            for catch in dict.fromkeys(c for m in mutants for c in m.catchers):
                baseline[catch] = run(catch, tree, logs / "baseline.log")
                print(f"unmutated: {catch.describe()}: {baseline[catch][1]}", flush=True)
        verdicts = []
        for mutant in mutants:
            verdicts.append(judge(mutant, tree, logs, baseline))
            v = verdicts[-1]
            print(f"{v.result:8} {mutant.name} ({v.seconds:.0f} s): {v.detail}", flush=True)
        print()
        print(table(verdicts, mutants))
        print()
        print(notes(verdicts))
        if args.keep:
            print(f"\nthe tree and the logs: {work}")
        return 0 if all(v.result == "CAUGHT" for v in verdicts) else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
