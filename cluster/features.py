"""The features every silo runs, as silo hooks: named jobs and flows, wired without Ray.

Kept apart from ``cluster._cluster`` (which makes silos Ray actors) so that in-process silos, as
the deterministic simulation runs them, get the same hooks as a silo on Ray.
"""

from __future__ import annotations

from cluster.flows.hooks import FlowHooks
from cluster.named.hooks import NamedJobHooks
from cluster.runtime.hooks import SiloHooks, SiloView
from storage import Store


def feature_hooks(store: Store, silo: SiloView) -> list[SiloHooks]:
    """The hooks every silo runs: named jobs (status, and the generation fence) and flows."""
    return [NamedJobHooks(store, silo), FlowHooks(store, silo)]


__all__ = ["feature_hooks"]
