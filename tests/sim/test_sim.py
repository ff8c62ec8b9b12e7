"""The deterministic simulation in ``make test``: thousands of seeded worlds of real silos under
faults, each checked against the README's promises (issue 12, deliverable 3).

Every fault kind is on by default: storage errors, lost answers, kills and restarts, pauses,
partitions from Ray, delayed and duplicated deliveries, and clock skew; and in half the seeds
dispatch ahead, to a ``JobHandler`` that waits for due times on clocks of its own, with
withdraws delayed, lost or overtaking their batch; and in half an operator pausing and resuming
jobs; and in a quarter a caller putting, overwriting, deleting, triggering, pausing and resuming
named jobs (``tests.sim.named``); and in half a user running flows (``tests.sim.flows``). The seeds
below each found a bug (now fixed): they stay as regression seeds.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

import pytest

from cluster.model.wire import datetime_to_us
from cluster.named.registry import NAMED_MARK
from tests.sim.__main__ import replay_command
from tests.sim.loop import VirtualLoop
from tests.sim.world import Faults, Result, run_seed

# Seeds 0-1399 in every run (0-1999 until the suite outgrew 15 minutes on two cores): wider searches,
# 20,000 seeds beyond this range, run before work on ownership, firing or cancel is called done.
SEEDS = 1400
REAL_CLIENT = "  0.000000 the client is cluster.client.Client"  # a line of the trace
CLOCKS_JUMP = "  0.000000 clocks jump"
NAMED = "  0.000000 a caller works named jobs"
# Fault kinds added after every seed of FOUND was found: off for those, so each keeps its world;
# a seed found with them on names them (``+torn_logs``), and they stay on for it.
LATER_KINDS = ",-real_client,-clock_jumps,-torn_logs,-named,-flows,-dormant_overwrites,-turns,-shared_hosts,-buckets,-joins"
USES_FLOWS = "  0.000000 a user runs flows"
CHUNKS = 7  # 200 seeds a chunk, a chunk per test, so progress shows and a failure names its range
# What every chunk of 200 seeds must at least do, so that "kept every invariant" means something: a
# chunk whose schedule calls mostly fail, or that never kills, adopts or cancels, proves little.
# About half the least a chunk of seeds 0-1999 did (issue 24, measured with the default kinds:
# acked 5218, kills 338, SIGSTOPs 309, partitions 274, shards taken over 1509, cancels answered
# "cancelled" 786 by either client, operator pauses 539).
FLOORS = {
    "acked": 2500,  # jobs whose schedule call was acknowledged
    "kills": 175,
    "pauses": 170,  # SIGSTOP of a silo process
    "partitions": 145,
    "shards taken over": 750,  # a shard's owner of record changed: adopted, or taken back by a new incarnation
    "cancels answered cancelled": 400,
    "operator pauses": 270,
    # Named jobs (a quarter of the seeds; measured with the default kinds, seeds 0-1999: puts
    # acknowledged 257, overwrites 111, deletes that removed a job 23, triggers 34, pauses 26 and
    # gets judged 280, the least of a chunk).
    "named: puts acknowledged": 125,
    "named: overwrites acknowledged": 55,
    "named: deletes acknowledged": 11,
    "named: triggers acknowledged": 17,
    "named: pauses acknowledged": 13,
    "named: gets checked": 140,
}
# What every chunk must at least do with flows (half the seeds; measured with the default kinds,
# seeds 0-1999, issue 24: flows submitted and acknowledged 640, every one of them completed,
# cancelled by a cancel that returned True 113, halted by their policy 78, the least of a chunk).
FLOW_FLOORS = {
    "flows submitted": 320,  # acknowledged: the submit returned
    "flows completed": 320,  # acknowledged and ended (succeeded, halted or cancelled) as the checks demand
    "flows cancelled": 56,
    "flows halted": 39,
}
FLOORS.update(FLOW_FLOORS)
# What every chunk may at most excuse: each allowance an oracle counts, as a share of what gives
# rise to it (excused duplicates per kill, jobs in doubt per job acknowledged to the real client,
# exemptions per damaged frame). An allowance widened by a bug, or a bug it absorbs, shows as more
# excused per chance than any chunk of seeds 0-1999 had. Each is 1.5 times the largest share a
# chunk reached (issue 24), measured twice: with the default kinds, and with +torn_logs, whose
# torn outcomes run far more again after a kill (its column applies when the seeds tear logs).
# The comments give both: excused/chances of the chunk with the largest share. One never seen has
# no margin: its first case is a finding, to be explained before it is allowed.
CEILINGS: dict[str, tuple[str, float, float]] = {
    # allowance: (its chances, the most per chance by default, ... with torn logs)
    "in flight at a kill": ("kills", 0.12, 0.38),  # 28/354 = 0.079; 83/331 = 0.25
    "succeeded twice: kill": ("kills", 0.55, 1.34),  # 128/354 = 0.36; 281/316 = 0.89
    "succeeded twice: partition": ("partitions", 0.37, 0.39),  # 70/286 = 0.24; 74/289 = 0.26
    "succeeded twice: pause": ("pauses", 0.18, 0.14),  # 40/348 = 0.11; 30/329 = 0.091
    "succeeded twice: redelivered": ("deliveries", 0.050, 0.051),  # 396/11986 = 0.033; 416/12280 = 0.034
    "succeeded twice: claimed or taken back": ("shards taken over", 0.038, 0.030),  # 46/1865 = 0.025; 44/2265 = 0.019
    # Per job, not per run: the allowance is one more chain of a job whose earlier try ran and left
    # no record, and counted per run a recurring job weighed its repeats (seed 1490: seven jobs of
    # three occurrences, drawing no retry window, put chunk 1400-1599 over as 20 runs).
    "jobs added again by a retry": ("acked", 0.0038, 0.027),  # runs then: 15/5914 = 0.0025; 106/5880 = 0.018
    "succeeded twice: arrived after its sender gave up": ("deliveries", 0.0, 0.0),  # never
    "succeeded twice: flow step's outcome lost to a kill": ("kills", 0.17, 0.60),  # 36/332 = 0.11; 131/331 = 0.40
    "client: in doubt": ("client: acked", 0.21, 0.24),  # 376/2699 = 0.14; 463/2945 = 0.16
    "named: older generation in flight at a kill": ("named: attempts started", 0.0039, 0.0078),  # 1/386; 2/383
    "named: job sent outside its calls": ("named: attempts started", 0.0, 0.0),  # never
    "flow step started after a cancel, sender killed": ("flows cancelled", 0.0, 0.0),  # never
    "jobs exempt: a record damaged": ("damaged frames", 0.0, 3.3),  # no damage; 147/68 = 2.2
    "pauses not held: their record damaged before the attempt was sent": ("damaged frames", 0.0, 0.0),  # never
    "cancels whose own removal was damaged before the answer": ("damaged frames", 0.0, 0.028),  # -; 2/108 = 0.019
}


def over_ceilings(results: list[Result]) -> dict[str, tuple[int, int, float]]:
    """Each allowance the seeds of ``results`` excused more of than its ceiling lets them:
    (excused, chances, the most allowed per chance)."""
    torn = any(r.faults.torn_logs for r in results)
    over = {}
    for key, (chance, share, torn_share) in CEILINGS.items():
        excused = sum(r.stats.get(key, 0) for r in results)
        chances = sum(r.stats.get(chance, 0) for r in results)
        most = torn_share if torn else share
        if excused > most * chances:
            over[key] = (excused, chances, most)
    return over


@pytest.fixture(autouse=True)
def _one_string_hash() -> None:
    """A seed means its world only with one string hash (silo code iterates sets of strings):
    without it every seed here runs some other world, and a kept seed proves nothing. Failing
    says so; re-running pytest in a subprocess would hide which interpreter ran what."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        pytest.fail("the simulation needs PYTHONHASHSEED=0 (make test sets it); run "
                    "PYTHONHASHSEED=0 python -m pytest tests/sim", pytrace=False)


def _explain(failures: list[Result]) -> str:
    lines = [f"{len(failures)} seeds broke an invariant (PYTHONHASHSEED={os.environ.get('PYTHONHASHSEED')!r}):"]
    for result in failures[:10]:
        lines.append(f"  seed {result.seed}: {result.violations[0]}")
        lines.append(f"    replay: {replay_command(result.seed, result.faults)}")
    return "\n".join(lines)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_every_seed_keeps_every_invariant(chunk: int) -> None:
    size = SEEDS // CHUNKS
    results = [run_seed(seed) for seed in range(chunk * size, (chunk + 1) * size)]
    failures = [r for r in results if not r.ok]
    assert not failures, _explain(failures)
    done = {key: sum(r.stats.get(key, 0) for r in results) for key in FLOORS}
    short = {key: (done[key], floor) for key, floor in FLOORS.items() if done[key] < floor}
    assert not short, f"seeds {chunk * size}-{(chunk + 1) * size - 1} did too little (done, floor): {short}"
    over = over_ceilings(results)
    assert not over, f"seeds {chunk * size}-{(chunk + 1) * size - 1} excused too much (excused, chances, share): {over}"


def test_a_seed_replays_exactly() -> None:
    first, second = run_seed(7), run_seed(7)
    assert first.digest == second.digest and first.trace == second.trace
    assert first.stats["deliveries"] > 0 and first.stats["acked"] > 0  # it did something worth replaying
    assert run_seed(8).digest != first.digest


def test_a_seed_that_draws_no_waiting_handler_runs_as_before_dispatch_ahead() -> None:
    """The ahead kind draws from a generator of its own: other seeds keep their worlds, so a seed
    found before it still means what it meant."""
    without = [run_seed(seed) for seed in range(8)]
    plain = [r for r in without if "dispatch ahead" not in r.trace[0]]
    assert 0 < len(plain) < len(without)  # some seeds wait, some do not
    for result in plain:
        assert run_seed(result.seed, Faults(ahead=False)).digest == result.digest


def test_dispatch_ahead_seeds_explore_the_waiting_handler() -> None:
    """Seeds that dispatch ahead reach what the protocol must survive: withdraws that drop a
    waiting job, withdraws that overtake their batch or lose their answer, leases that end while
    jobs wait; and each replays exactly."""
    seen: dict[str, int] = {}
    # 70: a call in doubt whose job fired is rare (seeds 59, 61 and 64 once a cancel's outcome
    # hold moved seed 30's world on: a retried cancel now shares the first one's answer).
    for seed in range(70):
        result = run_seed(seed)
        if "dispatch ahead" in result.trace[0]:
            for key, n in result.stats.items():
                seen[key] = seen.get(key, 0) + n
    for key in ("batches sent ahead", "withdrawn while waiting", "refused: Withdrawn", "arrived after its withdraw",
                "withdraws without an answer", "lease ended during the wait", "arrived past due"):
        assert seen.get(key, 0) > 0, (key, seen)
    first, second = run_seed(1939), run_seed(1939)
    assert "dispatch ahead" in first.trace[0] and first.digest == second.digest


def test_a_seed_that_draws_no_operator_runs_as_before_operator_pauses() -> None:
    """Operator pauses draw from a generator of their own: other seeds keep their worlds."""
    results = [run_seed(seed) for seed in range(8)]
    plain = [r for r in results if not any("an operator pauses" in line for line in r.trace)]
    assert 0 < len(plain) < len(results)
    for result in plain:
        assert run_seed(result.seed, Faults(operator_pauses=False)).digest == result.digest


