"""Issue 28, deliverable 2: a peer proven dead is taken over at once; nothing a running process
could bring about counts as proof.

Two layers: the heartbeat's decision, given what the transport can prove (``Transport.ended``),
and the Ray transport's own proofs (this host's process table, Ray's record of an actor's death),
with stand-ins for Ray's answers (Ray is imported, never started).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from typing import Any

import pytest
from ray.core.generated.common_pb2 import ActorDeathCause, ActorDiedErrorContext

import cluster.runtime.ray_transport as rt
from cluster.runtime.membership import ACTIVE, DEAD, EXITED, REPORTED, Membership
from cluster.runtime.ray_transport import RayTransport, record_proves_exit
from cluster.runtime.transport import Ping
from storage import MemoryStore
from tests.runtime.harness import OPTIONS, ManualClock, add, job, make_parts, until_idle

LEASE = OPTIONS.firing_lease.total_seconds()


# -- the heartbeat: what it does with a proof, and without one ------------------------------------


@pytest.mark.parametrize("answer", [Ping.GONE, Ping.UNKNOWN])
async def test_a_peer_whose_process_is_proven_ended_is_taken_over_at_once_whatever_its_ping_said(answer: Ping) -> None:
    """GONE: removed by ``ray.kill`` or given up by Ray; UNKNOWN: a ping that timed out, or Ray restarting it."""
    store, clock = MemoryStore(), ManualClock()
    victim = await make_parts(store, "v", clock=clock)
    j = job(due=timedelta(seconds=2))
    await add(victim, j)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.alive["v"] = answer
    watcher.transport.ended_peers.add("v")
    await watcher.heartbeat.detect_failures()
    row = (await Membership(store).members())["v"]
    assert row.status == DEAD and row.cause == EXITED and row.ended_through == 1
    assert watcher.queue.get(j.id) is not None  # no lease to wait out: its process runs no more


async def test_a_peer_gone_from_this_hosts_table_is_taken_over_without_waiting_for_a_slow_ping() -> None:
    """A peer Ray is restarting answers no ping until its timeout: it must not hold up another's takeover."""
    store, clock = MemoryStore(), ManualClock()
    victim = await make_parts(store, "v", clock=clock)
    j = job(due=timedelta(seconds=2))
    await add(victim, j)
    await make_parts(store, "slow", clock=clock)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.exited_nodes.add("local/v")
    slow = watcher.transport.pinging["slow"] = asyncio.Event()
    round_ = asyncio.ensure_future(watcher.heartbeat.detect_failures())
    await until_idle()  # everything the round does before the slow ping answers
    try:
        assert not round_.done()  # still waiting for the slow ping...
        row = (await Membership(store).members())["v"]
        assert row.cause == EXITED and row.ended_through == 1  # ... while the gone peer is declared dead
        assert watcher.queue.get(j.id) is not None  # and its shard taken
    finally:
        slow.set()
        await round_
    assert (await Membership(store).members())["slow"].status == ACTIVE


async def test_a_peer_ray_reports_dead_without_proof_keeps_its_shards_until_its_lease_ran_out() -> None:
    """Removed from Ray while its process may run on behind a partition: Ray's word is not proof."""
    store, clock = MemoryStore(), ManualClock()
    victim = await make_parts(store, "v", clock=clock)
    j = job(due=timedelta(seconds=2))
    await add(victim, j)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.alive["v"] = Ping.GONE
    await watcher.heartbeat.detect_failures()
    row = (await Membership(store).members())["v"]
    assert row.status == DEAD and row.cause == REPORTED and row.ended_through == 0
    assert watcher.queue.get(j.id) is None
    clock.advance(LEASE)
    assert await watcher.adoption.adopt_orphans() == 1


async def test_a_peer_that_does_not_answer_is_not_declared_dead_without_proof() -> None:
    """A timed-out ping (busy, paused, a network fault) is not a death: the heartbeat watch decides."""
    store, clock = MemoryStore(), ManualClock()
    await make_parts(store, "v", clock=clock)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.transport.alive["v"] = Ping.UNKNOWN
    await watcher.heartbeat.detect_failures()
    assert (await Membership(store).members())["v"].status == ACTIVE


