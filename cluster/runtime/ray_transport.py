"""The silo's transport over Ray: named handler actors, grains activated on demand, peer silos.

Lookups go through Ray's GCS, so handles are cached per target and dropped when a call finds the
actor dead. A target that does not exist yet is not an error here: the silo stages the job until
the actor appears (Dapr's staging queue) or ``undeliverable_timeout`` runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import ray
from ray.core.generated.common_pb2 import ActorDiedErrorContext  # type: ignore[attr-defined]  # generated, no stubs

from cluster.model.ahead import Ahead
from cluster.model.attempt import DELIVER, Attempt, Outcome
from cluster.model.errors import SiloStopping, failure, one_line
from cluster.model.jobs import Target
from cluster.model.routing import SiloLost, SiloRefused
from cluster.model.waiting import wait_bounded
from cluster.model.wire import resolve_code_path
from cluster.runtime.membership import SILO_PREFIX
from cluster.runtime.transport import Ping, TargetAbsent

log = logging.getLogger("timeshard.delivery")

# What Ray's GCS says when the raylet on the actor's node saw its worker process exit
# (GenWorkerDiedCause, reason WORKER_DIED). The Python exception keeps only this message, not the
# reason field. A lost node, `ray.kill` or a dead owner read differently: those prove nothing
# about the process, which may still run behind a partition.
WORKER_EXITED = "The actor is dead because its worker process has died."
# The handler actor method a cancel calls to keep attempts sent ahead from starting (JobHandler's).
WITHDRAW = "timeshard_withdraw"
#: How long one lookup of an actor by name may take (s) before its target counts as absent for now.
LOOKUP_TIMEOUT = 10.0
#: How long (s) a silo Ray has marked dead may take to exit on this host before its peers give up
#: waiting for that proof (they then wait out its lease). A killed worker exits in ~60 ms idle.
EXIT_GRACE_S = 0.3
#: A ping's first answer when the handle kept for a peer belongs to an actor that died: look again.
_STALE = object()


def proves_exit(exc: BaseException) -> bool:
    """Whether Ray's error for a call says the actor's worker process exited (not just unreachable)."""
    return isinstance(exc, ray.exceptions.ActorDiedError) and WORKER_EXITED in str(exc)


def record_proves_exit(record: Mapping[str, Any], node: str, pid: int) -> bool:
    """Whether Ray's record of an actor (``ray._private.state``'s actor table row) proves that
    process ``pid`` on ``node`` (``<Ray node id>/<pid namespace>``, a membership row's) ended.

    Only a death the raylet on the actor's own node reported counts (WORKER_DIED: it saw the
    worker process exit), and only for that very process: the record's last pid and node. Ray
    records RAY_KILL when it sends the kill, NODE_DIED when it stops hearing from a node, and
    either may name a process that runs on behind a partition; an older process of a restarted
    actor may run on too (its node was thought lost), so a record of another pid proves nothing.
    """
    cause = record.get("DeathCause")
    if record.get("State") != "DEAD" or cause is None or pid <= 0 or not node:
        return False
    if cause.WhichOneof("context") != "actor_died_error_context":
        return False
    if cause.actor_died_error_context.reason != ActorDiedErrorContext.WORKER_DIED:
        return False
    where = record.get("Address") or {}
    return bool(record.get("Pid") == pid and where.get("NodeID") and where.get("NodeID") == node.partition("/")[0])


def _actor_record(actor_id: str) -> Mapping[str, Any]:
    """Ray's record of one actor, dead or alive, from its GCS (a blocking round trip; no dashboard needed)."""
    from ray._private.state import state  # private, but the only reader that needs no dashboard

    return dict(state.actor_table(actor_id) or {})


