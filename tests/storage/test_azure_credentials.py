"""A wrong Azure credential is a StorageError that says so, on every call (Azurite)."""

from __future__ import annotations

import base64

import pytest

import storage
from storage.urls import CONNECTION_STRING_ENV
from tests.azurite import Azurite


@pytest.mark.parametrize("key", ["not base64!!", base64.b64encode(b"a wrong key of the right shape").decode()])
async def test_a_bad_account_key_is_a_storage_error_naming_the_credential(azurite: Azurite, key: str) -> None:
    good = azurite.connection_string
    bad = ";".join(f"AccountKey={key}" if part.startswith("AccountKey=") else part for part in good.split(";"))
    store = storage.open_store("azure://ts-bad-key", environ={CONNECTION_STRING_ENV: bad})
    try:
        for call in (store.list("shards/"), store.create("shards/x", {"owner": "-"}), store.stat("shards/x")):
            with pytest.raises(storage.StorageError) as info:
                await call
            assert "authentication failed" in str(info.value), info.value
    finally:
        await store.close()
