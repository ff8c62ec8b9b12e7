"""A sizing table for a deployment, computed from the committed benchmark results.

    python -m benchmarks.sizing [--results DIR] [--budgets 1,2,4,8,16] [--shards 1h,15m,5m]
                                [--account-limits 20000,40000] [--embed]

Reads ``suite.json`` (memory per job, triggers, replay) and ``storage.json`` (appends per shard)
from ``benchmarks/results/`` and prints Markdown: how many jobs a silo holds per GiB, the due rate
that fits a memory budget (and what is left of it after a node loss), triggers per silo, append
rates per shard, the store traffic of an idle cluster (List calls apart: they cost the most)
against an account's request target, what that traffic and a million jobs cost at Azure's
published sample prices, and how long adopting a shard, or restarting a whole cluster, replays.
Rows beyond what a benchmark measured say so. Nothing is measured here and nothing but the
standard library is imported, so it runs anywhere in a second. docs/deploy.md embeds its output
between two markers: ``--embed`` writes it there after a benchmark run (tests/test_sizing.py
fails while the page is stale, and checks the figures the page's prose quotes).
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
HOURS_PER_MONTH = 730  # Azure bills capacity and quotes monthly prices on 730 hours

# Azure's limits for append blobs and storage accounts (FIELD-NOTES.md, "Append blobs and ETags").
AZURE_BLOCKS_PER_BLOB = 50_000
AZURE_BLOCK_BYTES = 4 * MIB
# An assumption, not a documented limit: Azure once published a target of ~500 requests/s per
# blob and no longer does. Kept as the planning figure for one hot shard; re-measure yours.
ASSUMED_REQUESTS_PER_BLOB_S = 500
# Default request targets per standard (GPv2) account, "Scalability and performance targets for
# standard storage accounts" (learn.microsoft.com/azure/storage/common/scalability-targets-standard-account,
# read 2026-11-27): 40,000 requests/s in the regions it lists (East US, West Europe, ...),
# 20,000 in the others. Raised on request through Azure support.
AZURE_ACCOUNT_LIMITS_S = (20_000, 40_000)
# List Blobs returns at most 5,000 blobs per call (its maxresults); each page is one List call.
AZURE_LIST_PAGE = 5_000


@dataclass(frozen=True)
class Prices:
    """Azure prices per 10,000 operations of each kind, and per GB-month stored."""

    write: float
    read: float
    list: float
    other: float
    gb_month: float
    source: str

    def per_op(self, kind: str) -> float:
        return 0.0 if kind == "free" else float(getattr(self, kind)) / 10_000


# SAMPLE prices: the hot tier's in Microsoft's "Estimate the cost of using Azure Blob Storage"
# (learn.microsoft.com/azure/storage/blobs/blob-storage-estimate-costs, "Sample prices"; page dated
# 2024-07-26, read 2026-11-27), which calls them examples. Real prices vary by region, redundancy
# and agreement: https://azure.microsoft.com/pricing/details/storage/blobs/
SAMPLE_PRICES = Prices(write=0.055, read=0.0044, list=0.055, other=0.0044, gb_month=0.0208,
                       source="Azure's sample hot-tier prices (blob-storage-estimate-costs, dated 2024-07-26)")

# How Azure bills each Store method (learn.microsoft.com/azure/storage/blobs/map-rest-apis-transaction-categories,
# standard general-purpose v2): create = Put Blob, append_block = Append Block (writes); fetch = Get
# Blob (read); list, names, list_page = List Blobs ("list and create container"); set_metadata =
# Set Blob Metadata, stat = Get Blob Properties, server_time = Get Container Properties (other;
# with a shared key or SAS it is Get Account Information, taken as other too: its row in that
# table was not checked); delete = Delete Blob (free).
STORE_OP_KIND = {"create": "write", "append_block": "write", "fetch": "read", "list": "list", "names": "list",
                 "list_page": "list", "set_metadata": "other", "stat": "other", "server_time": "other",
                 "delete": "free"}

# ClusterOptions defaults these tables assume; tests/test_sizing.py checks they still match.
DEFAULT_LOOKAHEAD_S = 300.0
DEFAULT_HEARTBEAT_INTERVAL_S = 0.5
DEFAULT_SUSPICION_TIMEOUT_S = 2.0
DEFAULT_ADOPTION_INTERVAL_S = 2.0
DEFAULT_ADOPTION_LISTERS = 3  # cluster.model.options: silos that run an adoption round each interval, in turn
DEFAULT_STAGING_INTERVAL_S = 1.0  # the maintenance loop's tick: it adopts, then loads, on ticks
DEFAULT_MAX_BLOCKS = 45_000
DEFAULT_SHARD_DURATIONS_S = (3600.0, 900.0, 300.0)
LEASE_FRACTION = 0.8  # cluster.model.options: the firing lease is this share of suspicion_timeout

# Store requests of a silo with no jobs, by kind; tests/test_sizing.py counts them on a silo's
# roles. Per heartbeat_interval: its membership row rewritten (set_metadata), the membership
# table listed (detect_failures), the store's clock read (skew). Per adoption round: the
# membership table listed, then the shard logs within the lookahead, one List call per page
# (``adoption_list_pages``). A flow reconcile every 10 x adoption_interval is left out.
HEARTBEAT_REQUESTS = {"other": 2, "list": 1}
ADOPTION_REQUESTS = {"list": 1}  # plus the shard listing's pages
# The keeper (cluster._keeper) reads the membership table once a round, each second: per cluster.
KEEPER_LISTS_PER_S = 1.0
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
    loaded_measured_jobs: int  # the most loaded jobs the memory benchmark held: rows beyond are extrapolated
    replay_measured_records: int  # the longest log the replay benchmark read
    recoveries: Sequence[Mapping[str, Any]] = ()  # benchmarks/recovery.py runs (recovery.json), if any

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
            loaded_measured_jobs=int(s("results", "memory", "loaded", "jobs")),
            replay_measured_records=int(s("results", "replay", "azure", "records")),
            recoveries=_recoveries(results / "recovery.json"),
        )


def _recoveries(path: Path) -> list[Mapping[str, Any]]:
    """The runs of benchmarks/recovery.py; none when the file is absent (an older results folder)."""
    if not path.exists():
        return []
    runs = _read(path).get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise SizingError(f"{path}: runs must be a list of objects")
    for i, run in enumerate(runs):
        for key in ("store", "jobs", "silos", "ready_s", "first_fire_s", "all_loaded_s", "all_fired_s"):
            _at(run, f"{path.name} runs[{i}]", key)
    return runs


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


def survivors_share(silos: int) -> float:
    """The load on each silo once one of ``silos`` is lost, as a multiple of its share before."""
    return silos / (silos - 1)


def shards_within_lookahead(silos: int, shard_duration_s: float, lookahead_s: float) -> int:
    """Shard logs an adoption round lists: one per silo for each window that has started or
    starts within the lookahead (a silo writes its own shard of each window it schedules into)."""
    return silos * (math.ceil(lookahead_s / shard_duration_s) + 1)


def adoption_list_pages(shards: int) -> int:
    """List calls to list ``shards`` logs: one per page of ``AZURE_LIST_PAGE``, at least one."""
    return max(1, math.ceil(shards / AZURE_LIST_PAGE))


@dataclass(frozen=True)
class Traffic:
    """Store requests per second by kind (``STORE_OP_KIND``'s kinds)."""

    list: float
    other: float

    @property
    def total(self) -> float:
        return self.list + self.other

    def monthly_cost(self, prices: Prices) -> float:
        seconds = HOURS_PER_MONTH * 3600
        return seconds * (self.list * prices.per_op("list") + self.other * prices.per_op("other"))


def idle_traffic(silos: int, shard_duration_s: float, *, lookahead_s: float = DEFAULT_LOOKAHEAD_S,
                 heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
                 adoption_interval_s: float = DEFAULT_ADOPTION_INTERVAL_S,
                 adoption_listers: int = DEFAULT_ADOPTION_LISTERS) -> Traffic:
    """The store requests of ``silos`` idle silos together: heartbeats and adoption rounds.

    Every silo beats each heartbeat; ``adoption_listers`` of them run an adoption round each
    interval (in turn, ``Adoption.round_due``: all of them while there are no more). The
    membership table fits one page below 5,000 silos. Change this (and ``ADOPTION_REQUESTS``)
    with the adoption code: the test that counts a round's requests fails until they agree. The
    keeper's reads (``KEEPER_LISTS_PER_S``, per cluster) are not counted here.
    """
    pages = adoption_list_pages(shards_within_lookahead(silos, shard_duration_s, lookahead_s))
    per_round = ADOPTION_REQUESTS["list"] + pages
    rounds_per_s = min(silos, adoption_listers) / adoption_interval_s
    return Traffic(
        list=silos * HEARTBEAT_REQUESTS["list"] / heartbeat_interval_s + rounds_per_s * per_round,
        other=silos * HEARTBEAT_REQUESTS["other"] / heartbeat_interval_s,
    )


def writes_per_job(records_per_append: float) -> float:
    """Append Block calls per one-shot job: its add and its remove, sharing appends with others."""
    return RECORDS_PER_JOB / records_per_append


def replay_s(records: float, f: Figures) -> float:
    return records / f.replay_records_per_s


def restart_waits_s(suspicion_timeout_s: float = DEFAULT_SUSPICION_TIMEOUT_S,
                    staging_interval_s: float = DEFAULT_STAGING_INTERVAL_S) -> float:
    """What fresh silos wait before loading a vanished cluster's shards: the old incarnations'
    lease (nothing proves them stopped), then a maintenance tick to claim and one to load."""
    return LEASE_FRACTION * suspicion_timeout_s + 2 * staging_interval_s


def load_rate(f: Figures) -> float | None:
    """Jobs loaded per second by one process, from the largest Azurite run of benchmarks/recovery.py:
    its jobs over the time to every shard loaded, less the waits. None without such a run."""
    runs = [r for r in f.recoveries if r["store"] == "azurite"]
    if not runs:
        return None
    run = max(runs, key=lambda r: r["jobs"])
    return float(run["jobs"]) / (float(run["all_loaded_s"]) - restart_waits_s())


def restart_s(loaded_jobs_cluster: float, silos: int, jobs_per_s: float,
              suspicion_timeout_s: float = DEFAULT_SUSPICION_TIMEOUT_S,
              staging_interval_s: float = DEFAULT_STAGING_INTERVAL_S) -> float:
    """A formula: from fresh silos joining a store whose old silos are gone to the last loaded
    shard loaded. The waits (``restart_waits_s``), then each silo loads its share of the shards
    within the lookahead at ``jobs_per_s``, the silos side by side on machines of their own.
    Silo start-up (Ray, imports, joining) comes on top."""
    return restart_waits_s(suspicion_timeout_s, staging_interval_s) + loaded_jobs_cluster / silos / jobs_per_s


# -- the tables -----------------------------------------------------------------------------------


def _n(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _usd(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.1 else f"${value:,.3f}"


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


EXTRAPOLATED = " (extrapolated)"


def _memory(f: Figures, budgets_gib: Sequence[float], shard_durations_s: Sequence[float],
            lookahead_s: float) -> list[str]:
    out = [
        "**Memory per silo.** A silo starts at "
        f"{_n(f.silo_base_rss / MIB)} MiB RSS. A loaded job costs {_n(f.loaded_bytes_per_job)} B "
        f"({_n(GIB / f.loaded_bytes_per_job)} loaded jobs per GiB); a dormant one "
        f"{_n(f.dormant_bytes_per_job, 1)} B ({_n(f.dormant_bytes_per_job * 1e6 / MIB, 1)} MiB per million). "
        "Due rate: the jobs per second a silo can be sent so that its peak of loaded jobs "
        f"(those due within shard_duration + lookahead, lookahead {_duration(lookahead_s)}) fits the budget. "
        f"The benchmark measured up to {_n(f.loaded_measured_jobs)} loaded jobs (a straight line, fitted): rows "
        "beyond are extrapolated along it.",
        "",
        "| silo memory budget | loaded jobs | " + " | ".join(
            f"due rate, {_duration(d)} shards" for d in shard_durations_s) + " |",
        "|---|---:|" + "---:|" * len(shard_durations_s),
    ]
    for gib in budgets_gib:
        loaded = loaded_jobs(gib * GIB, f)
        rates = " | ".join(f"{_n(due_rate(loaded, d, lookahead_s))} jobs/s" for d in shard_durations_s)
        mark = EXTRAPOLATED if loaded > f.loaded_measured_jobs else ""
        out.append(f"| {gib:g} GiB | {_n(loaded)}{mark} | {rates} |")
    return out


def _headroom(f: Figures, budget_gib: float, shard_duration_s: float, lookahead_s: float) -> list[str]:
    per_silo = due_rate(loaded_jobs(budget_gib * GIB, f), shard_duration_s, lookahead_s)
    out = [
        "",
        "**Headroom for a node loss (N−1).** When one of N silos is lost, the N−1 left adopt its shards "
        "and carry its jobs: each holds N/(N−1) of its share. Size so that the survivors still fit: send the "
        f"cluster at most N−1 silos' due rate. With {budget_gib:g} GiB silos and {_duration(shard_duration_s)} "
        f"shards ({_n(per_silo)} jobs/s per silo):",
        "",
        "| silos (N) | load on each survivor | cluster due rate, all N full | cluster due rate that survives one loss |",
        "|---:|---:|---:|---:|",
    ]
    for silos in (3, 5, 10, 50):
        out.append(f"| {silos} | {survivors_share(silos):.2f} × | {_n(per_silo * silos)} jobs/s "
                   f"| {_n(per_silo * (silos - 1))} jobs/s |")
    return out


def _appends(f: Figures, max_blocks: int) -> list[str]:
    out = [
        "",
        f"**Appends per shard** (one log on Azurite, measured; records of {_n(f.record_bytes)} B) against "
        f"Azure's append-blob limits: {_n(AZURE_BLOCKS_PER_BLOB)} blocks per blob (timeshard compacts at "
        f"max_blocks = {_n(max_blocks)}), {AZURE_BLOCK_BYTES // MIB} MiB per block; and an assumed "
        f"~{_n(ASSUMED_REQUESTS_PER_BLOB_S)} requests/s per blob (a figure Azure once published and no longer "
        "documents: an assumption, not a limit). A shard's writer has one append in flight, so its request "
        "rate is bounded by the append round trip, whatever the load.",
        "",
        f"| write pattern | appends/s | records per append | records/s | of an assumed "
        f"{_n(ASSUMED_REQUESTS_PER_BLOB_S)} requests/s per blob | time to max_blocks | block size (of 4 MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for a in f.appends:
        block = a.records_per_append * f.record_bytes
        out.append(f"| {a.pattern} | {_n(a.appends_per_s)} | {_n(a.records_per_append)} | {_n(a.records_per_s)} "
                   f"| {a.appends_per_s / ASSUMED_REQUESTS_PER_BLOB_S:.0%} | {_minutes(max_blocks / a.appends_per_s)} "
                   f"| {_bytes(block)} ({block / AZURE_BLOCK_BYTES:.2%}) |")
    return out


def _account(f: Figures, limits: Sequence[int], shard_duration_s: float, lookahead_s: float,
             heartbeat_interval_s: float, adoption_interval_s: float, prices: Prices) -> list[str]:
    one = idle_traffic(1, shard_duration_s, lookahead_s=lookahead_s, heartbeat_interval_s=heartbeat_interval_s,
                       adoption_interval_s=adoption_interval_s)
    limit_cols = " | ".join(f"of {_n(limit)} requests/s" for limit in limits)
    out = [
        "",
        "**Store traffic of idle silos.** Counted from the code (tests/test_sizing.py counts a silo's calls): "
        f"per heartbeat_interval ({_duration(heartbeat_interval_s)}) a silo rewrites its membership row, reads the "
        "store's clock (both billed as *other* operations) and lists the membership table (a *List*); per "
        f"adoption_interval ({_duration(adoption_interval_s)}) {DEFAULT_ADOPTION_LISTERS} silos of the cluster, in "
        "turn (all of them while there are no more), list the membership table and the shard logs "
        f"within the lookahead, one List call per {_n(AZURE_LIST_PAGE)} logs (each silo's shard of each window "
        f"that starts within the lookahead: silos × (⌈lookahead / shard_duration⌉ + 1)); the cluster's keeper "
        f"lists the membership table besides, {_n(KEEPER_LISTS_PER_S)} List call a second (not in the table). One "
        "idle silo: "
        f"{_n(one.total, 1)} requests/s, {_n(one.list, 1)} of them List calls, the most expensive kind per call "
        f"(as much as a write, {prices.list / prices.read:g} times a read at these prices). "
        f"{_duration(shard_duration_s)} shards, "
        f"lookahead {_duration(lookahead_s)}; costs at {prices.source}, per month of {HOURS_PER_MONTH} h; "
        "account targets: Azure's default request rate per account, 40,000 requests/s in the major regions "
        "and 20,000 in the others. This counts a round listing only the shards within the lookahead; one that "
        f"lists every shard to the end of the horizon pays a page per {_n(AZURE_LIST_PAGE)} of them all (50 silos, "
        f"a 30-day horizon of 1 h windows: {_n(50 * 30 * 24)} shards, {adoption_list_pages(50 * 30 * 24)} pages "
        "per silo per round).",
        "",
        f"| silos | shard logs listed per round | List pages per round | List calls/s | other requests/s "
        f"| {limit_cols} | List calls' cost per month | cost per month, all (sample prices) |",
        "|---:|---:|---:|---:|---:|" + "---:|" * len(limits) + "---:|---:|",
    ]
    for silos in (1, 3, 10, 50, 100):
        t = idle_traffic(silos, shard_duration_s, lookahead_s=lookahead_s, heartbeat_interval_s=heartbeat_interval_s,
                         adoption_interval_s=adoption_interval_s)
        shards = shards_within_lookahead(silos, shard_duration_s, lookahead_s)
        shares = " | ".join(f"{t.total / limit:.2%}" for limit in limits)
        out.append(f"| {silos} | {_n(shards)} | {adoption_list_pages(shards)} | {_n(t.list, 1)} | {_n(t.other, 1)} "
                   f"| {shares} | {_usd(Traffic(t.list, 0).monthly_cost(prices))} | {_usd(t.monthly_cost(prices))} |")
    busiest = max(f.appends, key=lambda a: a.appends_per_s).appends_per_s
    out += [
        "",
        "**Busy shards per account.** A busy shard appends as fast as its round trip allows; each takes that "
        "from the account's target, beside the idle traffic of its silo.",
        "",
        "| requests/s of one busy shard | " + " | ".join(
            f"busy shards per account of {_n(limit)}/s | silos, one busy shard each" for limit in limits) + " |",
        "|---|" + "---:|---:|" * len(limits),
    ]
    for label, per_shard in ((f"{_n(busiest)} (measured here, 1 writer)", busiest),
                             (f"{_n(ASSUMED_REQUESTS_PER_BLOB_S)} (the assumed per-blob figure)",
                              ASSUMED_REQUESTS_PER_BLOB_S)):
        cells = " | ".join(f"{_n(math.floor(limit / per_shard))} | {_n(math.floor(limit / (per_shard + one.total)))}"
                           for limit in limits)
        out.append(f"| {label} | {cells} |")
    cells = " | ".join(f"— | {_n(math.floor(limit / one.total))}" for limit in limits)
    out.append(f"| 0 (idle silos) | {cells} |")
    return out


def _costs(f: Figures, prices: Prices, shard_duration_s: float, lookahead_s: float, heartbeat_interval_s: float,
           adoption_interval_s: float) -> list[str]:
    one = idle_traffic(1, shard_duration_s, lookahead_s=lookahead_s, heartbeat_interval_s=heartbeat_interval_s,
                       adoption_interval_s=adoption_interval_s)
    seconds = HOURS_PER_MONTH * 3600
    out = [
        "",
        f"**What it costs, at sample prices.** {prices.source}: writes ${prices.write} and List calls "
        f"${prices.list} per 10,000, reads and other operations ${prices.read} per 10,000, ${prices.gb_month} per "
        "GB-month. They are Microsoft's examples, not a quote: multiply the counts by your own prices.",
        "",
        "| what | store operations | cost (sample prices) |",
        "|---|---:|---:|",
        f"| an idle silo, per month ({HOURS_PER_MONTH} h) | {_n(one.list * seconds / 1e6, 2)} M List, "
        f"{_n(one.other * seconds / 1e6, 2)} M other | {_usd(one.monthly_cost(prices))} |",
    ]
    for a in f.appends:
        writes = writes_per_job(a.records_per_append) * 1e6
        out.append(f"| a million one-shot jobs; {a.pattern}, records per append: {_n(a.records_per_append)} "
                   f"| {_n(writes)} writes | {_usd(writes * prices.per_op('write'))} |")
    out += [
        "",
        "A job's records stay only until its shard is deleted after its window, so storage itself costs next to "
        f"nothing (a million jobs of {_n(f.record_bytes)}-byte records for a month: "
        f"{_usd(1e6 * RECORDS_PER_JOB * f.record_bytes / 1e9 * prices.gb_month)}). Each silo creates one shard "
        "log per window it schedules into (a write) and reads a shard once to load it (a read per 4 MiB). "
        "Retries and recurring moves add a record each.",
    ]
    return out


def _replay(f: Figures, shard_durations_s: Sequence[float]) -> list[str]:
    out = [
        "",
        f"**Replay when a shard is adopted** at {_n(f.replay_records_per_s)} records/s (read and fold, as a silo "
        f"loads a shard; measured on a log of {_n(f.replay_measured_records)} records, longer logs "
        f"extrapolated): a full shard of one silo's jobs at {RECORDS_PER_JOB} records per job (its add and its "
        "remove; each retry adds one) until compaction. This time adds to failover. It is the fold alone: a silo "
        "that loads a shard also decodes and queues each job, which ran far slower (Whole-cluster restart, below).",
        "",
        "| jobs due per second, one silo | " + " | ".join(f"{_duration(d)} shards" for d in shard_durations_s) + " |",
        "|---:|" + "---:|" * len(shard_durations_s),
    ]
    for rate in (10, 100, 1_000):
        cells = []
        for d in shard_durations_s:
            jobs = rate * d
            mark = EXTRAPOLATED if jobs * RECORDS_PER_JOB > f.replay_measured_records else ""
            cells.append(f"{_n(jobs)} jobs, {replay_s(jobs * RECORDS_PER_JOB, f):.2f} s{mark}")
        out.append(f"| {_n(rate)} | " + " | ".join(cells) + " |")
    return out


def _restart(f: Figures, suspicion_timeout_s: float) -> list[str]:
    rate = load_rate(f)
    if rate is None:
        return []
    out = [
        "",
        "**Whole-cluster restart, measured** (`python -m benchmarks.recovery`: fresh silos under the old ids, in one "
        "process, on a store whose silos all vanished with their jobs overdue; all silos share one event loop, so "
        "their loads and fires queue behind each other):",
        "",
        "| store | jobs | silos | ready | first fire | every shard loaded | every job fired |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for run in sorted(f.recoveries, key=lambda r: (r["store"], r["jobs"], r["all_loaded_s"])):
        out.append(f"| {run['store']} | {_n(run['jobs'])} | {run['silos']} | {run['ready_s']:.2f} s "
                   f"| {run['first_fire_s']:.1f} s | {run['all_loaded_s']:.1f} s | {run['all_fired_s']:.1f} s |")
    sizes = (100_000, 1_000_000, 10_000_000)
    measured = max(r["jobs"] for r in f.recoveries if r["store"] == "azurite")
    waits = restart_waits_s(suspicion_timeout_s)
    out += [
        "",
        "**Whole-cluster restart, a formula** for silos on machines of their own: the old incarnations' lease "
        f"({LEASE_FRACTION:g} × suspicion_timeout), a maintenance tick to claim their shards and one to load them "
        f"(2 × staging_interval): {waits:g} s; then each silo loads its share of the loaded jobs at the rate one "
        f"process loaded them above on Azurite, {_n(rate)} jobs/s (the largest run's jobs over its time to every "
        f"shard loaded, less the {waits:g} s). Loading decodes and queues each job, so it runs far below the replay "
        "rate of the table above. Silo start-up comes on top; shards further out load later, when their windows "
        "come near. Jobs that fell due while the cluster was down fire as their shard loads, late by the outage.",
        "",
        "| silos | " + " | ".join(f"{_n(n)} loaded jobs" for n in sizes) + " |",
        "|---:|" + "---:|" * len(sizes),
    ]
    for silos in (3, 10, 50):
        cells = []
        for n in sizes:
            mark = EXTRAPOLATED if n / silos > measured else ""
            cells.append(f"{restart_s(n, silos, rate, suspicion_timeout_s):.1f} s{mark}")
        out.append(f"| {silos} | " + " | ".join(cells) + " |")
    return out


def _reading(f: Figures, budget_gib: float, shard_durations_s: Sequence[float], lookahead_s: float,
             limits: Sequence[int], heartbeat_interval_s: float, adoption_interval_s: float) -> list[str]:
    """The page's "how to read it", every figure computed here (the page quotes only these)."""
    default = shard_durations_s[0]
    loaded = loaded_jobs(budget_gib * GIB, f)
    rate = due_rate(loaded, default, lookahead_s)
    fastest = max(f.triggers_per_s.values()) / f.trigger_silos
    busiest = max(f.appends, key=lambda a: a.appends_per_s).appends_per_s
    one = idle_traffic(1, default, lookahead_s=lookahead_s, heartbeat_interval_s=heartbeat_interval_s,
                       adoption_interval_s=adoption_interval_s)
    hundred = idle_traffic(100, default, lookahead_s=lookahead_s, heartbeat_interval_s=heartbeat_interval_s,
                           adoption_interval_s=adoption_interval_s)
    low, high = min(limits), max(limits)
    return [
        "",
        "How to read it:",
        "",
        f"- **Jobs per silo.** Pick the memory you give each silo. The due rate column is the most jobs per "
        f"second a silo can be sent with that shard duration; the cluster's rate is that times the silos, less one "
        f"silo's worth for a node loss. With the default {_duration(default)} shards, memory, not CPU, is the limit: "
        f"a silo with {budget_gib:g} GiB carries about {_n(rate)} jobs/s, below the ~{_n(fastest)} triggers/s it "
        "fired here. Shorter shards raise the memory limit.",
        f"- **Appends per shard.** A shard's writer keeps one append in flight and puts every record that arrived "
        f"meanwhile into it (group commit), so a busy shard makes as many requests per second as the round trip "
        f"allows ({_n(busiest)} here), whatever the job rate. Blocks stay far below 4 MiB. The "
        f"{_n(AZURE_BLOCKS_PER_BLOB)}-block limit is met by compaction at `max_blocks`.",
        f"- **One storage account.** An idle silo makes {_n(one.total, 1)} requests/s, {_n(one.list, 1)} of them "
        f"List calls; 100 idle silos {_n(hundred.total)} requests/s, {hundred.total / low:.1%} of a "
        f"{_n(low)} requests/s account ({hundred.total / high:.1%} of {_n(high)}). The membership listing at each "
        "heartbeat is most of it: raise `heartbeat_interval` on large clusters. Busy shards take the rest; about "
        f"{_n(math.floor(low / ASSUMED_REQUESTS_PER_BLOB_S))} shards appending flat out at the assumed per-blob "
        f"rate fill a {_n(low)} requests/s account. Beyond that, give each group of silos its own storage account "
        "(separate clusters on separate stores).",
    ]


def tables(f: Figures, budgets_gib: Sequence[float], shard_durations_s: Sequence[float], *,
           lookahead_s: float = DEFAULT_LOOKAHEAD_S, heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
           adoption_interval_s: float = DEFAULT_ADOPTION_INTERVAL_S, max_blocks: int = DEFAULT_MAX_BLOCKS,
           suspicion_timeout_s: float = DEFAULT_SUSPICION_TIMEOUT_S,
           account_limits: Sequence[int] = AZURE_ACCOUNT_LIMITS_S, prices: Prices = SAMPLE_PRICES,
           headroom_budget_gib: float = 4.0) -> str:
    """The sizing tables as Markdown."""
    out = [
        "<!-- generated by `python -m benchmarks.sizing`; do not edit by hand -->",
        f"From `benchmarks/results/suite.json` and `storage.json`, measured {f.when} on {f.machine}; "
        "store: Azurite (Azure's emulator, on the same cores), not Azure. Rows marked *extrapolated* lie beyond "
        "what a benchmark measured; the rest are measured figures or arithmetic on them.",
        "",
        *_memory(f, budgets_gib, shard_durations_s, lookahead_s),
        *_headroom(f, headroom_budget_gib, shard_durations_s[0], lookahead_s),
        "",
        f"**Triggers per silo** (measured). Jobs due at one instant, first to last start, on a cluster of "
        f"{f.trigger_silos} silos sharing the machine's cores with their handlers and the store: a floor for a "
        "silo with cores of its own.",
        "",
        "| store | cluster, jobs/s | per silo, jobs/s |",
        "|---|---:|---:|",
        *(f"| {store} | {_n(per_s)} | {_n(per_s / f.trigger_silos)} |" for store, per_s in f.triggers_per_s.items()),
        *_appends(f, max_blocks),
        *_account(f, account_limits, shard_durations_s[0], lookahead_s, heartbeat_interval_s, adoption_interval_s,
                  prices),
        *_costs(f, prices, shard_durations_s[0], lookahead_s, heartbeat_interval_s, adoption_interval_s),
        *_replay(f, shard_durations_s),
        *_restart(f, suspicion_timeout_s),
        *_reading(f, headroom_budget_gib, shard_durations_s, lookahead_s, account_limits, heartbeat_interval_s,
                  adoption_interval_s),
    ]
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


def _limit(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: requests per second, a whole number > 0")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sizing", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder with suite.json and storage.json")
    parser.add_argument("--budgets", type=_list(_budget), default=[1.0, 2.0, 4.0, 8.0, 16.0],
                        help="silo memory budgets in GiB (default 1,2,4,8,16)")
    parser.add_argument("--shards", type=_list(parse_duration), default=list(DEFAULT_SHARD_DURATIONS_S),
                        help="shard durations to compare (default 1h,15m,5m)")
    parser.add_argument("--lookahead", type=parse_duration, default=DEFAULT_LOOKAHEAD_S, help="default 5m")
    parser.add_argument("--account-limits", type=_list(_limit), default=list(AZURE_ACCOUNT_LIMITS_S),
                        help="storage account request targets per second to compare (default 20000,40000: "
                             "Azure's default outside and in its major regions)")
    parser.add_argument("--embed", action="store_true", help=f"also write the tables into {DEPLOY_PAGE.name}")
    args = parser.parse_args(argv)
    try:
        table = tables(Figures.load(args.results), args.budgets, args.shards, lookahead_s=args.lookahead,
                       account_limits=args.account_limits)
        if args.embed:
            embed(table)
    except SizingError as exc:
        parser.exit(1, f"sizing: {exc}\n")
    print(table, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