def test_a_seed_whose_silos_share_no_host_runs_as_before_shared_hosts() -> None:
    """Hosts draw from a generator of their own: seeds whose silos each have a host keep their worlds."""
    results = [run_seed(seed) for seed in range(8)]
    plain = [r for r in results if not r.stats.get("silos sharing a host")]
    assert 0 < len(plain) < len(results)
    for result in plain:
        assert run_seed(result.seed, Faults(shared_hosts=False)).digest == result.digest


def test_silos_on_one_host_see_a_dead_peers_process_gone() -> None:
    """Seeds that share hosts reach the proof of death found without Ray (issue 28), and keep every invariant."""
    results = [run_seed(seed) for seed in range(12)]
    assert sum(r.stats.get("peers seen gone on their host", 0) for r in results) > 0
    assert not [r.seed for r in results if r.violations]


def test_operator_seeds_pause_and_resume_jobs_under_faults() -> None:
    """Seeds with an operator pause jobs and resume them, across kills and adoptions: nothing of a
    paused job is sent, and everything owed fires once resumed (checked by every seed)."""
    seen: dict[str, int] = {}
    for seed in range(20):
        for key, n in run_seed(seed).stats.items():
            seen[key] = seen.get(key, 0) + n
    assert seen.get("operator pauses", 0) > 20 and seen.get("operator resumes", 0) > 10, seen


def test_a_seed_that_draws_no_real_client_runs_as_before_it() -> None:
    """The real client draws from a generator of its own: other seeds keep their worlds."""
    results = [run_seed(seed) for seed in range(8)]
    plain = [r for r in results if REAL_CLIENT not in r.trace]
    assert 0 < len(plain) < len(results)
    for result in plain:
        assert run_seed(result.seed, Faults(real_client=False)).digest == result.digest


def test_real_client_seeds_see_every_answer_a_client_can_get() -> None:
    """Seeds whose client is ``cluster.client.Client`` get acknowledgements, calls that failed
    outright and calls in doubt, cancels that returned True; and each replays exactly."""
    seen: dict[str, int] = {}
    # 70: a call in doubt whose job fired is rare (seeds 59, 61 and 64 once a cancel's outcome
    # hold moved seed 30's world on: a retried cancel now shares the first one's answer).
    for seed in range(70):
        result = run_seed(seed)
        if REAL_CLIENT in result.trace:
            for key, n in result.stats.items():
                seen[key] = seen.get(key, 0) + n
    for key in ("acked", "client: schedule failed", "client: schedule in doubt", "client: cancelled",
                "client: in doubt, fired"):
        assert seen.get(key, 0) > 0, (key, seen)
    first, second = run_seed(2), run_seed(2)
    assert REAL_CLIENT in first.trace and first.digest == second.digest


def test_a_seed_that_draws_no_clock_jumps_runs_as_before_them() -> None:
    """Clock jumps draw from a generator of their own: other seeds keep their worlds."""
    results = [run_seed(seed) for seed in range(8)]
    plain = [r for r in results if CLOCKS_JUMP not in r.trace]
    assert 0 < len(plain) < len(results)
    for result in plain:
        assert run_seed(result.seed, Faults(clock_jumps=False)).digest == result.digest


def test_a_seed_that_draws_no_named_jobs_runs_as_before_them() -> None:
    """Named jobs draw from a generator of their own: other seeds keep their worlds."""
    results = [run_seed(seed) for seed in range(14, 22)]
    plain = [r for r in results if NAMED not in r.trace]
    assert 0 < len(plain) < len(results)
    for result in plain:
        assert run_seed(result.seed, Faults(named=False)).digest == result.digest


def test_named_seeds_put_overwrite_delete_trigger_pause_and_replay() -> None:
    """Seeds with a caller of named jobs reach every call it makes, its races and its failures,
    under faults (each checked by every seed), and replay exactly: job ids and the caller's
    clock come from the seed (``tests.sim.named.deterministic``)."""
    seen: dict[str, int] = {}
    for seed in range(15, 31):
        result = run_seed(seed)
        if NAMED in result.trace:
            for key, n in result.stats.items():
                seen[key] = seen.get(key, 0) + n
    for key in ("named: puts acknowledged", "named: overwrites acknowledged", "named: races", "named: put raised",
                "named: deletes acknowledged", "named: triggers acknowledged", "named: pauses acknowledged",
                "named: resumes acknowledged", "named: gets checked", "named: attempts started"):
        assert seen.get(key, 0) > 0, (key, seen)
    first, second = run_seed(15), run_seed(15)
    assert NAMED in first.trace and first.digest == second.digest


def test_a_seed_that_draws_no_registry_buckets_runs_as_before_them() -> None:
    """The ``buckets`` kind draws from a generator of its own: other seeds keep their worlds."""
    drew = 0
    for seed in range(6):
        result = run_seed(seed, Faults(buckets=True))
        if result.stats.get("names in registry buckets"):
            drew += 1
        else:
            assert result.digest == run_seed(seed).digest, seed
    assert 0 < drew < 6


def test_a_seed_that_draws_no_join_runs_as_before_and_a_joiner_is_handed_registry_buckets() -> None:
    """The ``joins`` kind draws from a generator of its own: a seed without a join keeps its
    world. With one, a silo joins while faults go on, and the registry buckets held beyond the
    new fair share are handed over to it, every invariant kept."""
    joined = released = 0
    for seed in range(1, 7):
        result = run_seed(seed, Faults.parse("default,+buckets,+joins"))
        assert result.ok, _explain([result])
        if result.stats.get("joins"):
            joined += 1
            released += result.stats.get("registry: buckets released", 0)
        else:
            assert result.digest == run_seed(seed, Faults.parse("default,+buckets")).digest, seed
    assert 0 < joined < 6 and released > 0


def test_registry_bucket_seeds_work_names_at_their_owners_under_faults() -> None:
    """Seeds whose names live in silo-owned registry buckets (``tests.sim.buckets``) reach every
    call the caller makes, at owners that are killed, cut off and taken over, with answers lost
    on the way, each checked by every seed; and replay exactly."""
    seen: dict[str, int] = {}
    for seed in range(40, 64):
        result = run_seed(seed, Faults.parse(BUCKETS_NOW))
        assert result.ok, _explain([result])
        if result.stats.get("names in registry buckets"):
            for key, n in result.stats.items():
                seen[key] = seen.get(key, 0) + n
    for key in ("named: puts acknowledged", "named: overwrites acknowledged", "named: races", "named: put raised",
                "named: deletes acknowledged", "named: triggers acknowledged", "named: pauses acknowledged",
                "named: gets checked", "named: attempts started", "registry: answers lost", "kills", "partitions"):
        assert seen.get(key, 0) > 0, (key, seen)
    first, second = run_seed(43, Faults.parse(BUCKETS_NOW)), run_seed(43, Faults.parse(BUCKETS_NOW))
    assert first.stats.get("names in registry buckets") and first.digest == second.digest


def test_clock_jump_seeds_step_wall_clocks_and_suspend_vms() -> None:
    seen: dict[str, int] = {}
    for seed in range(20):
        for key, n in run_seed(seed).stats.items():
            seen[key] = seen.get(key, 0) + n
    assert seen.get("wall clock steps", 0) > 10 and seen.get("suspends", 0) > 10, seen


def test_a_seed_that_draws_no_log_faults_runs_as_before_them() -> None:
    """Rotation and torn appends draw from a generator of their own: other seeds keep their worlds."""
    results = [run_seed(seed, Faults(torn_logs=True)) for seed in range(8)]
    plain = [r for r in results if not any("logs rotate every" in line for line in r.trace[:4])]
    assert 0 < len(plain) < len(results)
    for result in plain:
        assert run_seed(result.seed).digest == result.digest


def test_log_fault_seeds_rotate_and_tear_appends() -> None:
    """Seeds with log faults rotate shard logs, meet the store's block limit, and tear appends at
    kills; the next owner drops a torn tail (checked by every seed: nothing acknowledged lost)."""
    torn = rotated = 0
    for seed in range(30):  # without named jobs, which draw their own: the worlds this was measured in
        result = run_seed(seed, Faults(torn_logs=True, named=False))
        torn += result.stats.get("torn appends", 0)
        rotated += result.stats.get("shard generations after the first", 0)
    assert torn > 3 and rotated > 3, (torn, rotated)


def test_a_cancel_folded_into_a_snapshot_is_read_there() -> None:
    """A cancel queued as its shard's log rotates lands only inside the next generation's
    SNAPSHOT, as its job's absence: the checks read it there, not only from REMOVE records
    (seeds 29 and 36 of all kinds reported such cancelled jobs lost). Their worlds moved on with
    the product (a flow step's start now claims itself in its flow log, a silo adopts as soon as
    a beat reads a death, an overwrite's cancels made at its bucket's owner, one put call in flight
    per owner); seeds 23, 39 and 51 queue such a cancel now (without a silo joining, a kind added
    after them)."""
    results = [run_seed(seed, Faults.parse("all,-turns,-joins")) for seed in (23, 39, 51)]
    assert all(r.stats.get("cancels read from a snapshot") for r in results), [r.stats for r in results]
    assert all(r.ok for r in results), _explain(results)


def test_a_seed_that_draws_no_flows_runs_as_before_them() -> None:
    """Flows draw from a generator of their own: other seeds keep their worlds."""
    results = [run_seed(seed) for seed in range(8)]
    plain = [r for r in results if USES_FLOWS not in r.trace]
    assert 0 < len(plain) < len(results)
    for result in plain:
        assert run_seed(result.seed, Faults.parse("default,-flows")).digest == result.digest


def test_flow_seeds_run_flows_to_every_end_under_faults() -> None:
    """Seeds with flows submit them (again after a failed submit), cancel some, and see them
    succeed, halt by their policy and end cancelled; steps run again only after a kill; and
    each replays exactly (flow ids and tokens are drawn from the seed)."""
    seen: dict[str, int] = {}
    for seed in range(30):
        result = run_seed(seed, Faults.parse("default,+flows"))
        if USES_FLOWS in result.trace:
            for key, n in result.stats.items():
                seen[key] = seen.get(key, 0) + n
    for key in ("flows submitted", "flows submitted again after a failure", "flows succeeded", "flows halted",
                "flows cancelled", "flow steps started"):
        assert seen.get(key, 0) > 0, (key, seen)
    first, second = (run_seed(7, Faults.parse("default,+flows")) for _ in range(2))
    assert USES_FLOWS in first.trace and first.digest == second.digest


def test_virtual_time_costs_no_wall_time() -> None:
    import asyncio

    loop = VirtualLoop()
    started = time.monotonic()
    try:
        loop.run_until_complete(asyncio.sleep(3600))
        assert loop.time() >= 3600
    finally:
        loop.close()
    assert time.monotonic() - started < 1


