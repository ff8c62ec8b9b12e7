"""The listing benchmark on registry buckets (``benchmarks.named_listing --registry buckets``),
small: it loads the names into the buckets their owners hold, and a page, a count, the
dashboard's requests and a new owner's first reads all answer (the benchmark checks the count
is every name and each page has rows); on the file store, no directory grows with the names
and a log's lock file is kept only while its log exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks import named_listing


def test_the_bucket_listing_benchmark_runs_on_memory_and_file_and_the_file_store_keeps_few_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TIMESHARD_BENCH_DIR", str(tmp_path))
    named_listing.main(["--registry", "buckets", "--stores", "memory,file", "--jobs", "3000", "--repeat", "1",
                        "--old-repeat", "0", "--takeover"])
    out = capsys.readouterr().out
    for label in ("named: list_page(limit=50), first", "named: count()", "paged: first page",
                  "after takeover: first list_page"):
        assert out.count(label) == 2, (label, out)
    layout = re.search(r"the store: (\d+) files, the fullest directory holds (\d+) entries, (\d+) \.lock files", out)
    assert layout is not None, out
    files, widest, locks = map(int, layout.groups())
    assert widest <= 8 and files < 40, out  # 3,000 names in four bucket logs, not files of their own
    store = next(tmp_path.glob("named-listing-*/buckets-file"))
    kept = {p.with_suffix("") for p in store.rglob("*.lock") if p.parent != store}  # not the store's own layout lock
    assert locks == len(kept) + 1 and kept <= {p.with_suffix("") for p in store.rglob("*.meta")}, out
