"""``evolve``: a frozen dataclass with some fields changed, equal to ``dataclasses.replace``'s copy."""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime, timezone

import pytest

from cluster.model.evolve import evolve
from cluster.model.jobs import ScheduledJob, Target
from cluster.named.registry import AttemptRecord, Entry, JobStatus, Retired

AT = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def examples() -> list[tuple[object, dict[str, object]]]:
    record = AttemptRecord("run", 1, 2, AT, AT, "s0#1")
    status = JobStatus(next_fire=AT, successful=3, current_attempt=record)
    entry = Entry("k", "etag", 2, "job", "shards/x", 7, 8, status, (Retired("old", "shards/y", 5),), "ZGVm")
    job = ScheduledJob.create(Target.actor("a"), due=AT, now=AT)
    return [
        (record, {"outcome": "failed", "error": "boom", "ended_at": AT}),
        (status, {"successful": 4, "current_attempt": None, "last_attempt": record}),
        (entry, {"status": JobStatus(), "retire": ()}),
        (entry, {"etag": "other"}),
        (job, {"shard": "shards/z"}),
        (status, {}),
    ]


@pytest.mark.parametrize("index", range(len(examples())))
def test_an_evolved_copy_equals_replace_and_leaves_the_original(index: int) -> None:
    original, changes = examples()[index]
    before = dataclasses.replace(original)  # type: ignore[type-var]
    copy = evolve(original, **changes)
    assert copy == dataclasses.replace(original, **changes)  # type: ignore[type-var]
    assert type(copy) is type(original) and copy is not original
    assert original == before  # the original is untouched
    assert hash(copy) == hash(dataclasses.replace(original, **changes))  # type: ignore[type-var]


def test_an_unknown_field_raises_type_error_as_replace_does() -> None:
    with pytest.raises(TypeError, match="nope"):
        evolve(JobStatus(), nope=1)


@dataclasses.dataclass(frozen=True)
class Checked:
    n: int
    doubled: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "doubled", 2 * self.n)


@dataclasses.dataclass(frozen=True)
class Cached:
    n: int

    @functools.cached_property
    def square(self) -> int:
        return self.n * self.n


def test_a_class_with_post_init_or_a_cached_value_is_copied_by_replace() -> None:
    assert evolve(Checked(2), n=5).doubled == 10  # __post_init__ ran for the copy
    cached = Cached(3)
    assert cached.square == 9
    assert evolve(cached, n=4).square == 16  # not the 9 the original kept
