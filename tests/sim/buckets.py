"""Named jobs on silo-owned registry buckets in the simulation (issue 25, points 5 and 6; the ``buckets`` kind).

In a share of seeds (the ``buckets`` kind, off by default) the simulated cluster keeps names in
registry buckets (``named_registry="buckets"``) and the named-jobs caller of
``tests.sim.named`` works them: its puts, deletes, reads and pauses go to each bucket's owner
silo, and the owners' fence verdicts and status records go from silo to silo. Nothing of the
registry is the simulation's but the Ray calls those take:

- the caller's calls to an owner (``BucketRay``) fail as Ray fails — the owner killed or cut off
  mid-call (``SiloLost``: it may have acted), a stopping silo (``SiloRefused``: it did not) — and
  an answer that was computed may be lost on its way back (a lost answer);
- a silo's calls to a peer (``call_peer``, as ``RayTransport.call_peer``): the same, plus no answer
  within the caller's timeout (a paused owner), and none at all from a caller that died.

Kills of a bucket's owner mid-round, its takeover by a peer within the lease bound, pauses and
partitions are the world's own faults. The checks are ``tests.sim.named``'s, judged by what the
caller was told; a job counts as pointed at when a bucket log's ``PUT`` (or a rotation's
``SNAPSHOT``) naming it lands, as the owners' fence clears jobs by that record.

What only this kind draws comes from ``random.Random(f"registry/{seed}")``, so seeds that do not
draw it keep their worlds.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cluster.model.jobs import ScheduledJob
from cluster.model.options import BUCKETS_REGISTRY
from cluster.model.routing import SiloLost, SiloRefused
from cluster.model.wire import datetime_to_us, unpack
from cluster.named.bucket import BUCKET_PREFIX, PUT, SNAPSHOT
from cluster.named.bucketclient import BucketNames
from cluster.named.putwire import PutOutcome
from cluster.named.registry import NAMED_MARK
from cluster.named.writes import PutRequest
from cluster.runtime.shardlog import ADD, SHARD_PREFIX
from cluster.runtime.shardlog import SNAPSHOT as SHARD_SNAPSHOT
from storage.records import decode
from tests.sim.client import SimRay, _drop
from tests.sim.loop import true_now_us

if TYPE_CHECKING:
    from tests.sim.named import Named
    from tests.sim.world import Process, World

#: The share of seeds (with the ``buckets`` kind on) whose cluster keeps names in registry
#: buckets; each such seed has a named-jobs caller.
BUCKETS_SHARE = 0.5
REGISTRY = BUCKETS_REGISTRY
# Errors no call should raise: a bug in the silo that raised it, not a fault it met.
BUGS = (AssertionError, TypeError, AttributeError, KeyError, IndexError, NameError)


def registry_rng(seed: int) -> random.Random:
    return random.Random(f"registry/{seed}")


def draws_buckets(world: World) -> bool:
    """Whether this seed's cluster keeps names in registry buckets."""
    return world.faults.buckets and world.registry_rng.random() < BUCKETS_SHARE


def pointed_by(name: str, method: str, payload: bytes) -> list[str]:
    """The job ids a bucket log write that landed points names at."""
    if not name.startswith(BUCKET_PREFIX) or method != "append_block":
        return []
    found = []
    for record in decode(payload).records():
        if record[0] == PUT:
            found.append(record[2]["job"])
        elif record[0] == SNAPSHOT:
            found += [metadata["job"] for _, metadata in record[1]]
    return found


class BucketRay(SimRay):
    """Ray's calls to a bucket's owner: ``SimRay``'s failures, and a feature call's answer lost on
    its way back after the owner acted."""

    def __init__(self, world: World, rng: random.Random) -> None:
        super().__init__(world, rng, ends_superseded=True)
        self._registry_rng = world.registry_rng

    async def _call(self, silo_id: str, method: str, args: tuple[Any, ...]) -> Any:
        from tests.sim.world import P_LOST_ANSWER

        world = self._world
        if method == "feature_call" and args[0] == "named_put":
            # Sends after one lost with its owner: judged, as every put, by what the client is told.
            world.stats["registry: puts sent again after a loss"] += sum(len(one) > 7 and bool(one[7]) for one in args[1])
        answer = await super()._call(silo_id, method, args)
        if (method == "feature_call" and world.injecting and world.faults.lost_answers
                and self._registry_rng.random() < P_LOST_ANSWER):
            world.stats["registry: answers lost"] += 1
            raise SiloLost(f"silo {silo_id} answered {args[0]}, the answer was lost (RayActorError)")
        return answer


