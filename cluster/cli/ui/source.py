"""What the dashboard reads and acts through, so tests can hand it fakes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class UiSource:
    """What the dashboard reads and acts through: silo statuses (blocking, run off the loop),
    the named-jobs API (``client.jobs``) and the flows API (one ``client.flows``, kept so its
    pages re-read only the flows that changed; None: the Flows page says it is not available),
    and where the silos are, for the page's header: their Ray ``namespace`` and Ray's ``address``;
    ``keeping``: the keeper's status (``Cluster.keeping``: None when no keeper runs), for target
    versus live silos (None: the overview shows no target)."""

    status: Callable[[], list[dict[str, Any]]]
    jobs: Any
    flows: Any = None
    namespace: str | None = None
    address: str | None = None
    keeping: Callable[[], dict[str, Any] | None] | None = None

    async def statuses(self) -> list[dict[str, Any]]:
        """Every silo's ``status()``; a silo that did not answer has an ``error``."""
        return await asyncio.to_thread(self.status)

    async def keeper(self) -> dict[str, Any] | None:
        """The keeper's status, read off the event loop (None without one)."""
        return None if self.keeping is None else await asyncio.to_thread(self.keeping)
