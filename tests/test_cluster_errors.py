"""``Cluster.start`` and the command line meet a store that refuses: the caller gets the project's
own error in one plain line, the silo's traceback kept behind it, and no refusing silo left behind
(issue 27, point 1, for the entry points beside the client). Ray is stood in for here, its wrapper
built as Ray builds it (``tests/test_client_errors.py``); ``tests/e2e/test_errors.py`` starts real
silos on a store marked by a newer release."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
import ray

import cluster._cluster as cluster_module
from cluster import Cluster, ClusterOptions, UnsupportedStoreFormat
from cluster.cli import main as cli
from cluster.model.errors import RemoteTraceback
from cluster.model.placement import Node
from storage import InvalidStoreUrl, StorageError
from tests.test_client_errors import ray_wrapped

REFUSAL = UnsupportedStoreFormat(2, 1, "timeshard 0.2.0")


class SiloHandle:
    """A silo actor's handle; what its calls (``ready``, ``describe``) raise is ``ray.get``'s stand-in's."""

    def __init__(self, silo_id: str) -> None:
        self.silo_id = silo_id
        self.ready = self.describe = self

    def remote(self) -> str:
        return f"ready-of-{self.silo_id}"


@pytest.fixture
def refusing_silos(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Silos whose start fails on the store; returns the ids of the silos removed since."""
    removed: list[str] = []

    def get(ref: Any, timeout: float | None = None) -> Any:
        raise ray_wrapped(REFUSAL, "ray::SiloActor.ready")

    monkeypatch.setattr(cluster_module, "_ensure_ray", lambda namespace, address=None: None)
    monkeypatch.setattr(cluster_module, "running_silo_ids", lambda namespace: [])
    monkeypatch.setattr(cluster_module, "_alive_nodes", lambda: [Node("node-1", {"CPU": 4.0}, True)])
    monkeypatch.setattr(Cluster, "_running_nodes", lambda self, exclude, timeout=5.0: [])
    monkeypatch.setattr(Cluster, "_spawn", lambda self, silo_id, node: SiloHandle(silo_id))
    monkeypatch.setattr(ray, "get", get)
    monkeypatch.setattr(ray, "kill", lambda handle, no_restart=True: removed.append(handle.silo_id))
    return removed


def test_a_start_on_a_store_of_a_newer_format_raises_the_refusal_itself(refusing_silos: list[str]) -> None:
    """Before: ``RayTaskError(UnsupportedStoreFormat)``, its text led by colour codes and the actor's repr."""
    with pytest.raises(UnsupportedStoreFormat) as caught:
        Cluster.start("memory://", silos=2, namespace="test")
    err = caught.value
    assert type(err) is UnsupportedStoreFormat and (err.found, err.supported) == (2, 1)
    assert str(err) == str(REFUSAL) and "\n" not in str(err)
    assert isinstance(err.__cause__, RemoteTraceback) and "SiloActor.ready" in err.__cause__.text
    printed = "".join(traceback.format_exception(err))
    assert "\x1b" not in printed and "RayTaskError" not in printed, printed
    # A refusing silo never serves; left as a detached actor, the next start would reuse it.
    assert sorted(refusing_silos) == ["0", "1"]


def test_a_scale_whose_new_silos_refuse_raises_the_refusal_and_keeps_only_the_silos_that_run(
        refusing_silos: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_module, "running_silo_ids", lambda namespace: ["0"])
    monkeypatch.setattr(Cluster, "_remove_lost", lambda self, silo_ids, timeout=2.0: list(silo_ids))
    cluster = Cluster("test", ["0"], ClusterOptions(), "memory://")
    with pytest.raises(UnsupportedStoreFormat) as caught:
        cluster.scale(3)
    assert isinstance(caught.value.__cause__, RemoteTraceback)
    assert sorted(refusing_silos) == ["1", "2"] and cluster.silo_ids == ["0"]


def test_connect_says_why_no_silo_answered(monkeypatch: pytest.MonkeyPatch) -> None:
    def get(ref: Any, timeout: float | None = None) -> Any:
        raise ray_wrapped(StorageError("file store /srv: [Errno 5] Input/output error"), "ray::SiloActor.describe")

    monkeypatch.setattr(cluster_module, "_ensure_ray", lambda namespace, address=None: None)
    monkeypatch.setattr(cluster_module, "running_silo_ids", lambda namespace: ["0"])
    monkeypatch.setattr(ray, "get_actor", lambda name, namespace=None: SiloHandle("0"))
    monkeypatch.setattr(ray, "get", get)
    with pytest.raises(LookupError) as caught:
        Cluster.connect("test", timeout=1)
    assert str(caught.value) == ("no timeshard silo in Ray namespace 'test' answered within 1 s "
                                 "(silo 0: StorageError: file store /srv: [Errno 5] Input/output error)")


def test_the_command_line_prints_the_refusal_in_one_line(refusing_silos: list[str], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(ray, "init", lambda **settings: None)
    monkeypatch.setattr("cluster.cli.up.running_silo_ids", lambda namespace: [])
    code = cli(["up", "--store", f"file://{tmp_path}", "--silos", "1", "--detach"])
    err = capsys.readouterr().err
    assert code == 1
    assert err == f"timeshard: {REFUSAL}\n", err
    assert refusing_silos == ["0"]


def test_a_start_on_a_malformed_store_url_fails_before_ray_is_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_ray(namespace: str, address: str | None = None) -> None:
        raise AssertionError("Ray was started for a store URL that cannot work")

    monkeypatch.setattr(cluster_module, "_ensure_ray", no_ray)
    with pytest.raises(InvalidStoreUrl, match="unknown scheme 'nosuch'") as caught:
        Cluster.start("nosuch://jobs")
    assert "\n" not in str(caught.value)
