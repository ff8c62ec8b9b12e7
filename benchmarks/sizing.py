"""A sizing table for a deployment, computed from the committed benchmark results.

    python -m benchmarks.sizing [--results DIR] [--budgets 1,2,4,8,16] [--shards 1h,15m,5m] [--embed]

Reads ``suite.json`` (memory per job, triggers, replay) and ``storage.json`` (appends per shard)
from ``benchmarks/results/`` and prints Markdown: how many jobs a silo holds per GiB, the due rate
that fits a memory budget, triggers per silo, append rates per shard against Azure's append-blob
limits, how many busy shards or silos one storage account carries, and how long adopting a
shard replays. Nothing is measured here and nothing but the standard library is imported, so it
runs anywhere in a second. docs/deploy.md embeds its output between two markers: ``--embed``
writes it there after a benchmark run (tests/test_sizing.py fails while the page is stale).
"""

from __future__ import annotations

import argparse
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
DEPLOY_PAGE = Path(__file__).resolve().parent.parent / "docs" / "deploy.md"
START, END = "<!-- sizing:start -->", "<!-- sizing:end -->"
GIB = 2**30
MIB = 2**20

# Azure's limits for append blobs and storage accounts (FIELD-NOTES.md, "Append blobs and ETags").
AZURE_BLOCKS_PER_BLOB = 50_000
AZURE_BLOCK_BYTES = 4 * MIB
AZURE_REQUESTS_PER_BLOB_S = 500  # a planning figure ("plan on ~500 requests/s per blob")
AZURE_REQUESTS_PER_ACCOUNT_S = 20_000

# ClusterOptions defaults these tables assume; tests/test_sizing.py checks they still match.
DEFAULT_LOOKAHEAD_S = 300.0
DEFAULT_HEARTBEAT_INTERVAL_S = 0.5
DEFAULT_ADOPTION_INTERVAL_S = 2.0
DEFAULT_MAX_BLOCKS = 45_000
DEFAULT_SHARD_DURATIONS_S = (3600.0, 900.0, 300.0)

# Store requests a silo makes with no jobs, read from the code: per heartbeat_interval one
# membership-row write (heartbeat.beat), one membership list (detect_failures) and one clock
# reading (skew.run); per adoption_interval one membership list and one shard list
# (adoption.adopt_orphans). A flow reconcile every 10 x adoption_interval is left out.
REQUESTS_PER_HEARTBEAT = 3
REQUESTS_PER_ADOPTION_ROUND = 2
# A fired one-shot job leaves two records in its shard's log until compaction: its add and its
# remove. Each retry adds one more; a recurring job's move to its next shard one more.
RECORDS_PER_JOB = 2


class SizingError(ValueError):
    """A results file is missing or lacks a figure; names the file and the figure."""


@dataclass(frozen=True)
class AppendRate:
    """One write pattern on one log: appends (blocks) per second and records per append."""

    pattern: str
    appends_per_s: float
    records_per_append: float

    @property
    def records_per_s(self) -> float:
        return self.appends_per_s * self.records_per_append


