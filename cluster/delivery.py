"""Finding the actor a job goes to: named actors, grains activated on demand, and absent targets.

Lookups go through Ray's GCS, so handles are cached per target and dropped when a call finds the
actor dead. A target that does not exist yet is not an error here: the silo stages the job until
the actor appears (Dapr's staging queue) or ``undeliverable_timeout`` runs out.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from cluster.jobs import Target
from cluster.wire import resolve_code_path

log = logging.getLogger("timeshard.delivery")


class TargetAbsent(Exception):
    """No actor answers to this target yet; the job waits for it."""


class ActorDirectory:
    """Resolves targets to Ray actor handles, activating grains on first use."""

    def __init__(self, default_namespace: str | None) -> None:
        self._namespace = default_namespace
        self._handles: dict[str, Any] = {}

    def resolve(self, target: Target) -> Any:
        """The actor handle for ``target``; raises ``TargetAbsent`` if it does not exist."""
        key = target.routing_key
        handle = self._handles.get(key)
        if handle is not None:
            return handle
        namespace = target.namespace or self._namespace
        try:
            handle = ray.get_actor(target.name, namespace=namespace)
        except ValueError:
            if target.kind != "grain":
                raise TargetAbsent(f"no actor named {target.name!r} in namespace {namespace!r}") from None
            handle = self._activate(target, namespace)
        self._handles[key] = handle
        return handle

    def forget(self, target: Target) -> None:
        """Drop a cached handle, e.g. after a call found the actor dead."""
        self._handles.pop(target.routing_key, None)

    def _activate(self, target: Target, namespace: str | None) -> Any:
        assert target.cls_path is not None
        try:
            cls = resolve_code_path(target.cls_path)
        except (ImportError, AttributeError) as exc:
            raise TargetAbsent(f"grain class {target.cls_path!r} cannot be imported: {exc}") from None
        actor_cls = cls if hasattr(cls, "options") and hasattr(cls, "remote") else ray.remote(cls)
        log.info("activating grain", extra={"grain": target.name})
        return actor_cls.options(
            name=target.name,
            namespace=namespace,
            lifetime="detached",
            get_if_exists=True,
            num_cpus=0,
            max_restarts=-1,
            max_task_retries=0,
        ).remote()
