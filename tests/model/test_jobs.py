"""The job model: targets, validated jobs, and the exact wire form the shard log replays."""

from __future__ import annotations

import dataclasses
import string
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import ray
from hypothesis import example, given, settings
from hypothesis import strategies as st

from cluster.model.errors import InvalidJob, InvalidPolicy, InvalidTime
from cluster.model.ids import new_job_ids, uuid4_hex
from cluster.model.jobs import ScheduledJob, Target, new_job_id
from cluster.model.policies import DEFAULT_FAILURE_POLICY, CallablePolicy, FailurePolicy
from cluster.model.schedules import Schedule
from cluster.model.wire import datetime_to_us, pack, unpack, us_to_datetime
from tests.model.test_policies import any_policies, retry_in_a_minute

NOW = datetime(2026, 10, 2, 15, 0, 0, tzinfo=timezone.utc)
MAILER = Target.actor("mailer")


class Counter:
    class Shard:
        pass


@ray.remote
class RemoteCounter:
    pass


def roundtrip(job: ScheduledJob) -> ScheduledJob:
    return ScheduledJob.from_wire(unpack(pack(job.to_wire())))


def field_of(build) -> str:
    with pytest.raises(ValueError) as err:
        build()
    return err.value.field


# --- targets -----------------------------------------------------------------------------------


def test_an_actor_target_names_the_ray_actor_and_namespace():
    target = Target.actor("mailer", namespace="prod")
    fields = (target.kind, target.name, target.namespace, target.key, target.cls_path)
    assert fields == ("actor", "mailer", "prod", None, None)


def test_a_grain_target_stores_the_class_path_and_activates_under_a_derived_name():
    target = Target.grain(Counter, 7)
    assert target.kind == "grain"
    assert target.cls_path == f"{__name__}:Counter"
    assert target.key == "7"
    assert target.name == f"grain:{__name__}:Counter:7"
    assert Target.grain(f"{__name__}:Counter", "7") == target


def test_a_ray_actor_class_is_stored_as_the_path_of_its_class():
    assert Target.grain(RemoteCounter, "k").cls_path == f"{__name__}:RemoteCounter"


def test_a_nested_class_and_a_dotted_path_give_colon_paths():
    assert Target.grain(Counter.Shard, "a").cls_path == f"{__name__}:Counter.Shard"
    assert Target.grain("myapp.grains.Counter", "a").cls_path == "myapp.grains:Counter"


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: Target.actor(""), "target.name"),
        (lambda: Target.actor(None), "target.name"),
        (lambda: Target.actor("mailer", namespace=""), "target.namespace"),
        (lambda: Target.actor("mail\ner"), "target.name"),
        (lambda: Target.grain(Counter, ""), "target.key"),
        (lambda: Target.grain(Counter, True), "target.key"),
        (lambda: Target.grain(Counter, 1.5), "target.key"),
        (lambda: Target.grain("not a path", 1), "target.cls"),
        (lambda: Target.grain("pkg.mod:", 1), "target.cls"),
        (lambda: Target.grain(Counter(), 1), "target.cls"),
    ],
)
def test_bad_targets_raise_invalid_job_naming_the_field(build, field):
    with pytest.raises(InvalidJob) as err:
        build()
    assert err.value.field == field


def test_a_class_defined_in_a_function_cannot_be_a_grain():
    class Local:
        pass

    with pytest.raises(InvalidJob):
        Target.grain(Local, 1)


def test_routing_keys_group_exactly_the_jobs_for_the_same_actor():
    keys = {
        Target.actor("a").routing_key,
        Target.actor("a", namespace="x").routing_key,
        Target.actor("x:a").routing_key,
        Target.grain(Counter, 1).routing_key,
        Target.grain(Counter, 2).routing_key,
    }
    assert len(keys) == 5
    assert Target.actor("a", "x").routing_key == Target.actor("a", "x").routing_key


def test_an_unknown_target_kind_on_the_wire_names_target():
    for obj in (["queue", "q", None], ["actor"], "mailer"):
        with pytest.raises(InvalidJob) as err:
            Target.from_wire(obj)
        assert err.value.field == "target"


# --- creating jobs -------------------------------------------------------------------------------


