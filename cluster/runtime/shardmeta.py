"""A shard's ownership record: what its log's metadata says of its owner, window and firing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["OPEN", "SEALED", "ShardMeta"]

OPEN, SEALED = "open", "sealed"


@dataclass(frozen=True)
class ShardMeta:
    """A shard's ownership record, kept in its log's metadata and replaced by CAS to claim it.

    ``firing``, ``deaths`` and ``suspects`` are what quarantine needs to survive its owner (see
    ``cluster.runtime.quarantine``): what the owner had in flight, how many owners in a row died
    while it fired, and how many owners in a row died while one job's attempt was alone in flight.
    """

    owner: str  # "<silo id>#<incarnation>", or "" when released
    window_start: int
    window_end: int
    state: str = OPEN
    adopted_count: int = 0  # times claimed from an owner that did not release it
    generation: int = 0
    firing: str = ""  # "" idle, "*" attempts in flight, or the digest of the one job in flight
    deaths: int = 0  # owners in a row that died while this shard was firing
    suspects: tuple[tuple[str, int], ...] = ()  # (job digest, owner deaths in a row during its attempt)

    def to_metadata(self) -> dict[str, str]:
        md = {
            "owner": self.owner,
            "window_start": str(self.window_start),
            "window_end": str(self.window_end),
            "state": self.state,
            "adopted_count": str(self.adopted_count),
            "generation": str(self.generation),
        }
        # Written only when set, so a shard that never fired reads as it always did.
        if self.firing:
            md["firing"] = self.firing
        if self.deaths:
            md["deaths"] = str(self.deaths)
        if self.suspects:
            md["suspects"] = ",".join(f"{digest}:{count}" for digest, count in self.suspects)
        return md

    @classmethod
    def from_metadata(cls, md: Mapping[str, str]) -> ShardMeta:
        return cls(
            owner=md.get("owner", ""),
            window_start=int(md["window_start"]),
            window_end=int(md["window_end"]),
            state=md.get("state", OPEN),
            adopted_count=int(md.get("adopted_count", "0")),
            generation=int(md.get("generation", "0")),
            firing=md.get("firing", ""),
            deaths=int(md.get("deaths", "0")),
            suspects=tuple((digest, int(count)) for digest, _, count in
                           (pair.partition(":") for pair in md.get("suspects", "").split(",") if pair)),
        )

    def with_owner(self, owner: str, **changes: Any) -> ShardMeta:
        return ShardMeta(**{**self.__dict__, "owner": owner, **changes})
