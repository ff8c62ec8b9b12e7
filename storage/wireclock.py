"""Azure's clock read off the wire: the instants a clock request left and its answer arrived,
stamped by this host's kernel, not by the event loop (issue 29, point 3).

A reading of the store's clock bounds the offset by the request's flight, and jobs fire by its
low end, ``Date - answer arrived``: every µs between the answer reaching this host and the code
noting it makes jobs that much later. Inside the SDK's pipeline that is aiohttp's parsing and the
event loop's queue (1-10 ms on a silo busy firing jobs). So the clock request is still built and
signed by the SDK (any credential: shared key, SAS, Microsoft Entra ID), but sent by
``WireClockTransport`` on a connection of its own: it notes the monotonic clock just before
writing the request, and takes the answer's arrival from the kernel's receive timestamp
(``SO_TIMESTAMPNS``) of the segment that brought its first bytes. That timestamp is on the wall
clock: it is moved onto the monotonic clock by the two clocks' difference read around the
exchange, and dropped (the loop's own instant kept) if that difference moved by more than
``STEP_NS`` meanwhile, i.e. the wall clock was stepped. Each difference is read between two
monotonic readings and read again if they are far apart: a thread switch between the two clocks'
reads (the GIL, a busy host) would otherwise look like a step.

A caller that aims its reading (the store should read its clock right at a tick of its coarse
clock, ``cluster.model.skew``) sets ``SEND_AT``: the connection is made first, then the request
waits for that instant, the last ``SPIN`` of it spinning, since a busy loop's timers wake ms late.

The answer is handed out of the pipeline by raising ``Answered`` (the SDK's response handling
would only add time); the caller catches it. HTTPS runs TLS over the raw socket through memory
BIOs, so the receive timestamps stay readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import sys
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from azure.core.pipeline.transport import AsyncHttpTransport

#: Linux's SO_TIMESTAMPNS (Python does not name it); other systems keep the loop's instant.
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None)
#: How far the wall clock may move against the monotonic one during an exchange before the
#: kernel's stamp is not trusted: slewing moves it by < 1 µs per ms, a step by far more.
STEP_NS = 50_000
#: The monotonic instant (seconds) the next clock request in this context should leave at, if any.
SEND_AT: ContextVar[float | None] = ContextVar("timeshard_clock_send_at", default=None)
#: The end of a wait for ``SEND_AT`` is spun, not slept (seconds); a wait longer than
#: ``MAX_WAIT`` is not a plausible aim and is not waited for.
SPIN = 0.001
MAX_WAIT = 1.0
#: A wall clock reading is paired with the monotonic one only if the monotonic readings around
#: it are at most this far apart (ns); ``PAIR_TRIES`` tries, then no pair (the loop's instant).
PAIR_NS = 20_000
PAIR_TRIES = 5
_HEAD_LIMIT = 64 * 1024
_wall_ns = time.time_ns  # the clock the kernel stamps are on (a test steps it)
_ANCILLARY = socket.CMSG_SPACE(16)


@dataclass(frozen=True)
class WireAnswer:
    """One exchange: the answer's status and ``Date``, and (monotonic ns) when the request's first
    byte was handed to the kernel and when the answer's first bytes arrived."""

    status: int
    date: str
    sent_ns: int
    arrived_ns: int
    kernel_stamped: bool


class Answered(Exception):  # noqa: N818  control flow, not an error: carries the answer out of the pipeline
    def __init__(self, answer: WireAnswer) -> None:
        super().__init__(f"HTTP {answer.status}")
        self.answer = answer


