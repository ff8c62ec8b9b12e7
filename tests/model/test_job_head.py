"""A job's head (what a silo fires on) reads exactly the records the whole job reads (issue 15)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from cluster.model.jobs import WIRE_VERSION, JobHead, ScheduledJob, Target
from cluster.model.policies import FailurePolicy
from cluster.model.wire import datetime_to_us
from tests.runtime.harness import T0, job


def test_the_head_carries_what_firing_and_a_plain_success_need() -> None:
    plain = job()
    head = ScheduledJob.head_from_wire(plain.to_wire(), {})
    assert head == JobHead(plain.target, None, {}, False, False)
    recurring = ScheduledJob.create(Target.grain("tests.model.test_job_head:Grain", 7), schedule="@every 1m",
                                    ttl=T0 + timedelta(hours=1), metadata={"k": "v"}, now=T0,
                                    failure_policy=FailurePolicy.constant("1s", 2, strategy="always"))
    head = ScheduledJob.head_from_wire(recurring.to_wire(), {})
    assert head.target == recurring.target and head.target.routing_key == recurring.target.routing_key
    assert head.ttl_us == datetime_to_us(recurring.ttl) and head.metadata == {"k": "v"}
    assert head.recurring and head.retry_always


def test_targets_decoded_with_a_memo_are_shared_and_equal_to_those_decoded_without() -> None:
    memo: dict[Any, Any] = {}
    a, b = job(), job()
    ha, hb = ScheduledJob.head_from_wire(a.to_wire(), memo), ScheduledJob.head_from_wire(b.to_wire(), memo)
    assert ha.target is hb.target
    assert ScheduledJob.from_wire(a.to_wire(), memo) == ScheduledJob.from_wire(a.to_wire()) == a


def _broken(index: int, value: Any) -> list[Any]:
    wire = job(failure_policy=FailurePolicy.constant("1s")).to_wire()
    wire[index] = value
    return wire


BROKEN = {
    "newer version": [WIRE_VERSION + 1, *job().to_wire()[1:], "more"],
    "too short": job().to_wire()[:13],
    "not a list": {"id": "x"},
    "unknown target kind": _broken(3, ["queue", "x", None]),
    "target not a list": _broken(3, "actor"),
    "due out of range": _broken(4, 10**20),
    "due not a number": _broken(4, "soon"),
    "schedule text": _broken(7, "@every never"),
    "ttl out of range": _broken(9, -(10**19)),
    "unknown policy": _broken(10, ["sometimes", 1]),
    "created not a number": _broken(11, None),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_the_head_refuses_exactly_what_the_whole_job_refuses(name: str) -> None:
    wire = BROKEN[name]
    with pytest.raises(Exception) as whole:
        ScheduledJob.from_wire(wire)
    with pytest.raises(Exception) as head:
        ScheduledJob.head_from_wire(wire, {})
    assert type(head.value) is type(whole.value) and str(head.value) == str(whole.value)


def test_odd_records_the_whole_job_reads_the_head_reads_too() -> None:
    # A float or a bool decodes as a time (timedelta takes them), and a target's parts are not
    # checked on the way back in: the head must not refuse what the whole job accepts.
    wire = job().to_wire()
    wire[4], wire[11] = float(wire[4]), True
    ScheduledJob.from_wire(wire)
    assert ScheduledJob.head_from_wire(wire, {}).target == job().target
    wire = _broken(3, ["actor", ["x"], None])
    assert ScheduledJob.head_from_wire(wire, {}).target == ScheduledJob.from_wire(wire).target


class Grain:
    """A grain class for the tests' targets."""