def pid_namespace() -> str:
    """This process's pid namespace, so that a pid recorded with it names one process."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def process_ended(pid: int) -> bool:
    """Whether process ``pid`` of this pid namespace is gone or a zombie (it can run no more code)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)  # no /proc (macOS): signal 0 only asks whether it exists
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    return stat.rpartition(")")[2].split()[:1] in (["Z"], ["X"])


class ActorDirectory:
    """Resolves targets to Ray actor handles, activating grains on first use.

    ``ray.get_actor`` blocks for a round trip to Ray's GCS (25-30 ms under load, issue 15): a
    lookup runs in the loop's executor thread, awaited with a timeout, and concurrent lookups of
    one target share it. A cached handle costs nothing.
    """

    def __init__(self, default_namespace: str | None) -> None:
        self._namespace = default_namespace
        self._handles: dict[str, Any] = {}
        self._lookups: dict[str, asyncio.Future[Any]] = {}

    async def resolve(self, target: Target) -> Any:
        """The actor handle for ``target``; raises ``TargetAbsent`` if it does not exist."""
        key = target.routing_key
        handle = self._handles.get(key)
        if handle is not None:
            return handle
        lookup = self._lookups.get(key)
        if lookup is None:
            lookup = self._lookups[key] = asyncio.ensure_future(asyncio.to_thread(self._look_up, target))
            lookup.add_done_callback(lambda _: self._lookups.pop(key, None))
        try:
            handle = await wait_bounded(asyncio.shield(lookup), LOOKUP_TIMEOUT)
        except asyncio.TimeoutError:
            raise TargetAbsent(f"looking up actor {target.name!r} took over {LOOKUP_TIMEOUT} s") from None
        self._handles[key] = handle
        return handle

    def _look_up(self, target: Target) -> Any:
        """In a worker thread: Ray's lookup, or a grain's activation."""
        namespace = target.namespace or self._namespace
        try:
            return ray.get_actor(target.name, namespace=namespace)
        except ValueError:
            if target.kind != "grain":
                raise TargetAbsent(f"no actor named {target.name!r} in namespace {namespace!r}") from None
            return self._activate(target, namespace)

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


