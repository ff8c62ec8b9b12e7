"""benchmarks/recovery.py measures what docs/operations.md says: fresh silos fire every job the
vanished ones held, and none before the old incarnations' lease has run out."""

from __future__ import annotations

from pathlib import Path

from benchmarks import recovery


async def test_fresh_silos_fire_every_job_of_the_vanished_ones_after_their_lease(tmp_path: Path) -> None:
    result = await recovery.run(jobs=300, silos=2, kind="file", scratch=tmp_path)
    assert result["jobs"] == 300 and result["silos"] == 2
    # Nothing proves the old processes stopped, so no shard of theirs is taken before their lease ends.
    assert result["lease_s"] <= result["first_fire_s"] <= result["all_fired_s"]
    assert result["all_loaded_s"] <= result["all_fired_s"]