def test_a_one_shot_job_is_due_a_duration_after_now():
    job = ScheduledJob.create(MAILER, "send", due="2h30m", data={"to": "x"}, metadata={"k": "v"}, now=NOW)
    assert job.due == NOW + timedelta(hours=2, minutes=30)
    assert (job.name, job.data, job.metadata, job.created_at) == ("send", {"to": "x"}, {"k": "v"}, NOW)
    assert job.schedule is None and not job.recurring
    assert job.generation == 0 and job.misfire == "fire_once"
    assert len(job.id) == 32 and all(c in string.hexdigits for c in job.id)


def test_due_accepts_rfc3339_and_aware_datetimes():
    assert ScheduledJob.create(MAILER, due="2026-10-02T17:00:00+02:00", now=NOW).due == NOW
    assert ScheduledJob.create(MAILER, due=NOW, now=NOW).due == NOW


def test_a_recurring_job_without_due_first_fires_at_the_schedule():
    job = ScheduledJob.create(MAILER, schedule="0 */5 * * * *", repeats=3, now=NOW + timedelta(seconds=1))
    assert job.due == NOW + timedelta(minutes=5)
    assert job.schedule == Schedule.parse("0 */5 * * * *") and job.repeats == 3 and job.recurring


def test_an_actor_reminder_period_is_an_every_schedule_with_repeats():
    job = ScheduledJob.create(MAILER, due="0s", schedule="R4/PT3S", now=NOW)
    assert (job.schedule, job.repeats) == (Schedule.parse("@every 3s"), 4)
    unbounded = ScheduledJob.create(MAILER, due="0s", schedule="R/PT3S", now=NOW)
    assert unbounded.repeats is None
    with pytest.raises(InvalidJob) as err:
        ScheduledJob.create(MAILER, due="0s", schedule="R4/PT3S", repeats=5, now=NOW)
    assert err.value.field == "repeats"


def test_ttl_is_an_absolute_expiry_counted_from_now():
    job = ScheduledJob.create(MAILER, due="1m", schedule="@every 1m", ttl="1h", now=NOW)
    assert job.ttl == NOW + timedelta(hours=1)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({}, "due"),
        ({"due": "1m", "repeats": 3}, "repeats"),
        ({"due": "1m", "ttl": "1h"}, "ttl"),
        ({"due": "1h", "schedule": "@hourly", "ttl": "1h"}, "ttl"),
        ({"due": "1m", "schedule": "@hourly", "repeats": 0}, "repeats"),
        ({"due": "1m", "schedule": "@hourly", "repeats": True}, "repeats"),
        ({"due": "1m", "schedule": 5}, "schedule"),
        ({"due": "1m", "metadata": {"k": 1}}, "metadata"),
        ({"due": "1m", "metadata": [("k", "v")]}, "metadata"),
        ({"due": "1m", "data": {1, 2}}, "data"),
        ({"due": "1m", "data": NOW}, "data"),
        ({"due": "1m", "data": "x" * 300_000}, "data"),
        ({"due": "1m", "generation": -1}, "generation"),
        ({"due": "1m", "job_id": ""}, "id"),
    ],
)
def test_bad_jobs_raise_invalid_job_naming_the_field(kwargs, field):
    with pytest.raises(InvalidJob) as err:
        ScheduledJob.create(MAILER, now=NOW, **kwargs)
    assert err.value.field == field


def test_policy_and_time_errors_keep_their_own_types():
    with pytest.raises(InvalidPolicy):
        ScheduledJob.create(MAILER, due="1m", misfire="sometimes", now=NOW)
    with pytest.raises(InvalidPolicy):
        ScheduledJob.create(MAILER, due="1m", failure_policy=lambda ctx, exc: None, now=NOW)
    with pytest.raises(InvalidTime) as err:
        ScheduledJob.create(MAILER, due="2026-10-02T15:00:00", now=NOW)
    assert err.value.field == "due"


def test_other_fields_are_named_too():
    assert field_of(lambda: ScheduledJob.create("mailer", due="1m", now=NOW)) == "target"
    assert field_of(lambda: ScheduledJob.create(MAILER, "", due="1m", now=NOW)) == "name"


