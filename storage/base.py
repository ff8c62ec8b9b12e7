"""The store interface every backend implements, and the pieces backends share."""

from __future__ import annotations

import asyncio
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import NamedTuple, TypeVar

from .errors import InvalidMetadata, RecordTooLarge, StorageError, Transient, Unavailable

#: The largest block one append may carry: Azure's append-block limit, applied to every store.
MAX_BLOCK_BYTES = 4 * 1024 * 1024
#: Blocks an Azure append blob holds; memory and file stores mimic it (configurable there).
AZURE_MAX_BLOCKS = 50_000
#: Azure caps the total size of a blob's metadata (names and values) at 8 KiB.
MAX_METADATA_BYTES = 8 * 1024

# Azure metadata names must be C# identifiers and are case-insensitive; lowercase only keeps
# every store round-tripping the same keys.
_KEY = re.compile(r"[a-z_][a-z0-9_]{0,62}")
# HTTP header values: printable ASCII, and Azure trims surrounding blanks.
_VALUE = re.compile(r"(?:[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?)?")

T = TypeVar("T")


class LogInfo(NamedTuple):
    """One log as ``list`` reports it; unpacks as ``name, metadata, etag``."""

    name: str
    metadata: dict[str, str]
    etag: str


@dataclass(frozen=True)
class LogPage:
    """One page of a listing: ``infos`` in lexical order of name, and the cursor to the next page.

    ``next`` is the name to pass as ``after`` for the following page; None when no log follows
    (on Azure a page may rarely be followed by an empty last one: the service may answer with a
    continuation marker and nothing behind it).
    """

    infos: tuple[LogInfo, ...]
    next: str | None


@dataclass(frozen=True)
class LogStat:
    """A log's properties at one ETag: metadata, body size in bytes and blocks appended."""

    name: str
    metadata: dict[str, str]
    etag: str
    size: int
    blocks: int


#: What ``write_metadata_many`` answers per write: the new ETag, None (deleted), or the error.
WriteOutcome = str | None | StorageError
WriteOutcomes = list[WriteOutcome]
#: What ``stat_many`` answers: per name, its ``LogStat`` or the error.
Stats = list[LogStat | StorageError]


class MetadataWrite(NamedTuple):
    """One write of ``Store.write_metadata_many``: create a log (``create``), replace its metadata
    while its ETag is ``if_match`` (None: whatever it is), or delete it (``metadata`` None)."""

    name: str
    metadata: Mapping[str, str] | None
    if_match: str | None = None
    create: bool = False


@dataclass(frozen=True)
class Appended:
    """What one append left behind: the new ETag, body size and block count."""

    etag: str
    size: int
    blocks: int


@dataclass(frozen=True)
class Fetched:
    """Bytes read from ``offset`` to the end, with the properties of the log at ``etag``."""

    data: bytes
    etag: str
    metadata: dict[str, str]
    size: int
    blocks: int


@dataclass(frozen=True)
class ServerTime:
    """The store's clock as one answer showed it: somewhere in ``[at_us, at_us + resolution_us)``.

    The reading was taken while the call was in flight, so a caller that notes its own clock
    before and after the call can bound the offset between the two clocks (``cluster.runtime
    .skew``). Azure's ``Date`` header has a resolution of one second.

    A store that sees its request leave and its answer arrive (Azure: inside the SDK's pipeline)
    says how much of the call lay outside that flight, on this host's monotonic clock:
    ``lead_us`` from the call's start to the request leaving, ``tail_us`` from the answer
    arriving to the call's return. The caller's bounds then narrow by both (``in_flight``): the
    SDK's own work and the event loop's delays no longer count as time the store may have read
    its clock in.
    """

    at_us: int
    resolution_us: int
    lead_us: int = 0
    tail_us: int = 0
    lag_us: int = 0  # how far the reading's Date may lag the store's clock (a cached header)
    #: How the flight was timed, for status(): "kernel" (the answer's arrival stamped by this
    #: host's kernel), "loop" (noted by the event loop), "sdk" (the SDK's per-request hooks) or "".
    timed_by: str = ""

    def in_flight(self, sent_us: int, received_us: int) -> tuple[int, int]:
        """The instants the request left and the answer arrived, from the caller's ``sent_us``
        (before the call) and ``received_us`` (after it), on a clock that ticks with the monotonic one.

        Kept inside ``[sent_us, received_us]``: a caller on another clock (a test's, which may not
        move during the call) gets its own instants back rather than a flight that ends before it began.
        """
        left = min(sent_us + max(self.lead_us, 0), received_us)
        return left, max(received_us - max(self.tail_us, 0), left)


