"""Starting, finding and stopping a cluster of silos on Ray: the composition root.

This is where the parts meet: a silo actor gets the features' hooks (named jobs, flows), the
Ray transport and the Ray metrics exporter here, and nowhere else.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Collection, Sequence
from typing import Any, Literal, overload

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from cluster._keeper import KEEPER_NAME, Keeper
from cluster.client import Client, running_silo_ids
from cluster.features import feature_hooks
from cluster.model.errors import RemoteTraceback, describe, unwrapped
from cluster.model.options import DEFAULT_NAMESPACE, ClusterOptions
from cluster.model.placement import Node, NoNodeFits, place
from cluster.runtime import heap
from cluster.runtime.membership import DEAD, REPORTED, SILENT, SILO_PREFIX, Member, Membership
from cluster.runtime.ray_metrics import RayMetrics
from cluster.runtime.ray_transport import RayTransport
from cluster.runtime.silo import Silo
from cluster.sync_client import SyncClient
from storage import DEFAULT_URL, open_store

log = logging.getLogger("timeshard.cluster")

#: How long a node whose silos were removed as lost is taken last for new silos: Ray's health
#: checks drop a lost node within about 15 s; one it still lists after this is alive.
LOST_NODE_MEMORY_S = 60.0


@ray.remote
class SiloActor(Silo):
    """A silo as a named, detached Ray actor, wired with the features' hooks and Ray's transport."""

    def __init__(self, silo_id: str, store_url: str, options: ClusterOptions, namespace: str) -> None:
        # This process runs only the silo: its collector is tuned for bursts of short-lived
        # objects over a large long-lived heap (see cluster.runtime.heap).
        heap.tune()
        # Silo.__init__ by name: Ray rebinds this class's name to its actor class.
        Silo.__init__(self, silo_id, store_url, options, namespace, hooks=feature_hooks,
                      transport=RayTransport(namespace), metrics_exporter=RayMetrics(), on_superseded=_end_process)


@ray.remote
class SiloKeeper(Keeper):
    """The keeper of a namespace's silo count as a detached Ray actor (``cluster._keeper``)."""

    def __init__(self, namespace: str, store_url: str, options: ClusterOptions, target: int) -> None:
        Keeper.__init__(self, Cluster(namespace, running_silo_ids(namespace), options, store_url), target)


def _end_process() -> None:
    # Ray runs a newer process of this actor; this one holds nothing and must not linger as a
    # second copy (it would answer calls meant for the new one). Logs are flushed first.
    logging.shutdown()
    os._exit(0)


#: What a Ray started by timeshard is told. Ray runs its workers at niceness 15 so its own daemons
#: come first; a silo so niced gets about 1/28 of a core beside any normal process busy on its node
#: (measured: killed silos took 31–35 s to come back beside two busy loops, and failover missed its
#: bound), so it keeps neither its heartbeat nor the failover bound. Workers run at normal priority.
LOCAL_RAY_CONFIG: dict[str, Any] = {"worker_niceness": 0}


def start_or_join_ray(address: str | None = None, *, num_cpus: int | None = None, **settings: Any) -> None:
    """Join the Ray at ``address`` (else ``RAY_ADDRESS``, else a running ``ray start``), or start a
    local one whose workers run at normal priority (``LOCAL_RAY_CONFIG``) with ``num_cpus``.

    Ray refuses a ``_system_config`` when it joins a cluster: a joined Ray keeps its own (see
    docs/deploy.md for setting ``RAY_worker_niceness`` there)."""
    named = address or os.environ.get("RAY_ADDRESS", "")
    if named in ("", "local"):
        try:
            ray.init(address=address, num_cpus=num_cpus, _system_config=LOCAL_RAY_CONFIG, **settings)
            return
        except ValueError:  # found a running cluster (`ray start`) to join: it has its own settings
            if named == "local":
                raise  # a new local Ray was asked for: Ray's error stands
    ray.init(address=address, **settings)


def _ensure_ray(namespace: str, address: str | None = None) -> None:
    if ray.is_initialized():
        return
    # A new local Ray gets room for several silos and handlers on a small machine.
    start_or_join_ray(address, num_cpus=max(4, os.cpu_count() or 1), namespace=namespace, include_dashboard=False,
                      configure_logging=False, log_to_driver=os.environ.get("TIMESHARD_RAY_LOGS", "") == "1")


