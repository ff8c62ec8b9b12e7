"""The blocking client's shape and where its calls run, without Ray (issue 27, point 2); on a real
cluster in ``tests/e2e/test_sync_client.py``."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import threading

import pytest

from cluster import Client, SyncClient
from cluster.flows.api import Flows
from cluster.named.api import NamedJobs
from cluster.named.reminders import Reminders
from cluster.sync_client import SyncFlows, SyncNamedJobs, SyncReminders, _Blocking, _blocking, _Runner
from tests.runtime.harness import OPTIONS

PAIRS = [(Client, SyncClient), (NamedJobs, SyncNamedJobs), (Reminders, SyncReminders), (Flows, SyncFlows)]


def public_coroutines(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(cls).items()
            if not name.startswith("_") and inspect.iscoroutinefunction(fn)}


@pytest.mark.parametrize(("async_cls", "sync_cls"), PAIRS, ids=[a.__name__ for a, _ in PAIRS])
def test_every_async_name_has_a_blocking_twin_with_the_same_arguments(async_cls: type, sync_cls: type) -> None:
    """A method added to the async client without its blocking twin fails here."""
    wanted = public_coroutines(async_cls)
    assert wanted, "nothing to compare: the async class has no public coroutines?"
    for name, signature in wanted.items():
        twin = getattr(sync_cls, name, None)
        assert twin is not None, f"{sync_cls.__name__}.{name} is missing"
        assert not inspect.iscoroutinefunction(twin), f"{sync_cls.__name__}.{name} must block, not return a coroutine"
        assert inspect.unwrap(twin) is vars(async_cls)[name], f"{sync_cls.__name__}.{name} runs another method"
        assert inspect.signature(twin) == signature  # so help() shows the async method's arguments


def test_the_blocking_client_pickles_as_the_async_one_does() -> None:
    client = SyncClient(Client("apps", ["0", "1"], OPTIONS))
    copy = pickle.loads(pickle.dumps(client))
    assert isinstance(copy, SyncClient) and (copy.namespace, list(copy.silo_ids)) == ("apps", ["0", "1"])
    assert copy.jobs is copy.jobs and isinstance(copy.jobs, SyncNamedJobs)


class Probe:
    """Says where and on which loop its coroutine ran."""

    async def where(self) -> tuple[str, int]:
        await asyncio.sleep(0)
        return threading.current_thread().name, id(asyncio.get_running_loop())


class SyncProbe(_Blocking[Probe]):
    where = _blocking(Probe.where)


def test_in_a_script_a_call_runs_in_the_callers_thread_on_one_loop_kept_between_calls() -> None:
    probe = SyncProbe(Probe(), _Runner())
    first, second = probe.where(), probe.where()
    assert first[0] == threading.current_thread().name, "no thread is started where none is needed"
    assert first[1] == second[1], "each call on a new loop: what the client opened on the last one is unusable"


async def test_inside_a_running_loop_a_call_runs_in_a_thread_that_ends_with_it() -> None:
    probe = SyncProbe(Probe(), _Runner())
    plain = await asyncio.to_thread(probe.where)  # from a thread without a loop: the caller's thread
    thread, loop = probe.where()  # from this test's loop, as a notebook cell calls it
    assert thread.startswith("timeshard-sync-call") and loop == plain[1] != id(asyncio.get_running_loop())
    assert not [t for t in threading.enumerate() if t.name.startswith("timeshard-sync-call")], "a thread outlived its call"
    probe._runner.close()


def test_an_interrupted_call_is_cancelled_not_resumed_by_the_next() -> None:
    ran: list[str] = []

    async def long_call() -> None:
        def interrupt() -> None:
            raise KeyboardInterrupt  # as Ctrl-C lands while the loop waits

        asyncio.get_running_loop().call_soon(interrupt)
        try:
            await asyncio.sleep(0.05)
            ran.append("resumed")
        except asyncio.CancelledError:
            ran.append("cancelled")
            raise

    runner = _Runner()
    with pytest.raises(KeyboardInterrupt):
        runner.run(long_call())
    runner.run(asyncio.sleep(0.1))  # the next call: the interrupted one must not go on meanwhile
    runner.close()
    assert ran == ["cancelled"]
