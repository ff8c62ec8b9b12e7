"""Azure's clock read off the wire, or inside the SDK's pipeline (issue 29, point 3), on Azurite.

Azurite's ``Date`` header comes from this host's wall clock, so the true offset between the store's
clock and this host's is zero: a silo's store clock must never read ahead of this host's wall clock.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from azure.storage.blob.aio import BlobServiceClient

import storage
from storage import ServerTime, wireclock
from storage.azure import AzureStore
from tests import certs
from tests.azurite import Azurite

pytestmark = pytest.mark.azurite


async def test_an_azure_reading_tells_the_requests_flight_inside_the_call(azure_store_url: str) -> None:
    async with storage.open_store(azure_store_url) as store:
        for _ in range(5):
            called = time.monotonic_ns() // 1000
            reading = await store.server_time()
            returned = time.monotonic_ns() // 1000
            assert reading is not None
            # The SDK's work before sending and after the answer is outside the flight.
            assert reading.lead_us > 0 and reading.tail_us > 0
            sent, received = reading.in_flight(called, returned)
            assert called < sent <= received < returned
            # On Linux the answer's arrival is the kernel's stamp, not the event loop's instant.
            assert reading.timed_by == ("kernel" if sys.platform == "linux" else "loop")


class WireWatch:
    """A TCP relay between the SDK and Azurite, in the test's event loop, noting when each request's
    first bytes reach it and each answer's first bytes leave it (this host's monotonic clock, µs)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.requests: list[int] = []
        self.request_lines: list[bytes] = []  # "GET /account/container?restype=... HTTP/1.1"
        self.answers: list[int] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        up_r, up_w = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        await asyncio.gather(self._pipe(client_r, up_w, answer=False), self._pipe(up_r, client_w, answer=True))

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, answer: bool) -> None:
        # One call at a time: a request's bytes after the last answer start a new request, an
        # answer's bytes after a request not yet answered start its answer.
        while data := await source.read(65536):
            if (len(self.answers) < len(self.requests)) if answer else (len(self.requests) == len(self.answers)):
                (self.answers if answer else self.requests).append(time.monotonic_ns() // 1000)
                if not answer:
                    self.request_lines.append(data.split(b"\r\n", 1)[0])
            sink.write(data)
            await sink.drain()
        sink.close()


class EntraCredential:
    """Stands for DefaultAzureCredential: the store then reads the clock by Get Container
    Properties, as Get Account Information takes only a shared key or SAS."""

    async def close(self) -> None:
        pass


@pytest.mark.parametrize(("credential", "operation", "wire_clock", "aimed"), [
    (None, b"restype=account&comp=properties", True, False),
    (None, b"restype=account&comp=properties", True, True),
    (None, b"restype=account&comp=properties", False, False),
    (EntraCredential(), b"restype=container", True, True),
    (EntraCredential(), b"restype=container", False, False)])
async def test_an_azure_readings_flight_holds_the_request_and_answer_on_the_wire(
        azurite: Azurite, credential: EntraCredential | None, operation: bytes, wire_clock: bool, aimed: bool) -> None:
    """Where a flight began after its request was on the wire, or ended before the answer was, the
    store could have read its clock outside it: the silo's low bound would sit above the truth
    and jobs would fire early. A relay on the way notes both, for readings at any phase, read off
    the wire (kernel stamps, aimed at an instant or not) or by the SDK's hooks."""
    watch = WireWatch(azurite.port)
    client = BlobServiceClient.from_connection_string(Azurite(port=await watch.start()).connection_string,
                                                      **AzureStore.client_options())
    async with AzureStore(client, f"ts-{uuid.uuid4().hex[:20]}", credential=credential, wire_clock=wire_clock) as store:
        await store.server_time()  # creates the container: several calls, not one flight
        assert operation in watch.request_lines[-1]
        for _ in range(20):
            await asyncio.sleep(random.random() / 50)
            first_request = len(watch.requests)
            called = time.monotonic_ns() // 1000
            send_at = called + random.randrange(20_000)
            reading = await (store.server_time_near(send_at / 1e6) if aimed else store.server_time())
            returned = time.monotonic_ns() // 1000
            assert reading is not None
            assert reading.timed_by == (("kernel" if sys.platform == "linux" else "loop") if wire_clock else "sdk")
            sent, received = reading.in_flight(called, returned)
            assert len(watch.requests) == first_request + 1 and len(watch.answers) == len(watch.requests)
            assert sent <= watch.requests[-1] and watch.answers[-1] <= received
            if aimed:  # on the wire at the instant asked, not before (the loop may make it a little late);
                # the flight's start is that instant less the µs the call took to note its own start
                assert send_at <= watch.requests[-1] and send_at - 1_000 <= sent
    assert watch.server is not None
    watch.server.close()


def test_the_clocks_lead_never_errs_high_so_an_arrival_is_never_moved_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lead moves the kernel's stamp of an answer's arrival onto the monotonic clock; a lead
    too high would put the arrival before it happened, and jobs would fire early by as much.
    Here the thread is held up just before each read of the wall clock (under ``PAIR_NS``)."""
    real_wall = time.time_ns
    reads: list[tuple[int, int]] = []

    def late_wall() -> int:
        until = time.monotonic_ns() + 8_000
        while time.monotonic_ns() < until:
            pass
        mono = time.monotonic_ns()  # the monotonic clock at or before the wall's read
        reads.append((real_wall(), mono))
        return reads[-1][0]

    monkeypatch.setattr(wireclock, "_wall_ns", late_wall)
    leads = [(lead, reads[-1]) for _ in range(200) if (lead := wireclock._lead()) is not None]
    assert len(leads) > 100, "the two clocks' reads were never close enough to pair"
    for (lead, _), (wall, mono) in leads:
        assert lead <= wall - mono  # the true lead at the wall's read is at most this


async def read_with_wall(url: str, monkeypatch: pytest.MonkeyPatch, wall: Callable[[], int]
                         ) -> tuple[ServerTime, int, int]:
    """One reading of the store's clock with the wire clock reading ``wall`` for the wall clock,
    and the monotonic µs just before and after the call."""
    async with storage.open_store(url) as store:
        await store.server_time()  # creates the container
        monkeypatch.setattr(wireclock, "_wall_ns", wall)
        before = time.monotonic_ns() // 1000
        reading = await store.server_time()
        after = time.monotonic_ns() // 1000
    assert reading is not None
    return reading, before, after


async def test_a_thread_switch_between_the_two_clocks_reads_is_not_taken_for_a_step(
        azure_store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy host (CI, a silo firing jobs beside other threads) the process can lose the CPU or
    the GIL between reading the wall clock and the monotonic one. Taken for a wall clock step, it
    threw the kernel's stamp away and jobs fired by the loop's later instant (seen in CI). Here
    the first read of the wall clock in the exchange is held up 2 ms. (Kernel stamps are read on
    Linux only; elsewhere the loop's instant times the reading, and the offset must still hold.)"""
    real_wall = time.time_ns
    held = False

    def slow_once() -> int:  # the thread loses the CPU right after reading the wall clock, once
        nonlocal held
        wall = real_wall()
        if not held:
            held = True
            until = time.monotonic_ns() + 2_000_000
            while time.monotonic_ns() < until:
                pass
        return wall

    reading, before, after = await read_with_wall(azure_store_url, monkeypatch, slow_once)
    truth = time.time_ns() // 1000 - time.monotonic_ns() // 1000
    assert held and reading.timed_by == ("kernel" if sys.platform == "linux" else "loop")
    sent, received = reading.in_flight(before, after)
    assert reading.at_us - received <= truth <= reading.at_us + reading.resolution_us - sent


async def test_a_wall_clock_step_during_a_reading_leaves_the_kernels_stamp_unused(
        azure_store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel stamps arrivals on the wall clock; moved onto the monotonic clock across a step,
    an arrival would seem a second earlier than it was, the flight would end before the store
    read its clock, and jobs would fire a second early. A step seen during the exchange keeps
    the event loop's own instant, which is later than the arrival."""
    real_wall = time.time_ns
    calls = 0

    def stepping_wall() -> int:  # this host's wall clock is stepped 1 s back during the exchange
        nonlocal calls
        calls += 1
        return real_wall() - (1_000_000_000 if calls > 1 else 0)

    reading, before, after = await read_with_wall(azure_store_url, monkeypatch, stepping_wall)
    assert reading.timed_by == "loop"
    sent, received = reading.in_flight(before, after)
    # Noted after the answer was read, never a second before the call returned.
    assert after - received < 100_000



@pytest.fixture
def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate (and its key) for 127.0.0.1, as Azurite needs to serve HTTPS."""
    return certs.self_signed(tmp_path)


async def test_an_azure_reading_over_https_holds_the_true_offset(
        self_signed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Azure is reached over HTTPS: the wire clock runs TLS itself over its raw socket (so the
    kernel's stamps stay readable) and must still bound the offset by the answer's arrival.
    Azurite's Date is this host's wall clock: each reading's interval must hold wall - monotonic."""
    cert, key = self_signed
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the wire clock's default TLS context trusts it
    with Azurite(tls=(cert, key)) as azurite:
        client = BlobServiceClient.from_connection_string(azurite.connection_string, connection_verify=str(cert),
                                                          **AzureStore.client_options())
        async with AzureStore(client, f"ts-{uuid.uuid4().hex[:20]}") as store:
            await store.server_time()  # creates the container
            for _ in range(10):
                await asyncio.sleep(random.random() / 5)
                called = time.monotonic_ns() // 1000
                reading = await store.server_time()
                returned = time.monotonic_ns() // 1000
                truth = time.time_ns() // 1000 - time.monotonic_ns() // 1000
                assert reading is not None
                assert reading.timed_by == ("kernel" if sys.platform == "linux" else "loop")
                sent, received = reading.in_flight(called, returned)
                assert called < sent <= received < returned
                assert reading.at_us - received <= truth <= reading.at_us + reading.resolution_us - sent


async def test_a_silo_reading_azurites_clock_in_aimed_rounds_never_runs_ahead_of_it(azure_store_url: str) -> None:
    """The silo's own loop on Azurite (rounds of three aimed readings, off the wire): its store
    clock never reads ahead of Azurite's (this host's wall clock) and narrows well below a second."""
    from cluster.model.clock import SYSTEM_CLOCK
    from cluster.model.options import ClusterOptions
    from cluster.runtime.metrics import SiloMetrics
    from cluster.runtime.skew import Skew

    async with storage.open_store(azure_store_url) as store:
        skew = Skew(store, ClusterOptions(heartbeat_interval="200ms"), SYSTEM_CLOCK, SiloMetrics("t"), "t")
        await skew.sample()
        loop = asyncio.create_task(skew.run())
        try:
            deadline = time.monotonic() + 4.0
            while time.monotonic() < deadline:
                await asyncio.sleep(0.003)
                assert skew.clock.now_us() <= time.time_ns() // 1000
        finally:
            loop.cancel()
        report = skew.report()
    assert report["aimed"] is True and report["timed_by"] == ("kernel" if sys.platform == "linux" else "loop")
    assert report["width_s"] < 0.1
