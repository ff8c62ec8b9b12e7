"""``open_store(url)``: pick and configure a store from one URL."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from .base import RetryPolicy, Store
from .errors import InvalidStoreUrl
from .file import FileStore
from .memory import MemoryStore

DEFAULT_URL = "file://./.timeshard"
CONNECTION_STRING_ENV = "AZURE_STORAGE_CONNECTION_STRING"
CONNECTION_STRING_FILE_ENV = "AZURE_STORAGE_CONNECTION_STRING_FILE"
_FORMS = (
    "memory://, file:///absolute/path, file://./relative/path, "
    "azure://<container> (with AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_CONNECTION_STRING_FILE set), "
    "azure://<container>?connection_string_file=/absolute/path or "
    "azure://<container>?account_url=https://<account>.blob.core.windows.net"
)
# A connection string is a few hundred bytes; a bigger file is the wrong file.
_MAX_SECRET_BYTES = 64 * 1024


def _query(url: str, query: str, allowed: set[str]) -> dict[str, str]:
    params = {key: values[-1] for key, values in parse_qs(query, keep_blank_values=True).items()}
    unknown = set(params) - allowed
    if unknown:
        raise InvalidStoreUrl(f"store URL {url!r}: unknown parameter(s) {sorted(unknown)}; accepted: {sorted(allowed)}")
    return params


def _max_blocks(url: str, params: Mapping[str, str]) -> dict[str, int]:
    if "max_blocks" not in params:
        return {}
    try:
        value = int(params["max_blocks"])
    except ValueError:
        value = 0
    if value < 1:
        raise InvalidStoreUrl(f"store URL {url!r}: max_blocks must be a positive integer")
    return {"max_blocks": value}


def open_store(url: str = DEFAULT_URL, *, retry: RetryPolicy | None = None,
               environ: Mapping[str, str] | None = None) -> Store:
    """Return the store ``url`` names; no I/O happens until the first operation.

    ``memory://`` and ``file://`` accept ``?max_blocks=N`` (blocks per log before ``LogFull``,
    default 50,000 like an append blob). ``environ`` defaults to ``os.environ``.
    Raises ``InvalidStoreUrl`` for a malformed URL or missing credentials, saying what to set.
    """
    if not isinstance(url, str) or "://" not in url:
        raise InvalidStoreUrl(f"store URL {url!r}: expected one of {_FORMS}")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "memory":
        if parts.netloc or parts.path not in ("", "/"):
            raise InvalidStoreUrl(f"store URL {url!r}: memory:// takes no host or path")
        limits = _max_blocks(url, _query(url, parts.query, {"max_blocks"}))
        return MemoryStore(max_blocks=limits["max_blocks"]) if limits else MemoryStore()
    if scheme == "file":
        params = _query(url, parts.query, {"max_blocks"})
        if parts.netloc in ("", "localhost") and parts.path.startswith("/"):
            root = Path(parts.path)
        elif parts.netloc == "." and parts.path.startswith("/") and len(parts.path) > 1:
            root = Path("." + parts.path)
        else:
            raise InvalidStoreUrl(
                f"store URL {url!r}: a file store is file:///absolute/path or file://./relative/path"
            )
        return FileStore(root, **_max_blocks(url, params))
    if scheme == "azure":
        return _open_azure(url, parts.netloc, parts.path, parts.query,
                           retry or RetryPolicy(), os.environ if environ is None else environ)
    raise InvalidStoreUrl(f"store URL {url!r}: unknown scheme {parts.scheme!r}; expected one of {_FORMS}")


def _open_azure(url: str, container: str, path: str, query: str, retry: RetryPolicy,
                environ: Mapping[str, str]) -> Store:
    from azure.storage.blob.aio import BlobServiceClient

    from .azure import AzureStore, check_container

    if path not in ("", "/"):
        raise InvalidStoreUrl(f"store URL {url!r}: azure://<container> takes no path")
    try:
        check_container(container)
    except ValueError as exc:
        raise InvalidStoreUrl(f"store URL {url!r}: {exc}") from None
    params = _query(url, query, {"account_url", "connection_string_file", "clock"})
    if "account_url" in params and "connection_string_file" in params:
        raise InvalidStoreUrl(f"store URL {url!r}: give account_url or connection_string_file, not both")
    if params.get("clock", "wire") not in ("wire", "sdk"):
        raise InvalidStoreUrl(f"store URL {url!r}: clock must be wire (the default) or sdk")
    wire_clock = params.get("clock", "wire") == "wire"
    options = AzureStore.client_options()
    if "account_url" in params:
        account_url = params["account_url"]
        if not account_url.startswith(("https://", "http://")):
            raise InvalidStoreUrl(f"store URL {url!r}: account_url must be https://<account>.blob.core.windows.net")
        try:
            from azure.identity.aio import DefaultAzureCredential
        except ImportError:
            raise InvalidStoreUrl(
                f"store URL {url!r}: account_url needs azure-identity; install it with "
                "`pip install 'timeshard[azure-identity]'`, or set AZURE_STORAGE_CONNECTION_STRING instead"
            ) from None
        credential = DefaultAzureCredential()
        client = BlobServiceClient(account_url, credential=credential, **options)
        return AzureStore(client, container, retry=retry, credential=credential, wire_clock=wire_clock)
    connection_string, source = _connection_string(url, params, environ)
    try:
        client = BlobServiceClient.from_connection_string(connection_string, **options)
    except ValueError as exc:
        reason = _without_secret(str(exc), connection_string)
        raise InvalidStoreUrl(
            f"store URL {url!r}: {source} is malformed ({reason}); expected the storage account's connection "
            "string, Key=Value pairs separated by ';' (DefaultEndpointsProtocol, AccountName, AccountKey, ...)"
        ) from None
    return AzureStore(client, container, retry=retry, wire_clock=wire_clock)


def _connection_string(url: str, params: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, str]:
    """The connection string this process reads on its own node, and where from (for errors).

    The URL's ``connection_string_file`` wins; then ``AZURE_STORAGE_CONNECTION_STRING``, or the
    file ``AZURE_STORAGE_CONNECTION_STRING_FILE`` names (not both: which one is meant is unclear).
    """
    if "connection_string_file" in params:
        path = params["connection_string_file"]
        where = f"store URL {url!r}: connection_string_file {path!r}"
        return _read_secret_file(where, path), f"the connection string in {path!r}"
    inline = environ.get(CONNECTION_STRING_ENV, "")
    path = environ.get(CONNECTION_STRING_FILE_ENV, "")
    if inline and path:
        raise InvalidStoreUrl(
            f"store URL {url!r}: both {CONNECTION_STRING_ENV} and {CONNECTION_STRING_FILE_ENV} are set; set one"
        )
    if inline:
        return inline, CONNECTION_STRING_ENV
    if path:
        where = f"store URL {url!r}: {CONNECTION_STRING_FILE_ENV} {path!r}"
        return _read_secret_file(where, path), f"the connection string in {path!r} ({CONNECTION_STRING_FILE_ENV})"
    raise InvalidStoreUrl(
        f"store URL {url!r}: no credential; set {CONNECTION_STRING_ENV} or {CONNECTION_STRING_FILE_ENV}, "
        "add ?connection_string_file=/path, or add ?account_url=https://<account>.blob.core.windows.net "
        "(uses DefaultAzureCredential)"
    )


def _read_secret_file(where: str, path: str) -> str:
    """The file's text without surrounding whitespace; errors name the file and the rule, never its contents."""
    if not Path(path).is_absolute():
        raise InvalidStoreUrl(f"{where}: must be an absolute path (each silo reads it on its own node)")
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_SECRET_BYTES + 1)
    except FileNotFoundError:
        raise InvalidStoreUrl(f"{where}: no such file on this node") from None
    except OSError as exc:
        raise InvalidStoreUrl(f"{where}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > _MAX_SECRET_BYTES:
        raise InvalidStoreUrl(f"{where}: larger than {_MAX_SECRET_BYTES} bytes, not a connection string")
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise InvalidStoreUrl(f"{where}: is not UTF-8 text, not a connection string") from None
    if not text:
        raise InvalidStoreUrl(f"{where}: is empty; write the storage account's connection string into it")
    return text


def _without_secret(message: str, connection_string: str) -> str:
    """``message`` with the key, the signature and any unparsed part of ``connection_string`` hidden.

    The SDK's own words do not quote the string today; this keeps it so if they ever do.
    """
    secrets = [connection_string.strip()]
    for part in connection_string.split(";"):
        key, equals, value = part.partition("=")
        if not equals:
            secrets.append(part.strip())
        elif key.strip().lower() in ("accountkey", "sharedaccesssignature"):
            secrets += [part.strip(), value.strip()]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        message = message.replace(secret, "***")
    return message