@dataclass(frozen=True)
class RetryPolicy:
    """Capped exponential backoff with full jitter for transient faults.

    ``attempts`` counts every try; the wait before retry n is uniform in
    ``[0, min(cap, base * 2**n)]`` so that many clients hitting one fault spread out.
    """

    attempts: int = 8
    base: float = 0.05
    cap: float = 2.0

    def delay(self, retry: int) -> float:
        return random.uniform(0, min(self.cap, self.base * 2**retry))


async def with_retries(op: Callable[[], Awaitable[T]], policy: RetryPolicy, what: str) -> T:
    """Run ``op``, retrying ``Transient`` faults; raise ``Unavailable`` once attempts run out."""
    for retry in range(policy.attempts):
        try:
            return await op()
        except Transient as exc:
            if retry + 1 >= policy.attempts:
                raise Unavailable(f"{what}: store unavailable after {policy.attempts} attempts: {exc}") from exc
            await asyncio.sleep(policy.delay(retry))
    raise AssertionError("unreachable")


def check_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """Return a plain copy of ``metadata`` or raise ``InvalidMetadata`` naming the bad entry."""
    total = 0
    for key, value in metadata.items():
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise InvalidMetadata(f"metadata key {key!r}: must match [a-z_][a-z0-9_]* (at most 63 chars)")
        if not isinstance(value, str) or not _VALUE.fullmatch(value):
            raise InvalidMetadata(
                f"metadata[{key!r}] = {value!r}: must be printable ASCII without leading/trailing blanks"
            )
        total += len(key) + len(value)
    if total > MAX_METADATA_BYTES:
        raise InvalidMetadata(f"metadata: {total} bytes in all, more than the {MAX_METADATA_BYTES} allowed")
    return dict(metadata)


def check_payload(name: str, payload: bytes) -> None:
    """Reject empty payloads (they would not change the ETag) and blocks over 4 MiB."""
    if not payload:
        raise RecordTooLarge(f"append to {name!r}: payload is empty; an append must carry bytes")
    if len(payload) > MAX_BLOCK_BYTES:
        raise RecordTooLarge(f"append to {name!r}: {len(payload)} bytes, more than one block ({MAX_BLOCK_BYTES})")


def check_page(prefix: str, after: str | None, limit: int) -> None:
    """Reject a listing page that cannot be answered: ``limit`` must be an int of at least 1."""
    if not isinstance(prefix, str):
        raise ValueError(f"list_page prefix {prefix!r}: must be a str")
    if after is not None and not isinstance(after, str):
        raise ValueError(f"list_page after {after!r}: must be a str or None")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"list_page limit {limit!r}: must be an int of at least 1")


def page_start(prefix: str, after: str | None) -> tuple[str | None, bool]:
    """Where a page of ``prefix`` strictly after ``after`` starts: ``(after or None, empty)``.

    An ``after`` before every name of the prefix is no bound at all; one past them all (it does
    not start with the prefix and sorts after it) leaves nothing to list.
    """
    if after is None or after.startswith(prefix):
        return after, False
    return (None, False) if after < prefix else (after, True)


def page_of(infos: Sequence[LogInfo], limit: int) -> LogPage:
    """The page of the first ``limit`` of ``infos`` (sorted; one more shows that a next page exists)."""
    shown = tuple(infos[:limit])
    return LogPage(shown, shown[-1].name if len(infos) > limit else None)


def nested_below(name: str, prefix: str) -> bool:
    """Whether ``name`` has a ``/`` past the directory of ``prefix`` (``a/x/y`` under ``a/``)."""
    return "/" in name[prefix.rfind("/") + 1:]


def check_name(name: str) -> str:
    """Log names are non-empty printable text of at most 1024 characters (Azure's blob limit)."""
    if not isinstance(name, str) or not name or len(name) > 1024 or not name.isprintable():
        raise ValueError(f"log name {name!r}: must be 1..1024 printable characters")
    return name


