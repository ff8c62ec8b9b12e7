"""Review: a hook's own bug that happens to be a StorageError subclass is still logged as a failure."""
import logging

import pytest

from cluster.runtime.hooks import SiloHooks, call_hooks
from storage import InvalidMetadata


class Buggy(SiloHooks):
    async def maintain(self) -> None:
        raise InvalidMetadata("metadata of 9 KiB: a hook's bug, not the store's weather")


async def test_a_hook_bug_raised_as_a_storage_error_is_logged_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="timeshard.silo"):
        await call_hooks([Buggy.__new__(Buggy)], "maintain")
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.exc_info, f"{record.levelname}: {record.getMessage()}"
