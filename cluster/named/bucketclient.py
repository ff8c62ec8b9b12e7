"""``client.jobs`` on registry buckets (``named_registry="buckets"``, the default; issue 25 point 5).

What a caller relies on, and how it holds here:

- **put**: the owner of the name's bucket decides and makes it durable (``Buckets.put_many``);
  an overwrite's owner cancels the generations the entry retires in its own shards before it
  answers (``OwnerCalls._retire_here``); this side cancels what the answer still lists through
  its shard's owner (following moves, ``try_cancel_job``) before ``put`` returns, so no attempt
  of an older generation starts after it (the fence: ``cluster.named.fence``, ``cluster.named.owned``).
  Confirmed cancels leave the entry's list in the background (a list left behind is only
  cancelled again by the next put or delete of the name).
- **delete**: read the entry, cancel what it names, then delete it at the owner only while it
  still names the job cancelled and lists nothing else to retire (else cancel the newer ones
  too and ask again), and cancel it all once more (a shard loaded in between from a log whose
  REMOVE was damaged has it live and cleared); once ``delete`` returned, nothing it named starts again.
- **trigger**: the run is admitted at its start by the bucket's owner, which lists it among the
  jobs the entry retires while the entry names its generation (``OwnerCalls.triggers``).
- **pause / resume**: the pause lives in the shard's log as with entries; the answer is
  mirrored in the name's status at the owner (a status change, as an attempt's).
- **get / list_page / count**: from the owners' memory of the durable entries, so a read after
  a put returned sees it. A page asks every bucket's owner for ``limit`` entries past the
  cursor and merges them by key.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cluster.model.errors import ClusterUnavailable, PutInDoubt
from cluster.model.ports import JobSubmitter
from cluster.named.attempts import WireChange
from cluster.named.bucket import BUCKETS
from cluster.named.putwire import PutOutcome
from cluster.named.registry import Entry, Retired
from cluster.named.routed import RoutedPuts, SiloCaller
from cluster.named.writes import PutRequest, locator
from storage import Store

__all__ = ["BucketNames", "DELETE_ATTEMPTS"]

DELETE_ATTEMPTS = 32  # rounds of one delete while puts keep replacing what it cancelled
PAGE = 1000  # entries per owner call when all of a prefix is read


class BucketNames(RoutedPuts):
    """Named jobs' writes and reads on registry buckets, for one event loop (module docstring)."""

    def __init__(self, store: Store, caller: SiloCaller, submitter: JobSubmitter, buckets: int = BUCKETS) -> None:
        super().__init__(store, caller, buckets)
        self._submitter = submitter
        self._tidying: set[asyncio.Task[Any]] = set()

    async def put_many(self, asks: Sequence[PutRequest]) -> list[PutOutcome]:
        """Make every put of ``asks``; each one's result or error, in order, once what each replaced is cancelled."""
        outcomes = await super().put_many(asks)
        # A task only per overwrite: one per put cost ~10 us (profiled) for nothing when it replaced none.
        retiring = [i for i, outcome in enumerate(outcomes) if not isinstance(outcome, BaseException) and outcome[0].retire]
        done = await asyncio.gather(*(self._retire(outcomes[i], asks[i]) for i in retiring))
        for i, outcome in zip(retiring, done, strict=True):
            outcomes[i] = outcome
        return outcomes

    async def _retire(self, outcome: PutOutcome, ask: PutRequest) -> PutOutcome:
        if isinstance(outcome, BaseException) or not outcome[0].retire:
            return outcome
        entry, job = outcome
        try:
            await self._cancel(entry.retire)
        except Exception as exc:
            return PutInDoubt(f"put, but an older generation's cancel failed: it may still start ({exc!r})", ask.name,
                              landed=True)
        self._tidy(entry.key, [r.job_id for r in entry.retire])
        return replace(entry, retire=()), job

    async def _cancel(self, retire: Sequence[Retired]) -> None:
        await asyncio.gather(*(self._submitter.try_cancel_job(locator(r.job_id, r.shard, r.due_us)) for r in retire))

    def _tidy(self, key: str, job_ids: list[str]) -> None:
        """Take ``job_ids`` (cancel confirmed) off the entry's list, without waiting."""
        task = asyncio.get_running_loop().create_task(self.routed.ask("named_retired", key, (key, job_ids)))
        self._tidying.add(task)
        task.add_done_callback(self._tidying.discard)

    async def delete(self, key: str, name: str) -> bool:
        """Delete the name ``key`` once what it names is cancelled; True if it existed."""
        entry = await self.get_entry(key)
        for _ in range(DELETE_ATTEMPTS):
            if entry is None:
                return False
            await self._cancel((entry.retired(), *entry.retire))
            # What was cancelled: the owner deletes only if the entry names nothing else (a
            # triggered run admitted meanwhile is listed to retire, and is cancelled next round).
            answer = await self.routed.ask("named_delete", key, (key, entry.job_id, [r.job_id for r in entry.retire]))
            if answer[0] in ("deleted", "absent"):
                await self._cancel_after_delete(entry, name)
                return True
            if answer[0] == "changed":
                entry = Entry.from_metadata(key, answer[1], "")
                continue
            raise _failure(answer, f"named job {name!r} may or may not be deleted")
        raise ClusterUnavailable(f"named job {name!r}: put again and again while being deleted; not deleted")

    async def _cancel_after_delete(self, entry: Entry, name: str) -> None:
        """Cancel what ``entry`` named once more, now that no entry names it. A silo that loaded
        a shard between the first cancel and the delete, its REMOVE lost to a damaged frame since
        (the README lets damage cost a frame's records), found the job live and the entry still
        naming it, and cleared it: only a cancel after the delete reaches that clearance
        (``job_cancelled``), as a put's cancel comes after its write (simulator seed 328446)."""
        try:
            await self._cancel((entry.retired(), *entry.retire))
        except Exception as exc:
            raise ClusterUnavailable(f"named job {name!r} deleted, but a cancel of what it named failed: "
                                     f"it may still start ({exc!r})") from exc

    async def get_entry(self, key: str) -> Entry | None:
        answer = await self.routed.ask("named_get", key, key)
        if answer[0] == "ok":
            return Entry.from_metadata(key, answer[1], "")
        if answer[0] == "none":
            return None
        raise _failure(answer, "the registry bucket's owner did not answer")

    async def page(self, start: str, after: str | None, limit: int) -> tuple[list[Entry], bool]:
        """At most ``limit`` entries whose keys start with ``start``, after key ``after``, in key
        order; and whether more follow."""
        answers = await self.routed.ask_all("named_page", start, after, limit)
        rows = sorted((row for found, _ in answers.values() for row in found), key=lambda row: row[0])
        more = len(rows) > limit or any(more for _, more in answers.values())
        return [Entry.from_metadata(key, metadata, "") for key, metadata in rows[:limit]], more

    async def entries(self, start: str) -> list[Entry]:
        """Every entry whose key starts with ``start``, in key order."""
        out: list[Entry] = []
        while True:
            page, more = await self.page(start, out[-1].key if out else None, PAGE)
            out += page
            if not more or not page:
                return out

    async def change_status(self, key: str, job_id: str, change: WireChange) -> None:
        """Apply ``change`` to the status of ``key`` while it names ``job_id`` (a pause mirrored), once durable."""
        answer = await self.routed.ask("named_status", key, (key, job_id, change))
        if answer[0] != "ok":
            raise _failure(answer, "the registry bucket's owner did not record the change")

    async def count(self, start: str) -> int:
        return sum((await self.routed.ask_all("named_count", start)).values())

    async def close(self) -> None:
        for task in list(self._tidying):
            with contextlib.suppress(Exception):
                await task


def _failure(answer: Any, what: str) -> Exception:
    if answer[0] == "lost":
        return ClusterUnavailable(f"{what}: {answer[1]}")
    return ClusterUnavailable(f"{what}: {answer[1] if len(answer) > 1 else answer[0]}")