def test_fault_kinds_are_named_and_a_wrong_one_is_refused() -> None:
    assert Faults.parse("default") == Faults() == Faults.parse("all,-torn_logs,-buckets,-joins")  # see Faults
    assert Faults.parse("none,kills") == Faults(**{**dict.fromkeys(Faults.kinds(), False), "kills": True})
    assert Faults.parse("default,-skew,-pauses") == Faults(skew=False, pauses=False)
    assert Faults.parse(Faults(skew=False).describe()) == Faults(skew=False)  # what a replay command says
    with pytest.raises(ValueError, match="'kill' is not one of"):
        Faults.parse("kill")


FLOWS_ON = "default,+real_client,+clock_jumps,+flows"  # the default kinds and flows, as the flow seeds were found
# The default kinds and flows as seeds 90000 on were found (``--faults default,+flows``).
FLOWS_NOW = "default,+real_client,+clock_jumps,+named,+flows,+dormant_overwrites,+shared_hosts"
# Seeds that each broke an invariant through a bug since fixed; see the module docstring. Those
# found before handlers waited say -ahead: with it a seed may draw a waiting handler, another world;
# and all say -operator_pauses, found before operators paused jobs (issue 16), for the same reason.
ALL_KINDS = "all,+real_client,+clock_jumps,+torn_logs"
BUCKETS_NOW = "default,+real_client,+clock_jumps,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets"
FOUND: list[tuple[int, str, str, str]] = [  # (seed, fault kinds, the bug, the invariant it broke)
    (27, "latency,kills", "point 3", "two chains"),  # killed between the ADD and the REMOVE(MOVED)
    (261, "latency,pauses", "point 3", "two chains"),  # paused between them, the shard adopted meanwhile
    (197, "latency,storage_errors,lost_answers,kills,pauses,delays,duplicates",
     "point 6", "two owners"),  # a restart took its shard back within the old incarnation's lease
    (0, "latency,partitions", "point 6", "two owners"),  # Ray said dead: adopted under a valid lease
    (137, "latency,partitions", "point 6, deliverable 2", "lost"),  # false deaths poisoned a shard
    (0, "latency,skew", "point 10", "early"),  # a silo whose clock ran ahead fired early
    (295, "all,-ahead,-operator_pauses", "point 10: first clock reading failed", "early"),  # fired on its own clock until read
    (72, "default,+pauses,-kills,-partitions,-skew,-ahead,-operator_pauses", "drained shard's delete failed", "lost"),
    (1, "default,+partitions,-kills,-pauses,-skew,-ahead,-operator_pauses", "rejoin recorded proof under a valid lease",
     "two owners"),  # a call retried by Ray ran beside the shard's new owner
    (21, "default,+partitions,-kills,-pauses,-skew,-ahead,-operator_pauses", "adoption judged before a rejoin", "two owners"),
    # A schedule call's append landed, a peer claimed the shard before the caller learnt it, and
    # the call wrote the job again into a fresh shard: both copies fired.
    *((seed, "all,-ahead,-operator_pauses", "schedule written again after a fenced append", "two chains")
      for seed in (2261, 2927, 3230, 4683)),
    # A shard handed over (balance) was adopted; the recurring job's move named a fresh shard of
    # a past window as its target, which was deleted as drained before the move landed, and the
    # delete's answer was lost: the shard stayed held with a closed writer, the move failed for good.
    (1926, "all,-ahead,-operator_pauses", "move target deleted while fresh, writer left closed", "lost"),
    # Dispatch ahead (issue 15, point 2). A cancel waiting for its withdraw saw the run end, and a
    # second cancel removed the job, queued no more; the first's removal then failed and it
    # queued the job again (from a shard since deleted as drained: a send whose owner was none).
    (161, "all,-operator_pauses", "failed cancel queued again a job another cancel removed", "cancel did not hold"),
    (105, "all,-operator_pauses", "failed cancel queued again a job another cancel removed", "two owners"),
    # A withdrawn run's batch delivered again (Ray repeats a call whose answer was lost): the
    # handler had forgotten the withdraw on the first refusal, and started it.
    (290, "all,-operator_pauses", "withdraw forgotten at the first refusal", "cancel did not hold"),
    # The outcome of a recurring job moved it to its next occurrence in another shard while a
    # cancel waited for the run; its silo then lost that shard: "cancelled", yet it fired there.
    (1939, "all,-operator_pauses", "cancel answered while the job moved on", "cancel did not hold"),
    # The same, its outcome having cancelled the next occurrence before the target was lost: the
    # fix's first form answered "moved", the target then said "absent", and the client, never told
    # "cancelled", awaited a run that could not come.
    (2780, "all,-operator_pauses", "cancel answered moved for a job cancelled in a lost target", "lost"),
    # A cancel found a recurring job's run in flight after its outcome had moved the job on; its
    # removal of the old occurrence then erased, in the fold, where the job had gone: "cancelled".
    (244, "all,-operator_pauses", "stale removal hid a move's forward", "cancel did not hold"),
    (3771, "all,-operator_pauses", "stale removal hid a move's forward", "cancel did not hold"),
    # A silo's own write to its shard landed but its answer was lost, so it dropped the shard as
    # fenced and adopted it again; a run of the dropped copy waited in its handler, and a cancel
    # on the fresh copy answered "cancelled" without withdrawing it.
    (4076, "all,-operator_pauses", "cancel left a dropped copy's run waiting", "cancel did not hold"),
    (4252, "all,-operator_pauses", "cancel left a dropped copy's run waiting", "cancel did not hold"),
    # A shard taken back from its log (an append in doubt had landed after it was undone): the
    # move it carried out was not queued while the run that decided it still ran, and that run
    # wrote nothing, as its copy was gone; or the next occurrence was queued twice.
    (3905, "all,-operator_pauses", "take-back left a moved occurrence unqueued", "lost"),
    (4547, "all,-operator_pauses", "take-back left a moved occurrence unqueued", "lost"),
    (4593, "all,-operator_pauses", "take-back queued a moved occurrence twice", "cancel did not hold"),
    # A recurring job's move was appended; the append landed, its answer was lost and the log
    # could not be read back, so the silo undid the move in memory, and its next append then
    # went on after the landed move: a cancel answered "cancelled" while the move lived on (first
    # seen as seeds 3474, 3507 and 4263 before the heartbeat kept its cadence).
    (5711, "all,-operator_pauses", "undone append landed behind a lost answer", "cancel did not hold"),
    # Operator pauses (issue 16). A pause settling a move its job's run was settling queued the
    # next occurrence while the run's outcome queued it too: two runs of one job.
    (141, "all", "pause queued a moved occurrence a run's outcome queued", "silo logged an unhandled AssertionError"),
    # A resume queued a job while a cancel of its withdrawn run waited: it ran and moved on, and
    # the cancel's removal of the old occurrence answered "cancelled".
    (1534, "all", "resume queued a job a cancel was removing", "cancel did not hold"),
    # A run of a dropped copy of a shard, displaced in the run table when its job started again
    # from the fresh copy, waited in its handler; a cancel withdrew only the fresh one.
    (1258, "all", "cancel missed a displaced run", "cancel did not hold"),
    # An attempt's outcome queued its paused job's next occurrence; a resume, applied to the
    # shard as its write went out, let it start, then queued it again once durable: two runs.
    (2128, "all", "outcome queued a paused job, resume queued it again", "silo logged an unhandled AssertionError"),
    # A claim (by a pause) settled its shard's moves one by one; the entry one handed back was
    # cancelled meanwhile, and queued anyway it ran after "cancelled".
    (2638, "all", "claim queued an entry cancelled while it settled moves", "cancel did not hold"),
    # A call of a job was on its way to its handler (delayed) when the silo took the shard back
    # from its log; the job ran again from the fresh copy, which queued its next occurrence. A
    # cancel removed that and answered "cancelled"; the delayed call then started the job.
    (9159, "all", "cancel missed a displaced run on its way", "cancel did not hold"),
    # A silo checked its lease, then was paused before its batch (sent ahead) went out; a peer,
    # told by Ray it was gone, took its shard once that lease was over, and the handler, its
    # clock 0.4 s behind the store's (within max_clock_skew), started the paused silo's copy.
    (10861, "all", "lease end sent without the handler's clock skew", "two owners"),
    # A cancel of a moved job reached a shard whose adopter was still settling its moves, settled
    # the move itself and queued the entry its target handed back, already running there: two runs.
    (30091, "all", "cancel queued a moved occurrence that ran", "silo logged an unhandled AssertionError"),
    # The default kinds. A schedule call into a shard landed in doubt, so that shard's writer
    # stopped at its next write; a recurring job's move decision, landed in doubt too, stopped
    # its source's writer. Taking the source back from its log settled the move under the lock
    # of take-backs, and the move's target had to be taken back as well: it waited on that lock
    # for good, the run stayed in flight and the next occurrence never ran.
    (43587, "all,+real_client,+clock_jumps,-torn_logs", "take-back settled a move into a shard to take back",
     "lost"),
    # A pause, applied to the shard as its write went out, made firing release the job from a
    # batch about to leave; the write failed and was undone, and nothing queued the job again:
    # live, not paused, never fired. Hidden until a pause without an answer was settled after
    # healing instead of exempting the job from the lost check (issue 24).
    (1700, "all", "failed pause left its job released from a leaving batch", "lost"),
    # A silo SIGSTOPped past its lease, whose shard was adopted meanwhile (the job moved on from
    # it and was paused there), was asked to resume the job on SIGCONT before its heartbeat learnt
    # it was declared dead: it answered "not_paused" from what it held, and the job stayed paused.
    (349, "all,+real_client,+clock_jumps,+torn_logs", "resume answered from a lost shard's memory", "pause lost"),
    # Torn logs (logs rotate every 16 blocks). A move decided again, away from a target proven
    # not to hold it, rotated its source's log; the rotation committed, then clearing the new
    # generation's pending mark failed, so the write was reported failed and taken back from
    # memory. The silo carried out the old decision (into the first target, its own by then),
    # and the source's next owner the new one from the log: two chains.
    (1829, "all,+real_client,+clock_jumps,+torn_logs", "rotation failed after its commit, move decided again",
     "two chains"),
    # Real client, clock jumps. A silo learnt it was declared dead (and dropped its shards) while
    # a schedule call's append was in flight; the append landed, its answer was lost and reading
    # the log back failed. The take-back looked for the window's open shard, found none, and the
    # call failed plainly ("not scheduled"); the shard's next owner fired the jobs.
    (8846, "all,+real_client,+clock_jumps,-torn_logs", "failed call's batch not taken back from a dropped shard",
     "not scheduled, yet fired"),
    # Torn logs (a damaged frame), clock jumps. A claim landed, then its silo (paused)
    # stalled before removing the log's other generations; a peer took the shard from it, its
    # claim rewrote the damaged log into a new generation, and the stalled claim, resumed,
    # deleted that as a leftover: every job of the shard gone, none with a damaged record.
    (7838, "all,+clock_jumps,+torn_logs,-real_client", "stale claim deleted the new owner's generation", "lost"),
    # The same with a torn tail (all kinds): the shard's log gone, its adopter fired from memory.
    (7402, "all,+real_client,+clock_jumps,+torn_logs", "stale claim deleted the new owner's generation", "two owners"),
    # A cancel found a job sent ahead already started (its withdraw came too late). The run
    # succeeded while the removal was being written (122) or while the withdraw was on its way
    # (7724); the removal failed, and the cancel, not cancelling after all, queued the job again
    # in place of the success it had dropped: the same owner ran the occurrence twice.
    (122, "all,+real_client,+clock_jumps", "failed cancel dropped a run's success, ran it again", "duplicate"),
    (7724, "all", "failed cancel dropped a run's success, ran it again", "duplicate"),
    # A claim of a shard settled its moves while a cancel of a moved job settled the same move.
    # One was claiming the orphaned target; the other, refused that claim (its own silo's), read
    # no ADD there and decided the move again into a new shard; the first then wrote its ADD.
    # The cancel followed the job into the first target and answered "cancelled"; it ran on.
    (9963, "all", "two settles of one move at once", "cancel did not hold"),
    # An append landed though reported failed, so a shard looked drained in memory; its delete was
    # under way when the silo took the shard back from its log. Fenced, the delete forgot the shard
    # by name: the fresh copy went unheld and fired on. Adoption claimed the log again, that claim
    # was handed over at once, and the unheld copy sent its job refused (lease over) again.
    (57302, "all,+real_client,+clock_jumps", "drained shard's delete unheld its fresh take-back", "two owners"),
    # Every fault (torn and damaged logs, rotation). A damaged frame lost the ADD of a recurring
    # job's next occurrence; its owner, unaware, cancelled that occurrence in a whole frame after
    # it. Replay kept occurrence 1 (the REMOVE named 2), and it ran on after "cancelled".
    (50250, ALL_KINDS, "cancel of a later occurrence than the one replay kept", "cancel did not hold"),
    (50316, ALL_KINDS, "cancel of a later occurrence than the one replay kept", "cancel did not hold"),
    # A run's outcome landed behind a lost answer and was undone in memory; a cancel's write
    # learnt it had landed (LandedAfterFailure) and, carrying on, queued the job from memory: the
    # same owner ran the occurrence again in the second before its shard was taken back.
    (53490, ALL_KINDS, "failed cancel queued a job from a stopped writer's memory", "duplicate"),
    # A retried schedule call looked for its earlier try in the first window only; the job had
    # moved on to a later window's shard and its first shard was deleted once drained: two chains.
    (42872, ALL_KINDS, "retry missed an earlier try that moved on", "two chains"),
    (53763, ALL_KINDS, "retry missed an earlier try that moved on", "two chains"),
    # Oracle errors, kept so their worlds stay checked. A cancel on its way back when its own
    # removal's frame was damaged was held to its True (the README lets damage cost that frame).
    (42417, ALL_KINDS, "oracle: cancel whose own removal was damaged held", "cancel did not hold"),
    (42566, ALL_KINDS, "oracle: cancel whose own removal was damaged held", "cancel did not hold"),
    (50218, ALL_KINDS, "oracle: cancel whose own removal was damaged held", "cancel did not hold"),
    (51257, ALL_KINDS, "oracle: cancel whose own removal was damaged held", "cancel did not hold"),
    (51602, ALL_KINDS, "oracle: cancel whose own removal was damaged held", "cancel did not hold"),
    (55661, ALL_KINDS, "oracle: cancel whose own removal was damaged held", "cancel did not hold"),
    # A job a retry added again after its earlier chain ended ran occurrence 2 in the same shard
    # both times: one more run, as the README allows, taken for a duplicate by shard.
    (45369, ALL_KINDS, "oracle: added again, the new chain through an old shard", "duplicate"),
    (45837, ALL_KINDS, "oracle: re-add into the same shard after compaction (world since changed)", "duplicate"),
    # The simulator's own bug (default kinds). A schedule call lost its try on a partitioned silo;
    # its retries waited for that silo's shard to be fenced, meanwhile the jobs ran to their end
    # and their shards were deleted as drained. The retry found nothing, wrote them again, failed
    # and could not take them back (in doubt): they ran once more, as the README allows. The
    # excuse held only for a retry acknowledged; now for one in doubt too, on the same grounds.
    (56728, "all,+real_client,+clock_jumps", "oracle: a retry in doubt added again", "duplicate"),
    # The simulator's own bug (default kinds). A named trigger's schedule call lost its try on a
    # partitioned silo and was sent again to one SIGSTOPped for 9 s; meanwhile the earlier try's
    # run fired and its shard was deleted as drained, so the retry found nothing and added it
    # again (one more run, as docs/failover.md allows). The named client's acknowledged retries
    # were never judged as the real client's and the flows' are (``earlier_try``).
    (3330, "all,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts,-torn_logs",
     "oracle: a named trigger's retry added again", "duplicate"),
    (3903, "all,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts,-torn_logs",
     "oracle: a named trigger's retry added again", "duplicate"),
    # The default kinds. A silo, SIGSTOPped with a cancel of a running recurring job pending,
    # went on at SIGCONT: the run's outcome wrote the next occurrence into the shard as the
    # cancel marked the run, so the cancel's removal named the ended occurrence. The silo learnt
    # it was declared dead, a peer claimed the shard, the outcome's removal of the next
    # occurrence was fenced, and the cancel answered "cancelled": the peer ran the job.
    (65829, "all,+real_client,+clock_jumps", "cancel answered while the next occurrence lived on",
     "cancel did not hold"),
    # The default kinds. A shard was taken back from its log twice in a row while its jobs waited
    # in their handler (sent ahead), so three copies of it each sent them. The run table kept
    # only the run of the copy displaced last: a cancel withdrew it and the fresh copy's, and the
    # first copy's started the job after "cancelled".
    (66001, "all,+real_client,+clock_jumps", "cancel missed all but the last displaced run", "cancel did not hold"),
    # Named jobs (issue 25, point 6), the default kinds. A triggered run's retry was admitted
    # while the name still pointed at its generation, then waited to be sent; an overwrite
    # returned meanwhile without cancelling it (the entry did not list it), and it started.
    (147, "all,+real_client,+clock_jumps,+named,-torn_logs", "overwrite left an admitted triggered run",
     "older generation ran"),
    # An overwrite's cancel of the recurring generation it replaced searched the shards (its
    # first was deleted as drained), found the job's shard owned by a silo being replaced, passed
    # it over as "not the owner" and answered absent; the put returned, the adopter fired it.
    (640, "all,+real_client,+clock_jumps,+named,-torn_logs", "cancel's search passed over a shard changing owner",
     "older generation ran"),
    # A named job sent ahead (1.9 s) was deferred as its clearance read failed, and queued again
    # a second later: before its due time, which the run then took for its own. It started early.
    (823, "all,+real_client,+clock_jumps,+named,-torn_logs", "deferred admission queued a run before its due time",
     "early"),
    # A put's compare-and-swap of the name's entry landed with its answer lost; the put took its
    # own write for another put's, cancelled its job and deleted its definition, then failed its
    # next try: the name pointed at nothing that runs, and get raised Fenced until the next put.
    (818, "all,+real_client,+clock_jumps,+named,-torn_logs", "put abandoned its own landed entry write",
     "unsettled"),
    # A recurring job's outcome landed with its answer lost and could not be read back; a cancel
    # stopped the outcome's retries, then its own write found the landed one (LandedAfterFailure),
    # and not cancelling after all it queued the ended run again from memory: it ran twice.
    (154, "all,+real_client,+clock_jumps,+named,-torn_logs", "failed cancel ran again a run whose outcome landed",
     "duplicate"),
    # A new name's put: its entry create landed with its answer lost, and the store's retry was
    # refused by that create itself. The put took it for another put holding the name, raised
    # AlreadyExists, and its cancel of the job failed: the job the name pointed at ran. A refused
    # entry write now reads the entry back and knows its own job (seed 818's fix, lost when the
    # put path became group-committed). Every kind but flows.
    (142700, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+turns,+shared_hosts",
     "put refused by its own landed entry create raised AlreadyExists", "AlreadyExists started"),
    # Flows (issue 24, deliverable 6), each with a test in tests/flows/test_recovery.py. A submit
    # failed after writing the definition; submitted again, the flow was returned as it stood, with
    # no root step scheduled, and nothing ever scheduled one.
    (15, FLOWS_ON, "resubmit left an acknowledged flow unscheduled", "flow lost"),
    # A step's success, refused by the flow log once, was given up: only its shard knew it, a drain
    # deleted that, and reconcile ran the step again.
    (7, FLOWS_ON, "a flow step's refused record given up", "duplicate"),
    # The same through an outcome write in doubt (the shard taken back): no hook heard of the end.
    (2033, FLOWS_ON, "an outcome in doubt never told to the flow", "duplicate"),
    # A cancel's record landed, its answer lost: read again, the flow was "finished", the call
    # answered False and cancelled no step; the steps ran on in a cancelled flow.
    (648, FLOWS_ON, "a cancel's own landed record answered False", "flow lost"),
    # A silo paused after scheduling a step (its intent unconfirmed) was taken over: the taker
    # added the job again beside the paused writer's copy (and, taken over twice, searched only the
    # last writer), or took over on a read made before the writer confirmed, or the writer's late
    # confirmation was ignored and the step taken over again.
    (154, FLOWS_ON, "takeover added a step's job beside its writer's copy", "duplicate"),
    (136, FLOWS_ON, "takeover decided on a stale read", "duplicate"),
    (419, FLOWS_ON, "a taken-over writer's confirmation ignored", "duplicate"),
    # A client's flow intent names every silo a suspect; the takeover waited on s1#1's shard of
    # the window while s1's next incarnation held it (an adopted shard, sealed), which it did to
    # the end: the steps never ran. named and dormant_overwrites (in default) are named so they stay on.
    (2053, "default,+real_client,+clock_jumps,+named,+flows,+dormant_overwrites,+shared_hosts",
     "takeover of a client's intent waited on a shard its creator's next incarnation held", "flow lost"),
    # A takeover of a client's flow intent was refused by its own silo: a shard of the window,
    # held by its live creator, might still take the client's earlier try, and only that holder
    # can tell. The taker took the step over again itself each round, keeping its intent young,
    # and the holder waited for it as for any live writer: the steps never ran. A takeover that
    # one live holder can settle is now handed to it.
    (90830, FLOWS_NOW, "takeover kept by a taker that could not settle it", "flow lost"),
    (90973, FLOWS_NOW, "takeover kept by a taker that could not settle it", "flow lost"),
    # A cancel waited 5 s for s2#1, SIGSTOPped between a step's intent and its schedule call, to
    # confirm, then returned True knowing no shard of the step's job; resumed, s2#1 added the job
    # and it started. A step's start is now refused once its flow log says cancelled (its world
    # changed with that read: tests/flows/test_recovery.py holds the case).
    (92583, FLOWS_NOW, "a cancel missed a step its paused writer added later", "flow cancel did not hold"),
    # s2#2 scheduled a step, was SIGSTOPped, and on SIGCONT failed to write the confirmation
    # (the step had run meanwhile and succeeded); it gave the confirmation up and took its own
    # intent over at once: the search found no copy (its shard drained and deleted) and the
    # step ran a second time. A writer now writes its confirmation until it lands.
    (93052, FLOWS_NOW, "a silo gave up confirming its own scheduled step and took it over", "duplicate"),
    # A run's outcome was opening the shard for the next occurrence when an operator paused the
    # job and a cancel removed the occurrence, dropping the pause from memory; the move went
    # out unpaused, the cancel's follow-up into the new shard never landed (its silo declared
    # dead), and the job, told "paused", fired there: the later resume found it not paused.
    (73583, "all,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts,-torn_logs",
     "cancel of a running occurrence dropped its pause from the move", "pause lost"),
    # An overwrite's entry write failed (PutInDoubt), leaving its generation-2 job unpointed at;
    # a delete, then a put made generation 1 of the name anew. The fence took the lower
    # generation for that overwrite still under way and deferred its job for good, asked again
    # every second by each owner of its shard. A job now carries the job its put replaces.
    (71301, "all,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts,-torn_logs",
     "fence deferred for good an overwrite's job once its name was deleted and put anew", "stuck"),
    # Every kind but flows and turns (torn and damaged logs). A silo deleting its drained shards
    # awaited one while it handed two others over; it went on to delete those, judging a move's
    # target by a listing bounded by the sources of the shards it still held, which missed the
    # target's own source. The source's next owner found the move's proof gone and decided it
    # again: the occurrence ran twice. A shard handed over is now left to its next owner.
    (107341, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+shared_hosts",
     "drained shards' delete went on to a shard handed over meanwhile", "duplicate"),
    (109234, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+shared_hosts",
     "drained shards' delete went on to a shard handed over meanwhile", "duplicate"),
    # Oracle errors, the same kinds. A paused job's move to its next occurrence was decided, its
    # target's ADD torn at a kill: the store scan that settles a resume without an answer found
    # it nowhere, took it for absent, and owed an occurrence that rightly stayed paused.
    (106680, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+shared_hosts",
     "oracle: a job whose move was under way taken for absent", "lost"),
    # A retry wrote a job again into the very shard its earlier try had run from, once that try
    # had ended and a rotation had compacted it away: the one more run docs/failover.md allows.
    (83235, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+shared_hosts",
     "oracle: a retry added again into the shard its compacted earlier try ran from", "duplicate"),
    # The same with a recurring job: the oracle took its first occurrence for never ended, as it
    # ended by the ADD of the next one in its shard (no REMOVE); its chain had ended and been
    # compacted away before the retry's search read the log, so its one more run is allowed.
    (150465, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+turns,+shared_hosts",
     "oracle: a recurring job's occurrence ended by its next one's ADD", "duplicate"),
    # A job refused (lease over) and queued again just before the end was held back for a
    # hand-over under way, judged 15 ms before the release landed and the job ran.
    (108527, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+shared_hosts",
     "oracle: judged stuck mid hand-over", "stuck"),
    # A named job's pause landed; the frame holding its record was damaged while the pause
    # awaited its withdraw; it returned "paused", and the job ran on as the README allows.
    (87706, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+shared_hosts",
     "oracle: named pause whose own record was damaged held", "pause did not hold"),
    # Pauses judged by when each attempt starts, against when the pause returned: a pause answered
    # "paused" while an attempt it could not withdraw was still on its way, and that attempt
    # started after (a delivery delayed 1.2 s; a retry sent, not ahead, to a waiting handler;
    # a named job's run in flight).
    *((seed, "default,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts",
       "pause answered while an attempt it could not withdraw was on its way", "pause did not hold")
      for seed in (78, 73, 585)),
    # The default kinds. A silo deleting its drained shards was declared dead while one delete
    # was under way (SIGSTOPped past its lease); its table emptied, so the round's listing was
    # bounded by the sources of the next shard alone, and the shard after it, the target of a
    # move from that one, read its source as gone and was deleted. The source's next owner found
    # the move's decision, its target gone, and made the move again: an ended occurrence ran twice.
    *((seed, "default,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts",
       "drained move target deleted while its source lived", "two chains") for seed in (101801, 104021)),
    # The default kinds. A shard taken back from its log ran its job again from the fresh copy,
    # while the older copy's attempt was on its way to the handler (a delayed delivery); the
    # fresh copy drained and was deleted, the run table counting only its own attempts, and the
    # older attempt then started from a shard that no longer existed.
    (121748, "default,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts",
     "drained shard deleted while an older copy's attempt was on its way", "two owners"),
    # Named jobs, the default kinds. A put's create of the name's entry landed, its answer lost;
    # the retried create answered AlreadyExists, and the put took its own entry for another
    # put's: it cancelled its job and raised AlreadyExists. The job's attempt, sent ahead by a
    # silo killed before the cancel reached it, started anyway (the earlier put path had the
    # check; the group-committed one lost it).
    (120113, "default,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts",
     "put took its own landed entry create for another put's", "named: a put refused AlreadyExists started"),
    # The default kinds. A cancel of a paused job whose run was in flight wrote its removal
    # without the shard's gate (its silo's VM suspended, the write stalled); a resume read
    # memory, the removal already applied there, and answered "absent". The removal failed (the
    # silo was declared dead meanwhile): the job lived on, paused, and a later pause found it so.
    (125919, "default,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts",
     "resume answered from a cancel's removal not yet durable", "pause"),
    # A silo sent a job ahead and was killed; a peer took its shard at once (its process seen to
    # exit), before its lease ended, and answered "paused" or "cancelled" while the job still
    # waited in its handler under that lease, where nobody was left to withdraw it: it started
    # after the answer (the oracle excused it until then).
    *((seed, "all,+real_client,+clock_jumps,+torn_logs,+named,+dormant_overwrites,+turns,+shared_hosts",
       "answered while a killed silo's attempt sent ahead could still start", invariant)
      for seed, invariant in ((142958, "pause did not hold"), (141299, "pause did not hold"),
                              (141059, "cancel did not hold"))),
    # Every default kind but flows and turns (found with "default,-turns,-flows"). A resume passed
    # its silo's look at the shard, then waited for the job's move to settle across a SIGSTOP; a
    # peer claimed the shard meanwhile and decided the move again elsewhere. The resume answered
    # "moved" from the lost shard's memory, to the first target, which said "absent": paused for good.
    (92363, "default,+real_client,+clock_jumps,+named,+dormant_overwrites,+shared_hosts",
     "resume answered from memory of a shard lost while its move settled", "lost"),
    # The default kinds, flows among them. A silo wrote its intent to schedule a step, then its
    # VM paused before the schedule call; a peer took the intent over, searched the paused
    # silo's shards (nothing yet) and ran the step. Resumed, declared dead meanwhile, the silo
    # added the job to a shard it created then, and its next incarnation ran it again.
    (1489, "default,+real_client,+clock_jumps,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a step's paused writer added its job after a taker ran it", "duplicate"),
    # Every kind. A named job's triggered run was on its way to its handler when its silo took
    # the shard back from a torn log; the fresh copy refused the run (an overwrite under way)
    # and removed it, so the next overwrite's cancel heard "absent" and did not stop the older
    # copy's call, which started the run 2 s after that put returned.
    (202823, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a cancel answered absent while an older copy's run was on its way", "older generation ran"),
    # Every kind. A silo cleared a named job as it landed, then handed its shard over; the
    # overwrite cancelled the job at the next owner, and a damaged frame later cost that REMOVE.
    # The silo claimed the shard back, the job live in it again, and admitted it from the
    # clearance it remembered: it started 6 s after the put returned.
    (206727, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a clearance kept across a hand-over admitted a job whose REMOVE was damaged", "older generation ran"),
    # Every kind (flow logs full at the store's low block limit, moved on to new generations).
    # A step's job ran late and failed; its policy counted the retry from the due time, so the
    # step was due again at once, and reconcile, measuring silence from then, read its shard 2 s
    # later while the silo that ran it was still writing "fail" (the full log being moved on):
    # the removal compacted away, it ran the step again. Its world changed with 202614's fix
    # (it passes without this one since): tests/flows/test_recovery.py holds the case.
    (201061, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a retrying step judged silent from a retry time counted from its due time", "two chains"),
    # Every kind, the same logs. A submit of the flow again created its log's first generation
    # anew (a repair had deleted it) and was to delete it on seeing the later one; meanwhile a
    # silo read that empty generation as "no such flow" and dropped its record of a step's
    # success as recorded: at 79 s reconcile found the step silent, nothing of its job in its
    # shard, and ran it again.
    (202614, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "an empty first generation created again read as no flow", "duplicate"),
    # Every kind. A client's flow submit failed in doubt, its intent taken over 60 s on and
    # handed to the one silo able to settle it; there a retry naming that silo was refused while
    # any schedule call was under way, here a step of another flow: put off round after round,
    # the acknowledged flow had not run one step two minutes after healing.
    (202493, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a retry refused while its silo wrote other jobs", "flow lost"),
    # Oracle error, every kind. A recurring job's schedule call lost its try; the job ran, moved
    # on through a second shard of its first window (its silo's next incarnation's) to the next
    # window's, and its first shard was deleted as drained. The retry found it in the shard it
    # had moved through and answered that one, writing nothing (a cancel sent there follows the
    # move); the oracle took its first occurrence, fired elsewhere, for a second add.
    (207672, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "oracle: a retry answered a shard its earlier try's chain moved through", "two chains"),
    # Every kind. s0#1 wrote its intent for a step, added the step's job to its shard and was
    # killed before confirming. s0#2 adopted the shard and ran the job, its records of the start
    # and end refused by the flow log for a while; the shard was compacted past the removal, and
    # s0#2, taking the dead writer's intent over, found no trace of the job and added it again:
    # the second copy started 0.3 s after the first's outcome was durable. A step's start is now
    # claimed in its flow log, naming its copy's shard; another copy waits. Their worlds changed
    # with the fix (a start is a flow log write now): tests/flows/test_recovery.py holds the case.
    (205777, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a taker's second copy of a step started while the first's end was on its way", "duplicate"),
    # Every kind, the same cause twice: a step's job run from an adopted shard (by the writer's
    # next incarnation, and by another silo), its end not yet in the flow log, was added again by
    # the silo taking the dead writer's intent over, and the second copy started.
    (205632, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a taker's second copy of a step started while the first's end was on its way", "duplicate"),
    # Every kind. A silo SIGSTOPped in its start's first adoption round and resumed past its
    # lease claimed a shard whose pending move needed a fresh target: the claim waited for the
    # lease to be renewed, which only the heartbeat does, and the heartbeat starts once that
    # round ends. It never fired, answered a call or learnt it had been declared dead, and the
    # jobs it had queued stayed unfired. A claim's moves that must wait now go on in the
    # background; tests/runtime/test_claim_lease.py holds the case. Found at a42fc3d; today's
    # world of 216088 no longer reaches the claim, 216011's does (its cancels and named puts
    # sent to the frozen silo got no answer).
    (216088, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a claim in the start waited for a lease only the heartbeat renews", "stuck"),
    (216011, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a claim in the start waited for a lease only the heartbeat renews", "unsettled"),
    # Every kind. A recurring job's ADD was in a frame damaged while its silo was stopped; the
    # silo, resumed, wrote the operator's PAUSE of it (the job live in its memory) and then its
    # running attempt's next occurrence, an ADD in the same shard. The adopter's replay met the
    # PAUSE with the job not live, dropped it, and fired that occurrence 0.65 s after "paused".
    (222064, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a pause read before the ADD that followed its damaged one was dropped", "pause did not hold"),
    # Every kind. A client's flow submit failed in doubt; 60 s on, s2#3 took its intent over and
    # was refused: s0#5 and s1#1 each held a shard of the window the client's call might still
    # reach (one kept by a job that never fired, the other by a move's proof from it). No
    # single silo could settle both, the step was handed to nobody and waited as long as they
    # held them: to the end of the run, its failing step never ran. It goes from holder to
    # holder now, each refusal naming the holders already settled.
    (220668, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a takeover two live holders refused waited on both for good", "flow not halted"),
    # Every kind. A recurring job's schedule call was lost with s2, its try landed in s2's shard;
    # s1 adopted that shard, ran the job and moved its next occurrence into s1's own shard of
    # the same window, and the first shard was compacted with the move still pending (its
    # snapshot names the move, no ADD). The retry, naming s2 alone, looked in s2's shards and in
    # later windows, found nothing and wrote the job again: two live chains. A pending move in a
    # snapshot now counts as the job found there, and a retry looks in every shard of the first
    # window too (either alone passes this seed; tests/runtime/test_scheduling.py holds each).
    (219412, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a retry missed its earlier try moved on within its first window", "two chains"),
    # Names in silo-owned registry buckets (``--faults default,+buckets``). A partitioned owner
    # gave way to a newer process of itself and a peer took its buckets, but a caller whose call
    # to it was lost kept sending every later call there.
    (0, BUCKETS_NOW, "a caller kept a lost owner of registry buckets", "unsettled"),
    # A silo declared dead joined again still held its old incarnation's buckets in memory: its
    # fair share full, it never claimed the one its old incarnation's log named, nor did anyone.
    (9, BUCKETS_NOW, "a rejoined silo's buckets of its earlier incarnation filled its share", "unsettled"),
    # A bucket dropped from memory while its log still named the silo was not taken back once
    # the silo held its fair share, and no peer takes a live owner's: a due occurrence waited
    # for the bucket's verdict for good.
    (525, BUCKETS_NOW, "a bucket its log named for a silo at its share was nobody's", "lost"),
    # A triggered run admitted between a delete's read of the entry and its delete at the owner
    # was listed to retire; the owner deleted the name anyway, and the run started after.
    (1181, BUCKETS_NOW, "a delete carried out over a run it had not cancelled", "older generation ran"),
    # Every kind. A client's flow submit failed in doubt; 60 s on s2#3 took its intent over, was
    # refused (s0#3 held a shard of the window the client's call might reach) and handed the
    # steps to s0#3. Its own refused intent still counted as an earlier try, naming s2#3, which
    # held its previous incarnation's shard of the window: s0#3 could not settle that, two
    # holders, and the acknowledged flow never ran. A hand-over now names the intent it replaces.
    # Its world changed with 205777's fix (it passes without this one since): the case is held by
    # tests/flows/test_recovery.py, with real silos' scheduling.
    (25, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a refused taker's intent kept it a suspect of the holder it handed to", "flow lost"),
    # The default kinds with torn_logs. A heartbeat round declared a peer dead and claimed its
    # shards; settling a claimed shard's move into a fresh shard waited for the lease, which a
    # VM suspension mid-round had let lapse and only that very loop renews: s2#3 never beat
    # again, and held a shard s0#2 took and drained, five jobs queued unfired to the end. Its
    # world changed with 205777's fix (it passes without this one since): tests/runtime/test_heartbeat.py
    # holds the case.
    (449, "default,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "a heartbeat round waited for the lease only it renews", "stuck"),
    # Three flows' steps succeeded in one batch; the silo told their hooks one after another,
    # and recording the first step's success scheduled its dependant, a call that waited for a
    # rejoin that never came (the silo, declared dead, was superseded). Two steps' successes,
    # durable in their shard, never reached their flow log; the shard drained and was deleted,
    # and reconcile, finding no trace, ran them again. Each run's hooks are now told apart.
    (31, BUCKETS_NOW, "a batch's flow successes waited behind another step's dependants", "duplicate"),
    # Every kind, registry buckets too. Not the library's: the simulator tied a bucket owner's job
    # to the put that asked for it by the name and due time alone, and two puts of ``a`` drew the
    # same due µs with a delete between them; the later put's acknowledged job, judged as the
    # earlier put's, was "an older generation" run after the delete. The tie holds the put's
    # clock reading (``created_at``) too.
    (236640, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "the oracle took a later put's job for an earlier put's with the same due time", "older generation ran"),
    # Every kind, registry buckets too. A silo's tasks, all cancelled at once at the end, lost a
    # cancel: ``asyncio.wait_for`` (Python < 3.12) returns the inner result when its caller is
    # cancelled just as the inner await ends, and a firing task went on to wait for a lease no
    # heartbeat would renew; the end never came (``Deadlock``). The silo's bounded waits keep
    # their cancels now (``cluster.model.waiting.wait_bounded``).
    (236575, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a bounded wait swallowed the cancel of a stopping silo's task", "deadlock"),
    # Default kinds (its world reached with the bounded waits above). A resume's append landed,
    # its answer lost and the log unreadable, so the resume raised and was taken back from memory
    # only; a pause then answered "already paused" from that memory, the shard was taken back from
    # its log (resumed) and the job started 0.1 s after the pause returned. Memory answers only
    # once its writer's doubt is settled (``ShardTable.answers_for``; tests/runtime/test_pause_doubt.py).
    (579, "default,+real_client,+clock_jumps,+named,+flows,+dormant_overwrites,+turns,+shared_hosts",
     "memory answered a pause behind a resume in doubt", "pause did not hold"),
    # Every kind. A shard log's writer rotated (a damaged log claimed) with a firing mark queued
    # and a cancel's removal behind it; the snapshot left the job out, but only records ahead of
    # the mark counted as covered. The mark failed, the removal with it, the cancel put the job
    # back and its silo ran it after its log said it was gone (tests/runtime/test_rotation_cancel.py).
    (263574, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a rotation failed a removal its snapshot made durable, queued behind a metadata change", "duplicate"),
    # Every kind. s1#3 ran j14's first occurrence, decided its move into a fresh shard of its own
    # and was paused with the ADD there on its way. s2#3 adopted the source and settled the move:
    # its claim of the target failed in the store, it read the target all the same, found no ADD
    # and decided the move again into a shard of its own. Resumed, s1#3's ADD landed (no claim had
    # fenced it), and j14#2 ran from both. A target is read as proof only once a claim landed
    # (tests/runtime/test_move_fence_doubt.py holds it, and a claim of ours under way).
    (256531, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a move's target was read as proof though its claim had failed", "two chains"),
    # Every kind, registry buckets too. s0#2, declared dead, rejoined: its write of s0#3 landed but
    # the call timed out. The next beat found s0#3 in the row, took it for a newer process of s0
    # and ended for good; the registry bucket holding ``a`` stayed s0's until peers saw its row
    # silent for the whole suspicion timeout, past every resume the caller made after healing
    # (s2#1 had given way to its own s2#2 the same way at 3.45 s).
    # A join now recognises its own unanswered write (tests/runtime/test_heartbeat.py).
    (260256, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a silo took its own rejoin, landed unanswered, for a newer process of itself", "unsettled"),
    # Every kind. Not the library's: the client gave up on a schedule call after 60 s (in doubt),
    # its retries went on, and 67 s after the first try one landed j13 again in the shard that try
    # had run it from (kept by ``retry_window``, compacted by a rotation since): one more run, as
    # in doubt allows. The simulator dropped that late answer unjudged and took the run for a
    # duplicate; a late answer is now judged as a call in doubt is.
    (282950, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: the answer of a call its caller gave up on went unjudged", "duplicate"),
    # Every kind. Not the library's: s1#1's try of a schedule call wrote j38 and j39 into its
    # shard and took them back as the call failed; the log rotated with the removals queued, so
    # they landed only as the jobs' absence from the snapshot (9.74 s). The retry wrote them into
    # s2's shard; s2#3 ran them, lost the shard to a claim before their outcomes landed, and the
    # claimer ran them again: at-least-once. The simulator read the take-back as their outcome,
    # "durable" before the first run. A snapshot's absence is an outcome only of an occurrence
    # that ran from that shard (tests/sim/test_snapshot_reading.py).
    (283659, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "the oracle read a schedule try's take-back, folded into a snapshot, as its retry's outcome", "duplicate"),
    # Every kind. f9's submit raised in doubt; submitted again, it was acknowledged with the
    # client's intent unconfirmed, which s1#4 took over after the grace period (78 s). Its search
    # for the earlier try listed s0.4-000001, drained, and s0#5 deleted it (its retry window
    # over) before the read: NotFound failed s1#4's whole reconcile round. Taken over again 20 s
    # later, then handed from holder to holder, the step was scheduled at 138.6 s and the run
    # ended with the flow still running. A shard gone between listing and read holds nothing,
    # as the next listing says (tests/runtime/test_retry_window.py).
    (285077, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a retry's search failed on a drained shard deleted after its listing", "flow lost"),
    # Every kind, more of the two oracle shapes above (282950: a late answer left unjudged, 279092;
    # 283659: a take-back folded into a snapshot read as an outcome, 286401 and 288095).
    (279092, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: the answer of a call its caller gave up on went unjudged", "duplicate"),
    (286401, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a take-back folded into a snapshot read as an outcome", "duplicate"),
    (288095, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a take-back folded into a snapshot read as an outcome", "duplicate"),
    # Every kind. Not the library's: s1#3 ran j26's three occurrences to their end, its client
    # never heard, and the client's retry reached s1 while another retried call searched there.
    # That call read the shard's log 14 ms after the retry was sent, j26's records still in it; a
    # rotation compacted them away, the retry's own search read the new generation and added j26
    # again (the one more run docs/failover.md allows). The oracle took the other call's read for
    # the retry's: it judged by the first read of the log by the retry's silo, not by the retry's
    # own (tests/sim/test_retry_reads.py).
    (275005, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: another call's read of the log taken for the retry's own search", "duplicate"),
    # Every kind. s1#2's call for j18..j20 landed j19 and j20 (window 0, written unqueued), its
    # window-10 batch failed, and three take-backs failed (stat Unavailable): ScheduleInDoubt at
    # 9.149 s, may fire j19 and j20. Nothing queued them: live in the log and in memory, they
    # neither fired nor went until the run's end (tests/runtime/test_scheduling.py).
    (311450, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a landed batch whose take-back failed was left unqueued", "stuck"),
    # Every kind. j7 ended at s2 at 3.8 s, and its record was damaged at 9.0 s. Its shard, drained
    # and kept for retry_window, counted toward s2's share: s2 handed it over at 22.4 s, after the
    # cluster had settled; s0 replayed the damaged log and sent j7 again at 24.2 s, at the run's
    # end. Nothing hung; the move itself was the fault (tests/runtime/test_balance.py).
    (313993, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a drained shard kept for its retry window was handed over", "stuck"),
    # Every kind. Not the library's: a trigger's first try (lost at s2) landed its run in
    # s2.1-000002, which ran it at 4.5 s; s0's claim rewrote that log at 5.7 s without it. The
    # retry at s0 read the new generation, found nothing, wrote the run again (one more run,
    # docs/failover.md) and was lost after it acted; the call ended in ScheduleInDoubt naming no
    # shard. The named caller judged no call in doubt, and the client's rule skipped a job with
    # no shard, so the allowed run was called a duplicate (tests/sim/test_in_doubt.py).
    (328498, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a call in doubt naming no shard went unjudged", "duplicate"),
    # Every kind, registry buckets too. A delete cancelled the name's job (its shard's owner
    # answered "cancelled") and reached the bucket's owner only 6 s later; meanwhile a damaged frame
    # cost that REMOVE and the shard was handed over, so its next owner found the job live and the
    # entry still naming it, and cleared it. The delete was written and the job started 0.13 s
    # after it returned. A delete cancels once more after its write, as a put cancels after its
    # (tests/named/test_bucket_fence.py).
    (328446, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a shard loaded between a delete's cancel and its write cleared a job whose REMOVE was damaged",
     "older generation ran"),
    # Every kind, flows too. A flow step's intent was taken over by the silo that had adopted the
    # shard its dead writer had added the job to, while that job was still finishing there: its
    # success durable and compacted out of the log by a rotation not yet done. The retry found it
    # nowhere and added it again, as allowed, into its own shard; the new copy was taken for the
    # finishing run (same job id) and never queued (tests/runtime/test_scheduling.py). Reached once
    # every silo reading a death adopted at once.
    (346763, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a job added again while its earlier copy's run was finishing here was left unqueued", "stuck"),
    # Every kind. s1#1 died with c's PUT durable and its job never added; s2#1 took the bucket,
    # added the job again (s2.1-000001), and died before its LANDED record. The PUT still named
    # s1#1 alone as the adder, so s2#3's takeover searched s1's shards, added a second copy
    # (s2.3-000002) and named it; the first copy was refused as not the one named, which left
    # the named one live and queued nowhere. A next owner now names itself among the adders
    # before it adds (tests/named/test_bucket_crash.py).
    (300985, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a bucket's next owner added a put's job again without recording that it did", "stuck"),
    # Every kind. put#20(a), sent to s0#1 (suspended), left its PUT in registry/0003 and no
    # LANDED; s0#2 opened s0.2-000002 in the job's window. Every owner taking the bucket after
    # searched s0#1's shards for the job and waited on s0#2's live shard as one s0#1 might still
    # write to: dropped every round (EarlierTryUnsettled), the bucket never answered, and c's
    # acknowledged job and its trigger's run never fired. A call writes under its own
    # incarnation alone (tests/named/test_bucket_crash.py).
    (291112, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a bucket's takeover search waited on the adder's next incarnation's live shard", "lost"),
    # Every kind. Not the library's: registry/0003 rotated while c's put had no LANDED record, so
    # its snapshot row carried the adders as a third field; the oracle read rows as pairs, and its
    # ValueError, raised into the owner's append (which had landed), dropped the bucket at every
    # take for 128 s: c's jobs never fired, a's resume never answered. The oracle's own error now
    # fails a seed by name (tests/sim/test_bucket_reading.py).
    (330012, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a bucket snapshot's row with its adders unread, its error raised into the append", "lost"),
    # Every kind. put#1(a) was answered by s1#1 (job in s1.1-000001), killed before its LANDED
    # record; delete#4(a) read the entry and cancelled the job there. s0#1 took the bucket, found
    # the job nowhere live (cancelled: as a withdrawn try) and added it again, same id, into
    # s0.1-000001, recording that shard. The owner deleted the name as it still named the job id,
    # and the copy ran on every 2 s after delete returned. The owner deletes only while the entry
    # names the job in the shard the caller cancelled it in (tests/named/test_bucket_crash.py).
    (340609, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a delete's owner took the job a next owner added again into another shard for the one cancelled",
     "older generation ran"),
    # Every kind. s2#3 rotated s1.1-000001 with f3's step s1 just succeeded in it; the commit (gen
    # 0 pointing at gen 1) landed, its answer was lost and the stat after it failed too. The
    # success was reported not durable, and the rotation tried again found its own commit in
    # place, took it for a claimer's and dropped the shard it still owned as fenced. The success
    # lived only as an absence from gen 1's snapshot: the step's silo read it back as no outcome,
    # reconcile took it for a lost job, and the step ran again from s2.5-000004. The writer asks
    # the store again until it says whether the commit landed (tests/storage/test_rotation_commit.py).
    (344458, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a rotation's commit in doubt taken for a claimer's: its shard dropped, a step's folded success lost",
     "duplicate"),
    # Every kind. s2#2 ran f1's step s3 from s0.1-000001; the removal of its success landed, its
    # answer was lost and the stat after it failed: the shard was taken back from its log, and
    # rotated (the removal folded into a snapshot of live jobs) before the flow hook read the
    # outcome back. The log said only that the job had ended: no outcome was recorded, reconcile
    # took the step for a lost job at 30 s and ran it again from s0.2-000001, its silo alive.
    # The silo tells the hook the attempt succeeded (tests/flows/test_recovery.py,
    # tests/runtime/test_outcomes.py).
    (335398, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a success in doubt whose removal a rotation folded away read back as a lost job", "duplicate"),
    # Every kind, 1.9 s ahead. A named put in doubt left its job deferred by its hook for good, in
    # a shard quarantined after its owners kept dying while it fired. Outside quarantine a deferred
    # attempt is due when it is asked again; a quarantined shard's lane ran it as due at its job's
    # time, so one such run, 29 s past that time, was in flight time and again, to the end
    # (tests/runtime/test_quarantine.py). Reached once every silo reading a death adopted at once.
    (366044, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a quarantined shard ran an attempt its hook deferred as due at its job's time", "stuck"),
    # Every kind: an oracle bug. A retried schedule call's search read a shard's sealed generation
    # (its job's ADD and REMOVE there), which ``read_log`` drops for the next one, rotated
    # meanwhile, whose snapshot had compacted the ended job away: the retry added it again, one
    # more run as the README allows, judged a duplicate by the bytes it never used (tests/sim/world.py).
    (400955, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a retry judged by the sealed generation it read on its way to the compacted one", "duplicate"),
    # Every kind: an oracle bug. f5, never acknowledged, was taken over by s0#4 at 78.2 s and its
    # steps run one after the other at the very end. The end waited for s1's run, which ended at
    # 79.50 s and started s2's schedule call; judged 0.4 ms into that call, s2's job was live in
    # memory and not yet queued, as a call's jobs are until all of it is durable (it ran 0.17 s
    # later). The end waits for a call its late runs start, up to a drain (tests/sim/world.py).
    (394662, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: judged stuck inside a schedule call a flow step's end started", "stuck"),
    # Every kind: an oracle bug. s2#3 adopted its dead incarnation's shard s2.2-000001 and started
    # flow f7's step s2 from it; while the step's flow hook was admitting that run, the flow took
    # the step again (its intent's writer dead) into s2#3's fresh shard under the same job id, and
    # a run started there displaced the first from the run table's ``inflight``. The first, its
    # shard held and its start in its flow, was sent; the simulator looked for it in ``inflight``
    # only and stopped the delivery, "sent without a run in flight" (tests/sim/test_displaced_send.py).
    (395846, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a run displaced before its send, by its job started from another shard", "silo logged an unhandled AssertionError"),
    # Every kind: an oracle bug. Flow f8's step s0, never acknowledged, was sent anew by s1#5's
    # reconcile at 78.25 s into s1.5-000003, which s1#5 began to hand over at 78.54 s while the
    # call wrote; queued as it ended, the overdue job was held back for the next owner. The end,
    # at 78.62 s, took it for stuck; the release landed at 78.64 s. The end waits, up to a drain,
    # for a hand-over holding back due jobs (tests/sim/test_end_checks.py).
    (395599, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a job held back by a hand-over under way at the end judged stuck", "stuck"),
    # Every kind: a library bug (the world moved at a9f5e34, an owner's overwrite cancels; the bug
    # is older). s2#1, paused, landed j16's batch into s2.1-000001; s0#2 adopted that shard and
    # fired j16 at 7.76 s. Resumed as s2#2, the call's other batch (j17, a fresh shard) failed on
    # a lapsed lease, and taking j16 back from s2.1-000001, re-adopted meanwhile, removed nothing
    # yet reported nothing started: the silo refused the call as if it had done nothing, the
    # retry's Unavailable told the client "not scheduled", and j16 had run. A take-back of a
    # landed batch counts a job no longer waiting on its first try as started: in doubt
    # (tests/runtime/test_scheduling.py).
    (431343, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a failed call's landed job that ran meanwhile answered not scheduled", "not scheduled, yet fired"),
    # Every kind: a library bug, older than today (it fails alike at 563e739). s2#1 sent j15 ahead
    # and was killed; s0#2 adopted its shard, so a cancel there waits out s2#1's lease. The cancel
    # of j15 wrote its removal while s0#2's heartbeat found it declared dead and dropped its shards;
    # the removal landed, "cancelled" went back at 5.23 s, but the wait looked the shard up again,
    # found none and skipped: s2#1's call started j15 at 5.84 s. The wait is for the shard that
    # answered (tests/runtime/test_cancel_dropped_shard.py).
    (462368, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a cancel answered from a shard dropped meanwhile skipped the dead owner's lease", "cancel did not hold"),
    # Every kind: a library bug (older than 563e739). Flow f3's step s3 succeeded on s0#1 at 4.18 s,
    # durable in s0.1-000001 at 4.31 s; s0 was paused from 4.35 s to 12.79 s before writing "ok".
    # Meanwhile s2#2 and s1#2 took s3's unconfirmed intent over and, refused, handed it to s0#1,
    # the shard's holder. Resumed, s0#1's write of "ok" failed and went on in the background; its
    # reconcile took the handed intent over as its own, found no trace of the job in the rotated
    # shard, added it again and ran it at 13.88 s. A silo reconciles no flow while a step record
    # of its own is on its way there (tests/flows/test_recovery.py).
    (472003, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a step taken over by its silo while its success was being recorded", "duplicate"),
    # Every kind: a library bug (older than 563e739). s0#3 ran j22#1 and its outcome moved j22 to
    # the 10 s window's s0.3-000002 as a cancel marked the run; s2#4 adopted that shard, ran j22#2
    # and moved j22 on to s2.4-000001. The cancel, once j22#1 ended (15.77 s), read s0.3-000002,
    # found j22 not live there, took it for ended there and answered "cancelled"; j22#3 fired at
    # 17.36 s. A job moved on from there is followed: "moved" (tests/runtime/test_cancel_moved_on.py).
    (466479, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a cancel took a job moved on from its next shard for ended there", "cancel did not hold"),
    # Every kind: a library bug (older than 563e739). Recurring j21 ran occurrences 1 and 2 from
    # s1.2-000001; its owner moved occurrence 3 on to s1.3-000001 (a REMOVE(MOVED) of occurrence
    # 2). Then bit rot damaged the frame holding the ADD of occurrence 2 (the README lets that
    # cost the frame's own records). Replay kept occurrence 1 live, since the move named
    # occurrence 2 and ended only that one: j21 live in two shards, to run twice. A move of a
    # later occurrence ends an older one, as a cancel's does (tests/runtime/test_damage.py).
    (475742, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "a move after a damaged ADD left the older occurrence live", "two chains"),
    # Every kind: an oracle bug (the world moved at 64d9a60; 563e739 passes in another world).
    # j20 and j22 ran from s0.1 (their earlier try) and the shard was compacted. The call's try at
    # s0#3, cut off by a partition after it reached s0, found them nowhere (SNAPSHOT without them)
    # and rightly wrote them again into s0.3: the one run more a call in doubt may add. The call
    # ended in doubt at 11.94 s, judged only where they had fired by then; the try's copy, landed
    # after, was never judged, and its runs were called a duplicate and a second chain. A try
    # the caller never hears from is judged where it lands (tests/sim/test_in_doubt.py).
    (469680, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets",
     "oracle: a try cut off after it reached its silo landed after its call ended, unjudged", "duplicate"),
    # Every kind, a silo joining too. Not the library's: s3 joined and came to hold the shard
    # of named job a; the simulated clients never learned of s3 (a client on Ray looks its
    # silos up every SILO_REFRESH_S), so the resume after healing, answered "not the owner,
    # s3#..." by each silo it knew, went round them until the run ended.
    # Every kind, a silo joining too. s0#1's adoption round read the membership table, s0 was
    # paused (3.5-12.9 s), and the round's listing went out at the resume: s1.2 was s3#1's by then,
    # s3 having joined at 4.3 s, and s3 was not in the table read, so s0#1 judged the shard an
    # orphan (an owner never registered) and claimed it at 13.0 s; s2#2 took it over from s0#1.
    # s3#1, paused meanwhile, resumed and sent j14, j15, j17 and j18 from it: two owners. A log
    # naming an owner the table read does not hold is judged on the table read again
    # (tests/runtime/test_adoption.py; registry buckets alike, tests/named/test_bucket_balance.py).
    (910359, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "a round's table read before a silo joined judged its shard an orphan", "two owners"),
    (910307, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "oracle: the clients never routed to a silo that joined", "unsettled"),
    # Every kind, a silo joining too (the world is the same without joins, back to 881a469).
    # Flow f1's step 2 (c13f32856d384625-2) was scheduled twice: s2#4 wrote it into s2.4 and ran
    # it; s0#1's earlier intent landed it in s0.1-000003 at 14.7 s, the shard f1 was told. s2#5
    # adopted s2.4, started its copy's retry, then adopted s0.1-000003 while that ran: a load
    # left the job to the run in flight, whose outcome queues nothing of another shard's copy, so
    # the told copy stayed live in its log, queued nowhere, to the end (s0#1's load of s2.4 at
    # 14.3 s, while s0.1-000003's copy ran, had left s2.4's the same way). A load leaves a job
    # only to a run of its own copy or of the shard that moved it here
    # (tests/runtime/test_one_job_in_two_shards.py).
    (995762, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "a load left another shard's copy of a running job unqueued", "stuck"),
    # Every kind, a silo joining too (its draw changes the world: before d69cbbe added joins the
    # seed runs another). A resume reached s0 while j8's attempt ran from s0.1-000001: nothing was
    # moving, so it went for the shard's gate, and the attempt's outcome decided the move to
    # s0.1-000002 meanwhile. The resume got the gate before the move's ADD landed and answered
    # "moved" there from memory; s0 was declared dead, the ADD never landed, s2#2 carried the move
    # out into s2.2-000006, and s0.1-000002 answered "absent": j8 stayed paused for good. A move
    # decided while a pause or resume waited is settled before it answers (tests/runtime/test_pause_lease.py).
    (997178, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "resume answered moved to a target its move had not reached", "lost"),
    # Every kind, a silo joining too: an oracle bug (the same world back to e971580 and before).
    # The call for j19..j21 lost s2#2 (it wrote j20, j21 into s2.2-000002), s0#1 and s1#1; every
    # retry was refused for 73 s, each silo waiting on the others' fresh shards for the windows.
    # s3#1 ran j21 to its end at 9.3 s; s2.2-000002 was deleted as drained once its retry window
    # was over, and the retry that landed at 78.4 s, after its caller gave up at 65 s, found j21
    # nowhere and wrote it again: the one more run docs/failover.md allows past that window. The
    # late answer was judged job by job; j20, answered in s3.1-000001 (its chain moved through
    # there), had that shard deleted as drained before the judge read it: NotFound ended the
    # judging, and j21 was called a duplicate and a second chain. A shard gone by the time it is
    # judged is judged by the ADDs that landed in it (tests/sim/test_in_doubt.py).
    (1111935, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "oracle: a late answer's judging ended on a shard deleted as drained", "duplicate"),
    # Every kind: a call for j19..j21 lost s1#1 as it wrote; j21's chain ran through s1.1-000001 and
    # s1.2-000001 and ended; s1.2's log rotated. A retry lost s1#2 after writing j21 again (no live
    # copy found: a snapshot was searched for live jobs only, not the chains it says ended there), and the
    # next retry, after that chain ended and rotated away too, wrote it a third time: occurrence 2
    # ran three times, twice after its outcome was durable (tests/runtime/test_retry_after_compaction.py).
    (1161807, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "retry missed a chain its compacted log forwarded", "duplicate"),
    # A flow step taken over twice (its first taker paused mid-launch, then resumed) was written
    # into two shards of one silo. Adopting the first copy's shard queued that copy under the
    # step's id, replacing the second copy in the timer queue; the first ran, and the second
    # stayed live in its log, queued nowhere, never refused by the flow's admit nor run. The queue
    # now sets another copy aside and queues it when the id leaves (tests/runtime/test_queue.py).
    (1187329, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "a second copy of a flow step, displaced in the queue", "stuck"),
    # A silo's repair of a flow log claimed it, and the claim's answer was lost; read back, its
    # metadata was there and the ETag read was taken for the claim's own, though another silo had
    # appended a step's success by then. The repair rotated the log from its earlier snapshot, the
    # success was lost, and the step was taken over and ran again 68 s later. A claim read back
    # now checks the log's size too (tests/storage/test_claim_doubt.py).
    (1200780, "all,+real_client,+clock_jumps,+torn_logs,+named,+flows,+dormant_overwrites,+turns,+shared_hosts,+buckets,"
     "+joins", "a claim read back took an append after it for its own", "duplicate"),
]


@pytest.mark.parametrize("seed, kinds", [
    pytest.param(seed, kinds, id=f"{bug}-{seed}-{invariant}") for seed, kinds, bug, invariant in FOUND
])
def test_a_seed_that_found_a_bug_keeps_it(seed: int, kinds: str) -> None:
    """The whole result, not only the invariant the seed was named for: most of these run fault
    kinds or seeds the chunks above never cover, so nothing else checks their worlds."""
    named = {word for word in kinds.split(",") if word.startswith("+")}
    later = "".join(f",{word}" for word in LATER_KINDS.split(",") if word and f"+{word[1:]}" not in named)
    result = run_seed(seed, Faults.parse(kinds + later))
    assert result.ok, _explain([result])


PLANT_SEEDS = range(1, 13)  # a few seeds of every kind: the real client in 9 of them, flows in half


def test_a_ceiling_catches_a_resent_batch_the_redelivery_allowance_absorbs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: a silo sends each batch twice under the same run ids, as a dispatcher re-sending
    what it took for lost would. The duplicate check takes a second success of one run for Ray's
    redelivery and excuses it; only its ceiling sees that it happens many times more than Ray's."""
    from tests.sim.world import SimTransport

    # Unplanted, this allowance stays under its ceiling (others, over so few seeds, may not:
    # twelve seeds with 18 kills and one delayed batch of five are over "in flight at a kill").
    assert "succeeded twice: redelivered" not in over_ceilings([run_seed(seed) for seed in PLANT_SEEDS])
    deliver = SimTransport.deliver

    async def twice(self: SimTransport, *args: object, **kwargs: object) -> object:
        await deliver(self, *args, **kwargs)  # type: ignore[arg-type]
        return await deliver(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SimTransport, "deliver", twice)
    over = over_ceilings([run_seed(seed) for seed in PLANT_SEEDS])
    assert "succeeded twice: redelivered" in over, over


def test_a_ceiling_catches_acknowledged_jobs_taken_for_in_doubt(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the lost check's allowance widened, every job acknowledged to the real client taken
    for one whose call ended in doubt (so none of them is owed). Each seed still passes; the share
    of jobs in doubt per acknowledged job goes past its ceiling."""
    from tests.sim.client import SimClient

    assert "client: in doubt" not in over_ceilings([run_seed(seed) for seed in PLANT_SEEDS])
    schedule = SimClient.schedule

    async def widened(self: SimClient, *args: object, **kwargs: object) -> None:
        await schedule(self, *args, **kwargs)  # type: ignore[arg-type]
        self.in_doubt.update(self.jobs)

    monkeypatch.setattr(SimClient, "schedule", widened)
    over = over_ceilings([run_seed(seed) for seed in PLANT_SEEDS])
    assert "client: in doubt" in over, over


def test_a_flow_cancel_in_doubt_is_settled_and_a_cancel_nobody_made_is_not_excused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A flow whose cancel got no answer is cancelled again after healing and judged by that
    answer; one that then ended cancelled must hold a cancel record its user wrote. Planted: a silo
    writes a cancel record into the log of each flow whose step attempt ended (a silo taking a
    step's end for a cancel). Most flows then fail as cancelled unasked; one whose user's cancel
    failed before its record landed (3 of seeds 160-279, the first 172, since silos adopt at the beat
    that reads a death) ends cancelled with no cancel of its user's behind it, which the simulator
    used to accept as "its cancel may have landed"."""
    from cluster.flows.hooks import FlowHooks, _step_of

    ended = FlowHooks.attempt_ended

    async def cancelling(self: FlowHooks, event: Any, end: Any) -> None:
        await ended(self, event, end)
        found = _step_of(event.job)
        if found is not None:
            await self._record(found[0], [["cancel", datetime_to_us(event.started_at), "silo"]])

    with monkeypatch.context() as planted:
        planted.setattr(FlowHooks, "attempt_ended", cancelling)
        seed = next((seed for seed in range(160, 280)
                     if any("flow cancelled uncalled" in v for v in run_seed(seed).violations)), None)
    assert seed is not None, "no seed of 160-279 ended a flow cancelled by its silo while its user's cancel was in doubt"


def test_a_named_job_is_due_when_its_put_asked_not_when_the_library_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: a named put builds its job 50 ms earlier than the due time its caller passed. The
    job says so itself, so an early check by its first fire saw nothing (named seeds 15-23 all
    passed); judged by what the put was asked, a start before it is early (6 of those 8 seeds)."""
    from cluster.model.jobs import ScheduledJob

    create = ScheduledJob.create.__func__  # type: ignore[attr-defined]

    def early(cls: type[ScheduledJob], *args: Any, due: Any = None, **kwargs: Any) -> ScheduledJob:
        if due is not None and NAMED_MARK in (kwargs.get("metadata") or {}):
            due -= timedelta(milliseconds=50)
        return create(cls, *args, due=due, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(ScheduledJob, "create", classmethod(early))
    named = (15, 16, 17, 18, 20, 21, 22, 23)  # the seeds of 0-23 that draw a caller of named jobs
    assert any(any(" early: " in v for v in run_seed(seed).violations) for seed in named)
