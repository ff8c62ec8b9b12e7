"""Puts sent to their registry bucket's owner (opt-in ``named_registry="experimental-buckets"``, issue 25 point 5).

The client side of ``cluster.named.buckets``: each put goes to the silo that owns its name's
bucket, the puts of one event-loop tick in one call per owner (as schedule calls coalesce). Who
owns which bucket is read from the bucket logs' metadata, and read again when a silo answers
that it does not own one (taken over meanwhile) or refuses the call (not started, stopping):
nothing was done then, so the put is sent again. A call lost on the way (the silo died) may have
landed: its puts raise ``PutInDoubt``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from cluster.model.errors import ClusterUnavailable, PutInDoubt
from cluster.model.jobs import ScheduledJob
from cluster.model.routing import SiloRefused
from cluster.named.bucket import BUCKET_PREFIX, BUCKETS, bucket_of
from cluster.named.buckets import NotOwner, PutOutcome, outcome_from_wire, put_to_wire
from cluster.named.registry import Entry
from cluster.named.writes import PutRequest
from cluster.runtime.membership import parse_owner
from storage import Store, list_logs

__all__ = ["RoutedPuts", "SiloCaller"]

log = logging.getLogger("timeshard.named")

SEND_ATTEMPTS = 40  # sends of one put while owners change or refuse (backing off up to 1 s)
_MAX_DELAY_S = 1.0


class SiloCaller(Protocol):
    """One call to one silo, never retried elsewhere: ``SiloRefused`` (nothing done) or
    ``SiloLost`` (done or not) as ``cluster.model.routing`` tells them apart."""

    async def _at_silo(self, silo_id: str, method: str, *args: Any) -> Any: ...


class RoutedPuts:
    """Sends puts to their buckets' owners, coalesced per tick (see the module docstring)."""

    def __init__(self, store: Store, caller: SiloCaller, buckets: int = BUCKETS) -> None:
        self._store = store
        self._caller = caller
        self._buckets = buckets
        self._owners: dict[int, str] = {}  # bucket -> the silo id its log names as owner
        self._queued: list[tuple[PutRequest, asyncio.Future[PutOutcome], int]] = []
        self._armed = False
        self._sends: set[asyncio.Task[None]] = set()

    async def put(self, ask: PutRequest) -> tuple[Entry, ScheduledJob]:
        (result,) = await self.put_many([ask])
        if isinstance(result, BaseException):
            raise result
        return result

    async def put_many(self, asks: Sequence[PutRequest]) -> list[PutOutcome]:
        """Make every put of ``asks`` (distinct names); each one's result or error, in order."""
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in asks]
        self._queued += [(ask, future, 0) for ask, future in zip(asks, futures, strict=True)]
        self._arm()
        return list(await asyncio.gather(*futures))

    def _arm(self) -> None:
        if not self._armed and self._queued:
            self._armed = True
            asyncio.get_running_loop().call_soon(self._start)  # one tick: callers of this one join

    def _start(self) -> None:
        self._armed = False
        queued, self._queued = self._queued, []
        task = asyncio.get_running_loop().create_task(self._route(queued))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _route(self, queued: list[tuple[PutRequest, asyncio.Future[PutOutcome], int]]) -> None:
        if any(bucket_of(ask.key, self._buckets) not in self._owners for ask, _, _ in queued):
            try:
                await self._read_owners()
            except Exception as exc:
                for _, future, _ in queued:
                    _answer(future, ClusterUnavailable(f"not put: its registry bucket's owner is unknown ({exc!r})"))
                return
        by_silo: dict[str | None, list[tuple[PutRequest, asyncio.Future[PutOutcome], int]]] = {}
        for one in queued:
            by_silo.setdefault(self._owners.get(bucket_of(one[0].key, self._buckets)), []).append(one)
        await asyncio.gather(*(self._send(silo, puts) for silo, puts in by_silo.items()))

    async def _send(self, silo: str | None, puts: list[tuple[PutRequest, asyncio.Future[PutOutcome], int]]) -> None:
        if silo is None:
            await self._again(puts)  # no live owner yet: a peer takes the bucket once its owner's lease ran out
            return
        try:
            answers = await self._caller._at_silo(silo, "feature_call", "named_put", [put_to_wire(a) for a, _, _ in puts])
        except SiloRefused:
            await self._again(puts)
            return
        except Exception as exc:  # lost on the way, or failed there: it may have landed
            for ask, future, _ in puts:
                _answer(future, PutInDoubt(f"its bucket's owner {silo} did not answer ({exc!r})", ask.name))
            return
        again = []
        for (ask, future, tries), answer in zip(puts, answers, strict=True):
            outcome = outcome_from_wire(answer, ask)
            if isinstance(outcome, NotOwner):
                again.append((ask, future, tries))
            else:
                _answer(future, outcome)
        if again:
            await self._again(again)

    async def _again(self, puts: list[tuple[PutRequest, asyncio.Future[PutOutcome], int]]) -> None:
        """Send ``puts`` again once the owners are read anew; nothing of them was done."""
        tries = max(t for _, _, t in puts) + 1
        if tries >= SEND_ATTEMPTS:
            for ask, future, _ in puts:
                _answer(future, ClusterUnavailable(f"not put: no owner of {ask.name!r}'s registry bucket answered"))
            return
        await asyncio.sleep(min(_MAX_DELAY_S, 0.01 * 2 ** tries))
        self._owners.clear()
        self._queued += [(ask, future, tries) for ask, future, _ in puts]
        self._arm()

    async def _read_owners(self) -> None:
        owners: dict[int, str] = {}
        for head in await list_logs(self._store, BUCKET_PREFIX):
            parsed = parse_owner(head.metadata.get("owner", ""))
            number = head.base[len(BUCKET_PREFIX):]
            if parsed is not None and number.isdigit():
                owners[int(number)] = parsed[0]
        self._owners = owners


def _answer(future: asyncio.Future[PutOutcome], outcome: PutOutcome) -> None:
    if not future.done():
        future.set_result(outcome)
