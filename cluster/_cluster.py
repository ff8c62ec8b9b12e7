"""Starting, finding and stopping a cluster of silos on Ray: the composition root.

This is where the parts meet: a silo actor gets the features' hooks (named jobs, flows), the
Ray transport and the Ray metrics exporter here, and nowhere else.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import ray

from cluster.client import Client
from cluster.features import feature_hooks
from cluster.model.options import DEFAULT_NAMESPACE, ClusterOptions
from cluster.runtime.membership import SILO_PREFIX
from cluster.runtime.ray_metrics import RayMetrics
from cluster.runtime.ray_transport import RayTransport
from cluster.runtime.silo import Silo
from storage import DEFAULT_URL, open_store

log = logging.getLogger("timeshard.cluster")


@ray.remote
class SiloActor(Silo):
    """A silo as a named, detached Ray actor, wired with the features' hooks and Ray's transport."""

    def __init__(self, silo_id: str, store_url: str, options: ClusterOptions, namespace: str) -> None:
        # Silo.__init__ by name: Ray rebinds this class's name to its actor class.
        Silo.__init__(self, silo_id, store_url, options, namespace, hooks=feature_hooks,
                      transport=RayTransport(namespace), metrics_exporter=RayMetrics())


def _ensure_ray(namespace: str) -> None:
    if not ray.is_initialized():
        ray.init(
            namespace=namespace,
            num_cpus=max(4, os.cpu_count() or 1),
            include_dashboard=False,
            log_to_driver=os.environ.get("TIMESHARD_RAY_LOGS", "") == "1",
            configure_logging=False,
        )


class Cluster:
    """A handle on the silos of one namespace: start them, connect to them, stop them."""

    def __init__(self, namespace: str, silo_ids: list[str], options: ClusterOptions, store_url: str) -> None:
        self.namespace = namespace
        self.silo_ids = silo_ids
        self.options = options
        self.store_url = store_url

    @classmethod
    def start(
        cls,
        store_url: str = DEFAULT_URL,
        silos: int = 3,
        namespace: str = DEFAULT_NAMESPACE,
        options: ClusterOptions | None = None,
        *,
        timeout: float = 60.0,
    ) -> Cluster:
        """Start ``silos`` named, detached silo actors on ``store_url`` and wait until they serve.

        Initialises Ray (in ``namespace``) if the caller has not. Silos that already exist under
        these names are reused, so a second ``start`` reconnects rather than doubles.
        """
        if silos < 1:
            raise ValueError(f"silos: must be >= 1 (got {silos})")
        options = options or ClusterOptions()
        open_store(store_url)  # a malformed URL fails here, in the caller, not in every silo
        _ensure_ray(namespace)
        ids = [str(i) for i in range(silos)]
        handles = [cls._spawn(silo_id, store_url, options, namespace) for silo_id in ids]
        ray.get([h.ready.remote() for h in handles], timeout=timeout)
        log.info("cluster started", extra={"namespace": namespace, "silos": silos, "store": store_url})
        return cls(namespace, ids, options, store_url)

    @staticmethod
    def _spawn(silo_id: str, store_url: str, options: ClusterOptions, namespace: str) -> Any:
        # No runtime_env: Ray shows it in plain text. Each silo reads the store credential on its
        # own node (README, Credentials); the store URL carries at most a file's path.
        actor: Any = SiloActor  # Ray's ActorClass: mypy does not apply class decorators
        return actor.options(
            name=SILO_PREFIX + silo_id,
            namespace=namespace,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=options.max_restarts,
            max_task_retries=0,
            num_cpus=options.silo_num_cpus,
        ).remote(silo_id, store_url, options, namespace)

    @classmethod
    def connect(cls, namespace: str = DEFAULT_NAMESPACE, *, timeout: float = 30.0) -> Cluster:
        """Find the silos already running in ``namespace`` (from another driver or an actor)."""
        _ensure_ray(namespace)
        names = [
            a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
            if a["namespace"] == namespace and a["name"].startswith(SILO_PREFIX)
        ]
        if not names:
            raise LookupError(f"no timeshard silos in Ray namespace {namespace!r}; start them with Cluster.start")
        ids = sorted((n[len(SILO_PREFIX):] for n in names), key=lambda s: (len(s), s))
        described = ray.get(ray.get_actor(SILO_PREFIX + ids[0], namespace=namespace).describe.remote(), timeout=timeout)
        return cls(namespace, ids, described["options"], described["store_url"])

    @property
    def silos(self) -> list[Any]:
        """The silo actor handles, in id order."""
        return [ray.get_actor(SILO_PREFIX + i, namespace=self.namespace) for i in self.silo_ids]

    def client(self) -> Client:
        """A picklable client for this cluster."""
        return Client(self.namespace, self.silo_ids, self.options)

    def status(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Each silo's status (see ``Silo.status``); a silo that does not answer shows its error."""
        out = []
        for silo_id, handle in zip(self.silo_ids, self.silos, strict=True):
            try:
                out.append(ray.get(handle.status.remote(), timeout=timeout))
            except Exception as exc:
                out.append({"silo_id": silo_id, "error": repr(exc)})
        return out

    def release_quarantine(self, shard: str, timeout: float = 30.0) -> dict[str, Any]:
        """Release ``shard`` from quarantine and queue its parked jobs again (an operator's call).

        Asks each silo; the one that holds ``shard`` answers ``{"shard", "was_quarantined",
        "released_jobs"}``. ``LookupError`` if no silo that answered holds it.
        """
        errors = []
        for silo_id, handle in zip(self.silo_ids, self.silos, strict=True):
            try:
                released = ray.get(handle.release_quarantine.remote(shard), timeout=timeout)
            except Exception as exc:
                errors.append(f"silo {silo_id}: {exc!r}")
                continue
            if released is not None:
                return dict(released)
        unanswered = f" ({len(errors)} silo(s) did not answer: {errors[0]})" if errors else ""
        raise LookupError(f"no silo holds shard {shard!r}{unanswered}; `timeshard status` lists the shards")

    def kill_silo(self, silo_id: str, *, restart: bool = True) -> None:
        """Crash a silo (no graceful stop); Ray restarts it as a new incarnation if ``restart``."""
        ray.kill(ray.get_actor(SILO_PREFIX + silo_id, namespace=self.namespace), no_restart=not restart)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every silo answers (e.g. after a restart)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                ray.get([h.ready.remote() for h in self.silos], timeout=max(1.0, deadline - time.monotonic()))
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def shutdown(self, *, graceful: bool = True, timeout: float = 30.0) -> None:
        """Stop every silo: gracefully (finish in-flight work, release shards), then remove them."""
        for silo_id in self.silo_ids:
            try:
                handle = ray.get_actor(SILO_PREFIX + silo_id, namespace=self.namespace)
            except ValueError:
                continue
            if graceful:
                try:
                    ray.get(handle.stop.remote(timeout), timeout=timeout + 10)
                except Exception as exc:
                    log.warning("silo did not stop gracefully", extra={"silo": silo_id, "error": repr(exc)})
            ray.kill(handle, no_restart=True)