async def test_a_peer_that_answers_is_never_declared_dead() -> None:
    store, clock = MemoryStore(), ManualClock()
    await make_parts(store, "v", clock=clock)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.transport.alive["v"] = Ping.ALIVE
    watcher.transport.ended_peers.add("v")  # a stale row's pid: the actor answered, so it is not dead
    await watcher.heartbeat.detect_failures()
    assert await watcher.heartbeat.declare_peer_dead("v") is False
    assert (await Membership(store).members())["v"].status == ACTIVE


async def test_proof_that_comes_after_ray_reported_a_peer_dead_still_spares_the_lease() -> None:
    """Ray marks an actor dead as it sends the kill: the round that sees it gone may find its
    process still there, and declares it dead without proof; the next finds it gone."""
    store, clock = MemoryStore(), ManualClock()
    victim = await make_parts(store, "v", clock=clock)
    j = job(due=timedelta(seconds=2))
    await add(victim, j)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.alive["v"] = Ping.GONE
    await watcher.heartbeat.detect_failures()
    assert (await Membership(store).members())["v"].cause == REPORTED
    await watcher.heartbeat.detect_failures()
    assert (await Membership(store).members())["v"].cause == REPORTED  # still no proof: still waiting
    watcher.transport.ended_peers.add("v")
    await watcher.heartbeat.detect_failures()
    row = (await Membership(store).members())["v"]
    assert row.status == DEAD and row.cause == EXITED and row.ended_through == 1
    assert watcher.queue.get(j.id) is not None  # at once, its lease not waited out


async def test_a_caller_told_a_peer_died_takes_its_shards_at_once_with_proof_and_after_its_lease_without() -> None:
    store, clock = MemoryStore(), ManualClock()
    proven, unproven = await make_parts(store, "p", clock=clock), await make_parts(store, "u", clock=clock)
    jp, ju = job(due=timedelta(seconds=2)), job(due=timedelta(seconds=2))
    await add(proven, jp)
    await add(unproven, ju)
    watcher = await make_parts(store, "w", clock=clock)
    watcher.adoption._budget = 64
    watcher.transport.alive.update(p=Ping.GONE, u=Ping.GONE)
    watcher.transport.ended_peers.add("p")
    assert await watcher.heartbeat.declare_peer_dead("p") and await watcher.heartbeat.declare_peer_dead("u")
    rows = await Membership(store).members()
    assert (rows["p"].cause, rows["u"].cause) == (EXITED, REPORTED)
    assert watcher.queue.get(jp.id) is not None and watcher.queue.get(ju.id) is None


# -- the Ray transport's proofs ------------------------------------------------------------------

NODE = "a" * 56
HERE = f"{NODE}/4026531836"


def record(state: str = "DEAD", reason: int | None = ActorDiedErrorContext.WORKER_DIED, pid: int = 4242,
           node: str = NODE) -> dict[str, Any]:
    """Ray's actor table row (``ray._private.state``), as the GCS keeps it after a death."""
    cause = ActorDeathCause()
    if reason is not None:
        cause.actor_died_error_context.CopyFrom(ActorDiedErrorContext(reason=reason, pid=pid))
    return {"State": state, "DeathCause": cause, "Pid": pid, "Address": {"NodeID": node}}


def test_only_rays_record_of_that_very_process_exiting_proves_it_ended() -> None:
    assert record_proves_exit(record(), HERE, 4242)  # the raylet on its node saw it exit
    not_proof = {
        "killed by ray.kill (recorded when the kill is sent)": record(reason=ActorDiedErrorContext.RAY_KILL),
        "its node reported lost": record(reason=ActorDiedErrorContext.NODE_DIED),
        "its owner died": record(reason=ActorDiedErrorContext.OWNER_DIED),
        "no reason recorded": record(reason=None),
        "alive (reachable or not)": record(state="ALIVE"),
        "restarting": record(state="RESTARTING"),
        "a later process of the actor exited": record(pid=4343),
        "a process of that pid on another node": record(node="b" * 56),
        "no node recorded": record(node=""),
    }
    for why, rec in not_proof.items():
        assert not record_proves_exit(rec, HERE, 4242), why
    assert not record_proves_exit(record(), "", 4242)  # the row says not where it ran
    assert not record_proves_exit({}, HERE, 4242)  # Ray has no record of it


