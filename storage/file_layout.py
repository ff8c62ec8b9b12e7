"""Where the file store keeps each log, and the index that lists them in order.

A log's files (``.meta``, ``.log``, ``.lock``) live in ``<root>/<kind>/<bucket>/``: ``kind`` is
the escaped first segment of the name (``names``, ``shards``, ``named-defs``..., ``%`` for a name
without ``/``) and ``bucket`` one of 256 by a hash of the name. So no directory holds more than
its share of one kind (1,000,000 names leave ~8,000 files a bucket; ext4 looks a name up in a
directory of that size as fast as in a small one) and a log is found without listing anything.
Why not more buckets: a batch of writes fsyncs each directory it renamed a file into (~4 ms
each here, ~0.1 ms each when 64 run at once), so 256 bound what one batch pays.

Order is kept apart from the files, in ``<root>/.index.db`` (SQLite, WAL, every commit fsynced):
one row per log name, and a count per directory prefix (``""``, ``names/``, ``names/a/``...)
kept in the same transaction as the rows. A page is one range read of the index, a count of a
directory prefix one row. The files stay the truth and the index a superset of them: a row is
written (durably) before its log's ``.meta`` appears and removed only after its ``.meta`` is gone,
so a crash between the two leaves a row without a log, never a log without a row (a log nobody
lists would be a shard nobody adopts). Listings read each row's ``.meta`` anyway, skip such a row
and prune it; until then ``count`` includes it.

A store from before this layout (every file flat in ``<root>``) is moved in when first opened,
under ``<root>/.layout.lock``: rows first, then each log's body and its ``.meta`` last; the index
is reconciled with the files and only then marked done (``user_version``). A crash midway leaves
logs in either place, each with its row, and the next open carries on. Names starting with
``.`` are refused by the store, so the dot-files are never a log's.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import quote, unquote

from .base import check_name
from .errors import StorageError, Unavailable

LAYOUT_VERSION = 2
INDEX_FILE = ".index.db"
LAYOUT_LOCK = ".layout.lock"
NO_KIND = "%"  # the directory of names without '/': quote() never writes a lone '%'
SUFFIXES = (".meta", ".log", ".lock", ".meta.tmp")
_SAFE = "-_.~"  # quote() keeps letters and digits; '%' escapes the rest, '/' included
_MAX_FILENAME = 240
_BATCH = 5000  # rows a statement or transaction carries when many are written at once


def encode(name: str) -> str:
    """The file name (without suffix) of the log ``name``: ``quote``d, so ``/`` is ``%2F``."""
    encoded = quote(check_name(name), safe=_SAFE)
    if len(encoded) > _MAX_FILENAME or encoded.startswith("."):
        raise ValueError(f"log name {name!r}: too long for a file name, or starts with '.'")
    return encoded


def log_dir(root: Path, name: str) -> Path:
    """The directory holding the files of the log ``name``."""
    head, slash, _ = name.partition("/")
    kind = quote(head, safe=_SAFE) if slash and head else NO_KIND
    bucket = hashlib.blake2b(name.encode(), digest_size=1).hexdigest()
    return root / kind / bucket


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dir(path: Path, durable: bool = True) -> bool:
    """Make ``path`` (and its parent); True if it was not there. ``durable``: its name is on
    disk when this returns (else the caller fsyncs ``path.parent`` and its parent later)."""
    try:
        path.mkdir()
    except FileExistsError:
        return False
    except FileNotFoundError:
        make_dir(path.parent, durable)
        with contextlib.suppress(FileExistsError):
            path.mkdir()
    if durable:
        fsync_dir(path.parent)  # the new directory's own name must survive a power cut
    return True


def _ancestors(name: str) -> list[str]:
    """The directory prefixes ``name`` counts in: ``""``, ``a/``, ``a/b/``... (not itself)."""
    cut = [i + 1 for i, c in enumerate(name) if c == "/" and i + 1 < len(name)]
    return ["", *(name[:i] for i in cut)]


def _upper(prefix: str) -> str | None:
    """The least string above every one starting with ``prefix`` (None: no bound)."""
    if not prefix:
        return None
    following = ord(prefix[-1]) + 1
    # Past U+D7FF the next character SQLite can hold is U+E000 (surrogates have no UTF-8), and no
    # name holds a surrogate; a prefix ending in U+10FFFF (no name holds that either) has no bound.
    if following > 0x10FFFF:
        return _upper(prefix[:-1])
    return prefix[:-1] + chr(0xE000 if 0xD800 <= following <= 0xDFFF else following)


class Index:
    """Log names in order and counts per directory prefix, shared by every process on ``path``.

    One connection per store object, used by one thread at a time (the store's calls run in
    worker threads); SQLite's own locks order the processes, waiting at most ``timeout``.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self._path = path
        self._mutex = threading.Lock()
        try:
            self._db = sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # a row must be on disk before its log's .meta
            self._db.execute("CREATE TABLE IF NOT EXISTS logs (name TEXT PRIMARY KEY) WITHOUT ROWID")
            # n: names under the prefix at any depth; direct: those with no further '/'.
            self._db.execute("CREATE TABLE IF NOT EXISTS dirs (prefix TEXT PRIMARY KEY, n INTEGER NOT NULL, "
                             "direct INTEGER NOT NULL) WITHOUT ROWID")
        except sqlite3.Error as exc:
            raise StorageError(f"file store index {path}: {exc}") from exc

    @contextlib.contextmanager
    def _using(self, write: bool) -> Iterator[sqlite3.Connection]:
        with self._mutex:
            try:
                if write:
                    self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                except BaseException:
                    if write:
                        self._db.execute("ROLLBACK")
                    raise
                if write:
                    self._db.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if "locked" in str(exc) or "busy" in str(exc):
                    raise Unavailable(f"file store index {self._path}: {exc}") from exc
                raise StorageError(f"file store index {self._path}: {exc}") from exc
            except sqlite3.Error as exc:
                raise StorageError(f"file store index {self._path}: {exc}") from exc

    def _change(self, names: Iterable[str], sql: str, step: int) -> None:
        pending = list(names)
        for start in range(0, len(pending), _BATCH):
            with self._using(write=True) as db:
                counts: dict[str, list[int]] = {}
                for name in pending[start:start + _BATCH]:
                    if db.execute(sql, (name,)).rowcount == 1:  # counted only when it changed the rows
                        above = _ancestors(name)
                        for prefix in above:
                            counts.setdefault(prefix, [0, 0])[0] += step
                        counts[above[-1]][1] += step  # its own directory
                db.executemany("INSERT INTO dirs VALUES (?, ?, ?) ON CONFLICT(prefix) "
                               "DO UPDATE SET n = n + excluded.n, direct = direct + excluded.direct",
                               [(prefix, n, direct) for prefix, (n, direct) in counts.items()])

    def add(self, names: Iterable[str]) -> None:
        """Rows for ``names`` (those already there stay), durable when this returns."""
        self._change(names, "INSERT OR IGNORE INTO logs VALUES (?)", 1)

    def remove(self, names: Iterable[str]) -> None:
        self._change(names, "DELETE FROM logs WHERE name = ?", -1)

    def page(self, prefix: str, after: str | None, limit: int) -> list[str]:
        """Up to ``limit`` names starting with ``prefix``, strictly after ``after``, in order."""
        low, high = (after, ">") if after is not None and after >= prefix else (prefix, ">=")
        upper = _upper(prefix)
        sql = f"SELECT name FROM logs WHERE name {high} ?" + (" AND name < ?" if upper else "") + " ORDER BY name LIMIT ?"
        with self._using(write=False) as db:
            return [row[0] for row in db.execute(sql, (low, upper, limit) if upper else (low, limit))]

    def scan(self, prefix: str, after: str | None = None, batch: int = 1000) -> Iterator[str]:
        """Every name starting with ``prefix`` after ``after``, in order, read ``batch`` at a time."""
        while True:
            names = self.page(prefix, after, batch)
            yield from names
            if len(names) < batch:
                return
            after = names[-1]

    def count(self, prefix: str, nested: bool = True) -> int:
        """Rows starting with ``prefix`` (only those without a ``/`` past its directory unless
        ``nested``): one row read for a directory prefix (``""``, ``a/``), else a range count."""
        with self._using(write=False) as db:
            if prefix == "" or prefix.endswith("/"):
                row = db.execute(f"SELECT {'n' if nested else 'direct'} FROM dirs WHERE prefix = ?", (prefix,)).fetchone()
                return int(row[0]) if row else 0
            upper = _upper(prefix)
            sql = "SELECT count(*) FROM logs WHERE name >= ?"
            args: list[str | int] = [prefix]
            if upper is not None:
                sql += " AND name < ?"
                args.append(upper)
            if not nested:
                sql += " AND instr(substr(name, ?), '/') = 0"
                args.append(prefix.rfind("/") + 2)  # substr() counts from 1: what follows the prefix's directory
            return int(db.execute(sql, args).fetchone()[0])

    def version(self) -> int:
        with self._using(write=False) as db:
            return int(db.execute("PRAGMA user_version").fetchone()[0])

    def set_version(self, version: int) -> None:
        with self._using(write=False) as db:
            db.execute(f"PRAGMA user_version = {int(version)}")

    def close(self) -> None:
        with self._mutex:
            self._db.close()


