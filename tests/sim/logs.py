"""Shard logs that rotate often and appends torn by a kill (the ``torn_logs`` kind).

In a share of seeds (drawn from ``random.Random(f"logs/{seed}")``):

- **rotation**: ``max_blocks`` is a few dozen blocks, so shard logs are compacted into new
  generations again and again while silos fire, adopt and die (``storage.log``, ``LogWriter``'s
  rotation), instead of never within a short run; and in a share of those the memory store's
  own block limit is lower still, so an append meets ``LogFull`` first and the writer must
  rotate from there (as on an append blob at 50,000 blocks).
- **torn appends**: an append in flight when its silo is killed (and three in a hundred appends
  has its silo killed as it goes out), which lands (half of them, as before), lands only in part
  in a share of those: a prefix of its block, as a file store's
  write does at a crash. Nobody was told it landed; the next owner's claim must drop the torn
  tail (README, Damage: "a torn tail is not damage") and lose nothing acknowledged.

- **damaged blocks**: in a share of those seeds, now and then a frame in the middle of a shard
  log (not a move or a snapshot, see ``damage_blocks``) has bytes changed in the store (bit
  rot: its ETag stays). The README promises that such a
  frame costs only its own records, that the shard is then *damaged* (copied byte for byte to
  ``damaged/`` before anything compacts it away) and that the rest of the shard runs. So the jobs
  with a record in that frame are exempt from every check (counted), and every other job is held
  to all of them. A cancel on its way back when a frame with a removal of its job was damaged
  may be the one that lost its removal, so its True is not held either (``World.cancel_returned``);
  one sent after the damage writes its own, and is.

The checks are the world's (nothing acknowledged lost, cancels that hold, one chain per job)
and one more: a torn tail is dropped, never taken for damage (nothing kept in ``damaged/`` but
what was damaged here).
A seed that draws neither runs as it did before this existed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from cluster.runtime.shardlog import ADD, CANCELLED, MOVED, PAUSE, REMOVE, SHARD_PREFIX, SNAPSHOT
from storage import MemoryStore
from storage.damage import DAMAGED_PREFIX
from storage.generations import generation_name
from storage.records import decode
from tests.sim.loop import true_now_us

if TYPE_CHECKING:
    from tests.sim.world import Process, World

#: The share of seeds whose logs rotate often, and whose killed appends may tear.
LOG_SHARE = 0.5
#: ``max_blocks`` of such a seed, drawn per seed: a rotation every few heartbeats of a busy shard.
MAX_BLOCKS = (8, 16, 40)
#: The share of those seeds in which the store's own block limit comes first.
P_STORE_LIMIT = 0.3
#: Per append in flight at its silo's kill that lands: the share that lands torn.
P_TORN = 0.7
#: The share of those seeds in which blocks are damaged, and how often (s) one is.
P_DAMAGE = 0.3
DAMAGE_EVERY_S = (2.0, 6.0)
#: Per append (with kills on): its silo is killed as it sends it. Kills at random moments rarely
#: catch an append in flight (one in 30 seeds); these do.
P_KILL_AT_APPEND = 0.03


class Logs:
    """What this seed does to shard logs."""

    def __init__(self, world: World) -> None:
        self.rng = random.Random(f"logs/{world.seed}")
        self.on = world.faults.torn_logs and self.rng.random() < LOG_SHARE
        self.max_blocks = self.rng.choice(MAX_BLOCKS) if self.on else 0
        self.store_limit = self.on and self.rng.random() < P_STORE_LIMIT
        self.damages = self.on and self.rng.random() < P_DAMAGE
        self.damaged: dict[str, float] = {}  # generation damaged -> when

    def describe(self) -> str:
        limit = f", the store's limit {self.max_blocks // 2}" if self.store_limit else ""
        damage = "; blocks get damaged" if self.damages else ""
        return f"logs rotate every {self.max_blocks} blocks{limit}; appends in flight at a kill may tear{damage}"

    def configure(self, world: World) -> None:
        """Set the seed's rotation in the silos' options and the store's limit."""
        if not self.on:
            return
        world.options = dataclasses.replace(world.options, max_blocks=self.max_blocks)
        store = world.store
        if self.store_limit:
            store.max_blocks = self.max_blocks // 2
        create = store.create

        async def counted(name: str, metadata: Mapping[str, str]) -> str:
            etag = await create(name, metadata)
            if name.startswith(SHARD_PREFIX) and not name.endswith(generation_name("", 0)):
                world.stats["shard generations after the first"] += 1  # a rotation, or a claim of a torn log
            return etag

        store.create = counted  # type: ignore[method-assign]

    def kill_at_append(self, world: World, proc: Process) -> None:
        """Now and then, kill ``proc`` as it sends an append: the append is in flight at the kill."""
        if not (self.on and world.injecting and world.faults.kills) or self.rng.random() >= P_KILL_AT_APPEND:
            return
        # A kill like the chaos's: what explains a run again after it (``World.faulted``) must see it.
        world.faulted[proc.silo_id].append((true_now_us(world.loop), "kill"))
        proc.kill()
        world.stats["kills at an append"] += 1
        world.note(f"kill {proc.silo_id} (epoch {proc.epoch}) as it appends")
        world.spawn(world.restart_later(proc, proc.epoch, self.rng.uniform(0.5, 3.0)))

    async def final_checks(self, world: World) -> None:
        """A torn tail is not damage (README, Damage): nothing is kept as damaged but what was
        damaged here. (That a damaged generation's copy *is* kept is not checked: a claim whose
        read came before the damage owes none, and the store cannot tell its read from a later one.)"""
        kept = {info.name[len(DAMAGED_PREFIX):] for info in await world.store.list(DAMAGED_PREFIX)}
        if kept - set(self.damaged):
            world.violate(f"torn taken for damage: {sorted(kept - set(self.damaged))} kept as damaged, "
                          f"{world.stats.get('torn appends', 0)} appends torn there and no block damaged")

    async def damage_blocks(self, world: World, until: float) -> None:
        """Until ``until`` (loop time), now and then change bytes in a frame in the middle of a
        shard log; the jobs with a record there are exempt from the checks."""
        rng = self.rng
        while True:
            await asyncio.sleep(rng.uniform(*DAMAGE_EVERY_S))
            if world.loop.time() >= until:
                return
            store: MemoryStore = world.store
            logs = [(name, log) for name, log in sorted(store._logs.items())
                    if name.startswith(SHARD_PREFIX) and name not in self.damaged]
            framed = [(name, log, frames) for name, log in logs if len(frames := decode(bytes(log.body)).frames) >= 3]
            if not framed:
                continue
            name, log, frames = rng.choice(framed)
            # In the middle (a whole frame follows it), and no move or snapshot: half a move lost
            # leaves its job live in two shards, whose runs then displace each other in one silo's
            # run table, where this simulation's transport finds what it sends (``SimTransport``).
            middle = [i for i in range(len(frames) - 1) if not _moves(frames[i].records)]
            if not middle:
                continue
            i = rng.choice(middle)
            start, end = frames[i].offset, frames[i + 1].offset
            for _ in range(rng.randint(1, 4)):
                log.body[rng.randrange(start, end)] ^= rng.randint(1, 255)
            jobs = sorted(_job_ids(frames[i].records))
            self.damaged[name] = world.loop.time()
            world.stats["damaged frames"] += 1
            world.stats["jobs exempt: a record damaged"] += len(jobs)
            world.note(f"damage bytes {start}-{end} of {name}: records of {jobs} lost")
            for job_id in jobs:
                world.exempt(job_id)
            for op in frames[i].records:
                if op[0] == REMOVE and len(op) > 3 and op[3] == CANCELLED:
                    world.cancel_frame_damaged(op[1])  # a cancel still on its way back may not hold
                elif op[0] == PAUSE and len(op) > 1:
                    world.pause_frame_damaged(op[1])  # nor a pause whose record this was

    async def land_killed_append(self, world: World, name: str, payload: bytes, if_match: str) -> bool:
        """An append in flight at its silo's kill, which lands: torn (True, done here) or whole
        (False: the caller lands it)."""
        if not self.on or self.rng.random() >= P_TORN:
            return False
        store: MemoryStore = world.store
        log = store._logs.get(name)
        if log is None or log.etag != if_match or log.blocks >= store.max_blocks:
            return False  # it would not have landed at all: the whole append fails as it would
        keep = self.rng.randint(1, max(1, len(payload) - 1))
        log.body += payload[:keep]
        log.blocks += 1
        log.etag = store._etag()
        world.stats["torn appends"] += 1
        world.note(f"append to {name} torn at its silo's kill: {keep} of {len(payload)} bytes landed")
        return True



def _moves(records: Iterable[Any]) -> bool:
    """Whether a frame holds a snapshot or a move: a REMOVE that moved its job on, or the ADD
    of a next occurrence (which names its source)."""
    return any(op[0] == SNAPSHOT or (op[0] == REMOVE and len(op) > 3 and op[3] == MOVED)
               or (op[0] == ADD and len(op) > 7) for op in records)


def _job_ids(records: Iterable[Any]) -> set[str]:
    """The jobs a frame's records are about (a snapshot's: every job it holds)."""
    ids: set[str] = set()
    for op in records:
        if op[0] == SNAPSHOT:
            ids.update(entry[0] for entry in op[1])
        elif len(op) > 1 and isinstance(op[1], str):
            ids.add(op[1])
    return ids
