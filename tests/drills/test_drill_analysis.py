"""The drill's verdicts on hand-made records: what counts as an early fire, an explained
duplicate, a superseded owner's fire, a failover; each check is also shown failing on the bug it
guards against (a fabricated record of that bug)."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest

from cluster.cli.drill_analysis import (
    DELIVERY_S,
    IN_FLIGHT_S,
    LANDED_S,
    STORM_ACK_FLOOR,
    DrillReport,
    Event,
    StormLoad,
    analyse,
)
from cluster.cli.drill_observer import Appended, Observer
from cluster.model.options import ClusterOptions
from cluster.runtime.shardlog import REMOVE, SUCCEEDED
from storage import read_log
from storage.log import LogWriter
from storage.memory import MemoryStore

T = 1_000_000.0


def job(k: int, shard: str = "shards/a", due: float | None = None) -> Any:
    return SimpleNamespace(id=f"j{k}", due=datetime.fromtimestamp(T + k if due is None else due, timezone.utc),
                           shard=shard, schedule=None)


def run(k: int, owner: str, started: float, scheduled_for: float | None = None, *, received: float | None = None,
        sent: float | None = None) -> dict[str, Any]:
    """A record as the recorder writes it: ``received`` when the batch reached it (else at the
    start), ``sent`` when its silo sent it (only a batch sent ahead says)."""
    record = {"job_id": f"j{k}", "run_id": f"r{k}-{started}@{owner}", "started": started,
              "scheduled_for": T + k if scheduled_for is None else scheduled_for, "sent": sent}
    if received is not None:
        record["received"] = received
    return record


def observer(appends: tuple[Appended, ...] = (), **owners: list[tuple[float, str]]) -> Observer:
    """The store as read every 0.1 s from T - 1 to T + 60, each shard's owners changing as given."""
    seen = Observer(MemoryStore())
    seen.shard_owners = {f"shards/{k}": v for k, v in owners.items()}
    seen.samples = [(T - 1 + k / 10 - 0.02, T - 1 + k / 10) for k in range(611)]
    seen.appends = list(appends)
    return seen


def outcome(*jobs: str, writer: str | None, shard: str = "shards/a", seen: float = T, after: float = 0.0) -> Appended:
    return Appended(shard, 0, seen, writer, jobs, jobs, after)


KILL = Event("kill", T + 10, "0", "0#1", ["shards/a"])


def test_early_is_judged_by_the_due_time_acknowledged_not_by_what_the_silo_reports():
    # Planted bug: a silo that fires 50 ms early and reports that time as the one scheduled.
    records = [run(0, "0#1", T - 0.05, scheduled_for=T - 0.05), run(1, "0#1", T + 1.0)]
    report = analyse([job(0), job(1)], records, [], ClusterOptions(), observer())
    assert report.early == 1 and report.early_examples == [("j0", T - 0.05, T)] and not report.ok


def test_recurring_jobs_are_refused_rather_than_judged_by_the_silos_occurrence():
    recurring = job(0)
    recurring.schedule = "@every 1s"
    with pytest.raises(ValueError, match="one-shot"):
        analyse([recurring], [], [], ClusterOptions(), observer())


