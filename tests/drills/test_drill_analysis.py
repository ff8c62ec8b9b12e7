"""The drill's verdicts on hand-made records: what counts as an explained duplicate, a two-owner fire."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

from cluster.cli.drill_analysis import Event, Observer, analyse
from cluster.model.options import ClusterOptions
from storage.memory import MemoryStore

T = 1_000_000.0


def job(k: int, shard: str = "shards/a") -> Any:
    return SimpleNamespace(id=f"j{k}", due=datetime.fromtimestamp(T + k, timezone.utc), shard=shard)


def run(k: int, owner: str, started: float) -> dict[str, Any]:
    return {"job_id": f"j{k}", "run_id": f"r{k}-{started}@{owner}", "started": started, "scheduled_for": T + k}


def observer(**owners: list[tuple[float, str]]) -> Observer:
    seen = Observer(MemoryStore())
    seen.shard_owners = {f"shards/{k}": v for k, v in owners.items()}
    return seen


def test_a_rerun_is_explained_only_by_an_attempt_in_flight_at_its_owners_kill():
    jobs = [job(0), job(1), job(2)]
    kill = Event("kill", T + 10, "0", "0#1", ["shards/a"])
    records = [
        run(0, "0#1", T + 9.9), run(0, "1#1", T + 12),   # in flight at the kill: explained
        run(1, "0#1", T + 1.0), run(1, "1#1", T + 12),   # finished long before the kill: not
        run(2, "1#1", T + 9.9), run(2, "2#1", T + 12),   # its owner was never hit: not
    ]
    report = analyse(jobs, records, [kill], ClusterOptions(), observer(a=[(T, "0#1"), (T + 11, "1#1")]))
    assert (report.duplicates, report.explained_duplicates) == (3, 1)
    assert [d[0][0] for d in report.unexplained_duplicates] == ["shards/a", "shards/a"]


def test_one_in_flight_attempt_explains_one_rerun_not_two():
    kill = Event("kill", T + 10, "0", "0#1", ["shards/a"])
    records = [run(0, "0#1", T + 9.9), run(0, "1#1", T + 12), run(0, "2#1", T + 12.5)]
    report = analyse([job(0)], records, [kill], ClusterOptions(), observer())
    assert (report.duplicates, report.explained_duplicates) == (2, 1)


def test_a_fire_after_the_store_showed_another_owner_is_a_two_owner_fire():
    records = [run(0, "0#1", T + 5), run(1, "0#1", T + 12), run(2, "1#1", T + 12)]
    seen = observer(a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse([job(0), job(1), job(2)], records, [], ClusterOptions(), seen)
    assert report.two_owner_fires == 1
    assert report.two_owner_examples[0][:3] == ("j1", "shards/a", "0#1")


def test_a_kill_nobody_took_over_is_reported():
    kill = Event("kill", T + 2, "0", "0#1", ["shards/a"])
    report = analyse([job(0), job(5)], [run(0, "0#1", T + 0.1)], [kill], ClusterOptions(), observer())
    assert report.unmeasured_kills == ["0#1"] and not report.failover_ok and report.lost == 1


def test_an_owner_that_took_its_shard_back_fires_from_it_again_but_not_in_between():
    # Handed over (released "-"), adopted by 1#1, released again at a scale-down, adopted back.
    seen = observer(a=[(T, "0#1"), (T + 10, "-"), (T + 11, "1#1"), (T + 20, "-"), (T + 21, "0#1")])
    records = [run(0, "0#1", T + 5), run(1, "1#1", T + 15), run(2, "0#1", T + 15), run(3, "0#1", T + 22),
               run(4, "0#1", T + 20.8)]  # j4: sent just before its claim back was observed
    report = analyse([job(k) for k in range(5)], records, [], ClusterOptions(), seen)
    assert [e[0] for e in report.two_owner_examples] == ["j2"]