class RayTransport:
    """Delivers batches of attempts to handler actors and pings peer silos, all through Ray.

    Built by the code that wires the cluster and pickled into each silo actor: it holds only its
    namespace until first used, then caches handles in the silo's process.
    """

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self._directory = ActorDirectory(namespace)
        self._peers: dict[str, Any] = {}
        self._actor_ids: dict[str, str] = {}  # silo id -> the id of the last actor found under its name
        self._dead: dict[str, Exception] = {}  # silo id -> how its kept handle died, while looked up again

    def __getstate__(self) -> dict[str, Any]:
        return {"namespace": self.namespace}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["namespace"])  # type: ignore[misc]

    def node_id(self) -> str:
        with contextlib.suppress(Exception):
            return f"{ray.get_runtime_context().get_node_id()}/{pid_namespace()}"
        return ""

    def exited(self, node: str, pid: int) -> bool:
        # Known only where it ran: the same Ray node and pid namespace, so the pid names that process.
        return bool(node) and pid > 0 and node == self.node_id() and pid != os.getpid() and process_ended(pid)

    async def ended(self, silo_id: str, node: str, pid: int) -> bool:
        if self.exited(node, pid):
            return True
        record = await self._record(silo_id)
        if record_proves_exit(record, node, pid):
            return True
        if node == self.node_id() and record.get("State") == "DEAD" and record.get("Pid") == pid:
            # Ray marks an actor dead as it sends the kill, a moment before the process exits:
            # this host's process table tells once it has.
            return await self._exits_within(pid, EXIT_GRACE_S)
        return False

    async def _record(self, silo_id: str) -> Mapping[str, Any]:
        """Ray's record of the last actor found under ``silo_id``'s name; {} if none or no answer."""
        actor_id = self._actor_ids.get(silo_id)
        if actor_id is None:
            return {}  # never found under its name here: no record to ask about
        try:
            return await wait_bounded(asyncio.to_thread(_actor_record, actor_id), LOOKUP_TIMEOUT)
        except Exception:  # Ray's GCS slow or unreachable: nothing is known
            return {}

    async def _exits_within(self, pid: int, seconds: float) -> bool:
        """Whether process ``pid`` of this host ends within ``seconds``, looking every few ms."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while not process_ended(pid):
            if loop.time() >= end:
                return False
            await asyncio.sleep(0.02)
        return True

    async def resolve(self, target: Target) -> Any:
        return await self._directory.resolve(target)

    def waits(self, handle: Any) -> bool:
        return hasattr(handle, DELIVER) and hasattr(handle, WITHDRAW)

    async def deliver(self, target: Target, handle: Any, attempts: Sequence[Attempt], timeout: float,
                      lease_end: float, ahead: Ahead | None = None,
                      stops: Mapping[str, float] | None = None) -> list[Outcome]:
        try:
            method = getattr(handle, DELIVER)
            batch = [tuple(a) for a in attempts]
            if stops:  # only then: a handler of an older version is called as before
                ref = method.remote(batch, timeout, lease_end, None if ahead is None else tuple(ahead), dict(stops))
            elif ahead is None:
                ref = method.remote(batch, timeout, lease_end)
            else:
                ref = method.remote(batch, timeout, lease_end, tuple(ahead))
            outcomes = await wait_bounded(ref, timeout + 10 + _wait_s(attempts, ahead))
        except AttributeError:
            return await self._deliver_one_by_one(handle, attempts, timeout, lease_end)
        except asyncio.TimeoutError:
            return [Outcome(a.run_id, f"no answer within {timeout} s", "TimeoutError", True) for a in attempts]
        except ray.exceptions.RayActorError as exc:
            self._directory.forget(target)
            return [Outcome(a.run_id, f"handler actor failed: {one_line(exc)}", type(exc).__name__) for a in attempts]
        except Exception as exc:  # a serialization or Ray fault: the attempts failed, not the silo
            return [Outcome(a.run_id, *failure(exc)) for a in attempts]
        return [Outcome(*o) for o in outcomes]

    async def withdraw(self, handle: Any, run_ids: Sequence[str], lease_end: float, timeout: float) -> list[str] | None:
        try:
            return list(await wait_bounded(getattr(handle, WITHDRAW).remote(list(run_ids), lease_end), timeout))
        except Exception as exc:  # lost, timed out, actor dead: nothing is known of these runs
            log.warning("a withdraw got no answer", extra={"runs": len(run_ids), "error": repr(exc)})
            return None

    async def _deliver_one_by_one(self, handle: Any, attempts: Sequence[Attempt], timeout: float,
                                  lease_end: float) -> list[Outcome]:
        """For actors that define ``execute_job`` but do not subclass JobHandler.

        Such a handler cannot check the sender's lease, so it is checked here, right before
        each call: a silo paused past its lease sends nothing (issue 12, point 8).
        """

        async def one(attempt: Attempt) -> Outcome:
            if time.time() > lease_end:
                return Outcome(attempt.run_id, "the sending silo's lease had expired", "LeaseExpired", refused=True)
            try:
                await wait_bounded(handle.execute_job.remote(attempt.context()), timeout)
            except asyncio.TimeoutError:
                return Outcome(attempt.run_id, f"no answer within {timeout} s", "TimeoutError", True)
            except Exception as exc:
                return Outcome(attempt.run_id, *failure(exc))
            return Outcome(attempt.run_id)

        return list(await asyncio.gather(*(one(a) for a in attempts)))

    async def ping(self, silo_id: str, timeout: float) -> Ping:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        answer = await self._ping_once(silo_id, timeout)
        if answer is _STALE:
            # The handle kept here was of an actor removed since; the name may be a new actor's
            # now (the keeper starts a lost or drained silo again under its id), and that one is
            # the row's incarnation: ask it, never take the old actor's death for the new one's.
            answer = await self._ping_once(silo_id, max(0.0, deadline - loop.time()), dead=self._dead.pop(silo_id))
        assert isinstance(answer, Ping)
        return answer

    async def _ping_once(self, silo_id: str, timeout: float, dead: Any = None) -> Ping | object:
        """One ping; ``_STALE`` when the handle kept here answered that its actor died (its error
        kept in ``_dead``); ``dead``: that error, if this is the second look."""
        handle = self._peers.get(silo_id)
        try:
            if handle is None:  # looked up off the event loop, within the ping's timeout
                found = await wait_bounded(asyncio.to_thread(
                    ray.get_actor, SILO_PREFIX + silo_id, namespace=self.namespace), timeout)
                handle = self._peers[silo_id] = found
                before = self._actor_ids.get(silo_id)
                actor_id = getattr(found, "_actor_id", None)
                if actor_id is not None:
                    self._actor_ids[silo_id] = actor_id.hex()
                if dead is not None and actor_id is not None and actor_id.hex() == before:
                    # The name is still the dead handle's actor (Ray restarting it, or not yet
                    # rid of it): its death is the answer, as before the second look.
                    return Ping.EXITED if proves_exit(dead) else Ping.GONE
            await wait_bounded(handle.ping.remote(), timeout)
            return Ping.ALIVE
        except ValueError:
            # No such actor: removed, but nothing says its process ended (an exit the kept
            # handle saw still does).
            return Ping.EXITED if dead is not None and proves_exit(dead) else Ping.GONE
        except ray.exceptions.ActorUnavailableError:
            return Ping.UNKNOWN  # unreachable for now, maybe restarting: the heartbeat watch decides
        except ray.exceptions.RayActorError as exc:
            self._peers.pop(silo_id, None)
            if dead is None:
                self._dead[silo_id] = exc
                return _STALE
            return Ping.EXITED if proves_exit(exc) else Ping.GONE
        except asyncio.TimeoutError:
            return Ping.UNKNOWN  # busy or paused: the heartbeat watch decides
        except Exception:  # e.g. Ray's OutOfMemoryError: a death, but no proof of how
            return Ping.UNKNOWN

    async def call_peer(self, silo_id: str, method: str, args: Sequence[Any], timeout: float) -> Any:
        handle = self._peers.get(silo_id)
        try:
            if handle is None:  # looked up off the event loop, as a ping's
                handle = self._peers[silo_id] = await wait_bounded(asyncio.to_thread(
                    ray.get_actor, SILO_PREFIX + silo_id, namespace=self.namespace), timeout)
        except (ValueError, asyncio.TimeoutError) as exc:
            raise SiloRefused(f"silo {silo_id} is not registered ({exc!r})") from exc
        try:
            return await wait_bounded(getattr(handle, method).remote(*args), timeout)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, asyncio.TimeoutError) as exc:
            self._peers.pop(silo_id, None)
            raise SiloLost(f"silo {silo_id} did not answer {method}: {one_line(exc)}") from exc
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, SiloStopping):  # raised before doing anything
                raise SiloRefused(f"silo {silo_id}: {one_line(exc.cause)}") from exc
            raise SiloLost(f"silo {silo_id} failed {method}: {one_line(exc)}") from exc

    def notify_adopt(self, silo_ids: Iterable[str]) -> None:
        for silo_id in silo_ids:
            handle = self._peers.get(silo_id)
            if handle is not None:
                with contextlib.suppress(Exception):
                    handle.adopt_now.remote()


def _wait_s(attempts: Sequence[Attempt], ahead: Ahead | None) -> float:
    """How long (s) the handler may wait before the last of ``attempts`` is due."""
    if ahead is None or not attempts:
        return 0.0
    return max(0, max(a.scheduled_for_us for a in attempts) - ahead.sent_us) / 1e6
