"""The contract suite runs every test on each store: memory, file and Azure (Azurite)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

import storage

STORES = [
    pytest.param("memory", id="memory"),
    pytest.param("file", id="file"),
    pytest.param("azure", id="azure", marks=pytest.mark.azurite),
]

StoreUrl = Callable[..., str]


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> StoreUrl:
    """Build a URL for the store under test; ``max_blocks`` only where a store can mimic it."""

    def build(**query: int) -> str:
        suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
        if store_kind == "memory":
            return "memory://" + suffix
        if store_kind == "file":
            return f"file://{tmp_path / 'store'}" + suffix
        return str(request.getfixturevalue("azure_store_url")) + suffix

    return build


@pytest.fixture
async def store(store_url: StoreUrl) -> AsyncIterator[storage.Store]:
    async with storage.open_store(store_url()) as opened:
        yield opened
