"""The benchmarks' pure parts: the least-squares slope the memory goals apply to, the herd's
figures, and the suite's table rows for the scale figures (no Ray, no store)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from benchmarks import baselines, herd, memory, peers, queue, report, storage, suite
from benchmarks import cluster as cluster_bench
from benchmarks.cluster import GOAL_REPLAY_PER_S
from cluster.cli import build_parser
from cluster.cli import main as cli_main


def test_fit_line_separates_the_slope_from_the_fixed_cost() -> None:
    # 10 MiB fixed (the allocator's high-water mark) and 100 B per job: the slope says 100, where
    # "RSS / jobs" at the smallest size would say 10 MiB / 20,000 + 100 = 624 B per job.
    xs = [20_000, 40_000, 60_000, 80_000]
    fit = memory.fit_line(xs, [10 * 2**20 + 100 * x for x in xs])
    assert fit.slope == pytest.approx(100)
    assert fit.intercept == pytest.approx(10 * 2**20)
    assert fit.r2 == pytest.approx(1.0)


def test_fit_line_reports_how_well_a_noisy_line_fits() -> None:
    fit = memory.fit_line([1, 2, 3, 4], [1.0, 3.0, 2.0, 4.0])
    assert fit.slope == pytest.approx(0.8)
    assert fit.intercept == pytest.approx(0.5)
    assert fit.r2 == pytest.approx(0.64)
    flat = memory.fit_line([1, 2, 3, 4], [5.0, 5.0, 5.0, 5.0])
    assert (flat.slope, flat.intercept, flat.r2) == (0.0, 5.0, 1.0)


@pytest.mark.parametrize("xs, ys", [([1], [1.0]), ([2, 2, 2], [1.0, 2.0, 3.0]), ([1, 2], [1.0])])
def test_fit_line_refuses_what_has_no_slope(xs: list[float], ys: list[float]) -> None:
    with pytest.raises(ValueError, match="xs"):
        memory.fit_line(xs, ys)


def test_sizes_argument_needs_two_distinct_positive_counts() -> None:
    assert memory.sizes_arg("1e6,100000,250000") == (100_000, 250_000, 1_000_000)
    for bad in ("100000", "5,5", "0,10"):
        with pytest.raises(argparse.ArgumentTypeError):
            memory.sizes_arg(bad)


def test_herd_growth_is_the_largest_herds_time_per_job_over_the_smallests() -> None:
    assert herd.growth({"1000000": {"us_per_job": 30.0}, "100000": {"us_per_job": 20.0}}) == pytest.approx(1.5)
    assert herd.growth({"100000": {"us_per_job": 20.0}}) is None


def test_firing_rate_counts_executions_per_second_in_bins() -> None:
    starts = [100.0 + i / 1_000 for i in range(2_000)]  # 1,000 jobs/s for 2 s, beginning 0.5 s after due
    points = herd.firing_rate(starts, origin=99.5, bins=4)
    assert [round(t, 2) for t, _ in points] == [0.75, 1.25, 1.75, 2.25, 2.75]
    assert all(r == pytest.approx(1_000, rel=0.01) for _, r in points[:4])
    assert sum(r * 0.49975 for _, r in points) == pytest.approx(2_000, rel=0.01)
    assert herd.firing_rate([], origin=0.0) == []


def _memory(slope: float, sizes: tuple[int, ...]) -> dict[str, Any]:
    return {"sizes": list(sizes), "jobs": sizes[-1], "bytes_per_job": slope, "r2": 0.99, "intercept_mb": 120.0,
            "objects_per_job": 2.0, "blocks_per_job": 6.0, "schedule_per_s": 16_000.0}


SCALE_RESULTS: dict[str, Any] = {
    "apscheduler": {"bytes_per_job": 360.0, "schedule_per_s": 300.0, "lateness": {"p99": 5_000.0}},
    "memory": {"dormant": {**_memory(0.4, (1_000_000, 10_000_000)), "objects_per_job": -0.004}, "loaded": _memory(567.0, (100_000, 1_000_000))},
    "herd": {"jobs": 1_000_000, "silos": 3, "per_s": 31_000.0, "lateness_ms": {"p50": 16_000.0, "p99": 32_000.0},
             "queue": {"per_s": 350_000.0}, "sizes": [100_000, 1_000_000], "growth": 1.2,
             "herds": {"100000": {"us_per_job": 27.0}, "1000000": {"us_per_job": 32.4}}},
    "replay": {"azure": {"records": 1_000_000, "records_per_s": 320_000.0},
               "file": {"records": 1_000_000, "records_per_s": 330_000.0}},
}


def test_rows_put_each_scale_figure_beside_its_baseline_with_goals_on_slopes() -> None:
    table = {r["figure"]: r for r in suite.rows(SCALE_RESULTS)}
    dormant = table["Dormant jobs (due beyond the lookahead): silo RSS slope, 1,000,000–10,000,000 jobs (B/job)"]
    assert dormant["value"] == 0.4 and dormant["met"] is True and "-0.0" not in dormant["shown"]
    assert "intercept 120 MiB" in dormant["shown"] and "scheduled at 16,000/s" in dormant["shown"]
    assert "APScheduler" in dormant["baselines"] and "360" in dormant["baselines"]
    loaded = table["Loaded jobs (in one silo): silo RSS slope, 100,000–1,000,000 jobs (B/job)"]
    assert loaded["value"] == 567.0 and loaded["goal"] == 150 and loaded["met"] is False
    assert loaded["published"] == "", "no peer publishes a per-job memory figure we could cite"
    crowd = table["Thundering herd: 1,000,000 jobs due at one instant, 3 silos (jobs/s; lateness p50 / p99 s)"]
    assert crowd["shown"] == "31,000 (16.0 / 32.0)" and "in-process timer queue 350,000" in crowd["baselines"]
    step = table["Herd: wall time per job, 1,000,000 over 100,000 jobs (×)"]
    assert step["value"] == 1.2 and step["met"] is True and "32.4 / 27.0 µs" in step["shown"]
    replay = table["Replay of a 1,000,000-job shard (records/s)"]
    assert replay["goal"] == GOAL_REPLAY_PER_S == 1_000_000 and replay["met"] is False
    assert replay["baselines"] == "file store 330,000"


def test_herd_row_names_the_steady_trigger_rate_when_the_cluster_ran() -> None:
    cluster = {"scheduling": {"batch_per_s": 16_000.0, "concurrent_single_per_s": 2_000.0, "single_per_s": 80.0},
               "triggers": {"per_s": 17_000.0, "jobs": 30_000},
               "lateness": {"p50": 3.0, "p99": 15.0, "max": 30.0}}
    results = {**SCALE_RESULTS, "cluster_azure": cluster, "cluster_file": cluster,
               "noop": {"concurrent_per_s": 1_100.0, "sequential_per_s": 330.0}}
    (crowd,) = [r for r in suite.rows(results) if r["figure"].startswith("Thundering herd")]
    assert "steady triggers (30,000 jobs) 17,000" in crowd["baselines"]


CITATION = re.compile(r"\[[^\]]+\]\((https://[^)\s]+)\)")


def test_every_published_figure_in_the_table_links_to_its_source() -> None:
    """Issue 27, point 7: a peer's figure beside ours says where the peer publishes it."""
    cluster = {"scheduling": {"batch_per_s": 16_000.0, "concurrent_single_per_s": 2_000.0, "single_per_s": 80.0},
               "triggers": {"per_s": 17_000.0, "jobs": 30_000}, "lateness": {"p50": 3.0, "p99": 15.0, "max": 30.0}}
    results = {**SCALE_RESULTS, "cluster_azure": cluster, "cluster_file": cluster,
               "noop": {"concurrent_per_s": 1_100.0, "sequential_per_s": 330.0},
               "failover": {"measured": 2, "p50": 0.5, "max": 1.0, "seconds": [0.5, 1.0]}}
    table = suite.rows(results)
    published = [r["published"] for r in table if r["published"]]
    assert len(published) >= 3  # batch scheduling, triggers (two stores) and the herd: the rows Dapr publishes for
    for text in published:
        assert CITATION.sub("", text).strip("; ") == "", f"a published figure without its source: {text!r}"
    sources = {url for text in published for url in CITATION.findall(text)}
    assert sources == {f.source for f in peers.ALL}
    for figure in peers.ALL:
        assert f"{figure.value:,.0f}" in figure.label, f"{figure.label!r} does not say the value it is drawn at"


