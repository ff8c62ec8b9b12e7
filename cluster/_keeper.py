"""The silo keeper: one small detached actor per namespace that keeps the silo count at its target.

Peers adopt a lost silo's shards within seconds, so no job waits on the keeper; what it restores
is capacity. Without it a silo lost with its node stayed down until an operator ran ``scale``, and
a node-image upgrade, which drains every node in turn, could end with no silo at all.

Each round (every ``KEEP_INTERVAL_S``, and at once after a drain) it counts the silo actors of
its namespace, removes those proven lost (declared dead by their peers and not answering within
``PROBE_TIMEOUT_S``: their node is gone though Ray may list it for a while yet, or the process
hung or was paused that long, which no one can tell apart from outside), and starts as many as
are missing under the freed ids, placed by the cluster's rules (``spread`` by default) on nodes
that are alive and not draining, a node where a silo was just lost only if no other has room. A
silo the keeper started less than ``YOUNG_S`` ago is never taken for lost: it may still be
loading its shards.

Bound, from a silo's loss to its successor serving (stated in docs/deploy.md, measured by
``tests/drills/test_silo_keeping.py``): a silo whose actor Ray removed (killed, or its node
known dead) is started within one round; one lost with a node Ray still lists is declared dead by
its peers after ``suspicion_timeout`` plus a heartbeat, probed for ``PROBE_TIMEOUT_S``, then
started: ``suspicion_timeout + heartbeat_interval + KEEP_INTERVAL_S + PROBE_TIMEOUT_S`` plus the
new silo's start (a process, a join, its orphans claimed). A cluster's last silo has no peer to
declare it dead: it comes back once Ray marks its node dead (its health checks, ~15 s by default).

The keeper is pinned to Ray's head node, which a cluster loses only whole (then every silo goes
too, and the start step starts all again), and Ray restarts it if its process dies. The target
is kept in the store (``TARGET_LOG``), so a keeper Ray restarted keeps the last ``scale``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import warnings
from collections import deque
from collections.abc import Collection, Coroutine, Sequence
from typing import Any, Protocol, TypeVar

import ray

from cluster.client import running_silo_ids
from cluster.model.errors import describe
from cluster.model.options import ClusterOptions
from storage import AlreadyExists, NotFound, open_store

log = logging.getLogger("timeshard.keeper")

KEEPER_NAME = "timeshard-keeper"
#: The store's record of the target: an empty log whose metadata says how many silos to keep.
TARGET_LOG = "timeshard/silos"
#: How often the keeper counts the silos (one Ray lookup and one List of the membership rows).
KEEP_INTERVAL_S = 1.0
#: How long a silo its peers declared dead gets to answer before its actor is removed.
PROBE_TIMEOUT_S = 2.0
#: A silo the keeper started this recently is still starting, never lost.
YOUNG_S = 30.0
#: How long starting the missing silos may take in one round before the next round tries again.
START_TIMEOUT_S = 60.0

#: A new silo's start, from the keeper's call to the silo serving: a Ray worker process, the
#: silo's join and its first claims. Measured by the keeping drill on a busy 2-core machine.
SILO_START_S = 5.0

T = TypeVar("T")


def keep_bound(options: ClusterOptions) -> float:
    """Seconds from a silo's loss (its node gone, or drained) until a successor serves, at most:
    its peers declare it dead (``suspicion_timeout`` after its last beat, seen within a heartbeat),
    the keeper's next round finds it (``KEEP_INTERVAL_S``) and probes it (``PROBE_TIMEOUT_S``),
    then starts a new one (``SILO_START_S``). A drained silo skips the first three."""
    return (options.suspicion_timeout.total_seconds() + options.heartbeat_interval.total_seconds()
            + KEEP_INTERVAL_S + PROBE_TIMEOUT_S + SILO_START_S)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end from this actor's threads, none of which runs an event loop."""
    return asyncio.run(coro)


async def read_target(store_url: str) -> int | None:
    """The silo count recorded in the store, or None if none is."""
    store = open_store(store_url)
    try:
        stat = await store.stat(TARGET_LOG)
        return int(stat.metadata["target"])
    except (NotFound, KeyError, ValueError):
        return None
    finally:
        await store.close()


async def write_target(store_url: str, target: int) -> None:
    """Record ``target`` in the store (the last writer wins: only a scale or a start writes it)."""
    store = open_store(store_url)
    try:
        try:
            await store.create(TARGET_LOG, {"target": str(target)})
        except AlreadyExists:
            await store.set_metadata(TARGET_LOG, {"target": str(target)}, None)
    finally:
        await store.close()


class KeptCluster(Protocol):
    """What the keeper needs of a ``cluster._cluster.Cluster`` (which hands itself in: the wiring
    sits above this module)."""

    namespace: str
    store_url: str
    silo_ids: list[str]
    avoid: set[str]
    lost_nodes: dict[str, float]

    def _remove_lost(self, silo_ids: Sequence[str], timeout: float = ..., spare: Collection[str] = ...) -> list[str]: ...
    def _add(self, silo_ids: Sequence[str], timeout: float) -> dict[str, str]: ...
    def _stop(self, silo_ids: Sequence[str], timeout: float, *, graceful: bool = ...) -> None: ...
    def _scale_here(self, silos: int, *, timeout: float) -> dict[str, list[str]]: ...
    def placement(self, timeout: float = ...) -> dict[str, str]: ...
    def prune_avoided(self) -> None: ...