def open_layout(root: Path, timeout: float) -> Index:
    """The index of the store at ``root``, its files moved into this layout first if need be."""
    root.mkdir(parents=True, exist_ok=True)
    index = Index(root / INDEX_FILE, timeout)
    if index.version() == LAYOUT_VERSION:
        return index
    fd = os.open(root / LAYOUT_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for a peer moving this store in (once per store)
        if index.version() != LAYOUT_VERSION:
            migrate(root, index)
            index.set_version(LAYOUT_VERSION)
    except BaseException:
        index.close()
        raise
    finally:
        os.close(fd)
    return index


def migrate(root: Path, index: Index) -> None:
    """Move the flat files of ``root`` into their directories, then make the index match the files.

    Safe to run again after a crash at any point: each step is a rename or an idempotent row.
    """
    flat = {entry.name for entry in os.scandir(root) if entry.is_file() and not entry.name.startswith(".")}
    metas = sorted(f[: -len(".meta")] for f in flat if f.endswith(".meta"))
    index.add(unquote(m) for m in metas)  # rows before any file moves: nothing is ever unlisted
    touched: set[Path] = set()
    for encoded in metas:
        where = log_dir(root, unquote(encoded))
        if where not in touched and make_dir(where, durable=False):  # fsynced together below
            touched.update((where.parent, where.parent.parent))
        if encoded + ".log" in flat:
            os.rename(root / (encoded + ".log"), where / (encoded + ".log"))
        os.rename(root / (encoded + ".meta"), where / (encoded + ".meta"))  # last: the log has moved
        touched.add(where)
    moved = {m + suffix for m in metas for suffix in (".meta", ".log")}
    for file in sorted(flat - moved):
        if file.endswith(".log"):
            encoded = file[: -len(".log")]
            where = log_dir(root, unquote(encoded))
            if (where / (encoded + ".meta")).exists() and not (where / file).exists():
                os.rename(root / file, where / file)  # its .meta moved before a crash: the body follows it
                touched.add(where)
                continue
        if file.endswith((".log", ".lock", ".meta.tmp")):  # a lock, a write never renamed, a body deleted long ago
            with contextlib.suppress(FileNotFoundError):
                os.unlink(root / file)
    for path in sorted(touched, key=lambda p: -len(p.parts)):  # deepest first: then the names of those
        fsync_dir(path)
    fsync_dir(root)
    reconcile(root, index)


def logs_on_disk(root: Path) -> Iterator[str]:
    """The name of every log with a ``.meta`` in this layout's directories."""
    for kind in os.scandir(root):
        if not kind.is_dir() or kind.name.startswith("."):
            continue
        for bucket in os.scandir(kind.path):
            if bucket.is_dir():
                for entry in os.scandir(bucket.path):
                    if entry.name.endswith(".meta"):
                        yield unquote(entry.name[: -len(".meta")])


def reconcile(root: Path, index: Index) -> None:
    """Rows for exactly the logs on disk: what a crash left (row without log, or a lost index) is mended."""
    on_disk = set(logs_on_disk(root))
    index.add(sorted(on_disk))
    index.remove([name for name in index.scan("") if name not in on_disk])
