"""The sizing tables in docs/deploy.md: computed right from the committed benchmark results, with
the store requests they assume counted on a silo's own roles, and no stale figure beside them."""

from __future__ import annotations

import json
import math
import re
import shutil
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from benchmarks import sizing
from cluster.model import options as options_module
from cluster.model.limits import JobLimits
from cluster.model.options import ClusterOptions
from storage import MemoryStore
from tests.runtime.harness import OPTIONS, add, job, make_parts

RESULTS = Path(sizing.__file__).resolve().parent / "results"
DEPLOY = Path(sizing.__file__).resolve().parent.parent / "docs" / "deploy.md"


def _number(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell.split()[0]))


def _rows(text: str, first_cell: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return [r for r in rows if r[0] == first_cell]


def _section(text: str, title: str) -> str:
    """The part of ``text`` from the paragraph starting ``**title`` to the next such paragraph."""
    part = text.split(f"**{title}", 1)[1]
    return part.split("\n**", 1)[0]


def _output(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert sizing.main(list(argv)) == 0
    return capsys.readouterr().out


def test_memory_row_is_budget_less_start_up_rss_over_bytes_per_loaded_job(capsys: pytest.CaptureFixture[str]) -> None:
    text = _output(capsys, "--budgets", "4", "--shards", "1h,15m")
    suite = json.loads((RESULTS / "suite.json").read_text())["results"]["memory"]["loaded"]
    (row,) = _rows(text, "4 GiB")

    loaded = math.floor((4 * 2**30 - suite["rss_before"]) / suite["bytes_per_job"])
    assert _number(row[1]) == loaded
    # The peak of loaded jobs is what falls due within shard_duration + lookahead (5 min).
    assert _number(row[2]) == round(loaded / (3600 + 300))
    assert _number(row[3]) == round(loaded / (900 + 300))


def test_rows_beyond_what_the_benchmark_measured_are_marked_extrapolated(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(RESULTS / "storage.json", tmp_path / "storage.json")
    suite = json.loads((RESULTS / "suite.json").read_text())
    suite["results"]["memory"]["loaded"]["jobs"] = 3_000_000  # as if the benchmark had held 3 M loaded jobs
    suite["results"]["replay"]["azure"]["records"] = 800_000
    (tmp_path / "suite.json").write_text(json.dumps(suite))
    text = _output(capsys, "--results", str(tmp_path), "--budgets", "1,2")
    (one,), (two,) = _rows(text, "1 GiB"), _rows(text, "2 GiB")
    assert _number(one[1]) <= 3_000_000 and not one[1].endswith("(extrapolated)")
    assert _number(two[1]) > 3_000_000 and two[1].endswith("(extrapolated)")
    replays = _section(text, "Replay when a shard is adopted")
    (replay,) = _rows(replays, "100")  # 100 jobs/s: 360,000 jobs of 1 h = 720,000 records; 15 min: 180,000
    assert not replay[1].endswith("(extrapolated)")
    (fast,) = _rows(replays, "1,000")  # 1 h: 7.2 M records, 5 min: 600,000
    assert fast[1].endswith("(extrapolated)") and not fast[3].endswith("(extrapolated)")


class CountingStore(MemoryStore):
    """A memory store that counts calls by how Azure bills them; a listing by its 5,000-log pages."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __getattribute__(self, attr: str) -> Any:
        value = super().__getattribute__(attr)
        if attr not in sizing.STORE_OP_KIND:
            return value

        async def counted(*args: Any, **kwargs: Any) -> Any:
            result = await value(*args, **kwargs)
            pages = math.ceil(len(result) / sizing.AZURE_LIST_PAGE) if attr in ("list", "names") else 1
            self.calls[sizing.STORE_OP_KIND[attr]] += max(1, pages)
            return result

        return counted


async def test_idle_requests_per_heartbeat_and_adoption_round_are_what_a_silo_makes() -> None:
    """The table's idle traffic is counted, not read off the code: one heartbeat round (beat, look
    at peers, read the store's clock) and one adoption round of a silo beside a peer, with shards
    in two windows within the lookahead and one beyond it."""
    store = CountingStore()
    peer = await make_parts(store, "1")
    parts = await make_parts(store, "0")
    await add(peer, job(due=timedelta(seconds=1)), job(due=timedelta(seconds=12)), job(due=timedelta(minutes=5)))
    await parts.heartbeat.detect_failures()  # the first look starts watching the peer

    store.calls.clear()
    await parts.heartbeat.beat()
    await parts.heartbeat.detect_failures()
    await parts.skew.sample()
    assert store.calls == Counter(sizing.HEARTBEAT_REQUESTS)

    store.calls.clear()
    await parts.adoption.adopt_orphans()
    within = sizing.shards_within_lookahead(1, OPTIONS.shard_duration.total_seconds(),
                                            OPTIONS.lookahead.total_seconds())
    expected = Counter(sizing.ADOPTION_REQUESTS)
    expected["list"] += sizing.adoption_list_pages(within)
    assert store.calls == expected


def test_idle_traffic_and_its_cost_follow_from_the_counted_requests(capsys: pytest.CaptureFixture[str]) -> None:
    text = _output(capsys)
    # Per silo: 1 List and 2 others per 0.5 s heartbeat; 1 + 1 List per 2 s adoption round, which
    # 3 silos of the cluster run each interval, in turn (all of them while there are no more).
    list_s, other_s = 1 / 0.5 + (1 + 1) / 2.0, 2 / 0.5
    (row,) = _rows(_section(text, "Store traffic of idle silos"), "50")
    lists_50 = 50 * 1 / 0.5 + 3 * (1 + 1) / 2.0
    assert (_number(row[3]), _number(row[4])) == (lists_50, 50 * other_s)
    assert row[5] == f"{(lists_50 + 50 * other_s) / 20_000:.2%}" and row[6] == f"{(lists_50 + 50 * other_s) / 40_000:.2%}"
    month = 730 * 3600
    per_silo = month * (list_s * 0.055 + other_s * 0.0044) / 10_000  # sample hot-tier prices per 10,000
    (idle,) = _rows(text, "an idle silo, per month (730 h)")
    assert idle[2] == f"${per_silo:,.2f}"
    assert row[7] == f"${month * lists_50 * 0.055 / 10_000:,.2f}"  # the List calls alone
    assert row[8] == f"${month * (lists_50 * 0.055 + 50 * other_s * 0.0044) / 10_000:,.2f}"
    (awaited,) = [r for r in _rows(text, "a million one-shot jobs; 1 writer, each append awaited, records per append: 1")]
    assert awaited[1:] == ["2,000,000 writes", f"${2_000_000 * 0.055 / 10_000:,.2f}"]


def test_account_rows_divide_each_account_target_by_per_shard_and_idle_requests(
        capsys: pytest.CaptureFixture[str]) -> None:
    text = _output(capsys, "--account-limits", "20000,40000")
    (row,) = _rows(text, "500 (the assumed per-blob figure)")
    idle = 3 / 0.5 + 2 / 2.0
    assert [_number(c) for c in row[1:]] == [20_000 // 500, math.floor(20_000 / (500 + idle)),
                                             40_000 // 500, math.floor(40_000 / (500 + idle))]


def test_list_pages_grow_with_shards_within_the_lookahead_only() -> None:
    # One shard per silo per window that started or starts within the lookahead.
    assert sizing.shards_within_lookahead(50, 3600, 300) == 100
    assert sizing.shards_within_lookahead(100, 900, 300) == 200
    assert sizing.shards_within_lookahead(100, 60, 300) == 600
    # Issue 28's count before the change: 36,000 blobs listed whole are 8 pages of 5,000.
    assert [sizing.adoption_list_pages(n) for n in (0, 1, 5_000, 5_001, 36_000)] == [1, 1, 1, 2, 8]


def test_restart_is_the_waits_then_each_silos_share_loaded_at_the_measured_rate() -> None:
    f = sizing.Figures.load()
    runs = json.loads((RESULTS / "recovery.json").read_text())["runs"]
    largest = max((r for r in runs if r["store"] == "azurite"), key=lambda r: r["jobs"])
    waits = 0.8 * 2.0 + 2 * 1.0  # the lease (0.8 x suspicion_timeout), a tick to claim, a tick to load
    rate = largest["jobs"] / (largest["all_loaded_s"] - waits)
    assert sizing.load_rate(f) == pytest.approx(rate)
    assert sizing.restart_s(1_000_000, 4, rate) == pytest.approx(waits + 1_000_000 / 4 / rate)


def test_measured_restarts_are_the_recovery_runs(capsys: pytest.CaptureFixture[str]) -> None:
    text = _section(_output(capsys), "Whole-cluster restart, measured")
    runs = json.loads((RESULTS / "recovery.json").read_text())["runs"]
    rows = [r for r in _rows(text, "azurite") + _rows(text, "file")]
    assert sorted((r[0], _number(r[1]), _number(r[5])) for r in rows) == sorted(
        (run["store"], run["jobs"], round(run["all_loaded_s"], 1)) for run in runs)


def test_assumed_defaults_are_the_cluster_options_defaults() -> None:
    options = ClusterOptions()
    assert options.lookahead.total_seconds() == sizing.DEFAULT_LOOKAHEAD_S
    assert options.heartbeat_interval.total_seconds() == sizing.DEFAULT_HEARTBEAT_INTERVAL_S
    assert options.suspicion_timeout.total_seconds() == sizing.DEFAULT_SUSPICION_TIMEOUT_S
    assert options.adoption_interval.total_seconds() == sizing.DEFAULT_ADOPTION_INTERVAL_S
    assert options.adoption_listers == sizing.DEFAULT_ADOPTION_LISTERS
    assert options.staging_interval.total_seconds() == sizing.DEFAULT_STAGING_INTERVAL_S
    assert options.max_blocks == sizing.DEFAULT_MAX_BLOCKS
    assert sizing.DEFAULT_SHARD_DURATIONS_S[0] == options.shard_duration.total_seconds()
    assert sizing.LEASE_FRACTION == options_module.LEASE_FRACTION


def test_deploy_page_embeds_the_current_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert _output(capsys).strip() in DEPLOY.read_text(), (
        "docs/deploy.md: run `python -m benchmarks.sizing --embed` again")


# Figures of the kinds the tables give (bytes, rates, dollars) that the page may state outside
# them, each with what makes it right: anything else must be a figure the tables print.
_SIZING_FIGURE = re.compile(r"\$\d[\d,.]*|\d[\d,.]*(?:–\d[\d,.]*)?\s*(?:B\b|KiB|MiB|GiB|records/s|requests/s|jobs/s|"
                            r"triggers/s)")
_NOT_FROM_THE_TABLES = {
    "256 KiB": "the job size limit, cluster.model.limits (checked below)",
    "2,000 jobs/s": "an example in the max_concurrency row: 2,000 jobs/s × 5 s handlers = 10,000",
    "150–200 jobs/s": "the node-loss drill's load, stated with the drill's own figures",
    "150 jobs/s": "the silo-keeping drill's load (checked below against the drill's --rate)",
}


def test_every_sizing_figure_in_the_page_outside_the_tables_is_one_the_tables_print() -> None:
    """Prose beside the table once quoted figures of older runs (621 B per job, 319,000
    records/s, ~4 requests/s idle) that nothing checked."""
    page = DEPLOY.read_text()
    head, rest = page.split(sizing.START, 1)
    table, tail = rest.split(sizing.END, 1)
    prose = re.sub(r"```.*?```", "", head + tail, flags=re.S)  # manifests' "4Gi" and such are not figures
    figures = [" ".join(m.split()) for m in _SIZING_FIGURE.findall(prose)]  # a figure may wrap across lines
    stray = [m for m in figures if m not in _NOT_FROM_THE_TABLES and m not in table]
    assert stray == [], f"docs/deploy.md quotes figures the sizing tables do not print: {stray}"
    assert JobLimits().max_bytes == 256 * 1024
    keeping_drill = Path(__file__).parent / "drills" / "test_silo_keeping.py"
    assert '"--rate", "150"' in keeping_drill.read_text()


def test_a_missing_figure_is_named(tmp_path: Path) -> None:
    shutil.copy(RESULTS / "storage.json", tmp_path / "storage.json")
    suite = json.loads((RESULTS / "suite.json").read_text())
    del suite["results"]["memory"]["loaded"]["bytes_per_job"]
    (tmp_path / "suite.json").write_text(json.dumps(suite))
    with pytest.raises(sizing.SizingError, match=r"suite\.json: figure results\.memory\.loaded\.bytes_per_job is missing"):
        sizing.Figures.load(tmp_path)
