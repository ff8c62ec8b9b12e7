"""A named job's status keeps its last attempts (newest first, bounded, errors clipped) in its
registry entry, counts triggered runs like any attempt, and shows a job waiting for its target."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from cluster.model.errors import ValidationError
from cluster.model.jobs import ScheduledJob, Target
from cluster.model.options import MAX_HISTORY_SIZE, ClusterOptions
from cluster.model.trigger import TRIGGERED_FROM, triggered_from, triggered_run
from cluster.named.hooks import ended, interrupted, staged, started
from cluster.named.registry import (
    HISTORY_BYTES,
    HISTORY_ERROR_CHARS,
    AttemptRecord,
    Entry,
    JobStatus,
)
from cluster.runtime.hooks import AttemptEnd, AttemptEvent

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)
AZURE_METADATA_LIMIT = 8 * 1024


def recurring(**kw: object) -> ScheduledJob:
    return ScheduledJob.create(Target.actor("h", "ns"), "nightly", schedule="@every 10s", now=T0,
                               metadata={"timeshard.named": "names/default/default/nightly"}, **kw)  # type: ignore[arg-type]


def event(job: ScheduledJob, n: int, *, late: float = 0.0) -> AttemptEvent:
    due = T0 + timedelta(seconds=10 * n)
    return AttemptEvent(job, f"run{n}", 1, n, due, due + timedelta(seconds=late))


def end(n: int, *, error: str | None = None, took: float = 0.5) -> AttemptEnd:
    return AttemptEnd(error is None, error, T0 + timedelta(seconds=10 * n + took), None,
                      T0 + timedelta(seconds=10 * (n + 1)), False)


def run_attempts(status: JobStatus, job: ScheduledJob, count: int, size: int = 10, *, first: int = 1,
                 error: str | None = None) -> JobStatus:
    for n in range(first, first + count):
        status = started(status, event(job, n, late=0.25), "0#1")
        status = ended(status, event(job, n, late=0.25), end(n, error=error), "0#1", size)
    return status


def test_history_is_newest_first_and_bounded() -> None:
    status = run_attempts(JobStatus(), recurring(), 13, size=10)
    assert [h.occurrence for h in status.history] == list(range(13, 3, -1))
    newest = status.history[0]
    assert newest.scheduled_for == T0 + timedelta(seconds=130)
    assert newest.started == T0 + timedelta(seconds=130.25)
    assert newest.lateness == timedelta(seconds=0.25)
    assert newest.duration == timedelta(seconds=0.25)  # started 0.25 s late, ended 0.5 s after due
    assert newest.outcome == "succeeded" and newest.error is None
    assert status.successful == 13 and status.last_attempt == newest


def test_history_stays_newest_start_first_when_ends_arrive_out_of_order() -> None:
    """Two silos report their attempts' ends independently: after a failover the adopter's
    next run may end (and be told) before the run a peer was finishing is recorded (found by
    tests/e2e/test_operator_trigger.py's failover, which reads the history in start order)."""
    job = recurring()
    status = run_attempts(JobStatus(), job, 2)
    status = ended(status, event(job, 4), end(4), "1#1")  # the adopter's run, told first
    status = ended(status, event(job, 3), end(3), "0#1")  # the earlier run, told after it
    assert [h.occurrence for h in status.history] == [4, 3, 2, 1]
    status = ended(status, event(job, 5), end(5), "1#1", 4)
    assert [h.occurrence for h in status.history] == [5, 4, 3, 2]  # bounded, oldest out


def test_history_size_is_configurable_and_zero_keeps_none() -> None:
    assert len(run_attempts(JobStatus(), recurring(), 5, size=3).history) == 3
    assert run_attempts(JobStatus(), recurring(), 5, size=0).history == ()
    assert ClusterOptions().history_size == 10
    for bad in (-1, MAX_HISTORY_SIZE + 1, 2.5, True):
        with pytest.raises(ValidationError, match="history_size"):
            ClusterOptions(history_size=bad)  # type: ignore[arg-type]


def test_history_survives_the_entry_round_trip() -> None:
    job = recurring()
    status = run_attempts(JobStatus(), job, 3)
    status = interrupted(started(status, event(job, 4), "0#1"), "1#1") or status
    status = staged(status, "actor h@ns", T0)
    assert status is not None
    entry = Entry("names/default/default/nightly", "etag", 1, job.id, "shards/x", 0, 0, status)
    again = Entry.from_metadata(entry.key, entry.metadata(), "etag2").status
    assert again == status
    assert [h.outcome for h in again.history] == ["interrupted", "succeeded", "succeeded", "succeeded"]
    assert again.staged_target == "actor h@ns" and again.staged_since == T0


def test_entries_written_before_history_still_read() -> None:
    old = {"n": None, "ok": 2, "ko": 0, "int": 0, "cf": 0, "cur": None, "last": None, "at": 0, "la": None, "fin": False}
    status = JobStatus.from_json(old)
    assert status.history == () and status.staged_target is None and status.successful == 2
    assert "h" not in JobStatus().to_json() and "st" not in JobStatus().to_json()  # no byte more when empty


def test_errors_are_clipped_and_the_entry_stays_under_azures_8_kib() -> None:
    # The worst case: every attempt fails with a long error in non-ASCII text (escaped to 6 bytes a character).
    error = "Ошибка: " + "ж" * 5000
    status = run_attempts(JobStatus(), recurring(), MAX_HISTORY_SIZE + 5, size=MAX_HISTORY_SIZE, error=error)
    assert all(len(h.error or "") <= HISTORY_ERROR_CHARS for h in status.history)
    assert len(json.dumps([h.to_row() for h in status.history], separators=(",", ":"))) <= HISTORY_BYTES
    assert status.history[0].occurrence == MAX_HISTORY_SIZE + 5  # the newest always stays
    entry = Entry("names/" + "n" * 190, "etag", 1, "j" * 32, "shards/" + "s" * 60, 0, 0, status)
    size = sum(len(k) + len(v) for k, v in entry.metadata().items())
    assert size < AZURE_METADATA_LIMIT - 1024, size


def test_history_bytes_per_job_without_errors() -> None:
    status = run_attempts(JobStatus(), recurring(), 10)
    added = len(json.dumps(status.to_json(), separators=(",", ":"))) - len(
        json.dumps(replace(status, history=()).to_json(), separators=(",", ":")))
    assert added < 1500, added  # about 120 bytes per attempt kept


def test_a_triggered_run_counts_but_moves_nothing_of_the_schedule() -> None:
    job = recurring()
    status = run_attempts(JobStatus(), job, 2)
    before = status
    run = triggered_run(job, T0 + timedelta(seconds=25))
    assert triggered_from(run) == job.id and run.metadata[TRIGGERED_FROM] == job.id
    assert run.schedule is None and run.repeats is None and run.due == T0 + timedelta(seconds=25) and run.id != job.id
    assert triggered_from(triggered_run(run, T0)) == job.id  # a run of a run is a run of the job
    ev = AttemptEvent(run, "trig", 1, 1, run.due, run.due)
    status = started(status, ev, "0#1")
    assert status.current_attempt is not None and status.current_attempt.triggered
    status = ended(status, ev, AttemptEnd(True, None, run.due + timedelta(seconds=1), None, None, True), "0#1")
    assert status.successful == before.successful + 1
    assert status.next_fire == before.next_fire and not status.finished and status.attempts == before.attempts
    assert status.history[0].triggered and status.history[0].run_id == "trig"
    assert status.current_attempt is None


def test_a_triggered_run_elsewhere_is_not_counted_interrupted_by_the_next_occurrence() -> None:
    job = recurring()
    run = triggered_run(job, T0)
    status = started(JobStatus(), AttemptEvent(run, "trig", 1, 1, T0, T0), "1#1")
    status = started(status, event(job, 1), "0#1")  # the schedule's own attempt, on another silo
    assert status.interrupted == 0
    status = ended(status, AttemptEvent(run, "trig", 1, 1, T0, T0),
                   AttemptEnd(True, None, T0, None, None, True), "1#1")
    assert status.successful == 1 and status.current_attempt is not None and status.current_attempt.run_id == "run1"


def test_staged_shows_until_the_attempt_starts_and_keeps_its_first_time() -> None:
    status = staged(JobStatus(), "actor h@ns", T0)
    assert status is not None and status.staged
    assert staged(status, "actor h@ns", T0 + timedelta(minutes=1)) is None  # staged again after a failover
    status = started(status, event(recurring(), 1), "0#1")
    assert not status.staged and status.staged_since is None


def test_attempt_record_json_keeps_the_triggered_mark() -> None:
    record = AttemptRecord("r", 1, 1, T0, T0, "0#1", triggered=True)
    assert AttemptRecord.from_json(record.to_json()) == record
    assert "g" not in replace(record, triggered=False).to_json()


def test_get_shows_history_and_staged_in_text_and_json() -> None:
    from cluster.cli.jobs import _job_text, named_job_to_json
    from cluster.named.api import NamedJob

    job = recurring()
    status = run_attempts(JobStatus(), job, 2, error=None)
    trig = triggered_run(job, T0 + timedelta(seconds=25))
    ev = AttemptEvent(trig, "trig", 1, 1, trig.due, trig.due + timedelta(seconds=0.5))
    status = ended(started(status, ev, "0#1"), ev, AttemptEnd(False, "ValueError: boom", trig.due + timedelta(seconds=2),
                                                              None, None, True), "0#1")
    status = staged(status, "actor h@ns", T0 + timedelta(seconds=30))
    assert status is not None
    shown = named_job_to_json(NamedJob("nightly", "default", "default", 1, job, status, T0))
    history = shown["status"]["history"]
    assert [h["outcome"] for h in history] == ["failed", "succeeded", "succeeded"]
    assert history[0]["triggered"] and history[0]["error"] == "ValueError: boom"
    assert history[0]["lateness_s"] == 0.5 and history[0]["duration_s"] == 1.5
    assert history[0]["scheduled_for"] == (T0 + timedelta(seconds=25)).isoformat() and history[0]["started"]
    assert shown["status"]["staged"] == {"target": "actor h@ns", "since": (T0 + timedelta(seconds=30)).isoformat()}
    json.dumps(shown)  # --json prints it
    text = _job_text(shown)
    assert f"staged: waiting for actor h@ns since {(T0 + timedelta(seconds=30)).isoformat()}" in text
    assert "history       last 3, newest first" in text
    assert "started 0.500s late, took 1.500s, failed (triggered): ValueError: boom" in text
    assert "attempts 0" not in text


def test_trigger_is_a_cli_command_with_examples() -> None:
    from cluster.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["trigger", "nightly", "--app-id", "billing", "--json"])
    assert args.name == "nightly" and args.app_id == "billing" and args.json
    sub = next(a for a in parser._subparsers._group_actions if a.dest in ("command", "cmd") or a.choices)  # type: ignore[union-attr]
    helptext = sub.choices["trigger"].format_help()
    assert "examples:" in helptext and "timeshard trigger db-backup" in helptext


def test_status_names_staged_jobs_with_their_absent_target() -> None:
    from cluster.cli.jobs import _status_text

    since_us = 1_893_456_000_000_000
    silo = {"silo_id": "0", "owner": "0#1", "node": "n", "pid": 1, "queued": 0, "inflight": 0, "staged": 1,
            "counters": {}, "clock": None, "shards": [], "damaged": {},
            "staged_jobs": [{"job": "abc", "name": "nightly", "target": "actor h@ns", "since_us": since_us}]}
    text = _status_text({"namespace": "test", "store": "memory://", "silos": [silo]})
    assert "STAGED job nightly: waiting for actor h@ns since " in text
