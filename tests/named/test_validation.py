"""Named jobs reject bad input with a typed error naming the field and the rule, writing nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from cluster import FailurePolicy, Target
from cluster.client import Client
from cluster.model.errors import InvalidJob, InvalidPolicy, InvalidSchedule, InvalidTime, ValidationError
from cluster.model.options import ENTRIES_REGISTRY, ClusterOptions
from cluster.named.api import NamedJobs, parse_target
from cluster.named.registry import (
    AttemptRecord,
    Entry,
    JobStatus,
    Retired,
    check_name,
    entry_key,
    name_of,
    scope_prefix,
)

TARGET = Target.actor("mailer", "apps")


@pytest.fixture
def jobs() -> NamedJobs:
    # No silo is ever called: validation happens before anything reaches the cluster or store.
    # Names in per-name entries, so "writes nothing" is read from the store itself, with no silo
    # (no registry bucket owner) to ask.
    return NamedJobs(Client("ns", [], ClusterOptions(named_registry=ENTRIES_REGISTRY)), max_data_bytes=1024,
                     store_url="memory://")


BAD_PUTS = [
    ("due_time", InvalidTime, {"due_time": datetime.now(timezone.utc) - timedelta(minutes=11)}, "10 minutes"),
    ("schedule", InvalidSchedule, {"schedule": "@every 500ms"}, "at least 1s"),
    ("schedule", InvalidSchedule, {"schedule": "R4/PT0.5S"}, "at least 1s"),
    ("repeats", InvalidJob, {"schedule": "@every 1s", "repeats": 0}, ">= 1"),
    ("ttl", InvalidJob, {"schedule": "@every 1s", "due_time": "10s", "ttl": "5s"}, "after due"),
    ("repeats", InvalidJob, {"due_time": "1s", "repeats": 3}, "needs a schedule"),
    ("ttl", InvalidJob, {"due_time": "1s", "ttl": "1h"}, "needs a schedule"),
    ("data", InvalidJob, {"due_time": "1s", "data": "x" * 2000}, "limit of 1024"),
    ("data", InvalidJob, {"due_time": "1s", "data": {"when": datetime.now()}}, "msgpack"),
    ("target.kind", InvalidJob, {"due_time": "1s", "target": "queue:x"}, "unknown target kind"),
    ("target.kind", InvalidJob, {"due_time": "1s", "target": Target("queue", "x")}, "unknown target kind"),
    ("metadata", InvalidJob, {"due_time": "1s", "metadata": {"timeshard.named": "x"}}, "reserved"),
    ("due_time", InvalidTime, {"due_time": "tomorrow"}, "cannot be read"),
    ("overlap", InvalidPolicy, {"schedule": "@every 1s", "overlap": "queue"}, "'buffer_one'"),
    ("overlap", InvalidJob, {"due_time": "1s", "overlap": "skip"}, "needs a schedule"),
]


@pytest.mark.parametrize("field,error,kwargs,rule", BAD_PUTS, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD_PUTS)])
async def test_bad_put_names_field_and_rule_and_writes_nothing(jobs, field, error, kwargs, rule):
    kwargs = {"target": TARGET, **kwargs}
    with pytest.raises(error) as info:
        await jobs.put("job", **kwargs)
    assert info.value.field == field
    if rule:
        assert rule in str(info.value)
    assert await jobs.list() == []


def test_a_restart_period_policy_needs_min_at_most_max():
    # The policy is built (and checked) before put sees it: nothing can be written.
    with pytest.raises(InvalidPolicy) as info:
        FailurePolicy.formula("10s", "5s")
    assert info.value.field == "max_period" and "min_period" in info.value.rule


@pytest.mark.parametrize("name", ["", "a/b", "a\\b", "a#b", "a?b", ".", "..", "tab\there", "x" * 129, 7])
async def test_bad_names_are_rejected(jobs, name):
    with pytest.raises(ValidationError) as info:
        await jobs.put(name, target=TARGET, due_time="1s")
    assert info.value.field == "name"


async def test_a_name_too_long_once_escaped_is_rejected_naming_the_store_limit(jobs):
    with pytest.raises(ValidationError, match="too long once escaped"):
        await jobs.put("\u00e9" * 100, target=TARGET, due_time="1s")


def test_names_escape_to_printable_store_names_that_keep_prefixes():
    for name in ["db-backup", "caf\u00e9 \u2603", "a.b", "x:y@z", "%7E~"]:
        key = entry_key("default", "app/1", name)
        assert key.isprintable() and key.isascii() and " " not in key
        assert key.startswith(scope_prefix("default", "app/1")) and name_of(key) == name
        assert key.startswith(entry_key("default", "app/1", name[:2]))
    assert check_name("ok name") == "ok name"


def test_a_key_is_spelled_as_stores_written_before_spell_it():
    """Keys are stored and hashed to buckets: a name must keep its key across releases."""
    def byte_by_byte(text: str) -> str:
        return "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in "_-") else f"~{b:02X}"
                       for b in text.encode("utf-8"))

    assert entry_key("default", "default", "db-backup_1") == "names/default/default/db-backup_1"
    assert entry_key("ns", "app", "a.b c") == "names/ns/app/a~2Eb~20c"
    for name in ["".join(map(chr, range(32, 127))), "Z9", "caf\u00e9", "a-b.c", "~", "x\u2603y"]:
        assert entry_key("n s", "a.p", name) == f"names/n~20s/a~2Ep/{byte_by_byte(name)}"


def test_target_text_forms():
    assert parse_target("actor:mailer") == Target.actor("mailer")
    assert parse_target("actor:mailer@apps") == Target.actor("mailer", "apps")
    grain = parse_target("grain:handlers.builtin:Recorder/user-1")
    assert grain == Target.grain("handlers.builtin:Recorder", "user-1")
    with pytest.raises(InvalidJob, match="KEY"):
        parse_target("grain:handlers.builtin:Recorder")


def test_entry_metadata_round_trips_and_is_printable_ascii():
    now = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    attempt = AttemptRecord("run", 2, 3, now, now, "0#1", "failed", "RuntimeError: caf\u00e9\n" * 100, now)
    status = JobStatus(now, 1, 2, 3, 4, attempt, attempt, 2, now, False)
    entry = Entry("names/a/b/c", "etag", 5, "job", "shards/x", 123, 456, status, (Retired("old", "shards/y", 9),))
    metadata = entry.metadata()
    assert all(v.isascii() and v.isprintable() for v in metadata.values())
    assert Entry.from_metadata("names/a/b/c", metadata, "etag") == entry


async def test_bad_reminder_periods_name_the_period_argument():
    reminders = Client("ns", [], ClusterOptions()).reminders
    with pytest.raises(InvalidTime) as info:
        await reminders.register(TARGET, "r", period="often")
    assert info.value.field == "period"
    with pytest.raises(InvalidSchedule) as info:
        await reminders.register(TARGET, "r", period="R3/PT0.2S")
    assert info.value.field == "period" and "at least 1s" in info.value.rule
    with pytest.raises(ValidationError) as info:
        await reminders.register(TARGET, "a/b", period="1s")
    assert info.value.field == "reminder_name"


async def test_a_bad_overlap_in_a_schedule_call_names_the_field_and_sends_nothing():
    client = Client("ns", [], ClusterOptions())  # no silo: a call that got past validation would fail otherwise
    good = {"target": TARGET, "schedule": "@every 1s", "overlap": "skip"}
    with pytest.raises(InvalidPolicy) as info:
        await client.schedule_jobs([good, {**good, "overlap": "every"}])
    assert info.value.field == "overlap" and "'cancel_other'" in str(info.value)
    with pytest.raises(InvalidPolicy):
        await client.schedule_job(TARGET, schedule="@every 1s", overlap="every")
