"""An Azurite blob emulator on a free local port, for the tests and the benchmarks.

Test tooling, not part of the product: it lives here (not under ``tests/``) because the
benchmarks are an installed package and must import it without the repository on ``sys.path``;
``tests/azurite.py`` re-exports it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

ACCOUNT = "devstoreaccount1"
# The well-known development key Azurite ships with; it guards nothing.
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
_REPO = Path(__file__).resolve().parent.parent


class AzuriteUnavailable(RuntimeError):
    """The Azurite executable is missing or did not start; the message says how to install it."""


def find_executable() -> str | None:
    """Return the path of ``azurite-blob`` (repo ``node_modules`` first, then ``PATH``), or None."""
    local = _REPO / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    return shutil.which("azurite-blob")


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for_port(port: int, deadline: float, proc: subprocess.Popen[bytes]) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AzuriteUnavailable(f"azurite-blob exited with code {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AzuriteUnavailable(f"azurite-blob did not listen on 127.0.0.1:{port} in time")


@dataclass
class Azurite:
    """One Azurite blob service; ``location=None`` keeps blobs in memory only.

    ``stop()`` and ``start()`` may be called repeatedly: the port (and the ``location``) stay
    the same, so clients reconnect to the same account after a restart.
    """

    port: int = field(default_factory=free_port)
    location: Path | None = None
    #: (certificate, key) PEM files: serve HTTPS with them (as Azure does) instead of HTTP.
    tls: tuple[Path, Path] | None = None
    executable: str | None = field(default_factory=find_executable)
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def scheme(self) -> str:
        return "http" if self.tls is None else "https"

    @property
    def connection_string(self) -> str:
        return (
            f"DefaultEndpointsProtocol={self.scheme};AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};"
            f"BlobEndpoint={self.scheme}://127.0.0.1:{self.port}/{ACCOUNT};"
        )

    def write_connection_string(self, path: Path) -> Path:
        """Write ``connection_string`` to ``path`` (owner-only), for ``azure://...?connection_string_file=``.

        Silos are Ray worker processes started before this emulator; a file is how they reach it
        without the credential passing through Ray. Replaced whole, so a silo never reads half of it.
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(self.connection_string + "\n")
        os.replace(partial, path)
        return path

    @staticmethod
    def store_url(container: str, secret_file: Path) -> str:
        """``azure://<container>?connection_string_file=<secret_file>`` (see ``write_connection_string``)."""
        return f"azure://{container}?connection_string_file={quote(str(secret_file), safe='/')}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = 30.0) -> Azurite:
        """Start the emulator and return once its port accepts connections."""
        if self.running:
            return self
        if self.executable is None:
            raise AzuriteUnavailable("azurite-blob not found: run `npm ci` at the repository root (pins azurite 3.35.0)")
        args = [self.executable, "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
                "--silent", "--skipApiVersionCheck", "--disableTelemetry"]
        if self.tls is not None:
            args += ["--cert", str(self.tls[0]), "--key", str(self.tls[1])]
        if self.location is None:
            args.append("--inMemoryPersistence")
        else:
            self.location.mkdir(parents=True, exist_ok=True)
            args += ["--location", str(self.location)]
        # A new session so that stopping it also stops the node child npm's shim may spawn.
        self._proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True)
        try:
            _wait_for_port(self.port, time.monotonic() + timeout, self._proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the emulator gracefully (SIGTERM lets a persistent one flush), then forcibly."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def __enter__(self) -> Azurite:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
