"""A full disk for the silos' shard writes, without a tiny filesystem (mounting one needs root).

The file through which the file store commits a shard's bookkeeping (``<log>.meta.tmp``) is made
a link to ``/dev/full``, where every write fails with ENOSPC, as on a full disk: the real error,
raised by the kernel inside the silo's real write path.
"""

from __future__ import annotations

import errno
import os
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from cluster.model.wire import datetime_to_us
from cluster.runtime.shardlog import shard_name, window_of
from storage.file import FileStore
from storage.generations import generation_name
from tests.e2e.conftest import FAST

SHARD_US = FAST.shard_duration // timedelta(microseconds=1)


def fill_disk(store_url: str, due: datetime) -> None:
    """Make every write silo 0 makes to its shards of ``due``'s window fail with ENOSPC.

    Its first shards there are named by window, silo incarnation and a counter; a few of them,
    in case one is tried after another. Without ``/dev/full`` (not Linux) the test fails under
    ``CI=true`` and is skipped elsewhere, as a missing Azurite or browser is.
    """
    if not os.path.exists("/dev/full"):
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("/dev/full is required under CI=true (a full disk is made from it)", pytrace=False)
        pytest.skip("needs /dev/full (Linux)")  # only outside CI: under CI=true it failed above
    store = FileStore(Path(store_url.removeprefix("file://")))
    window = window_of(datetime_to_us(due), SHARD_US)
    for counter in range(1, 9):
        name = generation_name(shard_name(window, "0.1", counter), 0)
        tmp = store._path(name, ".meta.tmp")
        tmp.parent.mkdir(parents=True, exist_ok=True)  # the log's directory: made by its first write otherwise
        tmp.symlink_to("/dev/full")


def assert_one_plain_line(err: BaseException) -> None:
    text = str(err)
    assert "\n" not in text and "\x1b" not in text and "ray::" not in text and "actor_id" not in text, text
    assert os.strerror(errno.ENOSPC) in text, text


