"""The sizing table in docs/deploy.md: computed right from the committed benchmark results."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from benchmarks import sizing
from cluster.model.options import ClusterOptions

RESULTS = Path(sizing.__file__).resolve().parent / "results"
DEPLOY = Path(sizing.__file__).resolve().parent.parent / "docs" / "deploy.md"


def _number(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell.split()[0]))


def _rows(text: str, first_cell: str) -> list[list[str]]:
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("| ")]
    return [r for r in rows if r[0] == first_cell]


def test_memory_row_is_budget_less_start_up_rss_over_bytes_per_loaded_job(capsys: pytest.CaptureFixture[str]) -> None:
    assert sizing.main(["--budgets", "4", "--shards", "1h,15m"]) == 0
    text = capsys.readouterr().out
    suite = json.loads((RESULTS / "suite.json").read_text())["results"]["memory"]["loaded"]
    (row,) = _rows(text, "4 GiB")

    loaded = math.floor((4 * 2**30 - suite["rss_before"]) / suite["bytes_per_job"])
    assert _number(row[1]) == loaded
    # The peak of loaded jobs is what falls due within shard_duration + lookahead (5 min).
    assert _number(row[2]) == round(loaded / (3600 + 300))
    assert _number(row[3]) == round(loaded / (900 + 300))


def test_account_rows_divide_the_account_limit_by_per_shard_and_idle_requests(capsys: pytest.CaptureFixture[str]) -> None:
    assert sizing.main([]) == 0
    text = capsys.readouterr().out
    (row,) = _rows(text, "500 (Azure's per-blob target)")
    idle = 3 / 1.0 + 2 / 2.0
    assert _number(row[1]) == 20_000 // 500
    assert _number(row[2]) == math.floor(20_000 / (500 + idle))


def test_assumed_defaults_are_the_cluster_options_defaults() -> None:
    options = ClusterOptions()
    assert options.lookahead.total_seconds() == sizing.DEFAULT_LOOKAHEAD_S
    assert options.heartbeat_interval.total_seconds() == sizing.DEFAULT_HEARTBEAT_INTERVAL_S
    assert options.adoption_interval.total_seconds() == sizing.DEFAULT_ADOPTION_INTERVAL_S
    assert options.max_blocks == sizing.DEFAULT_MAX_BLOCKS
    assert sizing.DEFAULT_SHARD_DURATIONS_S[0] == options.shard_duration.total_seconds()


def test_deploy_page_embeds_the_current_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert sizing.main([]) == 0
    assert capsys.readouterr().out.strip() in DEPLOY.read_text(), (
        "docs/deploy.md: paste the output of `python -m benchmarks.sizing` again")


def test_a_missing_figure_is_named(tmp_path: Path) -> None:
    shutil.copy(RESULTS / "storage.json", tmp_path / "storage.json")
    suite = json.loads((RESULTS / "suite.json").read_text())
    del suite["results"]["memory"]["loaded"]["bytes_per_job"]
    (tmp_path / "suite.json").write_text(json.dumps(suite))
    with pytest.raises(sizing.SizingError, match=r"suite\.json: figure results\.memory\.loaded\.bytes_per_job is missing"):
        sizing.Figures.load(tmp_path)