class WireClockTransport(AsyncHttpTransport):  # type: ignore[type-arg]
    """An azure-core transport for clock requests only: one exchange per request on a fresh
    connection, answered by raising ``Answered``. Requests must carry no body."""

    def __init__(self, timeout: float = 10.0, ssl_context: ssl.SSLContext | None = None) -> None:
        self._timeout = timeout
        self._ssl = ssl_context

    async def send(self, request: Any, **kwargs: Any) -> Any:
        if request.data or request.files:
            raise ValueError("the wire clock sends requests without a body only")
        answer = await asyncio.wait_for(self._exchange(request.method, request.url, dict(request.headers)),
                                        self._timeout)
        raise Answered(answer)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def __aenter__(self) -> WireClockTransport:
        return self

    async def __aexit__(self, *args: object) -> None:
        pass

    async def _exchange(self, method: str, url: str, headers: dict[str, str]) -> WireAnswer:
        parts = urlsplit(url)
        tls = parts.scheme == "https"
        host = parts.hostname or ""
        port = parts.port or (443 if tls else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = {k: v for k, v in headers.items() if k.lower() not in ("host", "connection")}
        head = "".join([f"{method} {target} HTTP/1.1\r\nHost: {parts.netloc.rpartition('@')[2]}\r\n",
                        *(f"{k}: {v}\r\n" for k, v in headers.items()), "Connection: close\r\n\r\n"])
        sock = await _connect(host, port)
        try:
            wire = _Tls(sock, self._ssl or ssl.create_default_context(), host) if tls else _Plain(sock)
            await wire.handshake()
            await _wait_until(SEND_AT.get())
            return await _ask(wire, head.encode("latin-1"))
        finally:
            sock.close()


async def _wait_until(send_at: float | None) -> None:
    if send_at is None or send_at - time.monotonic() > MAX_WAIT:
        return
    if (delay := send_at - time.monotonic() - SPIN) > 0:
        await asyncio.sleep(delay)
    while time.monotonic() < send_at:
        pass


async def _connect(host: str, port: int) -> socket.socket:
    loop = asyncio.get_running_loop()
    family, kind, proto, _, address = (await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM))[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if SO_TIMESTAMPNS is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        await loop.sock_connect(sock, address)
    except BaseException:
        sock.close()
        raise
    return sock


def _lead() -> tuple[int, int] | None:
    """How far the wall clock is ahead of the monotonic one (ns), and the monotonic instant it
    was read at; None if no try read the two within ``PAIR_NS`` of each other.

    Taken against the monotonic reading after the wall's, the lead errs low, by at most
    ``PAIR_NS``: an arrival moved by it errs late, never early."""
    for _ in range(PAIR_TRIES):
        before = time.monotonic_ns()
        wall = _wall_ns()
        after = time.monotonic_ns()
        if after - before <= PAIR_NS:
            return wall - after, after
    return None


async def _ask(wire: _Plain | _Tls, request: bytes) -> WireAnswer:
    """Send ``request`` and read the answer's head; the instants around it as ``WireAnswer`` says."""
    lead_before = _lead()
    sent_ns = time.monotonic_ns()
    await wire.send(request)
    head = b""
    arrived_ns: int | None = None
    kernel = False
    while b"\r\n\r\n" not in head:
        data, stamp_ns = await wire.receive()
        if not data:
            raise ConnectionError("the store closed the connection before its answer's head ended")
        if arrived_ns is None:
            # The first bytes of the answer: the store read its clock before sending them.
            lead_now = _lead()
            mono_now = time.monotonic_ns() if lead_now is None else lead_now[1]
            arrived_ns, kernel = mono_now, False
            if (stamp_ns is not None and lead_before is not None and lead_now is not None
                    and abs(lead_now[0] - lead_before[0]) <= STEP_NS):
                arrived_ns, kernel = min(mono_now, max(sent_ns, stamp_ns - lead_now[0])), True
        head += data
        if len(head) > _HEAD_LIMIT:
            raise ConnectionError("the store's answer head is too long")
    status, date = _parse_head(head.split(b"\r\n\r\n", 1)[0])
    return WireAnswer(status, date, sent_ns, arrived_ns or time.monotonic_ns(), kernel)


def _parse_head(head: bytes) -> tuple[int, str]:
    lines = head.decode("latin-1").split("\r\n")
    fields = lines[0].split(" ", 2)
    if len(fields) < 2 or not fields[0].startswith("HTTP/") or not fields[1].isdigit():
        raise ConnectionError(f"not an HTTP answer: {lines[0][:80]!r}")
    date = ""
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "date":
            date = value.strip()
    return int(fields[1]), date


def _stamp(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive timestamp (wall-clock ns) of the data just read, if it gave one."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanos = struct.unpack("qq", data[:16])
            return int(seconds) * 1_000_000_000 + int(nanos)
    return None


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(sock.fileno(), wake)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


class _Plain:
    """The raw socket: bytes as they arrive, each read with its kernel timestamp."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.closed = False

    async def handshake(self) -> None:
        pass

    async def send(self, data: bytes) -> None:
        await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def read_raw(self) -> tuple[bytes, int | None]:
        loop = asyncio.get_running_loop()
        while True:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(65536, _ANCILLARY)
            except (BlockingIOError, InterruptedError):
                await _readable(loop, self.sock)
                continue
            self.closed = not data
            return data, _stamp(ancillary)

    async def receive(self) -> tuple[bytes, int | None]:
        return await self.read_raw()


class _Tls(_Plain):
    """TLS through memory BIOs over the raw socket: plaintext, with the timestamp of the read
    that let it be decrypted (never earlier than its first byte's arrival)."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, host: str) -> None:
        super().__init__(sock)
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_hostname=host)

    async def _flush(self) -> None:
        if pending := self._out.read():
            await super().send(pending)

    async def _feed(self) -> int | None:
        data, stamp = await self.read_raw()
        if data:
            self._in.write(data)
        else:
            self._in.write_eof()
        return stamp

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                await self._feed()
        await self._flush()

    async def send(self, data: bytes) -> None:
        self._tls.write(data)
        await self._flush()

    async def receive(self) -> tuple[bytes, int | None]:
        # Records that arrived before the answer (a session ticket) decrypt to nothing: their
        # timestamps are never the answer's.
        stamp: int | None = None
        while True:
            try:
                return self._tls.read(65536), stamp
            except ssl.SSLWantReadError:
                if self.closed:
                    return b"", stamp
                stamp = await self._feed()
            except ssl.SSLZeroReturnError:
                self.closed = True
                return b"", stamp