@dataclass(frozen=True)
class Figures:
    """The measured figures the tables are computed from, each named by where it was read."""

    when: str
    machine: str
    silo_base_rss: float  # bytes: a silo's RSS after start-up and a 2,000-job warm-up
    loaded_bytes_per_job: float
    dormant_bytes_per_job: float
    trigger_silos: int
    triggers_per_s: Mapping[str, float]  # store -> jobs/s of the whole cluster
    replay_records_per_s: float
    appends: Sequence[AppendRate]
    record_bytes: float  # bytes per record in the storage benchmark's log

    @classmethod
    def load(cls, results: Path = RESULTS) -> Figures:
        """Read ``suite.json`` and ``storage.json`` from ``results``."""
        suite, storage = _read(results / "suite.json"), _read(results / "storage.json")

        def s(*keys: str) -> Any:
            return _at(suite, "suite.json", *keys)

        def a(*keys: str) -> Any:
            return _at(storage, "storage.json", "stores", "azure", *keys)

        silos = int(s("results", "cluster_azure", "silos"))
        if silos < 1 or s("results", "cluster_file", "silos") != silos:
            raise SizingError("suite.json: results.cluster_*.silos must be the same count >= 1 for both stores")
        machine = s("machine")
        return cls(
            when=str(s("when")),
            machine=f"{machine.get('cpus')} CPUs, Python {machine.get('python')}, Ray {machine.get('ray')}",
            silo_base_rss=float(s("results", "memory", "loaded", "rss_before")),
            loaded_bytes_per_job=float(s("results", "memory", "loaded", "bytes_per_job")),
            dormant_bytes_per_job=float(s("results", "memory", "dormant", "bytes_per_job")),
            trigger_silos=silos,
            triggers_per_s={"Azurite": float(s("results", "cluster_azure", "triggers", "per_s")),
                            "file": float(s("results", "cluster_file", "triggers", "per_s"))},
            replay_records_per_s=float(s("results", "replay", "azure", "records_per_s")),
            appends=(
                # One writer awaiting each append: every record is its own block.
                AppendRate("1 writer, each append awaited", float(a("sequential", "records_per_s")), 1.0),
                AppendRate(f"{a('group', 'writers')} writers, 1 in flight each (group commit)",
                           float(a("group", "blocks")) / float(a("group", "seconds")),
                           float(a("group", "records_per_block"))),
                AppendRate(f"{a('group_pipelined', 'writers')} writers, "
                           f"{a('group_pipelined', 'in_flight_per_writer')} in flight each",
                           float(a("group_pipelined", "blocks")) / float(a("group_pipelined", "seconds")),
                           float(a("group_pipelined", "records_per_block"))),
            ),
            record_bytes=float(a("replay", "bytes")) / float(a("replay", "records")),
        )


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise SizingError(f"{path}: no such results file; run the benchmark that writes it") from None
    except json.JSONDecodeError as exc:
        raise SizingError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise SizingError(f"{path}: must hold a JSON object")
    return data


def _at(data: Mapping[str, Any], where: str, *keys: str) -> Any:
    """``data[k1][k2]...``, a positive number where a number is found; ``SizingError`` naming the figure."""
    node: Any = data
    for i, key in enumerate(keys):
        if not isinstance(node, Mapping) or key not in node:
            raise SizingError(f"{where}: figure {'.'.join(keys[:i + 1])} is missing")
        node = node[key]
    if isinstance(node, (int, float)) and not isinstance(node, bool) and not node > 0:
        raise SizingError(f"{where}: figure {'.'.join(keys)} must be > 0 (got {node})")
    return node


# -- arithmetic -----------------------------------------------------------------------------------


def loaded_jobs(budget_bytes: float, f: Figures) -> int:
    """Loaded jobs a silo holds within ``budget_bytes`` of RSS, after its start-up RSS."""
    return max(0, math.floor((budget_bytes - f.silo_base_rss) / f.loaded_bytes_per_job))


def due_rate(loaded: int, shard_duration_s: float, lookahead_s: float) -> float:
    """Jobs due per second whose peak of loaded jobs is ``loaded``.

    A shard loads whole once its window starts within the lookahead and stays loaded until its
    window ends, so at the peak a silo holds the rest of the current window plus the next one:
    the jobs due within ``shard_duration + lookahead``.
    """
    return loaded / (shard_duration_s + lookahead_s)


def background_requests_per_s(heartbeat_interval_s: float, adoption_interval_s: float) -> float:
    """Store requests per second of one silo with no jobs (see REQUESTS_PER_HEARTBEAT)."""
    return REQUESTS_PER_HEARTBEAT / heartbeat_interval_s + REQUESTS_PER_ADOPTION_ROUND / adoption_interval_s


