"""Calls sent to registry buckets' owners (``named_registry="buckets"``, the default; issue 25 point 5).

The caller's side of ``cluster.named.buckets`` and ``cluster.named.owned``, for a client (puts,
deletes, reads) and for a silo (fence verdicts, status records) alike: each item goes to the
silo that owns its name's bucket, the items of one event-loop tick in one call per owner and
method (as schedule calls coalesce). Who owns which bucket is read from the bucket logs'
metadata, and read again when a silo answers that it does not own one (taken over meanwhile) or
refuses the call (not started, stopping): nothing was done then, so the item is sent again. A
call lost on the way (the silo died) may have been acted on: its items are answered
``("lost", why)``, and what that means is the caller's to say (a put in doubt, a verdict not
known yet); but a client's read (``READS``) lost with its silo (``SiloLost``) is sent again to
the bucket's next owner, as a read of the per-name entries never failed because a silo died,
and so is a put (``RoutedPuts``), marked as a resend, which that owner answers by what the lost
send left (``cluster.named.buckets.resent``). After ``SEND_ATTEMPTS`` sends,
``("unavailable", why)``, or ``("lost", why)`` for an item one of whose sends was lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from cluster.model.errors import ClusterUnavailable, PutInDoubt
from cluster.model.jobs import ScheduledJob
from cluster.model.routing import SiloLost, SiloRefused
from cluster.named.bucket import BUCKET_PREFIX, BUCKETS, bucket_of
from cluster.named.putwire import PutOutcome, outcome_from_wire, put_to_wire, resent_put
from cluster.named.registry import Entry
from cluster.named.writes import PutRequest
from cluster.runtime.membership import parse_owner
from storage import Store, list_logs

__all__ = ["READS", "Routed", "RoutedPuts", "SiloCaller", "put_outcome"]

log = logging.getLogger("timeshard.named")

SEND_ATTEMPTS = 40  # sends of one item while owners change or refuse (backing off up to 1 s)
# A client's put calls under way per owner; later puts wait and go together. One: fewer, larger
# calls beat overlapping ones on two cores (benchmarks/named_put_profile.md, "One call in flight").
PUT_CALLS_IN_FLIGHT = 1
_MAX_DELAY_S = 1.0

#: A client's reads of the registry: acted on twice, still a read, so one lost with its owner is
#: sent again rather than failed (``client.jobs.get`` and ``list`` keep answering through a failover).
READS = frozenset({"named_get", "named_page", "named_count"})



class _Answers:
    """The answers of one ``ask_many`` call, in order, and the one future its caller awaits."""

    __slots__ = ("values", "left", "future")

    def __init__(self, count: int, future: asyncio.Future[list[Any]]) -> None:
        self.values: list[Any] = [_UNANSWERED] * count
        self.left = count
        self.future = future


class _Slot:
    """One item's place among its call's answers: one future a call, not one an item with a
    gather over them (~5 us an item, a tenth of a ``put_many``'s CPU on its client)."""

    __slots__ = ("_answers", "_index")

    def __init__(self, answers: _Answers, index: int) -> None:
        self._answers = answers
        self._index = index

    def done(self) -> bool:
        """Answered already, or its caller gave up waiting (cancelled)."""
        return self._answers.values[self._index] is not _UNANSWERED or self._answers.future.done()

    def set_result(self, answer: Any) -> None:
        answers = self._answers
        answers.values[self._index] = answer
        answers.left -= 1
        if not answers.left and not answers.future.done():
            answers.future.set_result(answers.values)


_UNANSWERED = object()
# key, what is sent, its answer's place, sends so far, why a send of it was lost (None: none was, or a read's)
_Item = tuple[str, Any, _Slot, int, str | None]


class SiloCaller(Protocol):
    """One call to one silo, never retried elsewhere: ``SiloRefused`` (nothing done) or
    ``SiloLost`` (done or not) as ``cluster.model.routing`` tells them apart."""

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any: ...


class Routed:
    """Sends items to their buckets' owners, coalesced per tick and method (module docstring)."""

    def __init__(self, store: Store, caller: SiloCaller, buckets: int = BUCKETS) -> None:
        self._store = store
        self._caller = caller
        self.buckets = buckets
        #: Methods whose items lost with their silo are sent to the next owner: what to send then.
        self.resends: dict[str, Callable[[Any], Any]] = {}
        #: Methods with at most this many calls in flight per owner; the items of later ticks wait
        #: for one to end, then go in one call (``_route``).
        self.in_flight: dict[str, int] = {}
        self._flying: dict[tuple[str, str], int] = {}
        self._held: dict[tuple[str, str], list[_Item]] = {}
        self._owners: dict[int, str] = {}  # bucket -> the silo id its log names as owner
        self._queued: dict[str, list[_Item]] = {}
        self._armed = False
        self._sends: set[asyncio.Task[None]] = set()

    async def ask(self, method: str, key: str, sent: Any) -> Any:
        (answer,) = await self.ask_many(method, [(key, sent)])
        return answer

    async def ask_many(self, method: str, items: Sequence[tuple[str, Any]]) -> list[Any]:
        """Send each ``(key, what)`` of ``items`` to the owner of ``key``'s bucket; the answers, in order."""
        if not items:
            return []
        answers = _Answers(len(items), asyncio.get_running_loop().create_future())
        self._queued.setdefault(method, []).extend(
            (key, sent, _Slot(answers, i), 0, None) for i, (key, sent) in enumerate(items))
        self._arm()
        return await answers.future

    async def ask_all(self, method: str, *args: Any) -> dict[int, Any]:
        """Ask every bucket's owner ``method(numbers, *args)`` about the buckets it owns; each bucket's answer."""
        answers: dict[int, Any] = {}
        for tries in range(SEND_ATTEMPTS):
            if tries:
                await asyncio.sleep(min(_MAX_DELAY_S, 0.01 * 2 ** tries))
                self._owners.clear()
            missing = [n for n in range(self.buckets) if n not in answers]
            if any(n not in self._owners for n in missing):
                await self._read_owners()
            by_silo: dict[str, list[int]] = {}
            for number in missing:
                if number in self._owners:
                    by_silo.setdefault(self._owners[number], []).append(number)
            results = await asyncio.gather(*(self._caller._at_silo(silo, "feature_call", method, numbers, *args)
                                             for silo, numbers in by_silo.items()), return_exceptions=True)
            for (silo, numbers), result in zip(by_silo.items(), results, strict=True):
                if isinstance(result, SiloRefused):
                    continue
                if isinstance(result, BaseException):
                    self._forget(silo)
                    if method in READS and isinstance(result, SiloLost):
                        continue  # asked again once the buckets' owners are read anew
                    raise ClusterUnavailable(f"the owner {silo} of registry buckets {numbers} did not answer "
                                             f"({result!r})") from result
                answers.update((n, a) for n, a in result.items() if n in numbers)
            if len(answers) == self.buckets:
                return answers
        raise ClusterUnavailable(f"no owner answered for registry buckets "
                                 f"{[n for n in range(self.buckets) if n not in answers]}")

    def _arm(self) -> None:
        if not self._armed and self._queued:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._start)  # one tick: callers of this one join

    def _start(self) -> None:
        self._armed = False
        queued, self._queued = self._queued, {}
        for method, items in queued.items():
            task = asyncio.get_running_loop().create_task(self._route(method, items))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    async def _route(self, method: str, items: list[_Item]) -> None:
        if any(bucket_of(key, self.buckets) not in self._owners for key, *_ in items):
            try:
                await self._read_owners()
            except Exception as exc:
                _give_up(items, f"its registry bucket's owner is unknown ({exc!r})")
                return
        by_silo: dict[str | None, list[_Item]] = {}
        for one in items:
            by_silo.setdefault(self._owners.get(bucket_of(one[0], self.buckets)), []).append(one)
        limit = self.in_flight.get(method)
        if limit is not None:
            # Callers answered by different calls come back at different ticks, and each tick's
            # puts split again by owner: unchecked, 64 callers ended up in calls of 3-6 puts,
            # each paying a Ray call and its own appends. Held while the owner has ``limit``
            # calls under way, they go together when one ends.
            for silo in [s for s in by_silo if s is not None and self._flying.get((method, s), 0) >= limit]:
                self._held.setdefault((method, silo), []).extend(by_silo.pop(silo))
        await asyncio.gather(*(self._flown(method, silo, sent) for silo, sent in by_silo.items()))

    async def _flown(self, method: str, silo: str | None, items: list[_Item]) -> None:
        """``_send``, counted among the calls in flight to ``silo``; what was held for it meanwhile is routed again after."""
        if silo is None or method not in self.in_flight:
            await self._send(method, silo, items)
            return
        key = (method, silo)
        self._flying[key] = self._flying.get(key, 0) + 1
        try:
            await self._send(method, silo, items)
        finally:
            self._flying[key] -= 1
            held = self._held.pop(key, None)
            if held:
                self._queued.setdefault(method, []).extend(held)
                self._arm()

    async def _send(self, method: str, silo: str | None, items: list[_Item]) -> None:
        if silo is None:
            await self._again(method, items)  # no live owner yet: a peer takes the bucket once its owner's lease ran out
            return
        try:
            answers = await self._caller._at_silo(silo, "feature_call", method, [item[1] for item in items])
        except SiloRefused:
            await self._again(method, items)
            return
        except Exception as exc:  # lost on the way, or failed there: it may have been acted on
            # The owner may be gone for good and its buckets taken over: read them again next
            # time, or every later call goes to the dead owner (simulator seed 0, buckets kind).
            self._forget(silo)
            if method in READS and isinstance(exc, SiloLost):
                await self._again(method, items)
                return
            why = f"its bucket's owner {silo} did not answer ({exc!r})"
            resend = self.resends.get(method)
            if resend is not None and isinstance(exc, SiloLost):
                await self._again(method, [(key, resend(sent), future, tries, why)
                                           for key, sent, future, tries, _ in items])
                return
            for _, _, future, _, _ in items:
                _answer(future, ("lost", why))
            return
        again = []
        for item, answer in zip(items, answers, strict=True):
            if answer[0] == "not_owner":
                again.append(item)
            else:
                _answer(item[2], answer)
        if again:
            await self._again(method, again)

    async def _again(self, method: str, items: list[_Item]) -> None:
        """Send ``items`` again once the owners are read anew; nothing of them was done."""
        tries = max(item[3] for item in items) + 1
        if tries >= SEND_ATTEMPTS:
            _give_up(items, f"no owner of {items[0][0]!r}'s registry bucket answered")
            return
        await asyncio.sleep(min(_MAX_DELAY_S, 0.01 * 2 ** tries))
        self._owners.clear()
        self._queued.setdefault(method, []).extend((key, sent, future, tries, lost)
                                                   for key, sent, future, _, lost in items)
        self._arm()

    def _forget(self, silo: str) -> None:
        """Forget which buckets ``silo`` owns: it did not answer, and may have lost them."""
        self._owners = {n: owner for n, owner in self._owners.items() if owner != silo}

    async def _read_owners(self) -> None:
        owners: dict[int, str] = {}
        for head in await list_logs(self._store, BUCKET_PREFIX):
            parsed = parse_owner(head.metadata.get("owner", ""))
            number = head.base[len(BUCKET_PREFIX):]
            if parsed is not None and number.isdigit():
                owners[int(number)] = parsed[0]
        self._owners = owners


