"""`timeshard drain --node`: which Ray node a preStop hook or an operator names."""

from __future__ import annotations

import pytest

from cluster.cli.drain import resolve_node
from cluster.cli.jobs import _Failure

NODES = [
    {"NodeID": "aa11" + "0" * 52, "Alive": True, "NodeManagerAddress": "10.0.0.1", "NodeManagerHostname": "pod-a"},
    {"NodeID": "aa22" + "0" * 52, "Alive": True, "NodeManagerAddress": "10.0.0.2", "NodeManagerHostname": "pod-b"},
    {"NodeID": "bb33" + "0" * 52, "Alive": False, "NodeManagerAddress": "10.0.0.3", "NodeManagerHostname": "pod-c"},
]


def test_a_node_is_named_by_self_its_id_a_unique_prefix_its_address_or_host_name() -> None:
    assert resolve_node("self", NODES, "here") == "here"  # the hook's own pod: the Ray node it runs on
    assert resolve_node(NODES[1]["NodeID"], NODES, "here") == NODES[1]["NodeID"]
    assert resolve_node("aa2", NODES, "here") == NODES[1]["NodeID"]
    assert resolve_node("10.0.0.1", NODES, "here") == NODES[0]["NodeID"]
    assert resolve_node("pod-b", NODES, "here") == NODES[1]["NodeID"]


def test_an_ambiguous_or_unknown_or_dead_node_is_refused_naming_the_alive_ones() -> None:
    with pytest.raises(_Failure, match="more than one"):
        resolve_node("aa", NODES, "here")
    with pytest.raises(_Failure, match=r"names no alive Ray node; alive: aa1100000000 \(10.0.0.1\)"):
        resolve_node("10.0.0.3", NODES, "here")  # gone already: nothing to drain