# -- the tables -----------------------------------------------------------------------------------


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _duration(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def _bytes(size: float) -> str:
    return f"{size:,.0f} B" if size < 1024 else f"{size / 1024:,.1f} KiB"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def tables(f: Figures, budgets_gib: Sequence[float], shard_durations_s: Sequence[float], *,
           lookahead_s: float = DEFAULT_LOOKAHEAD_S, heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
           adoption_interval_s: float = DEFAULT_ADOPTION_INTERVAL_S, max_blocks: int = DEFAULT_MAX_BLOCKS) -> str:
    """The sizing tables as Markdown."""
    out = [
        "<!-- generated by `python -m benchmarks.sizing`; do not edit by hand -->",
        f"From `benchmarks/results/suite.json` and `storage.json`, measured {f.when} on {f.machine}; "
        "store: Azurite (Azure's emulator, on the same cores), not Azure.",
        "",
        "**Memory per silo.** A silo starts at "
        f"{_n(f.silo_base_rss / MIB)} MiB RSS. A loaded job costs {_n(f.loaded_bytes_per_job)} B "
        f"({_n(GIB / f.loaded_bytes_per_job)} loaded jobs per GiB); a dormant one "
        f"{_n(f.dormant_bytes_per_job, 1)} B ({_n(f.dormant_bytes_per_job * 1e6 / MIB, 1)} MiB per million). "
        "Due rate: the jobs per second a silo can be sent so that its peak of loaded jobs "
        f"(those due within shard_duration + lookahead, lookahead {_duration(lookahead_s)}) fits the budget.",
        "",
        "| silo memory budget | loaded jobs | " + " | ".join(
            f"due rate, {_duration(d)} shards" for d in shard_durations_s) + " |",
        "|---|---:|" + "---:|" * len(shard_durations_s),
    ]
    for gib in budgets_gib:
        loaded = loaded_jobs(gib * GIB, f)
        rates = " | ".join(f"{_n(due_rate(loaded, d, lookahead_s))} jobs/s" for d in shard_durations_s)
        out.append(f"| {gib:g} GiB | {_n(loaded)} | {rates} |")

    out += [
        "",
        f"**Triggers per silo.** Jobs due at one instant, first to last start, on a cluster of {f.trigger_silos} "
        f"silos sharing the machine's cores with their handlers and the store: a floor for a silo with cores of its own.",
        "",
        "| store | cluster, jobs/s | per silo, jobs/s |",
        "|---|---:|---:|",
    ]
    for store, per_s in f.triggers_per_s.items():
        out.append(f"| {store} | {_n(per_s)} | {_n(per_s / f.trigger_silos)} |")

    out += [
        "",
        f"**Appends per shard** (one log on Azurite; records of {_n(f.record_bytes)} B) against Azure's "
        f"append-blob limits: ~{_n(AZURE_REQUESTS_PER_BLOB_S)} requests/s per blob, {_n(AZURE_BLOCKS_PER_BLOB)} "
        f"blocks per blob (timeshard compacts at max_blocks = {_n(max_blocks)}), {AZURE_BLOCK_BYTES // MIB} MiB "
        "per block. A shard's writer has one append in flight, so its request rate is bounded by the append "
        "round trip, whatever the load.",
        "",
        "| write pattern | appends/s | records per append | records/s | of ~500 requests/s per blob "
        "| time to max_blocks | block size (of 4 MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for a in f.appends:
        block = a.records_per_append * f.record_bytes
        out.append(f"| {a.pattern} | {_n(a.appends_per_s)} | {_n(a.records_per_append)} | {_n(a.records_per_s)} "
                   f"| {a.appends_per_s / AZURE_REQUESTS_PER_BLOB_S:.0%} | {_minutes(max_blocks / a.appends_per_s)} "
                   f"| {_bytes(block)} ({block / AZURE_BLOCK_BYTES:.2%}) |")

    idle = background_requests_per_s(heartbeat_interval_s, adoption_interval_s)
    busiest = max(f.appends, key=lambda a: a.appends_per_s).appends_per_s
    out += [
        "",
        f"**One storage account** ({_n(AZURE_REQUESTS_PER_ACCOUNT_S)} requests/s). An idle silo makes about "
        f"{_n(idle, 1)} requests/s ({REQUESTS_PER_HEARTBEAT} per heartbeat_interval of {_duration(heartbeat_interval_s)}, "
        f"{REQUESTS_PER_ADOPTION_ROUND} per adoption_interval of {_duration(adoption_interval_s)}; read from the code). "
        "A busy shard appends as fast as the round trip allows.",
        "",
        "| requests/s of one busy shard | busy shards per account | silos per account, one busy shard each |",
        "|---|---:|---:|",
    ]
    for label, per_shard in ((f"{_n(busiest)} (measured here, 1 writer)", busiest),
                             (f"{_n(AZURE_REQUESTS_PER_BLOB_S)} (Azure's per-blob target)", AZURE_REQUESTS_PER_BLOB_S)):
        out.append(f"| {label} | {_n(math.floor(AZURE_REQUESTS_PER_ACCOUNT_S / per_shard))} "
                   f"| {_n(math.floor(AZURE_REQUESTS_PER_ACCOUNT_S / (per_shard + idle)))} |")
    out.append(f"| 0 (idle silos) | — | {_n(math.floor(AZURE_REQUESTS_PER_ACCOUNT_S / idle))} |")

    out += [
        "",
        f"**Replay when a shard is adopted** at {_n(f.replay_records_per_s)} records/s (read and fold, as a silo "
        f"loads a shard): a full shard of one silo's jobs at {RECORDS_PER_JOB} records per job (its add and its "
        "remove; each retry adds one) until compaction. This time adds to failover.",
        "",
        "| jobs due per second, one silo | " + " | ".join(f"{_duration(d)} shards" for d in shard_durations_s) + " |",
        "|---:|" + "---:|" * len(shard_durations_s),
    ]
    for rate in (10, 100, 1_000):
        cells = []
        for d in shard_durations_s:
            jobs = rate * d
            cells.append(f"{_n(jobs)} jobs, {jobs * RECORDS_PER_JOB / f.replay_records_per_s:.2f} s")
        out.append(f"| {_n(rate)} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def embed(table: str, page: Path = DEPLOY_PAGE) -> None:
    """Put ``table`` between the page's sizing markers; ``SizingError`` if they are missing."""
    text = page.read_text()
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SizingError(f"{page}: needs one {START} and one {END} line, in that order")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{table.strip()}\n{END}{tail}")


# -- command line ---------------------------------------------------------------------------------


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")


def parse_duration(text: str) -> float:
    """``1h``, ``15m``, ``300s`` -> seconds."""
    match = _DURATION.fullmatch(text.strip())
    if not match or float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a positive duration like 1h, 15m or 300s")
    return float(match.group(1)) * {"h": 3600, "m": 60, "s": 1}[match.group(2)]


def _list(parse: Any) -> Any:
    return lambda text: [parse(part) for part in text.split(",") if part.strip()]


def _budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a memory budget in GiB, > 0")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sizing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder with suite.json and storage.json")
    parser.add_argument("--budgets", type=_list(_budget), default=[1.0, 2.0, 4.0, 8.0, 16.0],
                        help="silo memory budgets in GiB (default 1,2,4,8,16)")
    parser.add_argument("--shards", type=_list(parse_duration), default=list(DEFAULT_SHARD_DURATIONS_S),
                        help="shard durations to compare (default 1h,15m,5m)")
    parser.add_argument("--lookahead", type=parse_duration, default=DEFAULT_LOOKAHEAD_S, help="default 5m")
    parser.add_argument("--embed", action="store_true", help=f"also write the tables into {DEPLOY_PAGE.name}")
    args = parser.parse_args(argv)
    try:
        table = tables(Figures.load(args.results), args.budgets, args.shards, lookahead_s=args.lookahead)
        if args.embed:
            embed(table)
    except SizingError as exc:
        parser.exit(1, f"sizing: {exc}\n")
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