class RoutedPuts:
    """Puts sent to their buckets' owners, as they answer them (no cancel of a replaced generation:
    ``cluster.named.bucketclient`` adds that)."""

    def __init__(self, store: Store, caller: SiloCaller, buckets: int = BUCKETS) -> None:
        self.routed = Routed(store, caller, buckets)
        # A put lost with its owner may have been made: sent again, marked, to the bucket's next
        # owner, which answers it by its job id (made: that put) rather than in doubt.
        self.routed.resends["named_put"] = resent_put
        self.routed.in_flight["named_put"] = PUT_CALLS_IN_FLIGHT

    async def put(self, ask: PutRequest) -> tuple[Entry, ScheduledJob]:
        (result,) = await self.put_many([ask])
        if isinstance(result, BaseException):
            raise result
        return result

    async def put_many(self, asks: Sequence[PutRequest]) -> list[PutOutcome]:
        """Make every put of ``asks``; each one's result or error, in order."""
        answers = await self.routed.ask_many("named_put", [(ask.key, put_to_wire(ask)) for ask in asks])
        return [put_outcome(answer, ask) for answer, ask in zip(answers, asks, strict=True)]


def put_outcome(answer: Any, ask: PutRequest) -> PutOutcome:
    """What a put's answer means for its caller."""
    if answer[0] == "lost":
        return PutInDoubt(answer[1], ask.name)
    if answer[0] == "unavailable":
        return ClusterUnavailable(f"not put: {answer[1]}")
    return outcome_from_wire(answer, ask)


def _give_up(items: Sequence[_Item], why: str) -> None:
    """Answer ``items`` unsent: unavailable (nothing done), or lost if a send of one was lost (maybe done)."""
    for _, _, future, _, lost in items:
        _answer(future, ("unavailable", why) if lost is None else ("lost", f"{lost}; then {why}"))


def _answer(slot: _Slot, answer: Any) -> None:
    if not slot.done():
        slot.set_result(answer)
