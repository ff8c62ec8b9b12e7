"""The benchmarks side by side: timeshard against the ceiling, the floor and a durable peer.

    python -m benchmarks.suite [cluster named failover replay memory herd baselines] [--quick | --publish]

Runs the named benchmarks (default: all) in one process, on one Ray and one Azurite, so every
figure is measured in the same run as its baselines: the no-op Ray call rate (ceiling), a
non-durable asyncio timer (lateness floor) and APScheduler 3 on SQLite (durable Python peer).
Figures Dapr publishes (``benchmarks.peers``: each with its source) are drawn as reference lines,
labelled as not measured, and linked from the table.
``scheduling``, ``triggers`` and ``lateness`` are names for ``cluster``; ``scale`` runs the scale
figures (``memory``: 10 million dormant and 1 million loaded jobs as RSS slopes; ``herd``: 1
million jobs due at one instant through 3 silos; ``replay``: a 1-million-job shard), each of
which takes minutes in a full run and prints progress as it goes.

Writes suite.json (machine, versions, every figure), suite-*.png (one per comparison) and
RESULTS.md, the table docs/benchmarks.md embeds, into ``$TIMESHARD_BENCH_DIR`` or a scratch folder
(``$TMPDIR/timeshard-bench``; ``-quick`` for a quick run). ``--publish`` writes them into
benchmarks/results/ instead and, for a full run of every benchmark at the default sizes,
regenerates the table in docs/benchmarks.md; a ``--quick`` run is never published.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import baselines, herd, memory, named_side, peers
from benchmarks.cluster import (
    CALLERS,
    GOAL_BATCH_PER_S,
    GOAL_FAILOVER_P50_S,
    GOAL_LATENESS_P99_MS,
    GOAL_LATENESS_P99_MS_HIGH,
    GOAL_REPLAY_PER_S,
    GOAL_SINGLE_OVER_NOOP,
    GOAL_TRIGGERS_PER_S,
    HIGH_RATE,
    STEADY_RATE,
    BenchEnv,
    bench_env,
    cluster_run,
    failover,
    noop_call_rate,
    replay,
)
from benchmarks.queue import GOAL_HERD_GROWTH
from benchmarks.report import PUBLISHED, Report, add_publish_flag, machine_info, report_for

NAMES = ("cluster", "named", "failover", "replay", "memory", "herd", "baselines")
ALIASES: dict[str, tuple[str, ...]] = {"scheduling": ("cluster",), "triggers": ("cluster",), "lateness": ("cluster",),
                                       "scale": ("memory", "herd", "replay")}
GOAL_STORE = "azure"  # the goals are set for this machine on Azurite


@dataclass(frozen=True)
class Sizes:
    """Sizes that override a step's defaults (None: the step's own, quick or full)."""

    dormant: tuple[int, ...] | None = None
    loaded: tuple[int, ...] | None = None
    herd: tuple[int, ...] | None = None


async def run(names: Sequence[str], quick: bool, report: Report,
              sizes: Sizes = Sizes()) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Run ``names``; returns every figure and the lateness samples (ms) to draw."""
    results: dict[str, Any] = {}
    samples: dict[str, list[float]] = {}
    with bench_env(["file", "azure"]) as env:
        report.progress("baseline: no-op Ray actor call rate (driver -> actor)")
        results["noop"] = await noop_call_rate(500 if quick else 3_000)
        for name in names:
            try:
                await STEPS[name](env, quick, report, results, samples, sizes)
            except Exception as exc:  # one broken benchmark must not cost the figures of the others
                results.setdefault("errors", {})[name] = repr(exc)[:2000]
                report.progress(f"{name} FAILED: {exc!r}"[:300])
    return results, samples


async def _cluster(env: BenchEnv, quick: bool, report: Report, results: dict[str, Any], samples: dict[str, list[float]],
                   sizes: Sizes) -> None:
    for kind in ("file", "azure"):
        r = await cluster_run(env, kind, 3, quick, report)
        samples[f"timeshard on {kind}"] = r.pop("lateness_samples_ms")
        samples[f"timeshard on {kind} at {HIGH_RATE:,}/s"] = r.pop("lateness_high_samples_ms")
        results[f"cluster_{kind}"] = r


async def _named(env: BenchEnv, quick: bool, report: Report, results: dict[str, Any], samples: dict[str, list[float]],
                 sizes: Sizes) -> None:
    results["named"] = await named_side.run(env, quick, report)


