"""``azure://<container>``: logs as Azure append blobs, fenced by ETag conditions.

One long-lived async ``BlobServiceClient``. The SDK's own retries are off: transient faults are
retried here, by ``with_retries``, so that the policy (and its ambiguity) is in one place. A
retried append whose first try landed comes back as ``Fenced``; ``LogWriter`` resolves that by
reading the tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

from azure.core import MatchConditions
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.storage.blob.aio import BlobClient, BlobServiceClient

from .base import (
    Appended,
    Fetched,
    LogInfo,
    LogPage,
    LogStat,
    RetryPolicy,
    ServerTime,
    Store,
    check_metadata,
    check_name,
    check_page,
    check_payload,
    page_start,
    with_retries,
)
from .errors import AlreadyExists, Fenced, LogFull, NotFound, StorageError, Transient
from .wireclock import SEND_AT, Answered, WireClockTransport

T = TypeVar("T")

#: Larger downloads are split by the SDK under If-Match and fail when an append lands between.
#: A log of up to this size is read in one request, into one bytes object: each 32 MiB range read
#: alone was copied twice more (the SDK's ``readall`` into a BytesIO, then the ranges joined),
#: a third of what a 150 MB shard's read cost here (issue 29).
MAX_READ = 256 * 1024 * 1024
_TRANSIENT_STATUS = {408, 429, 500, 502, 503, 504}
_RANGE_TOTAL = re.compile(r"/(\d+)$")
_PROXY_ENV = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_CLIENT_CACHE = 4096
_MARKER_CACHE = 4096
#: Blobs asked for per List Blobs call while looking for a page's start (the service's maximum).
_SCAN_BATCH = 5000
_SECOND_US = 1_000_000
#: How far a cached ``Date`` may lag the store's clock: Azurite renders Get Container Properties'
#: from a string Node renews by a timer, whose second turns over up to tens of ms late on a busy
#: host (49 ms seen). A lagging Date only lowers a reading's low side, which is what jobs fire by.
CACHED_DATE_LAG_US = 100_000
_CONTAINER = re.compile(r"[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}")


def check_container(name: str) -> str:
    """Azure container names: 3-63 lowercase letters, digits and single inner hyphens."""
    if not _CONTAINER.fullmatch(name):
        raise ValueError(
            f"container {name!r}: must be 3-63 characters of a-z, 0-9 and '-' "
            "(starting with a letter or digit, no '--')"
        )
    return name


def _quoted(etag: str) -> str:
    # Listing returns ETags bare while every other call quotes them; keep one form.
    return etag if etag.startswith('"') else f'"{etag}"'


def _etag(response: Mapping[str, Any]) -> str:
    # A write's response dict; the SDK types its values as str | datetime, whatever the key.
    return _quoted(response["etag"])


class AzureStore(Store):
    """Logs as append blobs in ``container``; created on first use if missing."""

    def __init__(
        self,
        client: BlobServiceClient,
        container: str,
        *,
        retry: RetryPolicy = RetryPolicy(),
        credential: Any = None,
        wire_clock: bool = True,
    ) -> None:
        # Every request is logged at INFO by the SDK; at our rates that drowns everything else.
        logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)
        self._client = client
        self._container = client.get_container_client(check_container(container))
        self._credential = credential
        self._retry = retry
        self._blobs: OrderedDict[str, BlobClient] = OrderedDict()
        # (prefix, last name of a page) -> (continuation marker, exact): where List Blobs resumes
        # for the page after it. See list_page.
        self._markers: OrderedDict[tuple[str, str], tuple[str | None, bool]] = OrderedDict()
        self._ready = False
        self._ready_lock = asyncio.Lock()
        # The clock is read on a connection of its own (storage.wireclock) unless asked not to, or
        # a proxy is set: that connection would not go through it.
        self._wire_clock = wire_clock and not any(os.environ.get(var) for var in _PROXY_ENV)
        self._clock_client: BlobServiceClient | None = None

    @classmethod
    def client_options(cls) -> dict[str, Any]:
        """Keyword arguments for ``BlobServiceClient``: no SDK retries, single-GET reads.

        Without a proxy in the environment, aiohttp is told not to look for one: it otherwise
        consults the environment in a worker thread on every request, a third of an append's
        client-side cost here.
        """
        return {
            "use_env_settings": any(os.environ.get(var) for var in _PROXY_ENV),
            "retry_total": 0,
            "connection_timeout": 10,
            "read_timeout": 60,
            "max_single_get_size": MAX_READ,
            "max_chunk_get_size": MAX_READ,
        }

    @property
    def aims_clock_reads(self) -> bool:  # type: ignore[override]
        return self._wire_clock

    @property
    def wire_clock(self) -> bool:
        """Whether the clock is read off the wire (``storage.wireclock``) rather than by the SDK's hooks."""
        return self._wire_clock

    @property
    def container(self) -> str:
        return str(self._container.container_name)

    def _blob(self, name: str) -> BlobClient:
        # Building a BlobClient builds a whole pipeline (~0.7 ms); a writer reuses one per log.
        blob = self._blobs.get(name)
        if blob is None:
            blob = self._blobs[name] = self._container.get_blob_client(check_name(name))
            if len(self._blobs) > _CLIENT_CACHE:
                self._blobs.popitem(last=False)
        else:
            self._blobs.move_to_end(name)
        return blob

    async def _ensure_container(self) -> None:
        async with self._ready_lock:
            if self._ready:
                return
            with contextlib.suppress(ResourceExistsError):
                await self._container.create_container()
            self._ready = True

    async def _call(self, what: str, name: str, op: Callable[[], Awaitable[T]]) -> T:
        async def attempt() -> T:
            try:
                if not self._ready:
                    await self._ensure_container()
                return await op()
            except HttpResponseError as exc:
                raise await self._translate(exc, what, name) from exc
            except (ServiceRequestError, ServiceResponseError, asyncio.TimeoutError, OSError) as exc:
                raise Transient(f"{what} {name!r}: {type(exc).__name__}: {exc}") from exc

        return await with_retries(attempt, self._retry, f"{what} {name!r}")

    async def _translate(self, exc: HttpResponseError, what: str, name: str) -> StorageError:
        # Set by the storage SDK on the errors it raises, absent on azure-core's own.
        code = str(getattr(exc, "error_code", None) or "")
        where = f"{what} {name!r}"
        if isinstance(exc, ResourceModifiedError) or code == "AppendPositionConditionNotMet":
            # Azure answers 412 also when the blob is gone; tell the two apart, a deleted log
            # is NotFound on every store.
            try:
                await self._blob(name).get_blob_properties()
            except ResourceNotFoundError:
                return NotFound(f"{where}: log not found")
            except HttpResponseError:
                pass
            return Fenced(f"{where}: the log changed since the ETag given (HTTP 412)")
        if code in ("BlockCountExceedsLimit", "MaxBlobSizeConditionNotMet"):
            return LogFull(f"{where}: {code}")
        if isinstance(exc, ResourceExistsError) and code == "BlobAlreadyExists":
            return AlreadyExists(f"{where}: log already exists")
        if isinstance(exc, ResourceNotFoundError):
            return NotFound(f"{where}: {code or 'not found'}")
        if isinstance(exc, ClientAuthenticationError) or exc.status_code == 403:
            return StorageError(f"{where}: authentication failed ({code}); check the connection string "
                                "(AZURE_STORAGE_CONNECTION_STRING or its file) or the DefaultAzureCredential setup")
        if exc.status_code in _TRANSIENT_STATUS:
            return Transient(f"{where}: HTTP {exc.status_code} {code}")
        return StorageError(f"{where}: HTTP {exc.status_code} {code}: {exc.reason}")

    async def create(self, name: str, metadata: Mapping[str, str]) -> str:
        md = check_metadata(metadata)
        blob = self._blob(name)

        async def op() -> str:
            result = await blob.create_append_blob(metadata=md, match_condition=MatchConditions.IfMissing)
            return _etag(result)

        return await self._call("create", name, op)

    async def list(self, prefix: str = "") -> list[LogInfo]:
        async def op() -> list[LogInfo]:
            return [
                LogInfo(props.name, dict(props.metadata or {}), _quoted(props.etag))
                async for props in self._container.list_blobs(name_starts_with=prefix or None, include=["metadata"])
            ]

        return sorted(await self._call("list", prefix, op))

    async def names(self, prefix: str = "") -> tuple[str, ...]:
        async def op() -> list[str]:
            # Without metadata: 5,000 names a call, and a far smaller answer to parse.
            return [name async for name in self._container.list_blob_names(name_starts_with=prefix or None)]

        return tuple(sorted(await self._call("list", prefix, op)))

    async def list_page(self, prefix: str = "", *, after: str | None = None, limit: int) -> LogPage:
        """One page of ``list(prefix)`` after ``after``, by List Blobs' continuation markers.

        Why markers: List Blobs has no documented "names after X" besides its ``marker``, which
        is opaque (on Azure it is an encoded position, not a name; Azurite happens to use the
        last name, which nothing promises). The newer ``startFrom`` parameter needs a service
        version Azurite 3.35 does not implement: it ignores it silently and lists from the start
        (checked against 3.35.0). So each page's end is remembered with the marker that resumes
        after it, and the next page, asked with that name as ``after``, is one call reading only
        its own blobs. ``exact``: the marker resumes right after that name; otherwise it resumes
        at or before it (the page ended inside the service's batch) and the names up to ``after``
        are skipped. A page cut inside a batch asks for that batch's names again, cut at its last
        name, for an exact marker: one more call, after which paging on is one call a page again.
        A cursor this store has not handed out (another process, a restart) starts from the prefix with ``startFrom=after`` as a hint: a service honouring it starts there,
        one ignoring it costs a scan of the names before ``after``, 5,000 a call. Every name is
        compared with ``after`` either way, so the hint never changes the answer.
        """
        check_page(prefix, after, limit)
        after, empty = page_start(prefix, after)
        if empty:
            return LogPage((), None)
        resume = None if after is None else self._markers.get((prefix, after))
        marker, exact = resume if resume is not None else (None, after is None)

        async def op() -> LogPage:
            infos: list[LogInfo] = []
            at, precise = marker, exact
            while True:
                size = limit - len(infos) if precise else _SCAN_BATCH
                hint = after if at is None else None
                pages: Any = self._container.list_blobs(  # AsyncPageIterator: typed without its marker
                    name_starts_with=prefix or None, include=["metadata"], results_per_page=size, start_from=hint,
                ).by_page(continuation_token=at)
                batch = [LogInfo(p.name, dict(p.metadata or {}), _quoted(p.etag)) async for p in await anext(pages)]
                following: str | None = pages.continuation_token or None
                fresh = [info for info in batch if after is None or info.name > after]
                room = limit - len(infos)
                infos += fresh[:room]
                if len(fresh) > room:
                    # The page ends inside this batch: ask the same batch again, cut after the
                    # page's last name (names only), for a marker that resumes exactly there.
                    cut = batch.index(infos[-1]) + 1
                    again: Any = self._container.list_blobs(
                        name_starts_with=prefix or None, results_per_page=cut, start_from=hint,
                    ).by_page(continuation_token=at)
                    names = [p.name async for p in await anext(again)]
                    exact_after = names[-1] == infos[-1].name if names else False
                    self._remember(prefix, infos[-1].name, again.continuation_token if exact_after else at, exact_after)
                    return LogPage(tuple(infos), infos[-1].name)
                if following is None:
                    return LogPage(tuple(infos), None)
                if len(infos) == limit:
                    self._remember(prefix, infos[-1].name, following, True)
                    return LogPage(tuple(infos), infos[-1].name)
                # Past ``after`` now: every later name belongs to the page, so ask for no more.
                at, precise = following, precise or bool(batch) and (after is None or batch[-1].name > after)

        return await self._call("list", prefix, op)

    def _remember(self, prefix: str, name: str, marker: str | None, exact: bool) -> None:
        self._markers[(prefix, name)] = (marker, exact)
        self._markers.move_to_end((prefix, name))
        if len(self._markers) > _MARKER_CACHE:
            self._markers.popitem(last=False)

    async def stat(self, name: str) -> LogStat:
        blob = self._blob(name)

        async def op() -> LogStat:
            props = await blob.get_blob_properties()
            return LogStat(name, dict(props.metadata or {}), _quoted(props.etag), int(props.size),
                           int(props.append_blob_committed_block_count or 0))

        return await self._call("stat", name, op)

    async def set_metadata(self, name: str, metadata: Mapping[str, str], if_match: str | None) -> str:
        md = check_metadata(metadata)
        blob = self._blob(name)

        async def op() -> str:
            if if_match is None:
                result = await blob.set_blob_metadata(md)
            else:
                result = await blob.set_blob_metadata(md, etag=if_match, match_condition=MatchConditions.IfNotModified)
            return _etag(result)

        return await self._call("set_metadata", name, op)

    async def append_block(self, name: str, payload: bytes, if_match: str) -> Appended:
        check_payload(name, payload)
        blob = self._blob(name)

        async def op() -> Appended:
            # The SDK types the response's values as str | datetime | int, whatever the key.
            result: dict[str, Any] = await blob.append_block(payload, etag=if_match, match_condition=MatchConditions.IfNotModified)
            size = int(result["blob_append_offset"]) + len(payload)
            return Appended(_etag(result), size, int(result["blob_committed_block_count"]))

        return await self._call("append", name, op)

    async def fetch(self, name: str, offset: int = 0) -> Fetched:
        blob = self._blob(name)

        async def op() -> Fetched:
            parts: list[bytes] = []
            pos = offset
            while True:
                try:
                    stream = await blob.download_blob(offset=pos, length=MAX_READ)
                except HttpResponseError as exc:
                    if exc.status_code != 416:
                        raise
                    # Real Azure refuses a range starting at the end (Azurite answers b"", but
                    # refuses any range of an empty blob).
                    props = await blob.get_blob_properties()
                    if props.size > pos:
                        continue  # appended to since the refusal (a drill's watcher met it): read on
                    if props.size < pos:
                        raise StorageError(f"read {name!r} at {offset}: outside the body (size {props.size})") from exc
                    data, total = b"", pos
                else:
                    # The body as the SDK read it: ``readall`` copies it into a BytesIO first.
                    data = b"".join([chunk async for chunk in stream.chunks()])
                    props = stream.properties
                    match = _RANGE_TOTAL.search(str(props.content_range or ""))
                    total = int(match.group(1)) if match else pos + len(data)
                parts.append(data)
                pos += len(data)
                if pos >= total or not data:
                    return Fetched(b"".join(parts), _quoted(props.etag), dict(props.metadata or {}), pos,
                                   int(props.append_blob_committed_block_count or 0))

        return await self._call("read", name, op)

    async def delete(self, name: str, if_match: str | None) -> None:
        blob = self._blob(name)

        async def op() -> None:
            if if_match is None:
                await blob.delete_blob()
            else:
                await blob.delete_blob(etag=if_match, match_condition=MatchConditions.IfNotModified)

        await self._call("delete", name, op)

    async def server_time(self) -> ServerTime | None:
        """The ``Date`` header of a Get Account Information answer (one-second resolution), or of
        Get Container Properties under Microsoft Entra ID, which the former does not take.

        Azurite renders Get Container Properties' ``Date`` from Node's cached string, renewed by a
        timer that turns it over a few ms late on a busy host; Get Account Information's is the
        request's own arrival. The request is signed by the SDK and sent on a connection of its own,
        its answer's arrival stamped by the kernel (``storage.wireclock``); with ``wire_clock=False``
        or a proxy, the instants come from the SDK's per-request hooks instead (a few ms later on a
        busy loop). Either way, the call around them signs the request, parses the answer and
        waits for the event loop, none of which the store's clock can be read in
        (``ServerTime.in_flight``).
        """
        began = time.monotonic_ns()
        if self._wire_clock:
            reading, flight, timed_by = await self._call("server_time", self.container, self._wire_time)
        else:
            reading, flight, timed_by = await self._call("server_time", self.container, self._hooked_time)
        ended = time.monotonic_ns()
        if flight is None:  # the hooks did not both run for the answer read: keep the whole call
            return reading
        return dataclasses.replace(reading, lead_us=(flight[0] - began) // 1000, tail_us=(ended - flight[1]) // 1000,
                                   timed_by=timed_by)

    async def server_time_near(self, send_at: float) -> ServerTime | None:
        """``server_time``, its request sent at monotonic ``send_at`` (when that is less than a
        second away): connected first, then waiting for that instant."""
        token = SEND_AT.set(send_at)
        try:
            return await self.server_time()
        finally:
            SEND_AT.reset(token)

    def _read_clock(self, container: Any) -> Callable[..., Awaitable[Any]]:
        read: Callable[..., Awaitable[Any]] = (
            container.get_container_properties if self._credential is not None else container.get_account_information)
        return read

    def _reading(self, date: str) -> ServerTime:
        if not date:
            raise StorageError("server time: the answer carried no Date header")
        try:
            when = parsedate_to_datetime(date)
        except (TypeError, ValueError) as exc:
            raise StorageError(f"server time: unreadable Date header {date!r}") from exc
        if when.tzinfo is None:
            raise StorageError(f"server time: Date header {date!r} names no zone")
        # Only Get Container Properties' Date may be a cached string that lags (Azurite's).
        return ServerTime(int(when.timestamp()) * _SECOND_US, _SECOND_US,
                          lag_us=CACHED_DATE_LAG_US if self._credential is not None else 0)

    async def _hooked_time(self) -> tuple[ServerTime, tuple[int, int] | None, str]:
        flight: list[int] = []  # this try's instant of leaving, then of its answer arriving
        dates: list[str] = []

        def left(request: Any) -> None:
            flight[:] = [time.monotonic_ns()]

        def answered(response: Any) -> None:
            flight.append(time.monotonic_ns())
            dates.append(str(response.http_response.headers.get("Date", "")))

        await self._read_clock(self._container)(raw_request_hook=left, raw_response_hook=answered)
        return self._reading(dates[-1] if dates else ""), (flight[0], flight[1]) if len(flight) == 2 else None, "sdk"

    async def _wire_time(self) -> tuple[ServerTime, tuple[int, int] | None, str]:
        if self._clock_client is None:
            # The same account, credential and API version; only the transport differs.
            self._clock_client = BlobServiceClient(
                self._client.url, credential=self._client.credential, api_version=self._client.api_version,
                transport=WireClockTransport(), retry_total=0)
        try:
            await self._read_clock(self._clock_client.get_container_client(self.container))()
        except Answered as answered:
            answer = answered.answer
        else:  # pragma: no cover  the transport answers only by raising
            raise StorageError("server time: the wire clock gave no answer")
        if answer.status in _TRANSIENT_STATUS:
            raise Transient(f"server time: HTTP {answer.status}")
        if not 200 <= answer.status < 300:
            raise StorageError(f"server time: HTTP {answer.status} from the store")
        return (self._reading(answer.date), (answer.sent_ns, answer.arrived_ns),
                "kernel" if answer.kernel_stamped else "loop")

    async def close(self) -> None:
        if self._clock_client is not None:
            await self._clock_client.close()
        await self._client.close()
        if self._credential is not None:
            await self._credential.close()
