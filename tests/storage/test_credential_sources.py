"""Where an Azure store finds its credential on the node that opens it, and errors that never show it.

No Ray, no Azurite: ``open_store`` builds the client without I/O, so these check which account and
credential each source yields and what each mistake says.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import storage
from storage.azure import AzureStore
from storage.urls import CONNECTION_STRING_ENV, CONNECTION_STRING_FILE_ENV

KEY = "c2VjcmV0LWtleS10aGF0LW11c3QtbmV2ZXItYmUtc2hvd24tYW55d2hlcmU="
SECRET = f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={KEY};EndpointSuffix=core.windows.net"
OTHER = SECRET.replace("AccountName=acct", "AccountName=other")


def account(store: storage.Store) -> str:
    assert isinstance(store, AzureStore)
    return str(store._client.account_name)


def secret_file(tmp_path: Path, text: str | bytes, name: str = "connection-string") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def refused(url: str, environ: dict[str, str] | None = None) -> str:
    """The error ``open_store`` raises for ``url``, checked to show no part of the secret."""
    with pytest.raises(storage.InvalidStoreUrl) as info:
        storage.open_store(url, environ=environ or {})
    message = str(info.value)
    assert KEY not in message and KEY[:12] not in message and SECRET not in message, message
    return message


async def test_the_node_environment_gives_the_connection_string() -> None:
    store = storage.open_store("azure://jobs", environ={CONNECTION_STRING_ENV: SECRET})
    assert account(store) == "acct"
    await store.close()


@pytest.mark.parametrize("contents", [SECRET, SECRET + "\n", f"  {SECRET}\r\n\n"])
async def test_a_secret_file_named_in_the_url_gives_the_connection_string(tmp_path: Path, contents: str) -> None:
    path = secret_file(tmp_path, contents)  # an editor's or a Kubernetes secret's trailing newline is fine
    url = f"azure://jobs?connection_string_file={path}"
    store = storage.open_store(url, environ={})
    assert account(store) == "acct"
    await store.close()
    assert KEY not in url


async def test_the_url_file_wins_over_the_environment(tmp_path: Path) -> None:
    path = secret_file(tmp_path, SECRET)
    store = storage.open_store(f"azure://jobs?connection_string_file={path}", environ={CONNECTION_STRING_ENV: OTHER})
    assert account(store) == "acct"
    await store.close()


async def test_a_secret_file_named_by_the_environment_gives_the_connection_string(tmp_path: Path) -> None:
    path = secret_file(tmp_path, SECRET + "\n")
    store = storage.open_store("azure://jobs", environ={CONNECTION_STRING_FILE_ENV: str(path)})
    assert account(store) == "acct"
    await store.close()


def test_both_environment_variables_set_is_ambiguous(tmp_path: Path) -> None:
    path = secret_file(tmp_path, OTHER)
    message = refused("azure://jobs", {CONNECTION_STRING_ENV: SECRET, CONNECTION_STRING_FILE_ENV: str(path)})
    assert CONNECTION_STRING_ENV in message and CONNECTION_STRING_FILE_ENV in message and "set one" in message


def test_account_url_and_a_secret_file_together_are_refused(tmp_path: Path) -> None:
    path = secret_file(tmp_path, SECRET)
    message = refused(f"azure://jobs?account_url=https://acct.blob.core.windows.net&connection_string_file={path}")
    assert "not both" in message


def test_no_credential_names_every_way_to_give_one() -> None:
    message = refused("azure://jobs")
    for way in (CONNECTION_STRING_ENV, CONNECTION_STRING_FILE_ENV, "connection_string_file", "account_url"):
        assert way in message, message


@pytest.mark.parametrize("source", ["url", "env"])
@pytest.mark.parametrize(("case", "rule"), [
    ("missing", "no such file"),
    ("directory", "cannot be read"),
    ("empty", "is empty"),
    ("blank", "is empty"),
    ("binary", "not UTF-8"),
    ("huge", "larger than"),
    ("relative", "absolute path"),
])
def test_a_bad_secret_file_is_named_with_the_rule_it_breaks(tmp_path: Path, source: str, case: str, rule: str) -> None:
    contents: dict[str, str | bytes] = {
        "empty": "", "blank": " \n\t\n", "binary": b"\xff\xfe" + KEY.encode(), "huge": SECRET + ";" + "x" * 70_000,
        "relative": SECRET,
    }
    made = {"missing": tmp_path / "absent", "directory": tmp_path}.get(case) or secret_file(tmp_path, contents[case])
    path = os.path.relpath(made) if case == "relative" else str(made)
    if source == "url":
        message = refused(f"azure://jobs?connection_string_file={path}")
        assert "connection_string_file" in message
    else:
        message = refused("azure://jobs", {CONNECTION_STRING_FILE_ENV: path})
        assert CONNECTION_STRING_FILE_ENV in message
    assert path in message and rule in message, message


@pytest.mark.parametrize("malformed", [
    f"AccountKey={KEY}",  # no account, no endpoint
    f"AccountName=acct;AccountKey={KEY};BlobEndpoint",  # a part without '='
    KEY,  # the bare key pasted instead of the connection string
])
def test_a_malformed_connection_string_is_named_without_its_key(tmp_path: Path, malformed: str) -> None:
    path = secret_file(tmp_path, malformed)
    from_file = refused(f"azure://jobs?connection_string_file={path}")
    assert str(path) in from_file and "malformed" in from_file, from_file
    from_env = refused("azure://jobs", {CONNECTION_STRING_ENV: malformed})
    assert CONNECTION_STRING_ENV in from_env and "malformed" in from_env, from_env


def test_the_sdk_quoting_the_connection_string_back_is_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Today's SDK says only "Connection string is either blank or malformed."; a later one might quote it.
    from azure.storage.blob.aio import BlobServiceClient

    def quoting(cls: Any, conn_str: str, **kwargs: Any) -> Any:
        raise ValueError(f"cannot parse {conn_str!r}; AccountKey {KEY} is not valid")

    monkeypatch.setattr(BlobServiceClient, "from_connection_string", classmethod(quoting))
    message = refused(f"azure://jobs?connection_string_file={secret_file(tmp_path, SECRET)}")
    assert "malformed" in message and "***" in message
