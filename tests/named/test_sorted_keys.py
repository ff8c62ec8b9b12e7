"""The order a bucket's owner pages and counts from (``cluster.named.sortedkeys``): always the
bucket's keys sorted, whatever came and went, so a page shows every name once, in order, and a
count is exact."""

from __future__ import annotations

import bisect
import random

import pytest

from cluster.named.sortedkeys import SortedKeys


@pytest.mark.parametrize("seed", range(4))
def test_keys_added_and_removed_at_random_stay_sorted_and_rank_and_iterate_as_a_sorted_list_does(seed: int) -> None:
    rng = random.Random(f"sorted-keys/{seed}")
    keys = SortedKeys(chunk=4)  # small chunks: splits and emptied chunks happen every few steps
    plain: list[str] = []
    pool = [f"k{i:03d}" for i in range(300)]
    for step in range(3000):
        key = rng.choice(pool)
        if key in plain and rng.random() < 0.5:
            keys.remove(key)
            plain.remove(key)
        elif key not in plain:
            keys.add(key)
            bisect.insort(plain, key)
        probe = rng.choice(pool) + rng.choice(("", "0", "~"))
        assert list(keys) == plain and len(keys) == len(plain), step
        assert keys.rank(probe) == bisect.bisect_left(plain, probe), step
        assert list(keys.since(probe, inclusive=True)) == plain[bisect.bisect_left(plain, probe):], step
        assert list(keys.since(probe, inclusive=False)) == plain[bisect.bisect_right(plain, probe):], step
    with pytest.raises(KeyError):
        keys.remove("absent")


def test_keys_given_at_once_are_sorted_and_chunked() -> None:
    given = [f"n{i:04d}" for i in range(2500)]
    keys = SortedKeys(reversed(given), chunk=100)
    assert list(keys) == given and keys.rank("n1000") == 1000 and keys.rank("z") == 2500
    assert next(keys.since("n0999", inclusive=False)) == "n1000"
