"""open_store: every accepted URL form, and errors that say what to set."""

from __future__ import annotations

from pathlib import Path

import pytest

import storage
from storage.azure import AzureStore


def test_memory_and_file_urls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(storage.open_store("memory://"), storage.MemoryStore)
    assert storage.open_store("memory://?max_blocks=7").max_blocks == 7  # type: ignore[attr-defined]
    absolute = storage.open_store(f"file://{tmp_path}")
    assert isinstance(absolute, storage.FileStore) and absolute.root == tmp_path
    monkeypatch.chdir(tmp_path)
    relative = storage.open_store()
    assert isinstance(relative, storage.FileStore) and relative.root == Path(".timeshard")
    assert storage.DEFAULT_URL == "file://./.timeshard"


@pytest.mark.parametrize("url", [
    "", "nothing", "s3://bucket", "memory://host", "file://relative/path", "file://./",
    "memory://?max_blocks=0", "memory://?bogus=1", "azure://ab", "azure://Upper", "azure://a--b",
    "azure://container/path", "azure://jobs?clock=loop",
])
def test_malformed_urls_name_the_accepted_forms(url: str) -> None:
    with pytest.raises(storage.InvalidStoreUrl):
        storage.open_store(url, environ={"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})


def test_azure_without_credentials_says_what_to_set() -> None:
    with pytest.raises(storage.InvalidStoreUrl, match="AZURE_STORAGE_CONNECTION_STRING.*account_url"):
        storage.open_store("azure://jobs", environ={})
    with pytest.raises(storage.InvalidStoreUrl, match="malformed"):
        storage.open_store("azure://jobs", environ={"AZURE_STORAGE_CONNECTION_STRING": "garbage"})


async def test_azure_with_account_url_uses_default_credential() -> None:
    store = storage.open_store("azure://jobs?account_url=https://acct.blob.core.windows.net", environ={})
    assert isinstance(store, AzureStore) and store.container == "jobs"
    await store.close()


@pytest.mark.parametrize(("query", "wire"), [("", True), ("?clock=wire", True), ("?clock=sdk", False)])
async def test_azure_clock_is_read_off_the_wire_unless_the_url_asks_for_the_sdks_hooks(
        query: str, wire: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    store = storage.open_store(f"azure://jobs{query}", environ={"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})
    assert isinstance(store, AzureStore) and store.wire_clock is wire
    await store.close()


async def test_azure_clock_goes_through_a_proxy_by_the_sdks_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wire clock's own connection would bypass the proxy the SDK's requests take."""
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    store = storage.open_store("azure://jobs", environ={"AZURE_STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true"})
    assert isinstance(store, AzureStore) and store.wire_clock is False
    await store.close()
