"""A new generation's entry made the quick way (``Entry.new_generation``, ``JobStatus.fresh``).

What a caller relies on: a put's owner writes its ``PUT`` record from this fast path, and the
log must hold exactly what the generic path wrote (today's code, an earlier owner, replays it),
so the entry, its metadata and the packed record are the same, byte for byte.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.model.wire import datetime_to_us, pack
from cluster.named.bucket import PUT
from cluster.named.registry import Entry, JobStatus, Retired, entry_key

KEY = entry_key("ns", "app", "nightly")
fires = st.none() | st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(9000, 1, 1),
                                 timezones=st.just(timezone.utc))
retired = st.builds(Retired, st.text("0123456789abcdef", min_size=32, max_size=32), st.just("shards/a/1"),
                    st.integers(0, 2**60), st.booleans())
definitions = st.none() | st.text("ABCDEFabcdef0123456789+/=", max_size=2600)


@given(fires, st.lists(retired, max_size=3), definitions, st.integers(1, 2**40))
@settings(max_examples=200, deadline=None)
def test_a_new_generations_entry_and_record_are_what_the_generic_path_makes(next_fire, retire, definition, generation):
    due_us = 0 if next_fire is None else datetime_to_us(next_fire)
    args = (KEY, generation, "j" * 32, "shards/a/1", due_us, 1_790_000_000_000_000)
    made, metadata = Entry.new_generation_stored(*args, next_fire, tuple(retire), definition)
    generic = Entry(KEY, "", generation, "j" * 32, "shards/a/1", due_us, args[-1], JobStatus(next_fire=next_fire),
                    tuple(retire), definition)
    assert made == generic and list(vars(made)) == list(vars(generic))
    assert Entry.new_generation(*args, next_fire, tuple(retire), definition) == generic
    assert pack([PUT, KEY, metadata]) == pack([PUT, KEY, generic.metadata()])  # the record, byte for byte
    assert metadata == made.metadata() and Entry.from_metadata(KEY, metadata, "") == generic


def test_a_fresh_status_is_the_constructors_and_owns_its_list() -> None:
    fire = datetime(2030, 1, 1, tzinfo=timezone.utc)
    for next_fire in (fire, None):
        fresh = JobStatus.fresh(next_fire)
        assert vars(fresh) == vars(JobStatus(next_fire=next_fire)) and list(vars(fresh)) == list(vars(JobStatus()))
    one, two = JobStatus.fresh(fire), JobStatus.fresh(fire + timedelta(seconds=1))
    assert one.next_fires is not two.next_fires
