"""What a registry bucket's owner answers besides puts (``named_registry="buckets"``, the default; issue 25 point 5).

Every call comes from another silo or a client through ``Silo.feature_call``, carries plain
values (``cluster.named.routed`` sends them, one call per owner per tick), and is answered from
the owner's memory of its buckets (``cluster.named.buckets``), one answer per item, in order;
``("not_owner",)`` when this silo does not answer for the item's bucket now (the caller reads
the owners again and sends it there).

- **Verdicts** (the generation fence, ``cluster.named.fence``): whether job J of a name may
  start. Asked of the owner, whose memory is the bucket's durable state once no put or delete
  of that name is under way (the answer waits for one that is: it decides). J is cleared,
  with the shard the entry names, iff the entry names J; otherwise refused at once: the owner
  knows every put in flight, so a job no durable entry names and no put under way is about
  will never be named (its put died, failed, or was superseded).
- **Deletes**: the name is deleted only while it still points at the job the caller cancelled
  (``("changed", entry)`` otherwise: the caller cancels that one too and asks again), so once
  a delete returned, nothing it named starts again.
- **Triggered runs**: admitted at their start while the entry names their generation, listed
  among the jobs it retires in the same append (so a put or delete replacing it cancels them).
- **Puts** (``cluster.named.buckets``) that replaced a generation: the owner cancels the jobs
  the new entry retires before it answers: in the shards it holds, here; in another silo's
  (a bucket handed over keeps its replaced generations in the shards its first owner scheduled
  them into), through that silo, one ``named_cancels`` call per silo per round of puts. It
  answers the entry listing only the ones it could not confirm (a move to follow, a silo that
  did not answer, a failure): the caller cancels those as before (``BucketNames._retire``).
  An overwrite is then one call, not a put and a cancel call per replaced job.
- **Cancels** forwarded by a peer's put round: each made here as a client's cancel sent here
  would be (``Silo.cancel``), never forwarded again.
- **Retired**: older generations whose cancel was confirmed leave the entry's list.
- **Status**: attempts' changes (``cluster.named.attempts``), applied in the order sent while the
  entry names their generation, one ``STATUS`` record per name per call, one append per bucket.
- **Reads** (``get``, a page, a count): the durable entries, never one an append under way
  may still take back; so a read after a put returned sees it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.model.evolve import evolve
from cluster.model.waiting import wait_bounded
from cluster.named.attempts import WireChange, apply_change, apply_changes, retiring
from cluster.named.bucket import DELETE, PUT, RETIRED, STATUS, StatusJson
from cluster.named.buckets import BucketReleased, Buckets, HeldBucket, merged, repeated
from cluster.named.putwire import PutOutcome, outcome_to_wire, put_from_wire
from cluster.named.registry import Entry, Retired
from cluster.runtime.runs import MEMO_LIMIT

__all__ = ["CancelHere", "Cancels", "OwnerCalls"]

log = logging.getLogger("timeshard.silo")

NOT_OWNER = ("not_owner",)
#: What a cancel made here answers when the job will not start again (``Cancelling.cancel``).
CONFIRMED = ("cancelled", "absent")
#: How long confirmed cancels gather before they leave their entries' lists (``OwnerCalls._tidy_soon``).
TIDY_AFTER_S = 0.05
#: How long a round of puts waits for a peer to make the cancels it forwarded there: past it,
#: they are left to the callers, and the round's other puts are answered. A peer paused or cut
#: off would otherwise hold every put of the round for the peer call's own 10 s, not only those
#: whose replaced jobs it holds (their callers then wait on that peer as they did before).
FORWARD_WAIT_S = 2.0

#: Cancels job ``job_id`` of shard ``shard`` from this silo, as a client's cancel sent here
#: would (``Silo.cancel``): ``("cancelled" | "absent" | "moved" | "not_owner", info)``.
CancelHere = Callable[[str, str], Awaitable[tuple[str, Any]]]


@dataclass(frozen=True)
class Cancels:
    """Where a bucket owner cancels the generations its puts replace."""

    here: CancelHere
    #: The silo to ask for a cancel in shard ``shard`` (one it does not hold, created by a peer),
    #: or None: made here (held, or no better guess: the claim path of ``Silo.cancel`` decides).
    route: Callable[[str], str | None] = lambda _shard: None
    #: ``(shard, job id)`` items cancelled at silo ``silo_id`` (its ``named_cancels``): one
    #: answer each, as ``here`` answers; raises as ``SiloView.call_peer`` does.
    there: Callable[[str, list[tuple[str, str]]], Awaitable[list[Any]]] | None = None


class OwnerCalls:
    """The calls a silo answers as the owner of registry buckets (see the module docstring)."""

    def __init__(self, buckets: Buckets, cancels: Cancels | None = None) -> None:
        self.buckets = buckets
        self._cancels = cancels
        self._retired_soon: dict[str, set[str]] = {}  # key -> job ids whose cancel was confirmed here
        self._memo: dict[Any, Any] = {}  # puts' targets, schedules and policies, decoded once (bounded)
        self._tidying: asyncio.Task[None] | None = None
        self._calls: dict[str, Callable[..., Awaitable[Any]]] = {
            "named_put": self.puts, "named_verdicts": self.verdicts, "named_delete": self.deletes,
            "named_retired": self.retired, "named_status": self.statuses, "named_get": self.gets,
            "named_page": self.page, "named_count": self.count, "named_trigger": self.triggers,
            "named_cancels": self.cancels,
        }

    def service(self, method: str) -> Callable[..., Awaitable[Any]] | None:
        return self._calls.get(method)

    async def puts(self, sent: Sequence[Any]) -> list[Any]:
        wire: list[Any] = [None] * len(sent)
        if len(self._memo) > MEMO_LIMIT:
            self._memo.clear()
        landed = await self.buckets.put_many([put_from_wire(one, self._memo) for one in sent], wire)
        outcomes = landed if self._cancels is None else await self._retire_here(landed)
        # An answer built with its record is sent as built, unless cancels made here changed its entry.
        return [made if made is not None and outcome is was else outcome_to_wire(outcome)
                for made, outcome, was in zip(wire, outcomes, landed, strict=True)]

    async def _retire_here(self, outcomes: list[PutOutcome]) -> list[PutOutcome]:
        """Cancel the generations the landed puts of ``outcomes`` retire, from here; each put's
        entry answered listing only those whose cancel was not confirmed.

        The caller cancelled every one through its shard's owner, one call per job after the
        put's own: a dormant window's overwrites paid two round trips each. Most are in shards
        this silo holds (its puts scheduled them); once a bucket was handed over, in its first
        owner's: asked of that silo, one call per round, not by the caller one call per job
        (overwriting 10,000 names after a hand-over: 378/s that way, 973/s this way). Concurrent
        ones reach ``Cancelling``'s batch per shard together. The confirmed leave the entry's
        list in the background (``_tidy_soon``), as the caller's tidy did: a list left behind
        is only cancelled again by the name's next put or delete."""
        assert self._cancels is not None
        retiring = [(i, r) for i, o in enumerate(outcomes) if not isinstance(o, BaseException) for r in o[0].retire]
        if not retiring:
            return outcomes
        here: list[tuple[int, Retired]] = []
        there: dict[str, list[tuple[int, Retired]]] = {}
        for row in retiring:
            silo = self._cancels.route(row[1].shard) if self._cancels.there is not None else None
            if silo is None:
                here.append(row)
            else:
                there.setdefault(silo, []).append(row)
        cancel = self._cancels.here
        answered = await asyncio.gather(
            asyncio.gather(*(cancel(r.shard, r.job_id) for _, r in here), return_exceptions=True),
            *(self._cancel_at(silo, [r for _, r in rows]) for silo, rows in there.items()))
        rows = here + [row for rows in there.values() for row in rows]
        answers = [answer for part in answered for answer in part]
        done: dict[int, set[str]] = {}
        for (i, r), answer in zip(rows, answers, strict=True):
            if isinstance(answer, (tuple, list)) and answer[0] in CONFIRMED:
                done.setdefault(i, set()).add(r.job_id)
        out = list(outcomes)
        for i, ids in done.items():
            entry, job = outcomes[i]  # type: ignore[misc]
            out[i] = evolve(entry, retire=tuple(r for r in entry.retire if r.job_id not in ids)), job
            self._retired_soon.setdefault(entry.key, set()).update(ids)
        if self._retired_soon and (self._tidying is None or self._tidying.done()):
            self._tidying = asyncio.get_running_loop().create_task(self._tidy_soon())
        return out

    async def _cancel_at(self, silo: str, retired: list[Retired]) -> Sequence[Any]:
        """The answers of ``silo`` to cancels of ``retired``; None each if it did not answer
        (left listed: the caller follows each job to its shard's owner, as before)."""
        assert self._cancels is not None and self._cancels.there is not None
        try:
            answers = await wait_bounded(self._cancels.there(silo, [(r.shard, r.job_id) for r in retired]),
                                         FORWARD_WAIT_S)
        except Exception as exc:  # refused, lost, failed there or slow: unconfirmed, the caller's to make
            log.debug("cancels not made at their shard's silo", extra={"silo": silo, "error": repr(exc)})
            return [None] * len(retired)
        return answers if len(answers) == len(retired) else [None] * len(retired)

    async def cancels(self, sent: Sequence[tuple[str, str]]) -> list[Any]:
        """``(shard, job id)`` each, cancelled here as ``Silo.cancel`` would: its answer, or
        ``("failed", why)`` (not confirmed: the put's caller makes that cancel itself)."""
        assert self._cancels is not None
        cancel = self._cancels.here
        answers = await asyncio.gather(*(cancel(shard, job_id) for shard, job_id in sent), return_exceptions=True)
        return [("failed", repr(a)) if isinstance(a, BaseException) else a for a in answers]

    async def tidied(self) -> None:
        """Return once the confirmed cancels of every put answered so far are off their entries' lists (or failed to be)."""
        while self._tidying is not None and not self._tidying.done():
            await asyncio.gather(self._tidying, return_exceptions=True)

    async def _tidy_soon(self) -> None:
        """Take the confirmed cancels off their entries' lists, those of many puts in one append
        per bucket: one per put round doubled a bucket's appends under a run of overwrites."""
        while self._retired_soon:
            await asyncio.sleep(TIDY_AFTER_S)
            items, self._retired_soon = self._retired_soon, {}
            await self._tidy([(key, sorted(ids)) for key, ids in items.items()])

    async def _tidy(self, items: list[tuple[str, list[str]]]) -> None:
        try:
            await self.retired(items)
        except Exception as exc:  # left listed: cancelled again by the name's next put or delete
            log.warning("retired generations not taken off their entries", extra={"error": repr(exc)})

    async def verdicts(self, sent: Sequence[tuple[str, str]]) -> list[Any]:
        """``(key, job id)`` each: ``("ok", shard)`` cleared, ``("refused",)``, or not ours."""
        return list(await asyncio.gather(*(self._verdict(key, job_id) for key, job_id in sent)))

    async def _verdict(self, key: str, job_id: str) -> Any:
        bucket = await self._settled(key)
        if bucket is None:
            return NOT_OWNER
        entry = bucket.state.durable(key)
        if entry is not None and entry.job_id == job_id:
            return ("ok", entry.shard)
        return ("refused",)

    async def _settled(self, key: str) -> HeldBucket | None:
        """The bucket of ``key`` once no put or delete of it is under way, if this silo answers for it."""
        bucket = (await self.buckets.settled([key]))[self.buckets.bucket_for(key)]
        return None if bucket is None or bucket.lost else bucket

    async def deletes(self, sent: Sequence[tuple[Any, ...]]) -> list[Any]:
        """``(key, job id the caller cancelled[, the entry's retire list it cancelled])`` each:
        ``("deleted",)``, ``("absent",)``, ``("changed", entry metadata)``, ``("doubt", why)``
        or not ours. "changed" too if the entry lists a job to retire the caller did not cancel:
        a triggered run admitted since it read the entry (simulator seed 1181, ``default,+buckets``)."""
        later = repeated([one[0] for one in sent])
        if later:  # a name twice in one call: one after the other (never waits on itself)
            first = await self.deletes([one for i, one in enumerate(sent) if i not in later])
            return merged(len(sent), later, first, await self.deletes([sent[i] for i in sorted(later)]))
        out: list[Any] = [None] * len(sent)
        rounds: dict[int, tuple[HeldBucket, list[int]]] = {}
        held: list[tuple[HeldBucket, str]] = []
        try:
            answering = await self.buckets.settled([one[0] for one in sent])  # then no await until marked busy
            for i, (key, job_id, *cancelled) in enumerate(sent):
                bucket = answering[self.buckets.bucket_for(key)]
                if bucket is None or bucket.lost:
                    out[i] = NOT_OWNER
                    continue
                entry = bucket.state.entries.get(key)
                if entry is None:
                    out[i] = ("absent",)
                elif entry.job_id != job_id or (cancelled and not {r.job_id for r in entry.retire} <= set(cancelled[0])):
                    out[i] = ("changed", entry.metadata())
                else:
                    bucket.busy.add(key)  # no put of it decides until the delete is durable (or not)
                    held.append((bucket, key))
                    rounds.setdefault(bucket.number, (bucket, []))[1].append(i)
            writes = [(bucket, rows, bucket.write([[DELETE, sent[i][0], sent[i][1]] for i in rows]))
                      for bucket, rows in rounds.values()]
            for i in await self._await_writes(writes, out):
                out[i] = ("deleted",)
        finally:
            await _release(held)
        return out

    async def triggers(self, sent: Sequence[tuple[str, str, list[Any] | None, WireChange]]) -> list[Any]:
        """``(key, generation's job id, triggered run as a retire row, its start)`` each: ``("ok",)``
        once the entry, still naming that generation, shows the run running and lists it among
        the jobs to retire (a put or delete replacing the generation then cancels it before it
        returns); ``("refused",)`` if it names another or none; ``("doubt", why)``; or not ours."""
        out: list[Any] = []
        for key, job_id, run, change in sent:  # rare, out of band: one at a time
            bucket = await self._settled(key)
            entry = None if bucket is None else bucket.state.entries.get(key)
            if bucket is None:
                out.append(NOT_OWNER)
            elif entry is None or entry.job_id != job_id:
                out.append(("refused",))
            else:
                listed = retiring(entry.retire, None if run is None else Retired(run[0], run[1], run[2],
                                                                                   len(run) < 4 or bool(run[3])))
                new = evolve(entry, status=apply_change(entry.status, change) or entry.status, retire=listed)
                bucket.busy.add(key)
                try:
                    await bucket.write([[PUT, key, new.metadata()]])
                except BucketReleased:
                    out.append(NOT_OWNER)
                except Exception as exc:
                    self.buckets.drop(bucket, f"its append failed ({exc!r})", retake=True)
                    out.append(("doubt", repr(exc)))
                else:
                    out.append(("ok",))
                finally:
                    await _release([(bucket, key)])
        return out

    async def retired(self, sent: Sequence[tuple[str, list[str]]]) -> list[Any]:
        """``(key, job ids whose cancel was confirmed)`` each: taken off the entry's list."""
        return await self._records(sent, lambda bucket, key, ids: [RETIRED, key, ids]
                                   if bucket.state.entries.get(key) is not None else None)

    async def statuses(self, sent: Sequence[tuple[str, str, WireChange]]) -> list[Any]:
        """``(key, job id, change)`` each, in order: the entry's status after them, while it names
        that job; one record per name (``apply_changes``: a start and its end, one step)."""
        changes: dict[str, list[tuple[str, WireChange]]] = {}
        for key, job_id, change in sent:
            changes.setdefault(key, []).append((job_id, change))
        last = {key: i for i, (key, _, _) in enumerate(sent)}

        def record(bucket: HeldBucket, key: str, i: int) -> list[Any] | None:
            entry = bucket.state.entries.get(key)
            if last[key] != i or entry is None:
                return None  # a name's changes are applied at its last one; a deleted name's, never
            # Another generation's are left out: an older one never touches a newer one's status.
            status = apply_changes(entry.status, [change for job_id, change in changes[key] if job_id == entry.job_id])
            return None if status is None else [STATUS, key, entry.job_id, StatusJson(status)]

        return await self._records([(key, i) for i, (key, _, _) in enumerate(sent)], record, last_per_key=True)

    async def _records(self, sent: Sequence[tuple[str, Any]],
                       make: Callable[[HeldBucket, str, Any], list[Any] | None], last_per_key: bool = False) -> list[Any]:
        """Append the records ``make`` builds for ``sent``, one append per bucket; ``("ok",)`` each once durable."""
        out: list[Any] = [("ok",)] * len(sent)
        answering: dict[int, HeldBucket | None] = {}
        for number in {self.buckets.bucket_for(key) for key, _ in sent}:
            answering[number] = await self.buckets.answering(number)
        # From here to the appends, no await: each record is made from the memory it is appended after.
        rounds: dict[int, tuple[HeldBucket, dict[str, list[Any]], list[int]]] = {}
        for i, (key, item) in enumerate(sent):
            number = self.buckets.bucket_for(key)
            bucket = answering[number]
            if bucket is None or bucket.lost:
                out[i] = NOT_OWNER
                continue
            made = make(bucket, key, item)
            _, records, rows = rounds.setdefault(number, (bucket, {}, []))
            rows.append(i)
            if made is not None:
                records[key if last_per_key else f"{key}\0{i}"] = made  # a status: the last per key says it all
        writes = [(bucket, rows, bucket.write(list(records.values()))) for bucket, records, rows in rounds.values()
                  if records]
        await self._await_writes(writes, out)
        return out

    async def _await_writes(self, writes: Sequence[tuple[HeldBucket, list[int], Awaitable[None]]],
                            out: list[Any]) -> list[int]:
        """The rows whose bucket's append landed; the others answer ``("doubt", error)``, and a
        bucket whose append failed is dropped and claimed again from its log (its memory may
        hold what the log does not)."""
        landed: list[int] = []
        for bucket, rows, writing in writes:
            try:
                await writing
            except BucketReleased:  # refused, nothing applied: the caller sends them to the next owner
                for i in rows:
                    out[i] = NOT_OWNER
            except Exception as exc:
                self.buckets.drop(bucket, f"its append failed ({exc!r})", retake=True)
                for i in rows:
                    out[i] = ("doubt", repr(exc))
            else:
                landed.extend(rows)
        return landed

    async def gets(self, sent: Sequence[str]) -> list[Any]:
        """Keys: ``("ok", entry metadata)``, ``("none",)`` or not ours."""
        out: list[Any] = []
        for key in sent:
            bucket = await self.buckets.answering(self.buckets.bucket_for(key))
            if bucket is None:
                out.append(NOT_OWNER)
                continue
            entry = bucket.state.durable(key)
            out.append(("none",) if entry is None else ("ok", entry.metadata()))
        return out

    async def page(self, numbers: Sequence[int], start: str, after: str | None, limit: int) -> dict[int, Any]:
        """Of each bucket of ``numbers`` this silo answers for: ``(rows, more)``, at most ``limit``
        ``(key, metadata)`` rows after key ``after`` among keys starting with ``start``."""
        found: dict[int, tuple[list[Entry], bool]] = {}
        for number in numbers:
            bucket = await self.buckets.answering(number)
            if bucket is not None:
                found[number] = bucket.state.page(start, after, limit)
        # Only this owner's first ``limit`` keys of all its buckets can be on the caller's page (a
        # key is in one bucket): the rest stay here, their buckets saying more follow. So a page
        # carries ``limit`` rows, definitions inline, per owner, not per bucket.
        kept = sorted(e.key for entries, _ in found.values() for e in entries)[:limit]
        out: dict[int, Any] = {}
        for number, (entries, more) in found.items():
            shown = [e for e in entries if kept and e.key <= kept[-1]]
            out[number] = ([(e.key, e.metadata()) for e in shown], more or len(shown) < len(entries))
        return out

    async def count(self, numbers: Sequence[int], start: str) -> dict[int, int]:
        """Of each bucket of ``numbers`` this silo answers for: how many keys start with ``start``."""
        out: dict[int, int] = {}
        for number in numbers:
            bucket = await self.buckets.answering(number)
            if bucket is not None:
                out[number] = bucket.state.count(start)
        return out


async def _release(held: list[tuple[HeldBucket, str]]) -> None:
    for bucket, key in held:
        bucket.busy.discard(key)
    for bucket in {id(b): b for b, _ in held}.values():
        async with bucket.settled:
            bucket.settled.notify_all()