async def call_peer(world: World, proc: Process, epoch: int, silo_id: str, method: str,
                    args: Sequence[Any], timeout: float) -> Any:
    """Silo ``proc`` (incarnation ``epoch``) calls peer ``silo_id``, as ``RayTransport.call_peer``:
    its answer, ``SiloRefused`` (not acted on) or ``SiloLost`` (maybe acted on)."""
    await proc.gate(epoch)  # a dead process calls no one
    if method == "feature_call" and args and args[0] == "named_cancels":
        world.stats["registry: cancels forwarded to the shard's silo"] += len(args[1])
    ray = world.peer_ray
    assert ray is not None, "a peer call in a seed without registry buckets"
    task = asyncio.ensure_future(ray._call(silo_id, method, tuple(args)))
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.add_done_callback(_drop)
        world.stats["registry: peer calls without an answer in time"] += 1
        raise SiloLost(f"silo {silo_id} did not answer {method} within {timeout} s")
    error = task.exception()
    if error is not None and not isinstance(error, (SiloLost, SiloRefused)):
        if isinstance(error, BUGS):
            world.violate(f"registry: {method}{tuple(args)[:1]} on {silo_id} raised {type(error).__name__}: {error!r}")
        error = SiloLost(f"silo {silo_id} failed {method}: {error!r}")  # Ray's RayTaskError
    await proc.gate(epoch)  # died meanwhile: the answer never comes; paused: it comes at resume
    if error is not None:
        world.note(f"registry: {proc.silo_id} -> {silo_id} {method}: {type(error).__name__} ({error})")
        raise error
    return task.result()


def added_named(name: str, method: str, payload: bytes) -> list[ScheduledJob]:
    """The named jobs a shard log write that landed adds."""
    if not name.startswith(SHARD_PREFIX) or method != "append_block":
        return []
    packed = []
    for op in decode(payload).records():
        if op[0] == ADD:
            packed.append(op[3])
        elif op[0] == SHARD_SNAPSHOT:  # a rotation folds records not yet appended into its snapshot
            packed += [row[2] for row in op[1]]
    jobs = (ScheduledJob.from_wire(unpack(one)) for one in packed)
    return [job for job in jobs if NAMED_MARK in job.metadata]


def asked(key: str, job: ScheduledJob) -> tuple[str, int, int]:
    """What ties a put's request to the job its owner makes of it under a new id (a copy but for
    the id, generation and replaced job): the name's key, the due time drawn per put and the
    put's own clock reading. The due time alone is not enough: two puts of a name drew the same
    µs (seed 236640), and the later put's job was judged as the earlier one's, superseded by a
    delete between them."""
    return key, datetime_to_us(job.first_fire), datetime_to_us(job.created_at)


class SimBucketNames(BucketNames):
    """The caller's bucket client: when each put's request left, so that the job its bucket's
    owner makes of it (a new id) is judged, as it lands in a shard, by the call that asked for it."""

    named: Named

    async def put_many(self, asks: Sequence[PutRequest]) -> list[PutOutcome]:
        named = self.named
        now_us = true_now_us(named.world.loop)
        for ask in asks:
            named.asked.setdefault(asked(ask.key, ask.job), now_us)
        outcomes = await super().put_many(asks)
        for outcome, ask in zip(outcomes, asks, strict=True):
            # Its record seen by none of the shard writes noted (a torn append that landed
            # whole, say): judged from its answer on, as asked when the request left.
            if isinstance(outcome, tuple) and outcome[1].id not in named.jobs:
                named.submitted([outcome[1]], named.asked[asked(ask.key, ask.job)])
        return outcomes