def test_the_data_limit_is_a_parameter():
    ScheduledJob.create(MAILER, due="1m", data="x" * 300_000, max_data_bytes=1 << 20, now=NOW)
    with pytest.raises(InvalidJob):
        ScheduledJob.create(MAILER, due="1m", data="x" * 100, max_data_bytes=50, now=NOW)


def test_data_is_stored_as_a_replay_will_return_it():
    job = ScheduledJob.create(MAILER, due="1m", data={"pair": (1, 2), 3: b"raw"}, now=NOW)
    assert job.data == {"pair": [1, 2], 3: b"raw"}
    assert roundtrip(job).data == job.data


def test_a_job_without_a_policy_uses_the_default_and_a_function_becomes_a_callable_policy():
    plain = ScheduledJob.create(MAILER, due="1m", now=NOW)
    assert plain.failure_policy is None and plain.retry_policy is DEFAULT_FAILURE_POLICY
    custom = ScheduledJob.create(MAILER, due="1m", failure_policy=retry_in_a_minute, now=NOW)
    assert isinstance(custom.retry_policy, CallablePolicy)


def test_jobs_hash_by_id_so_they_can_key_a_set():
    job = ScheduledJob.create(MAILER, due="1m", data={"a": [1]}, now=NOW)
    assert {job, roundtrip(job)} == {job}
    assert new_job_id() != new_job_id()


def test_a_replay_memo_decodes_each_schedule_and_policy_once():
    policy = FailurePolicy.cron("@every 10s", max_retries=3)
    create = ScheduledJob.create
    wires = [create(MAILER, due="1m", schedule="@hourly", failure_policy=policy, now=NOW).to_wire() for _ in range(3)]
    memo: dict = {}
    first, *rest = [ScheduledJob.from_wire(unpack(pack(w)), memo) for w in wires]
    assert first == ScheduledJob.from_wire(unpack(pack(wires[0])))
    assert all(job.schedule is first.schedule and job.failure_policy is first.failure_policy for job in rest)


def test_a_record_of_another_wire_version_is_refused():
    wire = ScheduledJob.create(MAILER, due="1m", now=NOW).to_wire()
    with pytest.raises(InvalidJob) as err:
        ScheduledJob.from_wire([99, *wire[1:]])
    assert err.value.field == "job"


@given(st.datetimes(timezones=st.sampled_from([timezone.utc, timezone(timedelta(hours=-9, minutes=-30))])))
def test_times_travel_as_exact_microseconds_in_utc(dt):
    back = us_to_datetime(datetime_to_us(dt))
    assert back == dt and back.utcoffset() == timedelta(0)


# --- wire round-trip ------------------------------------------------------------------------------

labels = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
payloads = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8) | st.integers(-5, 5), inner, max_size=4),
    max_leaves=20,
)
targets = st.builds(Target.actor, labels, st.none() | labels) | st.builds(
    Target.grain, st.sampled_from([Counter, Counter.Shard, "pkg.mod:Grain"]), labels | st.integers(-(2**40), 2**40)
)
offsets = st.integers(0, 10 * 365 * 86_400 * 1_000_000).map(lambda us: timedelta(microseconds=us))


@st.composite
def jobs(draw):
    texts = ["0 */5 * * * *", "@every 90s", "@daily", "CRON_TZ=America/New_York 0 0 9 * * Mon-Fri"]
    schedule = draw(st.none() | st.sampled_from(texts))
    due = NOW + draw(offsets)
    return ScheduledJob.create(
        draw(targets),
        draw(st.none() | labels),
        due=due,
        data=draw(payloads),
        metadata=draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)),
        schedule=schedule,
        repeats=draw(st.none() | st.integers(1, 10**6)) if schedule else None,
        ttl=due + draw(offsets) + timedelta(microseconds=1) if schedule and draw(st.booleans()) else None,
        failure_policy=draw(st.none() | any_policies),
        misfire=draw(st.sampled_from(["fire_once", "fire_all", "skip"])),
        generation=draw(st.integers(0, 2**32)),
        now=NOW - draw(offsets),
    )


