"""The client for code that does not await: ``cluster.client(sync=True)`` or ``SyncClient(client)``.

Every name of ``Client`` (and of its ``jobs``, ``reminders`` and ``flows``) is here with the same
arguments and results; a call blocks until the async call it wraps is done, and raises what that
raises. It runs that call on an event loop the ``SyncClient`` owns:

- in a plain script, a synchronous Ray task or a threaded actor, in the caller's own thread: no
  thread is started;
- where the calling thread already runs an event loop (a notebook cell, an async actor's method),
  a loop cannot be run inside it: the call then runs in one worker thread that lives for that
  call only, while the caller waits (as it would for ``ray.get``).

Why not ``ray.get`` on the silos' answers directly: a call is more than one Ray round trip (it
follows a job's shard across hops, retries other silos, and named jobs and flows read and write
the store from the caller's process through async store clients). Running the async client keeps
one implementation of all that. Why one loop kept for the client's life rather than
``asyncio.run`` per call: what the client opens (an Azure store's connections) belongs to the
loop it was opened on. Calls through one ``SyncClient`` run one at a time; for many at once,
await the async client instead. Pickles like the async client (its loop stays behind).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import threading
from collections.abc import Callable, Coroutine, Sequence
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from cluster.client import Client
from cluster.flows.api import Flows
from cluster.model.options import ClusterOptions
from cluster.named.api import NamedJobs
from cluster.named.reminders import Reminders

__all__ = ["SyncClient", "SyncFlows", "SyncNamedJobs", "SyncReminders"]

P = ParamSpec("P")
T = TypeVar("T")
A = TypeVar("A")


class _Runner:
    """Runs coroutines to completion on one event loop of its own, one at a time."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def run(self, call: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                self._loop = asyncio.new_event_loop()
            return _off_any_running_loop(_complete, self._loop, call)

    def close(self) -> None:
        with self._lock:
            if self._loop is not None and not self._loop.is_closed():
                _off_any_running_loop(_shut, self._loop)
            self._loop = None


def _off_any_running_loop(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(...)`` in this thread, or, if this thread runs an event loop (a notebook, an async
    actor), in a worker thread for that call only: a loop cannot be run inside another."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn(*args, **kwargs)
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="timeshard-sync-call") as worker:
        return worker.submit(fn, *args, **kwargs).result()


def _shut(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


def _complete(loop: asyncio.AbstractEventLoop, call: Coroutine[Any, Any, T]) -> T:
    task = loop.create_task(call)
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():  # interrupted (Ctrl-C): cancelled now, not resumed by the next call
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        raise


class _Blocking(Generic[A]):
    """The blocking face of an async object: ``_blocking`` methods run its coroutines."""

    def __init__(self, target: A, runner: _Runner) -> None:
        self._target = target
        self._runner = runner


def _blocking(method: Callable[Concatenate[A, P], Coroutine[Any, Any, T]]) -> Callable[Concatenate[_Blocking[A], P], T]:
    """``method`` of the async class, blocking: same arguments, same result, same errors."""

    def call(self: _Blocking[A], *args: P.args, **kwargs: P.kwargs) -> T:
        return self._runner.run(method(self._target, *args, **kwargs))

    functools.update_wrapper(call, method)  # name, docstring and signature (help(), inspect)
    return call


class SyncNamedJobs(_Blocking[NamedJobs]):
    """``client.jobs`` of a ``SyncClient``: the names of ``NamedJobs``, blocking."""

    put = _blocking(NamedJobs.put)
    put_many = _blocking(NamedJobs.put_many)
    get = _blocking(NamedJobs.get)
    list = _blocking(NamedJobs.list)
    list_page = _blocking(NamedJobs.list_page)
    count = _blocking(NamedJobs.count)
    trigger = _blocking(NamedJobs.trigger)
    pause = _blocking(NamedJobs.pause)
    resume = _blocking(NamedJobs.resume)
    pause_all = _blocking(NamedJobs.pause_all)
    resume_all = _blocking(NamedJobs.resume_all)
    delete = _blocking(NamedJobs.delete)
    delete_prefix = _blocking(NamedJobs.delete_prefix)
    close = _blocking(NamedJobs.close)


class SyncReminders(_Blocking[Reminders]):
    """``client.reminders`` of a ``SyncClient``: the names of ``Reminders``, blocking."""

    register = _blocking(Reminders.register)
    unregister = _blocking(Reminders.unregister)
    get = _blocking(Reminders.get)
    list = _blocking(Reminders.list)


class SyncFlows(_Blocking[Flows]):
    """``client.flows`` of a ``SyncClient``: the names of ``Flows``, blocking."""

    submit = _blocking(Flows.submit)
    get = _blocking(Flows.get)
    list = _blocking(Flows.list)
    page = _blocking(Flows.page)
    cancel = _blocking(Flows.cancel)


class SyncClient(_Blocking[Client]):
    """``Client`` for code that does not await: the same names, each call blocking until done.

    Made by ``cluster.client(sync=True)``, or around any client: ``SyncClient(client)``. See the
    module docstring for where a call runs. ``close()`` (or ``with``) releases its event loop
    and what named jobs opened on it; it is made again by the next call.
    """

    def __init__(self, client: Client) -> None:
        super().__init__(client, _Runner())
        self._jobs: SyncNamedJobs | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"client": self._target}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["client"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"SyncClient(namespace={self.namespace!r}, silos={self.silo_ids!r})"

    @property
    def client(self) -> Client:
        """The async client this one runs: for code that can await."""
        return self._target

    @property
    def namespace(self) -> str:
        return self._target.namespace

    @property
    def silo_ids(self) -> Sequence[str]:
        return self._target.silo_ids

    @property
    def options(self) -> ClusterOptions:
        return self._target.options

    @property
    def jobs(self) -> SyncNamedJobs:
        """Named jobs (Dapr Jobs API): ``put``, ``get``, ``delete``, ``list``, ``delete_prefix`` ..."""
        if self._jobs is None:
            self._jobs = SyncNamedJobs(self._target.jobs, self._runner)
        return self._jobs

    @property
    def reminders(self) -> SyncReminders:
        """Actor reminders, kept as named jobs: ``register``, ``unregister``, ``get``, ``list``."""
        return SyncReminders(self._target.reminders, self._runner)

    @property
    def flows(self) -> SyncFlows:
        """Flows (Volcano JobFlow): ``submit``, ``get``, ``cancel``, ``list``, ``page``."""
        return SyncFlows(self._target.flows, self._runner)

    def resolve_target(self, target: Any) -> Any:
        return self._target.resolve_target(target)

    describe = _blocking(Client.describe)
    schedule_job = _blocking(Client.schedule_job)
    schedule_jobs = _blocking(Client.schedule_jobs)
    submit_jobs = _blocking(Client.submit_jobs)
    try_cancel_job = _blocking(Client.try_cancel_job)
    trigger_job = _blocking(Client.trigger_job)
    pause_job = _blocking(Client.pause_job)
    resume_job = _blocking(Client.resume_job)
    set_paused = _blocking(Client.set_paused)

    def close(self) -> None:
        """Close what named jobs opened (a store's connections) and this client's event loop."""
        self._runner.run(self._target.jobs.close())
        self._runner.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
