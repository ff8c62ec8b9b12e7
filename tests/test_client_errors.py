"""The client's errors, without a Ray cluster: a silo's error reaches the caller as the project's
own type and one plain line, Ray's wrapper left behind (issue 27, point 1). Ray's exceptions are
built here as Ray builds them when a silo's call raised; ``tests/e2e/test_errors.py`` does it on
a real cluster with a full disk."""

from __future__ import annotations

import traceback
from datetime import timedelta
from typing import Any

import pytest
import ray.exceptions

from cluster.client import Client
from cluster.model.errors import ClusterUnavailable, EarlierTryUnsettled, RemoteTraceback, describe, failure, raised_remotely
from cluster.model.jobs import Target
from cluster.model.routing import SiloRefused
from storage import StorageError
from tests.runtime.harness import OPTIONS

SILO_TRACEBACK = """Traceback (most recent call last):
  File "/srv/storage/file.py", line 143, in _write_meta
    with open(tmp, "wb") as f:
OSError: [Errno 28] No space left on device
"""


def ray_wrapped(cause: BaseException, where: str = "ray::SiloActor.schedule") -> BaseException:
    """``cause`` as a Ray call that raised it reaches the caller: ``RayTaskError(<its type>)``."""
    error = ray.exceptions.RayTaskError(where.removeprefix("ray::"), SILO_TRACEBACK, cause, proctitle=where,
                                        pid=1864, ip="10.0.0.7", actor_repr="<cluster._cluster.SiloActor object>",
                                        actor_id="86fbea60ca9df031")
    return error.as_instanceof_cause()


def client_whose_silo_raises(error: BaseException) -> Client:
    class Method:
        async def remote(self, *args: Any) -> Any:
            raise error

    class Handle:
        def __getattr__(self, name: str) -> Method:
            return Method()

    client = Client("test", ["0"], OPTIONS, attempts=2)
    client._handle = lambda silo_id: Handle()  # type: ignore[method-assign]
    return client


def test_ray_wraps_a_silo_error_in_colour_codes_and_the_actors_repr() -> None:
    # The stand-in is faithful to what users saw, or the tests below prove nothing.
    text = str(ray_wrapped(StorageError("disk full")))
    assert text.startswith("\x1b[36mray::SiloActor.schedule") and "repr=<cluster._cluster.SiloActor" in text


async def test_a_silo_error_reaches_the_caller_as_its_own_type_in_one_plain_line() -> None:
    client = client_whose_silo_raises(ray_wrapped(StorageError("file store /srv: [Errno 28] No space left on device")))
    with pytest.raises(StorageError) as caught:
        await client.schedule_job(Target.actor("mailer", "apps"), due=timedelta(hours=1))
    err = caught.value
    assert type(err) is StorageError and str(err) == "file store /srv: [Errno 28] No space left on device"
    assert isinstance(err.__cause__, RemoteTraceback) and "OSError: [Errno 28]" in err.__cause__.text
    assert "ray::SiloActor.schedule() (pid=1864" in err.__cause__.text, "which silo process raised it is kept"
    printed = "".join(traceback.format_exception(err))
    assert "\x1b" not in printed and "RayTaskError" not in printed, printed


async def test_a_lost_silo_makes_cluster_unavailable_in_one_line() -> None:
    # As Ray words a silo process that died: a line each for its class, id, pid, name, namespace, ip.
    lost = ray.exceptions.RayActorError(error_msg="The actor died unexpectedly before finishing this task.\n"
                                                  "\tclass_name: SiloActor\n\tpid: 1864\n\tip: 10.0.0.7")
    client = client_whose_silo_raises(lost)
    with pytest.raises(ClusterUnavailable) as caught:
        await client.describe()
    assert "\n" not in str(caught.value) and "lost during describe" in str(caught.value), str(caught.value)


async def test_a_refusal_as_a_holder_reaches_the_router_saying_which_incarnation_it_settles() -> None:
    """What the router names settled on later tries travels with the silo's refusal, through Ray."""
    refused = EarlierTryUnsettled("shards ['shards/w1/x'] may still take an earlier try of this call",
                                  ["0#3", "1#2"], "0#3")
    client = client_whose_silo_raises(ray_wrapped(refused))
    with pytest.raises(SiloRefused) as caught:
        await client._call_silo("0", "schedule", ([], ["2"]))
    assert caught.value.settles == "0#3"


def test_a_handler_failure_is_the_error_raised_where_it_ran_even_through_nested_calls() -> None:
    inner = ray_wrapped(ValueError("invoice 7 has no address"), "ray::Ledger.post")
    outer = ray_wrapped(inner, "ray::Billing.timeshard_deliver")
    assert raised_remotely(outer) is not None and type(raised_remotely(outer)) is ValueError
    assert failure(outer) == ("invoice 7 has no address", "ValueError")
    assert failure(KeyError("x")) == ("'x'", "KeyError"), "an error raised in the handler itself stays as it was"
    assert describe(outer) == "ValueError: invoice 7 has no address"
    assert describe(RuntimeError()) == "RuntimeError", "an error without a message is named by its type"