def _get(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get``, but what a silo raised arrives as itself (``UnsupportedStoreFormat``,
    ``StorageError`` ...), its traceback kept as the cause, not in Ray's coloured wrapper."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.RayTaskError as exc:
        error = unwrapped(exc)
    # Raised here, outside the handler: Ray's wrapper is then not chained to it (as in the client).
    raise error


def _answers(ref: Any) -> bool:
    """Whether a finished call ``ref`` returned (rather than raised)."""
    try:
        ray.get(ref, timeout=0)
        return True
    except Exception:
        return False


def _alive_nodes() -> list[Node]:
    """Ray's alive nodes, as placement sees them."""
    return [Node(n["NodeID"], dict(n.get("Resources") or {}), "node:__internal_head__" in (n.get("Resources") or {}))
            for n in ray.nodes() if n.get("Alive")]


class Cluster:
    """A handle on the silos of one namespace: start them, connect to them, scale and stop them."""

    def __init__(self, namespace: str, silo_ids: Sequence[str], options: ClusterOptions, store_url: str) -> None:
        self.namespace = namespace
        self.silo_ids = list(silo_ids)
        self.options = options
        self.store_url = store_url
        #: Nodes no new silo is placed on (being drained), while Ray lists them alive.
        self.avoid: set[str] = set()
        #: Nodes whose silos were removed as lost, and when (monotonic): Ray lists a lost node alive
        #: for a while yet, and the membership rows that said so are overwritten once the silos run
        #: elsewhere. Forgotten after ``LOST_NODE_MEMORY_S``, by when Ray has dropped a lost node.
        self.lost_nodes: dict[str, float] = {}

    @classmethod
    def start(
        cls,
        store_url: str = DEFAULT_URL,
        silos: int = 3,
        namespace: str = DEFAULT_NAMESPACE,
        options: ClusterOptions | None = None,
        *,
        address: str | None = None,
        timeout: float = 60.0,
        keep: bool = True,
    ) -> Cluster:
        """Start ``silos`` named, detached silo actors on ``store_url`` and wait until they serve.

        Initialises Ray (in ``namespace``; joining the cluster at ``address`` if given) unless the
        caller has. Silos spread over the alive nodes (``ClusterOptions.placement``). Silos that
        already exist under these names are reused, so a second ``start`` reconnects rather
        than doubles. With ``keep`` (the default) a keeper actor on Ray's head node keeps
        ``silos`` running from then on: a silo lost with its node is started again elsewhere,
        without an operator (``cluster._keeper``); ``scale`` changes its target, ``shutdown``
        ends it first.
        """
        if silos < 1:
            raise ValueError(f"silos: must be >= 1 (got {silos})")
        options = options or ClusterOptions()
        open_store(store_url)  # a malformed URL fails here, in the caller, not in every silo
        _ensure_ray(namespace, address)
        cluster = cls(namespace, [str(i) for i in range(silos)], options, store_url)
        running = set(running_silo_ids(namespace))
        cluster._add([i for i in cluster.silo_ids if i not in running], timeout)
        if keep:
            cluster._keep(silos)
        log.info("cluster started", extra={"namespace": namespace, "silos": silos, "store": store_url})
        return cluster

    def _add(self, silo_ids: Sequence[str], timeout: float) -> dict[str, str]:
        """Start ``silo_ids`` on the nodes placement picks, and wait until they serve; where each runs.

        Ray learns of a lost node only after its health checks fail (about 15 s by default), so
        a node may still look alive: a silo Ray cannot start there is placed again elsewhere.
        """
        deadline = time.monotonic() + timeout
        # Where a silo went silent, its node may be lost (Ray lists it alive for a while yet) or
        # only that process paused: such nodes are taken last, never instead of starting no silo.
        suspect = self._nodes_of_silos_lost() | set(self.lost_nodes)
        failed: set[str] = set()  # Ray could not start a silo there: lost for sure
        waiting = list(silo_ids)
        placed: dict[str, str] = {}
        while waiting:
            usable = [n for n in _alive_nodes() if n.node_id not in self.avoid and n.node_id not in failed]
            running = self._running_nodes(exclude=silo_ids)
            try:
                nodes = place(len(waiting), [n for n in usable if n.node_id not in suspect], running,
                              placement=self.options.placement, required=self.options.placement_resources)
            except NoNodeFits:
                nodes = place(len(waiting), usable, running,
                              placement=self.options.placement, required=self.options.placement_resources)
            spawned = {silo_id: (node, self._spawn(silo_id, node)) for silo_id, node in zip(waiting, nodes, strict=True)}
            waiting = []
            for silo_id, (node, handle) in spawned.items():
                try:
                    _get(handle.ready.remote(), timeout=max(1.0, deadline - time.monotonic()))
                    placed[silo_id] = node
                except ray.exceptions.ActorUnschedulableError:
                    if time.monotonic() > deadline:
                        raise
                    log.warning("silo could not start on its node; placing it again", extra={"silo": silo_id,
                                                                                            "node": node})
                    failed.add(node)
                    waiting.append(silo_id)
                except Exception as exc:
                    if isinstance(exc.__cause__, RemoteTraceback):
                        # The silo's start raised (its store refused it): it never serves, and a
                        # detached actor left behind would be reused, refusing again, by the next start.
                        self._discard({i: h for i, (_, h) in spawned.items()})
                    raise
        return placed

    def _discard(self, spawned: dict[str, Any], timeout: float = 10.0) -> None:
        """Remove the actors of silos that failed to start, and wait until their names are free:
        Ray removes a killed actor a moment later, and a start meanwhile would be handed it."""
        for handle in spawned.values():
            ray.kill(handle, no_restart=True)
        deadline = time.monotonic() + timeout
        while set(spawned) & set(running_silo_ids(self.namespace)) and time.monotonic() < deadline:
            time.sleep(0.1)

    def _members(self) -> list[Member]:
        """The membership table's rows ([] when the store does not answer, or from async code)."""
        async def rows() -> list[Member]:
            store = open_store(self.store_url)
            try:
                return list((await Membership(store).members()).values())
            finally:
                await store.close()

        try:
            asyncio.get_running_loop()
            return []  # called from async code: a nested loop cannot run here
        except RuntimeError:
            pass
        try:
            return asyncio.run(rows())
        except Exception:
            return []

    def _nodes_of_silos_lost(self) -> set[str]:
        """Nodes where a silo was declared dead without a graceful stop: Ray may list them alive
        for a while after losing them, and a silo placed there would never start."""
        members = self._members()
        lost = {m.node.partition("/")[0] for m in members if m.status == DEAD and m.cause in (SILENT, REPORTED)}
        return lost - {m.node.partition("/")[0] for m in members if m.status != DEAD}

    def _remove_lost(self, silo_ids: Sequence[str], timeout: float = 2.0, spare: Collection[str] = ()) -> list[str]:
        """Remove the actors of silos declared dead by their peers that do not answer either (their
        node is lost: Ray lists them for a while yet); the ids left. ``spare``: silos still starting."""
        rows = {m.silo_id: m for m in self._members()
                if m.status == DEAD and m.cause in (SILENT, REPORTED) and m.silo_id not in spare}
        dead = set(rows)
        handles = {i: h for i, h in self.handles().items() if i in dead}
        refs = {i: h.ready.remote() for i, h in handles.items()}
        if not refs:
            return list(silo_ids)
        answered, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        # An error is no answer: a call to an actor whose process is gone with its node fails at
        # once (connection refused) while Ray still lists the actor alive.
        gone = [i for i, ref in refs.items() if ref not in answered or not _answers(ref)]
        for silo_id in gone:
            self.lost_nodes[rows[silo_id].node.partition("/")[0]] = time.monotonic()
            ray.kill(handles[silo_id], no_restart=True)
            log.warning("silo %s on a lost node removed (declared dead by its peers, no answer in %.1f s)",
                        silo_id, timeout, extra={"silo": silo_id})
        return [i for i in silo_ids if i not in gone]

    def prune_avoided(self) -> None:
        """Forget drained and lost nodes that left Ray (a node back under the same id is new), and
        lost ones Ray still lists after ``LOST_NODE_MEMORY_S``: only a silo of theirs was silent."""
        alive = {n.node_id for n in _alive_nodes()}
        self.avoid &= alive
        now = time.monotonic()
        self.lost_nodes = {n: at for n, at in self.lost_nodes.items() if n in alive and now - at < LOST_NODE_MEMORY_S}

    def placement(self, timeout: float = 5.0) -> dict[str, str]:
        """Silo id -> node of each silo running now (the keeper may have started some since this
        handle last looked) that answers within ``timeout`` (one on a lost node does not)."""
        self.silo_ids = running_silo_ids(self.namespace)
        refs = {silo_id: h.ready.remote() for silo_id, h in self.handles().items()}
        if not refs:
            return {}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
        out = {}
        for silo_id, ref in refs.items():
            if ref in ready:
                try:
                    out[silo_id] = ray.get(ref)["node"]
                except Exception:  # its node is gone, or it is restarting: it is nowhere now
                    continue
        return out

    def _running_nodes(self, *, exclude: Sequence[str], timeout: float = 5.0) -> list[str]:
        """The node of each running silo that answers in time (one on a lost node may not)."""
        refs = [h.ready.remote() for i, h in self.handles().items() if i not in exclude]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        nodes = []
        for ref in ready:
            try:
                nodes.append(ray.get(ref)["node"])
            except Exception:  # its node is gone, or it is restarting: it counts nowhere
                continue
        return nodes

    def _spawn(self, silo_id: str, node: str) -> Any:
        # No runtime_env: Ray shows it in plain text. Each silo reads the store credential on its
        # own node (README, Credentials); the store URL carries at most a file's path.
        actor: Any = SiloActor  # Ray's ActorClass: mypy does not apply class decorators
        return actor.options(
            name=SILO_PREFIX + silo_id,
            namespace=self.namespace,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=self.options.max_restarts,
            max_task_retries=0,
            num_cpus=self.options.silo_num_cpus,
            resources=self.options.required_resources or None,
            # Hard: Ray 2.60 placed soft-affinity actors on other nodes than asked (measured with
            # ray.cluster_utils). Ray restarts a crashed silo on its node; one whose node is lost
            # stays down (its shards are adopted by peers) until the keeper starts it elsewhere.
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
        ).remote(silo_id, self.store_url, self.options, self.namespace)

    @classmethod
    def connect(cls, namespace: str = DEFAULT_NAMESPACE, *, address: str | None = None,
                timeout: float = 30.0) -> Cluster:
        """Find the silos already running in ``namespace`` (from another driver, node or actor)."""
        _ensure_ray(namespace, address)
        ids = running_silo_ids(namespace)
        if not ids:
            raise LookupError(f"no timeshard silos in Ray namespace {namespace!r}; start them with Cluster.start")
        why = ""
        for silo_id in ids:
            try:
                handle = ray.get_actor(SILO_PREFIX + silo_id, namespace=namespace)
                described = _get(handle.describe.remote(), timeout=timeout)
            except Exception as exc:  # gone or not answering: ask the next one
                why = f" (silo {silo_id}: {describe(exc)})"
                continue
            return cls(namespace, ids, described["options"], described["store_url"])
        raise LookupError(f"no timeshard silo in Ray namespace {namespace!r} answered within {timeout:g} s{why}")

    def handles(self) -> dict[str, Any]:
        """The actor handle of each silo that exists now, by silo id; gone ones are left out."""
        out = {}
        for silo_id in self.silo_ids:
            try:
                out[silo_id] = ray.get_actor(SILO_PREFIX + silo_id, namespace=self.namespace)
            except ValueError:  # killed without restart, or removed: not an error here
                continue
        return out

    @property
    def silos(self) -> list[Any]:
        """The handles of the silos that exist now, in id order; never raises because one is gone."""
        return list(self.handles().values())

    @overload
    def client(self, *, sync: Literal[False] = False) -> Client: ...

    @overload
    def client(self, *, sync: Literal[True]) -> SyncClient: ...

    def client(self, *, sync: bool = False) -> Client | SyncClient:
        """A picklable client for this cluster: async, or with ``sync=True`` one whose calls block
        (for scripts, notebooks and Ray tasks that do not await; see ``cluster.sync_client``)."""
        client = Client(self.namespace, self.silo_ids, self.options)
        return SyncClient(client) if sync else client

    def status(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Each silo's status (see ``Silo.status``); a silo that is gone or does not answer shows its error."""
        handles = self.handles()
        out = []
        for silo_id in self.silo_ids:
            handle = handles.get(silo_id)
            if handle is None:
                out.append({"silo_id": silo_id, "error": f"no Ray actor {SILO_PREFIX}{silo_id}: removed or killed"})
                continue
            try:
                out.append(ray.get(handle.status.remote(), timeout=timeout))
            except Exception as exc:
                out.append({"silo_id": silo_id, "error": describe(exc)})
        return out

    def release_quarantine(self, shard: str, timeout: float = 30.0) -> dict[str, Any]:
        """Release ``shard`` from quarantine and queue its parked jobs again (an operator's call).

        Asks each silo; the one that holds ``shard`` answers ``{"shard", "was_quarantined",
        "released_jobs"}``. ``LookupError`` if no silo that answered holds it.
        """
        errors = []
        for silo_id, handle in self.handles().items():
            try:
                released = ray.get(handle.release_quarantine.remote(shard), timeout=timeout)
            except Exception as exc:
                errors.append(f"silo {silo_id}: {describe(exc)}")
                continue
            if released is not None:
                return dict(released)
        unanswered = f" ({len(errors)} silo(s) did not answer: {errors[0]})" if errors else ""
        raise LookupError(f"no silo holds shard {shard!r}{unanswered}; `timeshard status` lists the shards")

    def scale(self, silos: int, *, timeout: float = 60.0) -> dict[str, list[str]]:
        """Grow or shrink to ``silos`` silos while the cluster serves; returns ``{"added", "removed"}``.

        New silos are placed like the first ones and take a fair share of the loaded shards
        within a few adoption rounds (silos above their share hand shards over). Removed silos
        (the highest ids) stop gracefully: they finish what is in flight and release their
        shards, which the others adopt at once. Nothing acknowledged is lost either way. Silos
        lost with their node (declared dead by their peers, not answering) do not count, and
        their actors are removed. With a keeper, ``silos`` becomes its target, and the keeper
        makes the change (one change to the silos at a time).
        """
        if silos < 1:
            raise ValueError(f"silos: must be >= 1 (got {silos})")
        keeper = self.keeper()
        if keeper is None:
            return self._scale_here(silos, timeout=timeout)
        change: dict[str, list[str]] = ray.get(keeper.scale.remote(silos, timeout), timeout=2 * timeout + 30)
        self.silo_ids = running_silo_ids(self.namespace)
        return change

    def _scale_here(self, silos: int, *, timeout: float) -> dict[str, list[str]]:
        """``scale``, done by this process."""
        self.silo_ids = self._remove_lost(running_silo_ids(self.namespace))
        current = list(self.silo_ids)
        if silos > len(current):
            free = (str(i) for i in range(10 * silos + len(current)) if str(i) not in current)
            added = [next(free) for _ in range(silos - len(current))]
            self.silo_ids = sorted(current + added, key=lambda s: (len(s), s))
            try:
                self._add(added, timeout)
            except Exception:
                # Silos that refused to start were removed: the client must not route to them.
                running = set(running_silo_ids(self.namespace))
                self.silo_ids = [i for i in self.silo_ids if i in current or i in running]
                raise
            log.info("silos added", extra={"namespace": self.namespace, "silos": added})
            return {"added": added, "removed": []}
        removed = current[silos:]
        self._stop(removed, timeout)
        self.silo_ids = current[:silos]
        log.info("silos removed", extra={"namespace": self.namespace, "silos": removed})
        return {"added": [], "removed": removed}

    def _stop(self, silo_ids: Sequence[str], timeout: float, *, graceful: bool = True) -> None:
        """Stop ``silo_ids`` (in parallel: each hands its shards over), then remove their actors."""
        handles = {i: h for i, h in self.handles().items() if i in silo_ids}
        if graceful:
            stops = {i: h.stop.remote(timeout) for i, h in handles.items()}
            for silo_id, ref in stops.items():
                try:
                    ray.get(ref, timeout=timeout + 10)
                except Exception as exc:
                    log.warning("silo did not stop gracefully", extra={"silo": silo_id, "error": describe(exc)})
        for handle in handles.values():
            ray.kill(handle, no_restart=True)

    def _keep(self, target: int) -> None:
        """Start the keeper on Ray's head node (or find it) and give it ``target``."""
        head = next((n.node_id for n in _alive_nodes() if n.is_head), None)
        # On the head: a cluster loses its head only whole, and then every silo too.
        where = NodeAffinitySchedulingStrategy(head, soft=False) if head else None
        actor: Any = SiloKeeper  # Ray's ActorClass: mypy does not apply class decorators
        keeper = actor.options(name=KEEPER_NAME, namespace=self.namespace, lifetime="detached", get_if_exists=True,
                               # Threads: status and drain answer while a round starts silos.
                               max_restarts=-1, max_concurrency=4, num_cpus=0, scheduling_strategy=where,
                               ).remote(self.namespace, self.store_url, self.options, target)
        ray.get(keeper.set_target.remote(target))

    def keeper(self) -> Any | None:
        """The handle of this namespace's keeper, or None when its silos run without one."""
        try:
            return ray.get_actor(KEEPER_NAME, namespace=self.namespace)
        except ValueError:
            return None

    def keeping(self, timeout: float = 10.0) -> dict[str, Any] | None:
        """The keeper's view: target, live silos, draining nodes, why it waits, the silos it started
        lately (``SiloKeeper.status``); None without a keeper, ``{"error"}`` if it did not answer."""
        keeper = self.keeper()
        if keeper is None:
            return None
        try:
            return dict(ray.get(keeper.status.remote(), timeout=timeout))
        except Exception as exc:
            return {"error": describe(exc)}

    def drain(self, node: str, *, timeout: float = 30.0, wait: float = 0.0) -> dict[str, Any]:
        """Move every silo off Ray node ``node`` gracefully, for a node about to go (a Kubernetes
        preStop hook, a node-image upgrade): no silo is placed there again, its silos finish their
        attempts in flight and release their shards (peers adopt them at once: nothing waits for a
        lease), then stop; the keeper starts them again on other nodes. With ``wait`` > 0, wait up
        to that long for the silo count to be back at its target (``back_s``; None if it was not).
        """
        keeper = self.keeper()
        if keeper is None:
            raise LookupError(f"no keeper in Ray namespace {self.namespace!r}: start the silos with Cluster.start "
                              "(keep=True, the default) or `timeshard up`")
        started = time.monotonic()
        done: dict[str, Any] = dict(ray.get(keeper.drain.remote(node, timeout), timeout=timeout + 30))
        done["back_s"] = None
        while wait > 0 and time.monotonic() - started < wait:
            kept = self.keeping()
            if kept and "error" not in kept and kept["waiting"] is None and len(self.placement(timeout=2.0)) >= kept["target"]:
                done["back_s"] = round(time.monotonic() - started, 3)
                break
            time.sleep(0.2)
        self.silo_ids = running_silo_ids(self.namespace)
        return done

    def kill_silo(self, silo_id: str, *, restart: bool = True) -> None:
        """Crash a silo (no graceful stop); Ray restarts it as a new incarnation if ``restart``
        (else the keeper, if there is one, starts it again within a round)."""
        ray.kill(ray.get_actor(SILO_PREFIX + silo_id, namespace=self.namespace), no_restart=not restart)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Wait until every silo answers (e.g. after a restart)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                _get([h.ready.remote() for h in self.silos], timeout=max(1.0, deadline - time.monotonic()))
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def shutdown(self, *, graceful: bool = True, timeout: float = 30.0) -> None:
        """Stop every silo: gracefully (finish in-flight work, release shards), then remove them.
        The keeper goes first, so that it starts none of them again."""
        keeper = self.keeper()
        if keeper is not None:
            try:
                ray.get(keeper.stop.remote(), timeout=timeout + 60)
            except Exception as exc:  # gone or stuck: removed below all the same
                log.warning("keeper did not stop", extra={"error": describe(exc)})
            ray.kill(keeper, no_restart=True)
        self.silo_ids = sorted(set(self.silo_ids) | set(running_silo_ids(self.namespace)), key=lambda s: (len(s), s))
        self._stop(self.silo_ids, timeout, graceful=graceful)