class Store(ABC):
    """Named, fenced, append-only logs. Every write changes the log's ETag.

    Conditional writes take ``if_match``: the ETag the caller last saw. A stale one raises
    ``Fenced``; a missing log raises ``NotFound``. Use as ``async with open_store(url) as s``.
    """

    @abstractmethod
    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        """Create an empty log and return its ETag; ``AlreadyExists`` if the name is taken."""

    @abstractmethod
    async def list(self, prefix: str = "") -> list[LogInfo]:
        """Return every log whose name starts with ``prefix``, in lexical order of name."""

    async def names(self, prefix: str = "") -> tuple[str, ...]:
        """Return the names of the logs starting with ``prefix``, in lexical order, without metadata.

        This default lists them whole; the stores override it to skip reading metadata.
        """
        return tuple(info.name for info in await self.list(prefix))

    async def list_page(self, prefix: str = "", *, after: str | None = None, limit: int) -> LogPage:
        """Return at most ``limit`` logs whose name starts with ``prefix`` and sorts strictly after
        ``after``, in lexical order, with the cursor to the next page.

        This default lists the whole prefix (correct for any store, at the cost of ``list``);
        the stores override it to read only the page's metadata.
        """
        check_page(prefix, after, limit)
        after, empty = page_start(prefix, after)
        if empty:
            return LogPage((), None)
        infos = await self.list(prefix)
        return page_of([i for i in infos if after is None or i.name > after], limit)

    async def count(self, prefix: str = "", *, nested: bool = True) -> int:
        """Return how many logs start with ``prefix``, reading no metadata; with ``nested``
        False, only those with no ``/`` past the prefix's directory (``a/`` counts ``a/x``, not
        ``a/x/y``).

        This default counts ``names``; the file and memory stores keep counts and answer
        without listing (Azure lists the names, 5,000 a call).
        """
        return sum(1 for name in await self.names(prefix) if nested or not nested_below(name, prefix))



    @abstractmethod
    async def stat(self, name: str) -> LogStat:
        """Return the log's metadata, ETag, size and block count."""

    @abstractmethod
    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        """Replace all metadata (compare-and-swap on ``if_match``) and return the new ETag."""

    @abstractmethod
    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        """Append ``payload`` as one block if the ETag is still ``if_match``; report the result."""

    @abstractmethod
    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        """Read the body from ``offset`` to its end, with the properties matching those bytes."""

    @abstractmethod
    async def delete(self, name: str, if_match: str | None) -> None:
        """Delete the log (only if its ETag is still ``if_match``, unless that is None)."""

    @abstractmethod
    async def server_time(self) -> ServerTime | None:
        """The store's clock, read by one cheap call; None if the store shares the caller's clock."""

    #: Whether ``server_time_near`` sends its request at the instant asked; this default ignores it.
    aims_clock_reads: bool = False

    async def server_time_near(self, send_at: float) -> ServerTime | None:
        """``server_time``, its request sent as near as the store can to ``send_at`` (seconds on
        ``time.monotonic``): the caller aims the store's read at a tick of its coarse clock. This
        default ignores the aim."""
        return await self.server_time()

    async def stat_many(self, names: Sequence[str]) -> Stats:
        """``stat`` of each of ``names``, in order: its ``LogStat``, or the error (``NotFound``...).

        This default stats them concurrently; the file store reads them in one thread hop.
        """

        async def one(name: str) -> LogStat | StorageError:
            try:
                return await self.stat(name)
            except StorageError as exc:
                return exc

        return list(await asyncio.gather(*(one(name) for name in names)))

    async def write_metadata_many(self, writes: Sequence[MetadataWrite]) -> WriteOutcomes:
        """Make every write of ``writes`` (distinct names), each one alone; return, in order, the
        new ETag of each created or changed log, None for each deleted one, or the error that
        write met (``Fenced``, ``AlreadyExists``, ``NotFound``: it was not made; any other: it may
        have been). Nothing is atomic across writes: what they share is the cost (group commit).

        This default makes them concurrently; the file store shares its fsyncs among them.
        """
        if len({w.name for w in writes}) != len(writes):
            raise ValueError("write_metadata_many: a name appears twice")

        async def one(w: MetadataWrite) -> WriteOutcome:
            try:
                if w.metadata is None:
                    await self.delete(w.name, w.if_match)
                    return None
                if w.create:
                    return await self.create(w.name, w.metadata)
                return await self.set_metadata(w.name, w.metadata, w.if_match)
            except StorageError as exc:
                return exc

        return list(await asyncio.gather(*(one(w) for w in writes)))

    async def append(self, name: str, payload: bytes, if_match: str) -> str:
        """Append ``payload`` as one block if the ETag is still ``if_match``; return the new ETag."""
        return (await self.append_block(name, payload, if_match)).etag

    async def read(self, name: str, offset: int = 0) -> tuple[bytes, str]:
        """Return the body from ``offset`` to its end and the ETag those bytes belong to."""
        fetched = await self.fetch(name, offset)
        return fetched.data, fetched.etag

    async def close(self) -> None:  # noqa: B027  optional hook: stores holding nothing need not override it
        """Release connections and handles; the store is unusable afterwards."""

    async def __aenter__(self) -> Store:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
