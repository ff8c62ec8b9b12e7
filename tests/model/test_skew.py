"""The clock offset estimator: intervals from one-second ``Date`` readings that always hold the truth."""

from __future__ import annotations

import random

from cluster.model.skew import DRIFT, OffsetEstimator, Sample
from storage.azure import CACHED_DATE_LAG_US

SECOND = 1_000_000


def reading(offset_us: int, sent_us: int, round_trip_us: int, rng: random.Random) -> Sample:
    """What an Azure-like store answers: its clock, truncated to the second, read mid-flight."""
    read_at = sent_us + rng.randint(0, round_trip_us)
    store_us = (read_at + offset_us) // SECOND * SECOND
    return Sample(sent_us, sent_us + round_trip_us, store_us, SECOND)


def test_one_truncated_date_bounds_the_offset_to_a_second_plus_the_round_trip() -> None:
    # Sent at local 10.2 s, answered at 10.25 s, Date says 13 s: store - local in [2.75 s, 3.8 s].
    estimator = OffsetEstimator()
    estimator.add(Sample(10_200_000, 10_250_000, 13 * SECOND, SECOND))
    offset = estimator.offset(10_250_000)
    assert offset is not None
    assert (offset.low_us, offset.high_us) == (2_750_000, 3_800_000)


def test_readings_at_different_phases_narrow_the_interval_to_about_a_round_trip() -> None:
    estimator = OffsetEstimator()
    # Two readings 0.5 s apart on either side of the store's tick at 13 s.
    estimator.add(Sample(10_000_000, 10_010_000, 12 * SECOND, SECOND))  # offset in [1.99, 3.0] s
    estimator.add(Sample(10_600_000, 10_610_000, 13 * SECOND, SECOND))  # offset in [2.39, 3.4] s
    offset = estimator.offset(10_610_000)
    assert offset is not None
    assert offset.low_us == 2_390_000
    assert offset.high_us == 3_000_000 + int(600_000 * DRIFT)  # the older reading widened by its age


def test_aimed_readings_converge_on_the_true_offset_and_always_hold_it() -> None:
    rng = random.Random(12)
    for _ in range(200):
        truth = rng.randint(-30 * SECOND, 30 * SECOND)
        round_trip = rng.randint(1_000, 20_000)
        estimator = OffsetEstimator()
        now = rng.randint(0, 10**9)
        for _ in range(12):
            sample = reading(truth, now, round_trip, rng)
            estimator.add(sample)
            offset = estimator.offset(sample.received_us)
            assert offset is not None and offset.low_us <= truth <= offset.high_us
            now = sample.received_us + SECOND + estimator.next_phase(sample.received_us + SECOND, round_trip)
        offset = estimator.offset(now)
        assert offset is not None and offset.low_us <= truth <= offset.high_us
        assert offset.width_us <= 2 * round_trip + 1_000, (truth, round_trip, offset)


def test_readings_at_random_phases_always_hold_the_true_offset() -> None:
    rng = random.Random(3)
    truth, now, estimator = -3 * SECOND + 123_457, 5 * SECOND, OffsetEstimator()
    for _ in range(100):
        sample = reading(truth, now, rng.randint(100, 50_000), rng)
        assert estimator.add(sample)
        offset = estimator.offset(sample.received_us)
        assert offset is not None and offset.low_us <= truth <= offset.high_us
        now = sample.received_us + rng.randint(0, 3 * SECOND)


def test_a_stepped_store_clock_restarts_the_window_from_the_new_reading() -> None:
    rng = random.Random(5)
    estimator, now = OffsetEstimator(), 0
    for _ in range(10):
        sample = reading(2 * SECOND, now, 5_000, rng)
        estimator.add(sample)
        now = sample.received_us + SECOND + estimator.next_phase(sample.received_us + SECOND, 5_000)
    agreed = [estimator.add(sample := reading(7 * SECOND, now, 5_000, rng))]  # the store's clock jumped 5 s
    offset = estimator.offset(sample.received_us)
    assert agreed == [False] and estimator.restarts == 1
    assert offset is not None and offset.low_us <= 7 * SECOND <= offset.high_us


def test_an_old_reading_widens_by_the_drift_allowed_since() -> None:
    estimator = OffsetEstimator()
    estimator.add(Sample(0, 1_000, 5 * SECOND, 1))
    fresh, later = estimator.offset(1_000), estimator.offset(1_000 + 100 * SECOND)
    assert fresh is not None and later is not None
    assert later.low_us == fresh.low_us - int(100 * SECOND * DRIFT)
    assert later.high_us == fresh.high_us + int(100 * SECOND * DRIFT)


def test_a_date_lagging_the_stores_clock_neither_restarts_the_window_nor_lifts_the_low_past_the_truth() -> None:
    """Azurite's ``Date`` is a cached string that Node renews by a timer, a few ms late when busy:
    just after the store's tick it still names the second before. Such a reading's high side is
    below the truth; taken for a stepped clock, each restarted the window, and the silo fired up to
    a second late until it had narrowed again."""
    rng = random.Random("skew/lagging-date")
    for _ in range(100):
        truth = rng.randint(-30 * SECOND, 30 * SECOND)
        round_trip = rng.randint(1_000, 8_000)
        estimator = OffsetEstimator()
        now = rng.randint(0, 10**9)
        for _ in range(40):
            now += rng.randint(0, 20_000) if rng.random() < 0.2 else 0  # a busy event loop sends late
            read_at = now + rng.randint(0, round_trip)
            lag = rng.randint(0, 2_000) if rng.random() < 0.8 else rng.randint(0, 60_000)  # the Date turned over this late
            sample = Sample(now, now + round_trip, (read_at + truth - lag) // SECOND * SECOND, SECOND, CACHED_DATE_LAG_US)
            assert estimator.add(sample)
            offset = estimator.offset(sample.received_us)
            assert offset is not None and offset.low_us <= truth <= offset.low_us + 2 * SECOND
            now = sample.received_us + SECOND // 2 + estimator.next_phase(sample.received_us + SECOND // 2, round_trip)
        assert estimator.restarts == 0


def test_a_store_clock_stepped_back_restarts_the_window_when_its_date_cannot_lag() -> None:
    """A reading stamped as its request arrived (no lag allowed) that falls below the window is a
    stepped store clock: the window starts over from it, so jobs fire by the new store time and
    not by the old one, which now runs ahead of it."""
    estimator = OffsetEstimator()
    estimator.add(Sample(10_000_000, 10_010_000, 12 * SECOND, SECOND))
    estimator.add(Sample(10_600_000, 10_610_000, 13 * SECOND, SECOND))  # offset in [2.39, 3.0] s
    # The store's clock stepped back: read in flight from local 11.65 s (store 14.04 s or later by
    # the window), its Date still says 13 s, so this reading's high side (2.35 s) is below the low.
    stepped = Sample(11_650_000, 11_660_000, 13 * SECOND, SECOND)
    assert not estimator.add(stepped)
    offset = estimator.offset(stepped.received_us)
    assert offset is not None and offset.low_us == 13 * SECOND - 11_660_000 and estimator.restarts == 1
    # The same reading from a Date that may lag 100 ms is taken for a late Date instead.
    tolerant = OffsetEstimator()
    tolerant.add(Sample(10_000_000, 10_010_000, 12 * SECOND, SECOND, CACHED_DATE_LAG_US))
    tolerant.add(Sample(10_600_000, 10_610_000, 13 * SECOND, SECOND, CACHED_DATE_LAG_US))
    assert tolerant.add(Sample(11_650_000, 11_660_000, 13 * SECOND, SECOND, CACHED_DATE_LAG_US))