async def _failover(env: BenchEnv, quick: bool, report: Report, results: dict[str, Any], samples: dict[str, list[float]],
                    sizes: Sizes) -> None:
    kills = 1 if quick else 6
    report.progress(f"failover ({GOAL_STORE}): {kills} SIGKILLs of silo workers")
    results["failover"] = await failover(env, GOAL_STORE, kills, report)


async def _replay(env: BenchEnv, quick: bool, report: Report, results: dict[str, Any], samples: dict[str, list[float]],
                  sizes: Sizes) -> None:
    n = 50_000 if quick else 1_000_000
    results["replay"] = {}
    for kind in ("file", "azure"):
        report.progress(f"replay ({kind}): a shard of {n:,} jobs, read and folded as a silo loads it")
        results["replay"][kind] = await replay(env, kind, n)


async def _memory(env: BenchEnv, quick: bool, report: Report, results: dict[str, Any], samples: dict[str, list[float]],
                  sizes: Sizes) -> None:
    results["memory"] = await memory.run(env, GOAL_STORE, quick, report, dormant_sizes=sizes.dormant,
                                         loaded_sizes=sizes.loaded)
    for name in ("dormant", "loaded"):
        report.progress(memory.summary(name, results["memory"][name]))


async def _herd(env: BenchEnv, quick: bool, report: Report, results: dict[str, Any], samples: dict[str, list[float]],
                sizes: Sizes) -> None:
    results["herd"] = await herd.run(env, GOAL_STORE, quick, report, sizes.herd)


async def _baselines(env: BenchEnv, quick: bool, report: Report, results: dict[str, Any], samples: dict[str, list[float]],
                     sizes: Sizes) -> None:
    figures, lateness = await baselines.run(env, quick, report)
    results.update(figures)
    samples.update(lateness)


STEPS: dict[str, Callable[..., Any]] = {
    "cluster": _cluster, "named": _named, "failover": _failover, "replay": _replay, "memory": _memory, "herd": _herd,
    "baselines": _baselines,
}


# -- the table ------------------------------------------------------------------------------------


def _n(value: float, digits: int = 0) -> str:
    shown = f"{value:,.{digits}f}"
    return shown[1:] if shown.startswith("-") and not shown.strip("-0.,") else shown  # no "-0.0"


def _cite(*figures: peers.Published) -> str:
    """Published figures for the table, each a link to where it is published."""
    return "; ".join(f.cited() for f in figures)


def rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure: what timeshard reached, its goal, baselines measured and published."""
    out: list[dict[str, Any]] = []
    noop, aps, floor = results.get("noop"), results.get("apscheduler"), results.get("asyncio_timer")

    def row(figure: str, value: float, shown: str, goal: float | None, goal_text: str, higher: bool,
            measured: str = "", published: str = "") -> None:
        met = None if goal is None else (value >= goal if higher else value <= goal)
        out.append({"figure": figure, "value": value, "shown": shown, "goal": goal, "goal_text": goal_text,
                    "higher_is_better": higher, "met": met, "baselines": measured, "published": published})

    az, fi = results.get(f"cluster_{GOAL_STORE}"), results.get("cluster_file")
    if az and fi and noop:
        s, sf = az["scheduling"], fi["scheduling"]
        row("Batch scheduling, 1,000 per call (jobs/s)", s["batch_per_s"], _n(s["batch_per_s"]), GOAL_BATCH_PER_S,
            f">= {_n(GOAL_BATCH_PER_S)}", True,
            f"file store {_n(sf['batch_per_s'])}" + (f"; APScheduler add_job {_n(aps['schedule_per_s'])}" if aps else ""),
            _cite(peers.DAPR_SCHEDULE_TARGET, peers.DAPR_REMINDER_REGISTRATIONS))
        ratio = s["concurrent_single_per_s"] / noop["concurrent_per_s"]
        row(f"Single-call scheduling, {CALLERS} callers (jobs/s)", ratio, f"{_n(s['concurrent_single_per_s'])} "
            f"({ratio:.0%} of no-op)", GOAL_SINGLE_OVER_NOOP, f">= {GOAL_SINGLE_OVER_NOOP:.0%} of no-op call", True,
            f"no-op Ray call ×{CALLERS} {_n(noop['concurrent_per_s'])}; file store {_n(sf['concurrent_single_per_s'])}")
        row("Single-call scheduling, 1 caller (jobs/s)", s["single_per_s"], _n(s["single_per_s"]), None, "—", True,
            f"no-op Ray call ×1 {_n(noop['sequential_per_s'])}; file store {_n(sf['single_per_s'])}"
            + (f"; APScheduler add_job {_n(aps['schedule_per_s'])}" if aps else ""))
        noop_text = f"no-op Ray call ×1 {_n(noop['sequential_per_s'])}, ×{CALLERS} {_n(noop['concurrent_per_s'])}"
        for kind, store in ((GOAL_STORE, az), ("file", fi)):  # a goal per store, the no-op rate of the same run beside
            t = store["triggers"]
            goal = GOAL_TRIGGERS_PER_S[kind]
            row(f"Trigger throughput into handler actors, {kind} store (jobs/s)", t["per_s"], _n(t["per_s"]), goal,
                f">= {_n(goal)}", True, noop_text, _cite(peers.DAPR_TRIGGER_TARGET, peers.DAPR_REMINDER_TRIGGERS))
        lt = az["lateness"]
        base = [f"file store p99 {fi['lateness']['p99']:.1f}"]
        if floor:
            base.append(f"asyncio timer (floor) p99 {floor['p99']:.1f}")
        if aps:
            base.append(f"APScheduler p99 {_n(aps['lateness']['p99'])}")
        row(f"Lateness at {_n(STEADY_RATE)} jobs/s, p50 / p99 / max (ms)", lt["p99"],
            f"{lt['p50']:.1f} / {lt['p99']:.1f} / {lt['max']:.1f}", GOAL_LATENESS_P99_MS, f"p99 <= {GOAL_LATENESS_P99_MS}",
            False, "; ".join(base))
        hi, fh = az.get("lateness_high"), fi.get("lateness_high")
        if hi and fh:
            high = [f"file store p99 {fh['p99']:.1f}"]
            hfloor = az.get("timer_floor", {}).get(str(HIGH_RATE))
            if hfloor:
                high.append(f"asyncio timer (floor) p99 {hfloor['p99']:.1f}")
            row(f"Lateness at {_n(HIGH_RATE)} jobs/s, p50 / p99 / max (ms)", hi["p99"],
                f"{hi['p50']:.1f} / {hi['p99']:.1f} / {hi['max']:.1f}", GOAL_LATENESS_P99_MS_HIGH,
                f"p99 <= {GOAL_LATENESS_P99_MS_HIGH}", False, "; ".join(high), "")
    if "named" in results:
        named_side.rows(results["named"], row, _cite(peers.DAPR_SCHEDULE_TARGET, peers.DAPR_REMINDER_REGISTRATIONS))
    if "failover" in results and results["failover"]["measured"]:
        f = results["failover"]
        row(f"Failover, kill → first adopted fire, p50 / max (s, {f['measured']} kills)", f["p50"],
            f"{f['p50']:.2f} / {f['max']:.2f}", GOAL_FAILOVER_P50_S, f"p50 <= {GOAL_FAILOVER_P50_S:g}", False, "")
    if "replay" in results:
        r = results["replay"]
        kind = GOAL_STORE if GOAL_STORE in r else next(iter(r))
        row(f"Replay of a {_n(r[kind]['records'])}-job shard (records/s)", r[kind]["records_per_s"],
            _n(r[kind]["records_per_s"]), GOAL_REPLAY_PER_S, f">= {_n(GOAL_REPLAY_PER_S)}", True,
            "; ".join(f"{k} store {_n(v['records_per_s'])}" for k, v in r.items() if k != kind))
    if "memory" in results:
        m = results["memory"]
        for name, goal in (("dormant", memory.GOAL_DORMANT_BYTES_PER_JOB), ("loaded", memory.GOAL_LOADED_BYTES_PER_JOB)):
            r = m[name]
            what = "Dormant jobs (due beyond the lookahead)" if name == "dormant" else "Loaded jobs (in one silo)"
            extra = f"; scheduled at {_n(r['schedule_per_s'])}/s" if name == "dormant" else ""
            row(f"{what}: silo RSS slope, {_n(r['sizes'][0])}–{_n(r['jobs'])} jobs (B/job)", r["bytes_per_job"],
                f"{_n(r['bytes_per_job'], 1)} (R² {r['r2']:.2f}; intercept {_n(r['intercept_mb'])} MiB; "
                f"{_n(r['objects_per_job'], 1)} objects, {_n(r['blocks_per_job'], 1)} blocks per job{extra})",
                goal, f"slope <= {goal}", False,
                f"APScheduler (SQLite store) RSS per stored job {_n(aps['bytes_per_job'])}" if aps else "")
    if "herd" in results:
        h = results["herd"]
        late = h["lateness_ms"]
        base = [f"in-process timer queue {_n(h['queue']['per_s'])}"]
        if az:
            base.append(f"steady triggers ({_n(az['triggers']['jobs'])} jobs) {_n(az['triggers']['per_s'])}")
        row(f"Thundering herd: {_n(h['jobs'])} jobs due at one instant, {h['silos']} silos (jobs/s; lateness p50 / p99 s)",
            h["per_s"], f"{_n(h['per_s'])} ({late['p50'] / 1e3:.1f} / {late['p99'] / 1e3:.1f})",
            GOAL_TRIGGERS_PER_S[GOAL_STORE], f">= {_n(GOAL_TRIGGERS_PER_S[GOAL_STORE])}", True, "; ".join(base),
            _cite(peers.DAPR_TRIGGER_TARGET, peers.DAPR_REMINDER_TRIGGERS))
        if h.get("growth") is not None:
            small, large = (h["herds"][str(n)] for n in (h["sizes"][0], h["sizes"][-1]))
            row(f"Herd: wall time per job, {_n(h['sizes'][-1])} over {_n(h['sizes'][0])} jobs (×)", h["growth"],
                f"{h['growth']:.2f} ({large['us_per_job']:.1f} / {small['us_per_job']:.1f} µs)", GOAL_HERD_GROWTH,
                f"<= {GOAL_HERD_GROWTH:g} (no quadratic step)", False, "", "")
    return out


def markdown(table: list[dict[str, Any]], quick: bool, machine: dict[str, Any], when: str) -> str:
    lines = [
        "<!-- generated by `python -m benchmarks.suite`; do not edit by hand -->",
        f"Measured {when} on this machine: {machine.get('cpus')} CPUs"
        + (f" ({machine['cpu']})" if machine.get("cpu") else "")
        + f", {machine.get('mem_total_kib', 0) / 2**20:.0f} GiB, Python {machine.get('python')}, "
        f"Ray {machine.get('ray')}; store: Azurite unless noted. Goals are set for this machine; "
        "baselines ran in the same run, published figures come from their authors' own hardware"
        + (" — **quick run (small sizes): figures are indicative only**" if quick else "") + ".",
        "",
        f"| Figure | timeshard | Goal | Met | Baselines (measured, same run) | Published ({PUBLISHED}) |",
        "|---|---:|---|:-:|---|---|",
    ]
    for r in table:
        met = "—" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(f"| {r['figure']} | {r['shown']} | {r['goal_text']} | {met} | {r['baselines']} | {r['published']} |")
    return "\n".join(lines) + "\n"


def draw(report: Report, results: dict[str, Any], samples: dict[str, list[float]]) -> None:
    """One PNG per comparison: measured bars, goal dashed, published figures dotted."""
    noop, aps = results.get("noop", {}), results.get("apscheduler")
    az, fi = results.get(f"cluster_{GOAL_STORE}"), results.get("cluster_file")
    if az and fi:
        batch = {"timeshard azure": az["scheduling"]["batch_per_s"], "timeshard file": fi["scheduling"]["batch_per_s"]}
        single = {f"timeshard azure ×{CALLERS}": az["scheduling"]["concurrent_single_per_s"],
                  f"no-op call ×{CALLERS}": noop["concurrent_per_s"], "timeshard azure ×1": az["scheduling"]["single_per_s"],
                  "no-op call ×1": noop["sequential_per_s"]}
        if aps:
            batch["APScheduler"] = single["APScheduler"] = aps["schedule_per_s"]
        report.bars("scheduling throughput (jobs/s)", [
            ("batch, 1,000 per call", batch, GOAL_BATCH_PER_S,
             [peers.DAPR_SCHEDULE_TARGET.reference, peers.DAPR_REMINDER_REGISTRATIONS.reference]),
            ("single call", single, GOAL_SINGLE_OVER_NOOP * noop["concurrent_per_s"]),
        ], suffix="scheduling")
        report.bars("trigger throughput into handler actors (jobs/s)", [
            ("jobs due at one instant", {"timeshard azure": az["triggers"]["per_s"], "timeshard file": fi["triggers"]["per_s"]},
             GOAL_TRIGGERS_PER_S[GOAL_STORE], [peers.DAPR_TRIGGER_TARGET.reference, peers.DAPR_REMINDER_TRIGGERS.reference,
                                               (f"goal on file {GOAL_TRIGGERS_PER_S['file']:,}/s",
                                                float(GOAL_TRIGGERS_PER_S["file"]))]),
        ], suffix="triggers")
    if samples:
        report.cdf(f"lateness at a steady {STEADY_RATE:,} jobs/s (handler start - due)", samples,
                   goal=GOAL_LATENESS_P99_MS, suffix="lateness")
    if "named" in results:
        named_side.draw(report, results["named"])
    if results.get("failover", {}).get("measured"):
        f = results["failover"]
        report.bars("failover: SIGKILL -> first fire of adopted shards (s)", [
            ("per kill", {f"kill {i + 1}": v for i, v in enumerate(f["seconds"])}, GOAL_FAILOVER_P50_S),
        ], suffix="failover")
    if "replay" in results:
        report.bars("replay: loading one large shard (records/s)", [
            ("records/s", {k: v["records_per_s"] for k, v in results["replay"].items()}, GOAL_REPLAY_PER_S),
        ], suffix="replay")
    if "memory" in results:
        m = results["memory"]
        per_job = {"timeshard loaded": max(m["loaded"]["bytes_per_job"], 0.1),
                   "timeshard dormant": max(m["dormant"]["bytes_per_job"], 0.1)}
        if aps:
            per_job["APScheduler (SQLite)"] = aps["bytes_per_job"]
        report.bars("memory per job (RSS slope, bytes)", [
            ("bytes per job", per_job, memory.GOAL_LOADED_BYTES_PER_JOB),
        ], suffix="memory", log=True)
        memory.draw(report, m, suffix="memory-slope")
    if "herd" in results:
        h = results["herd"]
        compared = {f"herd {_n(h['jobs'])}": h["per_s"], "in-process queue": h["queue"]["per_s"]}
        if az:
            compared[f"steady triggers {_n(az['triggers']['jobs'])}"] = az["triggers"]["per_s"]
        report.bars("thundering herd through a cluster (jobs/s)", [
            ("jobs due at one instant", compared, GOAL_TRIGGERS_PER_S[GOAL_STORE],
             [peers.DAPR_TRIGGER_TARGET.reference, peers.DAPR_REMINDER_TRIGGERS.reference]),
        ], suffix="herd", log=True)
        herd.draw(report, h, suffix="herd-rate")

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"any of {', '.join(NAMES)} (and {', '.join(ALIASES)}); default all")
    parser.add_argument("--quick", action="store_true", help="small sizes: the whole suite in about a minute")
    parser.add_argument("--dormant", type=memory.sizes_arg, default=None,
                        help="dormant-job sizes for memory (default 1M,2.5M,5M,7.5M,10M; quick 5k..20k)")
    parser.add_argument("--loaded", type=memory.sizes_arg, default=None,
                        help="loaded-job sizes for memory (default 100k,250k,500k,750k,1M; quick 2.5k..10k)")
    parser.add_argument("--herd", type=memory.sizes_arg, default=None, help="herd sizes (default 100k,1M; quick 1k,4k)")
    add_publish_flag(parser)
    args = parser.parse_args(argv)
    names: list[str] = []
    for given in args.names or NAMES:
        for name in ALIASES.get(given, (given,)):
            if name not in NAMES:
                parser.error(f"unknown benchmark {name!r}; choose from {', '.join(NAMES + tuple(ALIASES))}")
            if name not in names:
                names.append(name)
    # Baselines first when present: the peer's figures then sit beside every row.
    names.sort(key=lambda n: n != "baselines")
    report = report_for("suite", parser, args)
    sizes = Sizes(args.dormant, args.loaded, args.herd)
    results, samples = asyncio.run(run(names, args.quick, report, sizes))
    table = rows(results)
    for r in table:
        if r["goal"] is not None:
            report.goal(r["figure"], r["value"], r["goal"], higher_is_better=r["higher_is_better"])
    report.table(["figure", "timeshard", "goal", "baselines"], [[r["figure"], r["shown"], r["goal_text"], r["baselines"]] for r in table])
    draw(report, results, samples)
    machine = machine_info()
    report.data.update({"machine": machine, "names": names, "results": results, "table": table})
    out = report.results_dir
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(table, args.quick, machine, report.data["when"])
    (out / "RESULTS.md").write_text(text)
    report.progress(f"table: {out / 'RESULTS.md'}")
    if args.publish and set(names) >= set(NAMES) and sizes == Sizes():
        embed_in_page(text, RESULTS_PAGE)
        report.progress(f"{RESULTS_PAGE}: benchmark table regenerated")
    return report.finish()


RESULTS_PAGE = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
START, END = "<!-- results:start -->", "<!-- results:end -->"


def embed_in_page(table: str, page: Path = RESULTS_PAGE) -> bool:
    """Put ``table`` between the results markers of docs/benchmarks.md (a full run of every benchmark only)."""
    text = page.read_text()
    if START not in text or END not in text:
        return False
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{table.strip()}\n{END}{tail}")
    return True


if __name__ == "__main__":
    raise SystemExit(main())