@pytest.fixture
def here(monkeypatch: pytest.MonkeyPatch) -> Iterator[RayTransport]:
    """A Ray transport on node ``HERE``, which knows peer ``p``'s actor id."""
    monkeypatch.setattr(RayTransport, "node_id", lambda self: HERE)
    transport = RayTransport("test")
    transport._actor_ids["p"] = "01" * 16
    yield transport


def _reaped_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True)
    return int(child.stdout)


def _running(seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A process of this host that runs on (it stands for a silo alive but unreachable)."""
    running = _running(30)
    yield running
    running.kill()
    running.wait()


async def test_a_process_gone_from_this_hosts_table_is_proof_one_still_there_is_not(
        here: RayTransport, sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    def no_record(actor_id: str) -> Mapping[str, Any]:
        raise AssertionError("the host's proof needs no GCS")

    monkeypatch.setattr(rt, "_actor_record", no_record)
    assert await here.ended("p", HERE, _reaped_pid())
    for state in ("ALIVE", "RESTARTING"):  # however unreachable over the network
        monkeypatch.setattr(rt, "_actor_record", lambda actor_id, state=state: record(state=state, pid=sleeper.pid))
        began = time.monotonic()
        assert not await here.ended("p", HERE, sleeper.pid)
        assert time.monotonic() - began < rt.EXIT_GRACE_S  # nothing to wait for


async def test_a_process_ray_marked_dead_is_proven_ended_once_it_exits_here_and_not_while_it_runs(
        here: RayTransport, sleeper: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray marks an actor dead as it sends ``ray.kill``; the process exits a moment later, or, cut
    off from the kill, runs on: only its exit from this host's table proves anything."""
    exiting = _running(0.1)
    try:
        monkeypatch.setattr(rt, "_actor_record", lambda actor_id: record(reason=ActorDiedErrorContext.RAY_KILL,
                                                                           pid=exiting.pid))
        assert await here.ended("p", HERE, exiting.pid)
    finally:
        exiting.wait()
    monkeypatch.setattr(rt, "_actor_record", lambda actor_id: record(reason=ActorDiedErrorContext.RAY_KILL,
                                                                       pid=sleeper.pid))
    assert not await here.ended("p", HERE, sleeper.pid)


async def test_another_hosts_process_is_proven_ended_only_by_rays_record_of_its_exit(
        here: RayTransport, monkeypatch: pytest.MonkeyPatch) -> None:
    there = f"{NODE}/other-pid-namespace"  # same Ray node id, another pid namespace: its pids are not ours
    pid = _reaped_pid()  # gone here, which says nothing of a pid over there
    monkeypatch.setattr(rt, "_actor_record", lambda actor_id: record(reason=ActorDiedErrorContext.RAY_KILL, pid=pid))
    assert not await here.ended("p", there, pid)
    monkeypatch.setattr(rt, "_actor_record", lambda actor_id: record(pid=pid))
    assert await here.ended("p", there, pid)
    assert not await RayTransport("test").ended("p", there, pid)  # no actor id known: no record to ask about


async def test_a_gcs_that_fails_or_does_not_answer_proves_nothing(
        here: RayTransport, monkeypatch: pytest.MonkeyPatch) -> None:
    there = "b" * 56 + "/1"

    def unreachable(actor_id: str) -> Mapping[str, Any]:
        raise ConnectionError("GCS unreachable")

    monkeypatch.setattr(rt, "_actor_record", unreachable)
    assert not await here.ended("p", there, 4242)

    def slow(actor_id: str) -> Mapping[str, Any]:
        time.sleep(0.3)
        return record(node="b" * 56)

    monkeypatch.setattr(rt, "_actor_record", slow)
    monkeypatch.setattr(rt, "LOOKUP_TIMEOUT", 0.05)
    assert not await here.ended("p", there, 4242)
    await asyncio.sleep(0.3)  # let the abandoned lookup's thread finish
