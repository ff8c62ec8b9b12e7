"""Azure's clock read inside the SDK's pipeline (issue 29, point 3), on Azurite.

Azurite's ``Date`` header comes from this host's wall clock, so the true offset between the store's
clock and this host's is zero: a silo's store clock must never read ahead of this host's wall clock.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid

import pytest
from azure.storage.blob.aio import BlobServiceClient

import storage
from storage.azure import AzureStore
from tests.azurite import Azurite

pytestmark = pytest.mark.azurite


async def test_an_azure_reading_tells_the_requests_flight_inside_the_call(azure_store_url: str) -> None:
    async with storage.open_store(azure_store_url) as store:
        for _ in range(5):
            called = time.monotonic_ns() // 1000
            reading = await store.server_time()
            returned = time.monotonic_ns() // 1000
            assert reading is not None
            # Both hooks ran: the SDK's work before sending and after the answer is outside the flight.
            assert reading.lead_us > 0 and reading.tail_us > 0
            sent, received = reading.in_flight(called, returned)
            assert called < sent <= received < returned


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


@pytest.mark.parametrize(("credential", "operation"), [
    (None, b"restype=account&comp=properties"), (EntraCredential(), b"restype=container")])
async def test_an_azure_readings_flight_holds_the_request_and_answer_on_the_wire(
        azurite: Azurite, credential: EntraCredential | None, operation: bytes) -> None:
    """Where a flight began after its request was on the wire, or ended before the answer was, the
    store could have read its clock outside it: the silo's low bound would sit above the truth
    and jobs would fire early. A relay on the way notes both, for readings at any phase."""
    watch = WireWatch(azurite.port)
    client = BlobServiceClient.from_connection_string(Azurite(port=await watch.start()).connection_string,
                                                      **AzureStore.client_options())
    async with AzureStore(client, f"ts-{uuid.uuid4().hex[:20]}", credential=credential) as store:
        await store.server_time()  # creates the container: several calls, not one flight
        assert operation in watch.request_lines[-1]
        for _ in range(20):
            await asyncio.sleep(random.random() / 50)
            first_request = len(watch.requests)
            called = time.monotonic_ns() // 1000
            reading = await store.server_time()
            returned = time.monotonic_ns() // 1000
            assert reading is not None
            sent, received = reading.in_flight(called, returned)
            assert len(watch.requests) == first_request + 1 and len(watch.answers) == len(watch.requests)
            assert sent <= watch.requests[-1] and watch.answers[-1] <= received
    assert watch.server is not None
    watch.server.close()
