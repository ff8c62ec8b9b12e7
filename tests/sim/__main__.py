"""Run the simulation: ``python -m tests.sim --seeds N [--start S] [--faults ...]`` searches seeds;
``python -m tests.sim --seed S --verbose`` replays one seed with its trace.

Replays are exact only with one string hash for every run, so this re-executes itself with
``PYTHONHASHSEED=0`` when it is not set (silo code iterates sets of strings).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from tests.sim.world import Faults, Result, run_seed


def replay_command(seed: int, faults: Faults) -> str:
    """The command line that replays ``seed`` with ``faults``, trace and all."""
    return f"PYTHONHASHSEED=0 python -m tests.sim --seed {seed} --faults {faults.describe()} --verbose"


def _report(result: Result) -> None:
    print(f"seed {result.seed} FAILED ({len(result.violations)} violations); replay: "
          f"{replay_command(result.seed, result.faults)}")
    for violation in result.violations[:5]:
        print(f"    {violation}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, help="how many seeds to run (a search)")
    parser.add_argument("--start", type=int, default=0, help="the first seed of a search")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--faults", default="default",
                        help=f"default, all, none, or kinds from {Faults.kinds()}; +kind/-kind change the defaults")
    parser.add_argument("--verbose", action="store_true", help="print the trace as it runs")
    parser.add_argument("--status", type=float, default=10.0, help="seconds between status lines of a search")
    args = parser.parse_args(argv)
    faults = Faults.parse(args.faults)
    if args.seed is not None:
        result = run_seed(args.seed, faults, verbose=args.verbose)
        print(f"seed {args.seed} faults {faults.describe()} digest {result.digest} {dict(result.stats)}")
        if result.violations:
            _report(result)
            return 1
        print("ok")
        return 0
    count = args.seeds if args.seeds is not None else 100
    started = last = time.monotonic()
    failed: list[int] = []
    for n, seed in enumerate(range(args.start, args.start + count), 1):
        result = run_seed(seed, faults)
        if not result.ok:
            failed.append(seed)
            _report(result)
        now = time.monotonic()
        if now - last >= args.status:
            last = now
            print(f"... {n}/{count} seeds, {n / (now - started):.1f} seeds/s, {len(failed)} failed", flush=True)
    elapsed = time.monotonic() - started
    print(f"ran {count} seeds ({args.start}..{args.start + count - 1}) with faults {faults.describe()} in "
          f"{elapsed:.1f} s ({count / elapsed:.1f} seeds/s): {len(failed)} failed {failed[:50]}")
    return 1 if failed else 0


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, "-m", "tests.sim", *sys.argv[1:]],
                  {**os.environ, "PYTHONHASHSEED": "0"})
    sys.exit(main())