@given(jobs())
@settings(max_examples=200, deadline=None)
def test_every_job_round_trips_exactly_through_msgpack(job):
    back = roundtrip(job)
    assert back == job
    assert back.due.utcoffset() == timedelta(0) and back.created_at.utcoffset() == timedelta(0)
    assert back.target.routing_key == job.target.routing_key


@given(jobs())
@settings(max_examples=100, deadline=None)
def test_create_and_from_wire_make_what_the_dataclass_constructor_makes(job):
    """Both set the instance's fields directly (the frozen ``__init__`` sets them one
    ``object.__setattr__`` at a time: ~4 us a job): each must hold every field, in order, and
    nothing else, as the constructor would (a field left out reads its class default instead)."""
    shaped = ScheduledJob.create(MAILER, "shaped", due=NOW + timedelta(hours=1), now=NOW, schedule="@every 1h",
                                 jitter="5s", not_before=NOW, not_after=NOW + timedelta(days=9),
                                 exclude=["2026-10-03"], overlap="skip")
    for made in (job, roundtrip(job), shaped, roundtrip(shaped)):
        fields = {f.name: getattr(made, f.name) for f in dataclasses.fields(ScheduledJob)}
        assert list(vars(made)) == list(fields)
        assert vars(made) == vars(ScheduledJob(**fields))


@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12))
@example("\x7f")
@example("a\x1fb")
@example("\x00")
@example("\x80 ~")  # C1 controls and the rest of Latin-1 are not refused
def test_a_label_is_refused_exactly_when_it_holds_an_ascii_control_character(text):
    if any(ord(ch) < 0x20 or ch == "\x7f" for ch in text):
        with pytest.raises(InvalidJob) as err:
            Target.actor(text)
        assert err.value.field == "target.name" and err.value.rule == "must not contain control characters"
    else:
        assert Target.actor(text).name == text


@given(st.binary(min_size=16, max_size=16))
def test_a_job_id_drawn_in_a_batch_is_the_uuid4_of_its_bytes(raw):
    assert uuid4_hex(raw) == uuid.UUID(bytes=raw, version=4).hex


def test_job_ids_drawn_in_a_batch_are_distinct_random_uuids() -> None:
    ids = new_job_ids(500)
    assert len(set(ids)) == 500 and new_job_ids(0) == []
    for job_id in ids:
        parsed = uuid.UUID(hex=job_id)
        assert parsed.hex == job_id and parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_evolve_makes_what_dataclasses_replace_makes_and_refuses_what_it_refuses() -> None:
    """``evolve`` (a named put's fast copy) copies the instance's state: it must hold the fields
    and nothing else, or a copy would carry a value computed from the fields it changes."""
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    job = ScheduledJob.create(Target.actor("a", namespace="n"), "nightly", due=now + timedelta(days=1), now=now,
                              schedule="@every 1h", jitter=timedelta(seconds=9), metadata={"k": "v"}, data={"x": 1})
    assert job.first_fire  # what a cached property would keep once read
    assert set(vars(job)) == {f.name for f in dataclasses.fields(ScheduledJob)}
    for changes in ({"id": "other"}, {"generation": 3, "shard": "shards/s"}, {"metadata": {"k": "w"}, "id": "x"}):
        made = job.evolve(**changes)
        assert made == dataclasses.replace(job, **changes) and made.first_fire == dataclasses.replace(job, **changes).first_fire
    assert job.evolve() == job and job.evolve() is not job
    with pytest.raises(TypeError):
        job.evolve(nonsense=1)


def test_a_data_limit_applies_with_any_limits_given() -> None:
    """``max_data_bytes`` replaces the limit of the ``limits`` given, made once per pair; limits
    that cannot key that memo (prefixes as a list) still get it."""
    from cluster.model.limits import JobLimits

    for limits in (JobLimits(), JobLimits(code_prefixes=["tests."])):  # type: ignore[arg-type]
        with pytest.raises(InvalidJob) as caught:
            ScheduledJob.create(MAILER, due="1m", data="x" * 100, now=NOW, limits=limits, max_data_bytes=50)
        assert caught.value.field == "data"
        assert ScheduledJob.create(MAILER, due="1m", data="x" * 100, now=NOW, limits=limits, max_data_bytes=500)