def test_a_rerun_is_explained_when_the_log_holds_no_outcome_of_the_run_in_flight_at_the_kill():
    jobs = [job(0), job(1), job(2)]
    records = [
        run(0, "0#1", T + 9.9), run(0, "1#1", T + 12),   # in flight at the kill, outcome absent: explained
        run(1, "0#1", T + 1.0), run(1, "1#1", T + 12),   # its outcome is in the log, by 0#1: not
        run(2, "1#1", T + 9.9), run(2, "2#1", T + 12),   # its owner was never hit: not
    ]
    seen = observer((outcome("j1", writer="0#1", seen=T + 1.1), outcome("j0", "j1", "j2", writer="1#1", seen=T + 12.1)),
                    a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse(jobs, records, [KILL], ClusterOptions(), seen)
    assert (report.duplicates, report.explained_by_log, report.explained_by_window) == (3, 1, 0)
    assert [d[1][:2] for d in report.unexplained_duplicates] == [("0#1", T + 1.0), ("1#1", T + 9.9)]


def test_a_rerun_of_a_run_whose_outcome_was_durable_is_not_explained_however_close_to_the_kill():
    # Planted bug: the next owner replays past a durable outcome. The old 2 s window excused it.
    records = [run(0, "0#1", T + 9.9), run(0, "1#1", T + 12)]
    seen = observer((outcome("j0", writer="0#1", seen=T + 9.95),), a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse([job(0)], records, [KILL], ClusterOptions(), seen)
    assert report.other_duplicates == 1 and not report.ok


def test_an_append_holding_the_outcome_of_a_job_one_owner_ran_names_its_writer():
    # Read in the same poll as the change of owner: the store cannot say who appended it, but
    # j1 ran only on 0#1, and one append has one writer.
    records = [run(0, "0#1", T + 9.9), run(1, "0#1", T + 9.9), run(0, "1#1", T + 12)]
    seen = observer((outcome("j0", "j1", writer=None, seen=T + 11.05),), a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse([job(0), job(1)], records, [KILL], ClusterOptions(), seen)
    assert report.other_duplicates == 1


def test_two_removals_of_one_job_leave_its_reruns_unexplained():
    records = [run(0, "0#1", T + 9.9), run(0, "1#1", T + 12)]
    seen = observer((outcome("j0", writer=None, seen=T + 11.05), outcome("j0", writer="1#1", seen=T + 12.1)),
                    a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse([job(0)], records, [KILL], ClusterOptions(), seen)
    assert report.other_duplicates == 1


def test_an_outcome_the_log_cannot_place_is_judged_by_the_measured_in_flight_window():
    just_before, long_before = T + 10 - IN_FLIGHT_S / 2, T + 10 - IN_FLIGHT_S - 0.5
    records = [run(0, "0#1", just_before), run(0, "1#1", T + 12), run(1, "0#1", long_before), run(1, "1#1", T + 12)]
    seen = observer((outcome("j0", "j1", writer=None, seen=T + 11.05),), a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse([job(0), job(1)], records, [KILL], ClusterOptions(), seen)
    assert (report.explained_by_window, report.other_duplicates) == (1, 1)
    assert report.unexplained_duplicates[0][1][1] == long_before


def _placed_by_window(durable: float, *unplaced: int) -> DrillReport:
    """A re-run explained only by the in-flight window (j0's outcome in an append of no proven
    writer), beside j5, run once, whose outcome was read ``durable`` s after it started; the
    unplaced appends are at the offsets given (one outcome each for j0, j1, ...)."""
    records = [run(0, "0#1", T + 9.5), run(0, "1#1", T + 12), run(5, "0#1", T + 5.5)]
    appends = [Appended("shards/a", offset, T + 11.05, None, (f"j{k}",), (f"j{k}",), T + 10.4)
               for k, offset in enumerate(unplaced)]
    records += [x for k in range(1, len(unplaced)) for x in (run(k, "0#1", T + 9.6), run(k, "1#1", T + 12))]
    seen = observer((*appends, outcome("j5", writer="0#1", seen=T + 5.5 + durable)), a=[(T, "0#1"), (T + 11, "1#1")])
    jobs = [job(0), job(5)] + [job(k) for k in range(1, len(unplaced))]
    return analyse(jobs, records, [KILL], ClusterOptions(), seen)


def test_the_in_flight_window_excuses_only_what_the_runs_own_durable_times_justify():
    fast = _placed_by_window(0.3, 40)
    assert (fast.explained_by_window, fast.other_duplicates, fast.durable_s) == (1, 0, [0.3])
    assert fast.in_flight_window_ok and fast.ok
    # Planted: appends this slow to become durable; a run begun IN_FLIGHT_S before the kill
    # may have had its outcome durable by then, so the window no longer explains its re-run.
    slow = _placed_by_window(IN_FLIGHT_S + 0.1, 40)
    assert slow.explained_by_window == 1 and not slow.in_flight_window_ok and not slow.ok
    # Nothing measured: nothing justifies the window.
    blind = _placed_by_window(0.3, 40)
    blind.durable_s = []
    assert not blind.in_flight_window_ok and not blind.ok


def test_the_in_flight_window_places_no_more_appends_than_the_hits_changed_owners():
    # One kill of an owner of one shard: one read across its change of owner, one append it
    # could leave unplaced. Planted: two such appends, as if every read lost its writer.
    assert _placed_by_window(0.3, 40, 40).in_flight_window_ok
    two = _placed_by_window(0.3, 40, 41)
    assert (two.explained_by_window, two.window_appends) == (2, [("shards/a", 40), ("shards/a", 41)])
    assert not two.in_flight_window_ok and not two.ok


HIT = Event("kill", T + 10, "0", "0#1", [])  # a kill that measures no failover


def _arrived_after_kill(*arrivals: tuple[float, float | None], measured: float = 0.01) -> DrillReport:
    """Fires of the killed 0#1 whose calls reached the handler at these (arrival, sent) times, one
    batch each, beside a batch sent ahead that took ``measured`` s to arrive."""
    records = [run(k, "0#1", at + 0.01, received=at, sent=sent) for k, (at, sent) in enumerate(arrivals)]
    records.append(run(9, "0#1", T + 9.5, received=T + 9.45, sent=T + 9.45 - measured))
    return analyse([job(k) for k in range(len(arrivals))] + [job(9)], records, [HIT], ClusterOptions(), observer())


def test_a_call_that_arrives_after_its_silo_was_killed_is_excused_only_as_measured():
    # Arrived 0.2 s after the kill, sent when nobody knows: the delivery window excuses it, and counts it.
    late = _arrived_after_kill((T + 10.2, None))
    assert (late.zombie_fires, late.delivery_excused, late.delivery_s) == (0, [("0#1", 0.2, 1)], [0.01])
    assert late.delivery_window_ok and late.ok
    # Sent before the kill, as the recorder measured: on its way, whenever it arrived within the window.
    proven = _arrived_after_kill((T + 10.3, T + 9.99))
    assert (proven.zombie_fires, proven.delivery_excused) == (0, []) and proven.ok
    # Arrived later than any call on its way, or sent after the kill as measured: the killed silo fired.
    zombie = _arrived_after_kill((T + 10 + DELIVERY_S + 0.1, None))
    assert zombie.zombie_fires == 1 and not zombie.ok
    assert _arrived_after_kill((T + 10.03, T + 10.02)).zombie_fires == 1


def test_a_silo_that_runs_on_after_ray_kill_was_sent_fires_until_its_process_is_seen_stopped():
    # ray.kill at T+10; the process was seen gone at T+10.08. A call it sent at T+10.05 came from
    # a running silo; one sent at T+10.1 did not.
    hit = Event("kill", T + 10, "0", "0#1", [], ended=T + 10.08)
    records = [run(0, "0#1", T + 10.07, received=T + 10.06, sent=T + 10.05), run(9, "0#1", T + 9.5, received=T + 9.45, sent=T + 9.44)]
    report = analyse([job(0), job(9)], records, [hit], ClusterOptions(), observer())
    assert (report.zombie_fires, report.delivery_excused) == (0, []) and report.ok
    records.append(run(1, "0#1", T + 10.12, received=T + 10.11, sent=T + 10.1))
    assert analyse([job(0), job(1), job(9)], records, [hit], ClusterOptions(), observer()).zombie_fires == 1


def test_the_delivery_window_excuses_no_more_batches_than_hits_and_only_when_delivery_was_that_fast():
    # Planted: a killed silo whose calls kept arriving, batch after batch, within the window.
    many = _arrived_after_kill((T + 10.1, None), (T + 10.3, None))
    assert len(many.delivery_excused) == 2 and not many.delivery_window_ok and not many.ok
    # Planted: calls took longer to arrive than the window allows: it no longer covers a call on its way.
    slow = _arrived_after_kill((T + 10.2, None), measured=DELIVERY_S + 0.1)
    assert slow.delivery_s == [DELIVERY_S + 0.1] and not slow.delivery_window_ok and not slow.ok
    unmeasured = analyse([job(0)], [run(0, "0#1", T + 10.21, received=T + 10.2)], [HIT], ClusterOptions(), observer())
    assert unmeasured.delivery_excused and not unmeasured.delivery_window_ok


def test_a_rerun_of_a_call_that_arrived_after_a_pause_counts_against_the_delivery_window():
    # A paused silo's fires are judged from when it was declared dead, not by this window; the
    # re-run is explained only because the window places the call on its way at the pause.
    pause = Event("pause", T + 10, "0", "0#1", ["shards/a"])
    records = [run(0, "0#1", T + 10.21, received=T + 10.2), run(0, "1#1", T + 12)]
    report = analyse([job(0)], records, [pause], ClusterOptions(), observer(a=[(T, "0#1"), (T + 11, "1#1")]))
    assert (report.explained_by_log, report.delivery_excused) == (1, [("0#1", 0.2, 1)])
    assert not report.delivery_window_ok and not report.ok  # nothing sent ahead in this run: the window is not measured


def test_an_outcome_that_landed_after_its_owner_was_killed_is_not_the_killed_owners():
    # The new owner's first append held only re-runs: no writer is proven, but the read before
    # it began 0.9 s after the kill, when the killed silo could append nothing more.
    records = [run(0, "0#1", T + 7.0), run(0, "1#1", T + 12)]
    late = observer((outcome("j0", writer=None, seen=T + 11.05, after=T + 10 + LANDED_S + 0.4),),
                    a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse([job(0)], records, [KILL], ClusterOptions(), late)
    assert (report.explained_by_log, report.other_duplicates) == (1, 0)
    # Found by a read begun before the killed silo's last appends could have landed: unplaced,
    # and its run began too long before the kill for the window.
    early = observer((outcome("j0", writer=None, seen=T + 11.05, after=T + 10 + LANDED_S - 0.1),),
                     a=[(T, "0#1"), (T + 11, "1#1")])
    assert analyse([job(0)], records, [KILL], ClusterOptions(), early).other_duplicates == 1
    # A paused silo appends again when it resumes: no time rules its outcome out.
    pause = Event("pause", T + 10, "0", "0#1", ["shards/a"])
    assert analyse([job(0)], records, [pause], ClusterOptions(), late).other_duplicates == 1


def test_one_in_flight_attempt_explains_one_rerun_not_two():
    records = [run(0, "0#1", T + 9.9), run(0, "1#1", T + 12), run(0, "2#1", T + 12.5)]
    report = analyse([job(0)], records, [KILL], ClusterOptions(), observer())
    assert (report.duplicates, report.explained_duplicates) == (2, 1)


def test_a_fire_of_a_job_neither_acknowledged_nor_in_doubt_fails_the_drill():
    records = [run(0, "0#1", T + 0.1), run(1, "0#1", T + 1.1), run(2, "0#1", T + 2.1)]
    report = analyse([job(0)], records, [], ClusterOptions(), observer(), in_doubt={"j1": T + 1})
    assert report.unacknowledged_fires == ["j2"] and report.lost == 0 and not report.ok
    early = analyse([job(0)], [run(1, "0#1", T + 0.9)], [], ClusterOptions(), observer(), in_doubt={"j1": T + 1})
    assert early.early == 1  # a job in doubt is judged by the due time its call asked for


def test_a_fire_after_the_store_showed_another_owner_is_a_two_owner_fire():
    records = [run(0, "0#1", T + 5), run(1, "0#1", T + 12), run(2, "1#1", T + 12)]
    seen = observer(a=[(T, "0#1"), (T + 11, "1#1")])
    report = analyse([job(0), job(1), job(2)], records, [], ClusterOptions(), seen)
    assert report.two_owner_fires == 1
    assert report.two_owner_examples[0][:3] == ("j1", "shards/a", "0#1")


def test_an_owner_never_seen_owning_has_no_excuse():
    records = [run(0, "2#1", T + 5)]
    report = analyse([job(0)], records, [], ClusterOptions(), observer(a=[(T, "0#1")]))
    assert report.two_owner_fires == 1


def test_a_claim_back_seen_after_the_next_reading_does_not_excuse_a_fire():
    # The old rule excused a claim back seen within 0.5 s; the store showed 1#1 at the readings
    # on both sides of the send, so 0#1 fired without owning the shard.
    seen = observer(a=[(T, "0#1"), (T + 11, "1#1"), (T + 15.3, "0#1")])
    records = [run(0, "0#1", T + 15.02)]
    report = analyse([job(0)], records, [], ClusterOptions(), seen)
    assert report.two_owner_fires == 1


def test_an_owner_that_claimed_between_two_readings_may_fire_at_once():
    # Handed over (released "-"), adopted by 1#1, released again at a scale-down, adopted back.
    seen = observer(a=[(T, "0#1"), (T + 10, "-"), (T + 11, "1#1"), (T + 20, "-"), (T + 21, "0#1")])
    records = [run(0, "0#1", T + 5), run(1, "1#1", T + 15), run(2, "0#1", T + 15), run(3, "0#1", T + 22),
               run(4, "0#1", T + 20.95)]  # j4: sent between the readings at 20.9 and 21.0, which shows 0#1
    report = analyse([job(k) for k in range(5)], records, [], ClusterOptions(), seen)
    assert [e[0] for e in report.two_owner_examples] == ["j2"]


def test_a_reading_under_way_at_the_send_that_shows_the_sender_excuses_it():
    # Azurite's listing took 0.28 s under load: the reading answered at 21.0 began before the
    # send at 20.85 and shows 0#1, which claimed the shard at some moment of that span.
    seen = observer(a=[(T, "1#1"), (T + 20.5, "-"), (T + 21, "0#1"), (T + 21.2, "-")])
    seen.samples = [(T + k / 10 - 0.28, T + k / 10) for k in range(-10, 600)]
    report = analyse([job(0), job(1)], [run(0, "0#1", T + 20.85), run(1, "2#1", T + 20.85)], [], ClusterOptions(), seen)
    assert [e[:3] for e in report.two_owner_examples] == [("j1", "shards/a", "2#1")]


def test_failover_is_measured_per_shard():
    # A silo with two shards: one taken over at once, the other late. The old figure (the first
    # takeover over all its shards) read 2.6 s; the shard left waiting is the one a user notices.
    kill = Event("kill", T + 10, "0", "0#1", ["shards/a", "shards/b"])
    jobs = [job(11, "shards/a"), job(12, "shards/b"), job(30, "shards/c")]
    records = [run(11, "1#1", T + 12.6), run(12, "2#1", T + 19.0), run(30, "1#1", T + 30)]
    report = analyse(jobs, records, [kill], ClusterOptions(), observer())
    assert report.failover_s == [2.6, 9.0] and not report.failover_ok
    unmeasured = analyse(jobs[:2], records[:1], [kill], ClusterOptions(), observer())
    assert unmeasured.unmeasured_kills == ["0#1 shards/b"] and not unmeasured.failover_ok


def test_store_watcher_errors_fail_the_drill():
    seen = observer()
    seen.errors = 1
    assert not analyse([job(0)], [run(0, "0#1", T + 0.1)], [], ClusterOptions(), seen).ok


def test_a_storm_fails_on_an_unexpected_error_or_when_it_acknowledges_too_little():
    def report(load: StormLoad) -> DrillReport:
        out = analyse([job(0)], [run(0, "0#1", T + 0.1)], [], ClusterOptions(), observer(), storm=True)
        out.storm_load = load
        return out

    assert report(StormLoad(duration=10, offered=100, acknowledged=80, refused=20)).ok
    assert not report(StormLoad(duration=10, offered=100, acknowledged=int(100 * STORM_ACK_FLOOR) - 1)).ok
    # Calls so slow that little was offered, all of it acknowledged: still almost nothing.
    assert not report(StormLoad(duration=10, offered=40, acknowledged=40)).ok
    assert not report(StormLoad(duration=10, offered=100, acknowledged=100, unexpected=["KeyError('x')"])).ok


async def test_the_observer_names_the_writer_of_an_outcome_only_when_the_store_proves_it():
    store = MemoryStore()
    first = await LogWriter.create(store, "shards/a", {"owner": "0#1"})
    seen = Observer(store)
    await seen.observe()
    await first.append(["add"])
    await first.append([REMOVE, "j0", 0, SUCCEEDED, None])
    await seen.observe()
    second = await LogWriter.claim(store, await read_log(store, "shards/a"), {"owner": "1#1"})
    await second.append([REMOVE, "j1", 0, SUCCEEDED, None])
    await seen.observe()  # the owner changed since the last reading: who appended j1 is not proven
    await second.append([REMOVE, "j2", 0, SUCCEEDED, None])
    await seen.observe()
    assert [(a.outcomes, a.writer) for a in seen.appends] == [(("j0",), "0#1"), (("j1",), None), (("j2",), "1#1")]
    assert seen.shard_owners["shards/a"][-1][1] == "1#1" and seen.errors == 0 and not seen.gaps


async def test_a_read_the_store_cannot_answer_is_taken_up_by_the_next_one_and_a_log_unread_too_long_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A file store's log stays locked past its 2 s wait under load (seen in CI): the next reading
    starts where the last one ended and sees every outcome, so one missed read is no error; a log
    left unread longer than the watch may go blind is one, and so is one unreadable at the end."""
    import cluster.cli.drill_observer as watch
    from storage import Unavailable

    clock = [T]
    monkeypatch.setattr(watch.time, "time", lambda: clock[0])
    store = MemoryStore()
    writer = await LogWriter.create(store, "shards/a", {"owner": "0#1"})
    seen = Observer(store)
    await seen.observe()
    fetch, failing = store.fetch, [True]

    async def locked(name: str, offset: int = 0) -> Any:
        if failing[0]:
            raise Unavailable("log 'shards/a' stayed locked by another process for 2.0 s")
        return await fetch(name, offset)

    monkeypatch.setattr(store, "fetch", locked)
    await writer.append([REMOVE, "j0", 0, SUCCEEDED, None])
    await seen.observe()
    clock[0] += 2.1
    failing[0] = False
    await seen.observe()
    assert [a.outcomes for a in seen.appends] == [("j0",)] and seen.errors == 0 and seen.retried == 1

    failing[0] = True
    await seen.observe()
    clock[0] += watch.MAX_BLIND_S + 0.1
    failing[0] = False
    await seen.observe()  # read at last, but the watch was blind too long
    assert seen.errors == 1 and "unread for" in seen.error_examples[0]

    failing[0] = True
    await seen.observe()
    clock[0] += watch.MAX_BLIND_S + 0.1  # finish() waits no longer than MAX_BLIND_S from when it went blind
    await seen.finish()
    assert seen.errors == 2 and "could not be read" in seen.error_examples[1]


def test_lateness_after_a_kill_is_judged_by_the_due_time_acknowledged_for_jobs_due_after_it():
    # Kills at T+10 (two at once, one moment) and T+20. Due just after the first: j11 (due T+11,
    # fired by the new owner at T+11.8, though the record a silo reports says it was due later),
    # j12 (on time). j9 fell due before the kill, and j30 (1 s late) after the bound: neither counts.
    jobs = [job(9, due=T + 9.9), job(11), job(12), job(30), job(21), job(99)]
    records = [run(9, "0#1", T + 9.95), run(11, "1#1", T + 11.8, scheduled_for=T + 11.7), run(12, "1#1", T + 12.05),
               run(30, "1#1", T + 31.0), run(21, "1#1", T + 21.3)]
    kills = [KILL, Event("kill", T + 10.0004, "2", "2#1", ["shards/b"]), Event("kill", T + 20, "1", "1#1", [])]
    report = analyse(jobs, records, kills, ClusterOptions(), observer(a=[(T, "0#1"), (T + 11, "1#1")]))
    assert report.late_after_kill_s == [0.8, 0.3]  # j99 never ran: lost, not late
    assert report.lost == 1


async def test_the_recorder_notes_when_its_silo_sent_a_batch_sent_ahead_from_this_host() -> None:
    """What ``delivery_s`` is measured from, and what shows a call arriving after a kill was sent before it."""
    import asyncio
    import time

    from cluster.model.ahead import Ahead, monotonic_domain
    from cluster.model.attempt import Attempt
    from cluster.model.wire import pack
    from handlers.builtin import Recorder
    from tests.runtime.harness import job as scheduled

    async def deliver(domain: str | None) -> dict[str, Any]:
        recorder = Recorder()
        left, sent_us, sent_mono = time.time(), time.time_ns() // 1000, time.monotonic()
        await asyncio.sleep(0.05)  # the call on its way
        attempt = tuple(Attempt(pack(scheduled().to_wire()), "run-0", 1, time.time_ns() // 1000, 1))
        ahead = None if domain is None else tuple(Ahead(sent_us, sent_mono, domain, sent_mono + 60))
        await recorder.timeshard_deliver([attempt], 5.0, time.time() + 60, ahead)
        (record,) = await recorder.executions()
        return {**record, "left": left}

    here = await deliver(monotonic_domain())
    assert abs(here["sent"] - here["left"]) < 0.01 and 0.05 <= here["received"] - here["sent"] < 1.0
    assert (await deliver("another host"))["sent"] is None  # its monotonic clock is not ours
    assert (await deliver(None))["sent"] is None  # due on arrival: the call says nothing of when it left
