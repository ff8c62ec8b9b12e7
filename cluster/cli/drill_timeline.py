"""A drill's timeline drawn: executions per silo incarnation over time, kills and pauses marked."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from cluster.cli.drill_analysis import DrillReport, owner_of
from cluster.model.jobs import ScheduledJob


def timeline(report: DrillReport, jobs: list[ScheduledJob], records: list[dict[str, Any]], path: Path) -> Path | None:
    """Executions over time, one colour per silo incarnation, kills and pauses marked; below, jobs
    due vs fired so far (a gap that stays open is loss)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not records:
        return None
    t0 = min(r["started"] for r in records)
    due = {j.id: j.due.timestamp() for j in jobs}  # as acknowledged; a job never acknowledged shows its own
    owners = sorted({owner_of(r) for r in records})
    fig, (ax, below) = plt.subplots(2, 1, figsize=(11, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    for owner in owners:
        mine = [r for r in records if owner_of(r) == owner]
        ax.scatter([r["started"] - t0 for r in mine], [1000 * (r["started"] - due.get(r["job_id"], r["scheduled_for"])) for r in mine], s=4,
                   label=f"fired by {owner}")
    colours = {"kill": "#c53030", "pause": "#dd6b20", "resume": "#38a169"}
    for e in report.events:
        for axis in (ax, below):
            axis.axvline(e.at - t0, color=colours[e.kind], linestyle="--", linewidth=0.8)
        if len(report.events) <= 40:
            ax.annotate(f"{e.kind} {e.owner}", (e.at - t0, 1), rotation=90, fontsize=6, va="bottom")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("lateness (ms, start - due)")
    p50 = statistics.median(report.failover_s) if report.failover_s else float("nan")  # per shard
    kind = "restart storm" if report.storm else "drill"
    ax.set_title(f"{kind}: {report.jobs} jobs, lost {report.lost}, early {report.early}, duplicates {report.duplicates} "
                 f"({report.other_duplicates} other), superseded-owner fires {report.two_owner_fires}, failover p50 {p50:.2f} s")
    ax.legend(fontsize=6, markerscale=3, loc="upper left", ncol=max(1, len(owners) // 12))
    due_times = sorted(j.due.timestamp() - t0 for j in jobs)
    first = sorted({r["job_id"]: r["started"] for r in reversed(sorted(records, key=lambda r: r["started"]))}.values())
    below.plot(due_times, range(1, len(due_times) + 1), label="jobs due", color="#4a5568", linewidth=1)
    below.plot([t - t0 for t in first], range(1, len(first) + 1), label="jobs fired (first run)", color="#3182ce", linewidth=1)
    below.set_xlabel("seconds since the first execution")
    below.set_ylabel("jobs")
    below.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
