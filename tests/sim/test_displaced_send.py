"""The simulator knows the shard of every attempt a silo sends, a displaced run's too (seed 395846,
every kind: s2#3 adopted its dead incarnation's shard s2.2-000001 and started flow f7's step s2 from
it; while the step's flow hook was still admitting that run, the flow took the step again into
s2#3's fresh shard s2.3-000001 under the same job id, and a run of it started there, displacing
the first from the run table's ``inflight``. The first run, admitted, was then sent, as it should
be: its shard is held, and its flow had recorded its start. The simulator looked for it in
``inflight`` only, and stopped the delivery with "sent without a run in flight".)"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from cluster.model.attempt import Attempt
from cluster.runtime.runs import Run, RunTable
from cluster.runtime.shardlog import OWNER
from tests.sim.loop import VirtualLoop
from tests.sim.world import Faults, SimTransport, World

OLD = "shards/20300101T000000.000000Z-s2.2-000001"
FRESH = "shards/20300101T000000.000000Z-s2.3-000001"
JOB = "7e578676cf3d4b35-2"


def _run(run_id: str, base: str) -> Run:
    entry: list[Any] = [0, b"", 1, 0, 0, SimpleNamespace(base=base), None]
    assert entry[OWNER].base == base
    return Run(JOB, entry, cast(Any, None), cast(Any, None), run_id, 0, 0)


def _transport(runs: RunTable) -> SimTransport:
    world = World(0, Faults.parse("none"), VirtualLoop())
    transport = SimTransport(world, cast(Any, None), 3)
    transport.silo = cast(Any, SimpleNamespace(_r=SimpleNamespace(runs=runs)))
    return transport


def _attempt(run: Run) -> Attempt:
    return Attempt(b"", run.run_id, 1, 0, 1)


def test_a_run_displaced_by_its_job_started_from_another_shard_is_found_where_it_was_sent_from() -> None:
    runs = RunTable(4)
    first = _run("r2@s2#3", OLD)
    runs.start(first)  # waits for its hooks to admit it
    again = _run("r4@s2#3", FRESH)
    runs.start(again)  # the same job id taken again into a fresh shard: ``first`` displaced
    runs.release(again)  # its hooks undecided: asked again later, out of the table
    assert runs.displaced_of(JOB) == [first] and JOB not in runs.inflight
    transport = _transport(runs)
    assert transport._shard_of(_attempt(first)) == (JOB, OLD, None)
    assert transport._name_of(first.run_id) == f"{JOB}#1.1"


def test_a_run_in_flight_is_found_and_one_never_started_is_not() -> None:
    runs = RunTable(4)
    run = _run("r1@s2#3", OLD)
    runs.start(run)
    transport = _transport(runs)
    assert transport._shard_of(_attempt(run)) == (JOB, OLD, None)
    stray = _run("r9@s2#3", FRESH)
    try:
        transport._shard_of(_attempt(stray))
    except AssertionError as exc:
        assert "sent without a run in flight" in str(exc)
    else:
        raise AssertionError("an attempt of no run in the table was given a shard")