class Keeper:
    """Keeps ``target`` silos running in the namespace of ``cluster``: see the module docstring.
    Runs as the Ray actor ``cluster._cluster.SiloKeeper``."""

    def __init__(self, cluster: KeptCluster, target: int) -> None:
        store_url = cluster.store_url
        self._cluster = cluster
        with warnings.catch_warnings():  # Ray 2.60 warns of an API it uses inside this one
            warnings.simplefilter("ignore", DeprecationWarning)
            reconstructed = ray.get_runtime_context().was_current_actor_reconstructed
        if reconstructed:
            # Restarted by Ray with the arguments it was created with: the store has the last scale.
            target = _run(read_target(store_url)) or target
        else:
            _run(write_target(store_url, target))
        self._target = target
        self._lock = threading.Lock()  # one change to the set of silos at a time
        self._wake = threading.Event()
        self._stopped = False
        self._live: list[str] = []
        self._started: dict[str, float] = {}  # silo id -> when this keeper started it (monotonic)
        self._waiting: str | None = None
        self._repairs: deque[dict[str, Any]] = deque(maxlen=20)
        self._rounds = 0
        self._since = time.time()  # a keeper Ray restarted starts over: its rounds count from here
        threading.Thread(target=self._loop, name="keeper", daemon=True).start()

    def _loop(self) -> None:
        while not self._stopped:
            self._wake.wait(KEEP_INTERVAL_S)
            self._wake.clear()
            with self._lock:
                if self._stopped:
                    return
                try:
                    self._round()
                except Exception as exc:  # the next round tries again; status says why it waits
                    why = describe(exc)
                    if why != self._waiting:  # once per reason, not every second while it lasts
                        log.warning("keeper round failed: %s", why, extra={"namespace": self._cluster.namespace,
                                                                           "error": why})
                    self._waiting = why

    def _round(self) -> None:
        """Remove the silos proven lost, then start as many as are missing (under the lock)."""
        cluster = self._cluster
        self._rounds += 1
        now = time.monotonic()
        young = {i for i, at in self._started.items() if now - at < YOUNG_S}
        running = running_silo_ids(cluster.namespace)
        cluster.silo_ids = running
        kept = cluster._remove_lost(running, timeout=PROBE_TIMEOUT_S, spare=young)
        cluster.prune_avoided()
        self._live = kept
        missing = self._target - len(kept)
        if missing <= 0:
            self._waiting = None
            return
        free = (str(i) for i in range(10 * self._target + len(kept)) if str(i) not in kept)
        added = [next(free) for _ in range(missing)]
        cluster.silo_ids = sorted(kept + added, key=lambda s: (len(s), s))
        started = time.time()
        self._waiting = f"starting silo(s) {', '.join(added)}"
        for silo_id in added:
            self._started[silo_id] = time.monotonic()
        placement = cluster._add(added, START_TIMEOUT_S)
        took = round(time.time() - started, 3)
        for silo_id in added:
            self._repairs.append({"silo": silo_id, "node": placement.get(silo_id, ""), "at": round(started, 3),
                                  "start_s": took})
        log.warning("silo(s) %s started on %s to keep the target of %d (%.2f s)", ", ".join(added),
                    ", ".join(placement.get(i, "?")[:8] for i in added), self._target, took,
                    extra={"namespace": cluster.namespace, "silos": added, "target": self._target, "seconds": took})
        self._live = kept + added
        self._waiting = None

    def status(self) -> dict[str, Any]:
        """``target``; ``live``: the silo ids counted in the last round (answering, or starting);
        ``draining``: nodes no silo is placed on; ``lost_nodes``: nodes whose silos were removed as
        lost, taken last for new silos while Ray still lists them; ``waiting``: why the count is not at target (None
        when it is); ``repairs``: the last silos started, each with its node, when and how long."""
        return {"target": self._target, "live": list(self._live), "draining": sorted(self._cluster.avoid),
                "lost_nodes": sorted(self._cluster.lost_nodes),
                "waiting": self._waiting, "repairs": list(self._repairs), "rounds": self._rounds,
                "since": self._since,
                "interval_s": KEEP_INTERVAL_S, "node": ray.get_runtime_context().get_node_id()}

    def scale(self, target: int, timeout: float) -> dict[str, list[str]]:
        """Record ``target`` and grow or shrink to it now (see ``Cluster.scale``)."""
        with self._lock:
            _run(write_target(self._cluster.store_url, target))
            self._target = target
            self._cluster.silo_ids = running_silo_ids(self._cluster.namespace)
            change = self._cluster._scale_here(target, timeout=timeout)
            self._live = list(self._cluster.silo_ids)
            return change

    def set_target(self, target: int) -> None:
        """Record ``target``; the next round starts what is missing (it never stops silos)."""
        with self._lock:
            _run(write_target(self._cluster.store_url, target))
            self._target = target
        self._wake.set()

    def drain(self, node: str, timeout: float) -> dict[str, Any]:
        """Place no silo on ``node`` from now on, and stop its silos gracefully: each finishes its
        attempts in flight and releases its shards, which peers adopt at once. The next round
        (started now) starts them again on other nodes. Returns the silos stopped and how long."""
        started = time.time()
        with self._lock:
            self._cluster.avoid.add(node)
            self._cluster.silo_ids = running_silo_ids(self._cluster.namespace)
            on_node = sorted(s for s, n in self._cluster.placement().items() if n == node)
            self._cluster._stop(on_node, timeout)
        self._wake.set()
        return {"node": node, "stopped": on_node, "stop_s": round(time.time() - started, 3)}

    def undrain(self, node: str) -> bool:
        """Let silos be placed on ``node`` again; whether it was draining."""
        with self._lock:
            was = node in self._cluster.avoid
            self._cluster.avoid.discard(node)
            return was

    def stop(self) -> None:
        """End the rounds (before the silos are shut down: the keeper must not start them again)."""
        with self._lock:
            self._stopped = True
        self._wake.set()
