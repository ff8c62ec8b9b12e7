"""A named put on the wire between a client and its bucket's owner: what one put sends, what it
answers, and how either side reads the other's (``Buckets.put_many`` serves them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster.model.errors import AlreadyExists, ClusterUnavailable, PutInDoubt, SiloStopping
from cluster.model.jobs import ScheduledJob
from cluster.model.wire import datetime_to_us, pack, unpack
from cluster.named.registry import REPLACES_MARK, Entry, Retired
from cluster.named.writes import PutRequest

__all__ = ["NotOwner", "PutOutcome", "WireOutcome", "WirePut", "made_to_wire", "outcome_from_wire", "outcome_to_wire",
           "put_from_wire", "put_to_wire", "resent_put"]

PutOutcome = tuple[Entry, ScheduledJob] | BaseException


class NotOwner(LookupError):
    """This silo does not answer for the bucket of ``key`` (now): ask its owner."""

    def __init__(self, key: str) -> None:
        super().__init__(f"this silo does not own the registry bucket of {key!r}")
        self.key = key



#: What one put sends: (key, name, app_id, namespace, packed job, overwrite, now_us[, resend[,
#: brief]]). The packed job's id is the put's ``try_id`` (an owner of an earlier release ignores
#: it); an owner of an earlier release unpacks the first seven fields and reads the eighth as
#: ``resend``. ``brief``: the sender reads a made put's brief answer ("made", below).
WirePut = tuple[Any, ...]
#: What one put answers: ("ok", entry metadata, packed job) | ("made", generation, job id, shard,
#: replaced job id or None, retire rows) | ("exists",) | ("not_owner",) | ("doubt", why[, landed])
#: | ("failed", why). "made" only to a sender that asked for it, for a put this call made whose
#: entry is as made: the rest the sender has (its job, its time; a new generation's status is
#: fresh), so it decodes no JSON and no job (35 us a put, a third of a client's put_many).
#: Plain values: an exception with its own constructor arguments does not survive Ray's
#: pickling of an answer.
WireOutcome = tuple[Any, ...]


def put_to_wire(ask: PutRequest) -> WirePut:
    job = ask.job if ask.job.id == ask.try_id else ask.job.evolve(id=ask.try_id)
    return (ask.key, ask.name, ask.app_id, ask.namespace, pack(job.to_wire()), ask.overwrite, ask.now_us, ask.resend,
            True)


def put_from_wire(sent: Sequence[Any], memo: dict[Any, Any] | None = None) -> PutRequest:
    """The put ``sent`` on the wire; ``memo`` as ``ScheduledJob.from_wire`` takes it (each target,
    schedule and policy decoded once, not once a put)."""
    key, name, app_id, namespace, packed, overwrite, now_us, *more = sent
    job = ScheduledJob.from_wire(unpack(packed), memo)
    return PutRequest(key, name, app_id, namespace, job, overwrite, now_us, try_id=job.id, resend=bool(more and more[0]),
                      brief=len(more) > 1 and bool(more[1]))


def resent_put(sent: Sequence[Any]) -> WirePut:
    """``sent`` (a put on the wire) as its resend after a send lost with its owner."""
    return (*sent[:7], True, *sent[8:9])


def made_to_wire(entry: Entry, job: ScheduledJob) -> WireOutcome:
    """The brief answer of a put just made (``WireOutcome``)."""
    return ("made", entry.generation, entry.job_id, entry.shard, job.metadata.get(REPLACES_MARK),
            [r.row() for r in entry.retire])


def outcome_to_wire(outcome: PutOutcome) -> WireOutcome:
    if isinstance(outcome, AlreadyExists):
        return ("exists",)
    if isinstance(outcome, NotOwner | SiloStopping):
        # A lapsed lease (a starved silo) or a stop: its schedule wrote nothing of the round, and
        # another try reaches the bucket's owner once the lease is renewed or the bucket moved on.
        # Answered "failed", the put raised ClusterUnavailable under a moment's CPU starvation.
        return ("not_owner",)
    if isinstance(outcome, PutInDoubt):
        return ("doubt", outcome.reason, outcome.landed)
    if isinstance(outcome, BaseException):
        return ("failed", repr(outcome))
    entry, job = outcome
    return ("ok", entry.metadata(), pack(job.to_wire()))


def outcome_from_wire(answer: WireOutcome, ask: PutRequest) -> PutOutcome:
    kind = answer[0]
    if kind == "made":
        return _made_from_wire(answer, ask)
    if kind == "ok":
        entry = Entry.from_metadata(ask.key, answer[1], "")
        return entry, ScheduledJob.from_wire(unpack(answer[2])).evolve(shard=entry.shard)  # the wire form has no shard
    if kind == "exists":
        return AlreadyExists(ask.name, ask.app_id, ask.namespace)
    if kind == "not_owner":
        return NotOwner(ask.key)
    if kind == "doubt":
        return PutInDoubt(answer[1], ask.name, landed=len(answer) > 2 and bool(answer[2]))
    return ClusterUnavailable(f"not put: {answer[1]}")


def _made_from_wire(answer: WireOutcome, ask: PutRequest) -> tuple[Entry, ScheduledJob]:
    """A brief answer's entry and job, as the owner made them of ``ask`` (``_next_generation``,
    ``Buckets._land``); the entry without its definition, which only an owner reads."""
    _, generation, job_id, shard, replaces, retire = answer
    metadata = ask.job.metadata if replaces is None else {**ask.job.metadata, REPLACES_MARK: replaces}
    job = ask.job.evolve(id=job_id, generation=generation, shard=shard, metadata=metadata)
    fire = job.first_fire
    rows = tuple(Retired(r[0], r[1], r[2], bool(r[3]) if len(r) > 3 else True) for r in retire)
    entry = Entry.new_generation(ask.key, generation, job_id, shard, datetime_to_us(fire), ask.now_us, fire, rows, None)
    return entry, job
