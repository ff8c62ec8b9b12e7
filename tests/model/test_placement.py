"""Placement: silos spread one per node before any node gets a second, or pack onto one; only
onto nodes carrying the resources they require."""

from __future__ import annotations

import pytest

from cluster.model.errors import ValidationError
from cluster.model.options import ClusterOptions
from cluster.model.placement import Node, NoNodeFits, place

HEAD = Node("head", {"CPU": 2}, is_head=True)
W1, W2, W3 = (Node(f"w{i}", {"CPU": 1}) for i in (1, 2, 3))


def test_spread_puts_one_silo_per_node_workers_first_then_round_robin() -> None:
    assert place(3, [HEAD, W1, W2, W3], []) == ["w1", "w2", "w3"]
    assert place(6, [HEAD, W1, W2, W3], []) == ["w1", "w2", "w3", "head", "w1", "w2"]


def test_spread_fills_the_nodes_with_fewest_silos_first() -> None:
    # Silos left crowded on two nodes (a restart after a node loss): new ones go where none run.
    assert place(2, [HEAD, W1, W2, W3], ["w1", "w1", "w2"]) == ["w3", "head"]


def test_pack_keeps_silos_together_on_the_fullest_node() -> None:
    assert place(3, [HEAD, W1, W2], [], placement="pack") == ["w1", "w1", "w1"]
    assert place(2, [HEAD, W1, W2], ["w2"], placement="pack") == ["w2", "w2"]


def test_required_resources_pin_silos_to_the_nodes_that_carry_them() -> None:
    pinned = Node("p", {"CPU": 1, "timeshard": 3})
    assert place(3, [HEAD, W1, pinned], [], required={"timeshard": 1}) == ["p", "p", "p"]
    with pytest.raises(NoNodeFits, match="timeshard"):
        place(1, [HEAD, W1], [], required={"timeshard": 1})


def test_a_full_node_takes_no_more_silos() -> None:
    # One unit a pod (the KubeRay manifest): a second silo there would wait in Ray's queue for good,
    # so the silo a drained node's keeper moves goes to the pod with a free unit, or nowhere.
    pods = [Node(f"p{i}", {"CPU": 2, "timeshard": 1}) for i in (1, 2, 3)]
    assert place(1, pods, ["p1", "p2"], required={"timeshard": 1}) == ["p3"]
    with pytest.raises(NoNodeFits, match="no alive Ray node has room"):
        place(1, pods, ["p1", "p2", "p3"], required={"timeshard": 1})
    # The CPUs each silo reserves count the same way: a head advertising none gets no silo.
    assert place(2, [Node("head", {"CPU": 0}, is_head=True), W1], [], required={"CPU": 0.5}) == ["w1", "w1"]
    with pytest.raises(NoNodeFits):
        place(3, [Node("head", {"CPU": 0}, is_head=True), W1], [], required={"CPU": 0.5})


def test_silos_reserve_a_little_cpu_so_the_autoscaler_keeps_their_nodes() -> None:
    # Ray's autoscaler removes a node whose logical resources are all free; a silo reserving
    # nothing would leave its node looking idle.
    assert ClusterOptions().silo_num_cpus > 0
    assert ClusterOptions().placement_resources == {"CPU": ClusterOptions().silo_num_cpus}
    assert ClusterOptions(silo_num_cpus=0, silo_resources={"timeshard": 1}).placement_resources == {"timeshard": 1.0}
    with pytest.raises(ValidationError, match="silo_num_cpus"):
        ClusterOptions(silo_num_cpus=-1)


def test_options_name_the_placement_and_resources_rules() -> None:
    assert ClusterOptions(silo_resources={"timeshard": 1}).required_resources == {"timeshard": 1.0}
    with pytest.raises(ValidationError, match="placement: must be one of spread, pack"):
        ClusterOptions(placement="anywhere")
    with pytest.raises(ValidationError, match="silo_resources: must name custom resources"):
        ClusterOptions(silo_resources={"CPU": 1})