def test_scale_runs_the_three_scale_steps_with_the_sizes_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ran: list[tuple[list[str], suite.Sizes]] = []

    async def fake_run(names: list[str], quick: bool, report: Any, sizes: suite.Sizes) -> tuple[dict, dict]:
        ran.append((list(names), sizes))
        return {}, {}

    monkeypatch.setattr(suite, "run", fake_run)
    monkeypatch.setenv("TIMESHARD_BENCH_DIR", str(tmp_path))
    assert suite.main(["scale", "--dormant", "1000,2000", "--quick"]) == 0
    assert ran == [(["memory", "herd", "replay"], suite.Sizes(dormant=(1_000, 2_000)))]
    assert (tmp_path / "RESULTS.md").exists() and (tmp_path / "suite.json").exists()


def test_a_quick_suite_from_a_checkout_writes_a_scratch_folder_never_the_published_results(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`timeshard bench suite --quick` without TIMESHARD_BENCH_DIR once rewrote benchmarks/results/."""
    published, scratch = tmp_path / "published", tmp_path / "scratch"
    published.mkdir()
    # Both folders stand in for the real ones, so a regression writes here, not over the checkout.
    monkeypatch.setattr(report, "DEFAULT_RESULTS_DIR", published)
    monkeypatch.setattr(report, "QUICK_RESULTS_DIR", scratch)
    monkeypatch.delenv("TIMESHARD_BENCH_DIR", raising=False)

    async def fake_run(names: list[str], quick: bool, report: Any, sizes: suite.Sizes) -> tuple[dict, dict]:
        return {}, {}

    monkeypatch.setattr(suite, "run", fake_run)
    assert cli_main(["bench", "suite", "--quick"]) == 0
    assert sorted(p.name for p in scratch.iterdir()) == ["RESULTS.md", "suite.json"]
    assert list(published.iterdir()) == []
    assert str(scratch) in capsys.readouterr().out  # the user is told where the figures went


def test_unpublished_runs_write_scratch_folders_outside_the_checkout(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    monkeypatch.delenv("TIMESHARD_BENCH_DIR", raising=False)
    checkout = Path(suite.__file__).resolve().parent.parent
    for quick in (True, False):
        assert not report.results_dir(quick=quick).resolve().is_relative_to(checkout)
    assert report.results_dir(quick=False, publish=True) == report.DEFAULT_RESULTS_DIR
    monkeypatch.setenv("TIMESHARD_BENCH_DIR", str(tmp_path))
    assert report.results_dir(quick=True) == report.results_dir(quick=False) == tmp_path


@pytest.fixture
def folders(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Path]:
    """Stand-ins for the published folder, the scratch folders and docs/benchmarks.md, so a
    regression writes here, not over the checkout; the suite's steps do not run."""
    found = {name: tmp_path / name for name in ("published", "scratch", "quick")}
    found["published"].mkdir()
    found["page"] = tmp_path / "benchmarks.md"
    found["page"].write_text(f"# Benchmarks\n{suite.START}\nthe published table\n{suite.END}\n")
    monkeypatch.setattr(report, "DEFAULT_RESULTS_DIR", found["published"])
    monkeypatch.setattr(report, "SCRATCH_RESULTS_DIR", found["scratch"])
    monkeypatch.setattr(report, "QUICK_RESULTS_DIR", found["quick"])
    monkeypatch.setattr(suite, "RESULTS_PAGE", found["page"])
    monkeypatch.delenv("TIMESHARD_BENCH_DIR", raising=False)

    async def fake_run(names: list[str], quick: bool, report: Any, sizes: suite.Sizes) -> tuple[dict, dict]:
        return {}, {}

    monkeypatch.setattr(suite, "run", fake_run)
    return found


def test_a_full_run_is_published_only_with_publish(folders: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 27, point 6: a full run someone tries locally no longer replaces the published figures."""
    page = folders["page"].read_text()
    assert cli_main(["bench"]) == 0
    assert sorted(p.name for p in folders["scratch"].iterdir()) == ["RESULTS.md", "suite.json"]
    assert list(folders["published"].iterdir()) == [] and folders["page"].read_text() == page
    assert str(folders["scratch"]) in capsys.readouterr().out  # the user is told where the figures went

    assert cli_main(["bench", "--publish"]) == 0
    assert sorted(p.name for p in folders["published"].iterdir()) == ["RESULTS.md", "suite.json"]
    table = (folders["published"] / "RESULTS.md").read_text().strip()
    assert folders["page"].read_text() == f"# Benchmarks\n{suite.START}\n{table}\n{suite.END}\n"


@pytest.mark.parametrize("module", [baselines, cluster_bench, herd, memory, queue, storage, suite],
                         ids=lambda m: m.__name__)
def test_a_quick_run_is_refused_publishing_before_it_runs(module: Any, folders: dict[str, Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        module.main(["--quick", "--publish"])
    assert refused.value.code == 2
    assert "--quick run's figures are indicative only and are never published" in capsys.readouterr().err
    assert list(folders["published"].iterdir()) == [] and not folders["quick"].exists()


def test_the_command_line_refuses_a_quick_published_run(folders: dict[str, Path]) -> None:
    with pytest.raises(SystemExit) as refused:
        cli_main(["bench", "suite", "--quick", "--publish"])
    assert refused.value.code == 2 and list(folders["published"].iterdir()) == []


@pytest.mark.parametrize("argv", [["--quick"], []], ids=["quick", "full"])
def test_the_published_folder_is_not_a_scratch_folder(argv: list[str], folders: dict[str, Path],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """TIMESHARD_BENCH_DIR naming benchmarks/results/ would publish without --publish."""
    monkeypatch.setenv("TIMESHARD_BENCH_DIR", str(folders["published"]))
    with pytest.raises(SystemExit) as refused:
        suite.main(argv)
    assert refused.value.code == 2 and list(folders["published"].iterdir()) == []


def test_timeshard_bench_without_a_name_runs_the_suite() -> None:
    args = build_parser().parse_args(["bench"])
    assert args.names == ["suite"]
